package swutest

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

const (
	// slotDir holds one lock file per slot. It is a fixed path, not TMPDIR, because
	// what the slots ration is machine-wide (see slots), and test binaries of different
	// packages may run with different TMPDIRs.
	slotDir = "/tmp/swutest-slots"
	// slots is how many clients may run at once on this machine, across every test
	// binary. SWUpdate 2022.12's main process binds the Linux abstract socket
	// "@NotifyServer", and on EADDRINUSE tries NotifyServer1 … NotifyServer9 and
	// "NotifyServer:" (ten retries) before it exits with "Error binding notifier
	// socket: Address already in use": eleven processes per network namespace at most.
	// One name is left for a swupdate the machine may run for itself.
	slots        = 10
	slotWait     = 2 * time.Minute
	slotInterval = 50 * time.Millisecond
)

// acquireSlot takes one of the machine's client slots, waiting while all are held by
// other clients (of this test binary or another), and returns the held lock file: the
// slot is free again once it is closed, or once this process dies.
func acquireSlot(t testing.TB) (*os.File, error) {
	if err := os.MkdirAll(slotDir, 0o777); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(slotWait)
	for {
		for i := range slots {
			f, err := os.OpenFile(filepath.Join(slotDir, fmt.Sprintf("slot-%d", i)), os.O_CREATE|os.O_RDWR, 0o666)
			if err != nil {
				return nil, err
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
				return f, nil
			}
			f.Close()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("all %d slots in %s stayed held for %s: SWUpdate 2022.12 runs at most 11 processes at once per network namespace", slots, slotDir, slotWait)
		}
		select {
		case <-t.Context().Done():
			return nil, t.Context().Err()
		case <-time.After(slotInterval):
		}
	}
}
