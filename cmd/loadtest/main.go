// Command loadtest drives a running dispatchd over HTTP as many client agents would,
// then checks the quota invariants through the admin API (see package loadtest and
// docs/PERFORMANCE.md). It exits 1 when the check finds a violation, cannot be
// completed, or the run fails; the report's PASS or FAIL always says the same.
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
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// run parses the config, runs, and prints the report to stdout (progress to stderr).
// The report's Verdict is both the PASS or FAIL it prints and the error run returns
// (so the exit status): they cannot disagree. With -h or --help it lists the settings
// on stdout and returns nil.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := loadtest.ParseConfig(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("config: %w (loadtest -h lists the settings)", err)
	}
	rep, err := loadtest.Run(ctx, cfg, loadtest.Progress{W: stderr, TTY: isTerminal(stderr)})
	if rep == nil {
		return err // nothing was judged: a failed setup or an interrupted run
	}
	if cfg.JSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		return fmt.Errorf("write report: %w (verdict: %v)", err, rep.Verdict())
	}
	return rep.Verdict()
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
