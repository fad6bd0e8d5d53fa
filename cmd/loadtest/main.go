// Command loadtest drives a running dispatchd over HTTP as many client agents would,
// then checks the quota invariants through the admin API (see package loadtest and
// docs/PERFORMANCE.md). It exits 1 when the check finds a violation or the run fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/taskpull/taskd/loadtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
		}
		os.Exit(1)
	}
}

// run parses the config, runs, and prints the report to stdout (progress to stderr).
// The report is printed even when the check fails; the error then wraps
// loadtest.ErrViolations.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := loadtest.ParseConfig(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("config: %w", err)
	}
	rep, runErr := loadtest.Run(ctx, cfg, loadtest.Progress{W: stderr, TTY: isTerminal(stderr)})
	if rep != nil {
		var werr error
		if cfg.JSON {
			werr = rep.WriteJSON(stdout)
		} else {
			werr = rep.WriteTable(stdout)
		}
		if runErr == nil && werr != nil {
			return fmt.Errorf("write report: %w", werr)
		}
	}
	return runErr
}

// isTerminal reports whether w is a character device (a terminal), where the live
// progress line is rewritten in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
