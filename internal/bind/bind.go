// Package bind opens the binaries' listening sockets, with errors that say which
// address failed, where that address came from and why.
package bind

import (
	"errors"
	"fmt"
	"net"
	"os"
)

// Listen binds addr over TCP; source says where addr came from (an env name, "flag
// -addr" or "default"), and a failure names both.
func Listen(addr, source string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &Error{Addr: addr, Source: source, Err: err}
	}
	return ln, nil
}

// Error is a failed listen: "listen on :8080 (DISPATCH_ADDR): address already in use".
// It wraps the net error (errors.Is(err, syscall.EADDRINUSE) holds).
type Error struct {
	Addr, Source string
	Err          error
}

func (e *Error) Error() string {
	return fmt.Sprintf("listen on %s (%s): %s", e.Addr, e.Source, reason(e.Err))
}

// Unwrap returns the net error.
func (e *Error) Unwrap() error { return e.Err }

// reason is the cause of a failed listen, without the operation and address that
// net.OpError repeats.
func reason(err error) string {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err.Error()
	}
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return ae.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}
