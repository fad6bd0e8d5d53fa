// Command rediscluster runs a command against a throwaway local Redis Cluster: six
// redis-server processes (three primaries, three replicas) on free loopback ports, in a
// fresh temporary directory (see testenv.StartCluster). The Makefile runs the tests
// that need a cluster under it:
//
//	go run ./internal/testenv/rediscluster [-keep] -- command [args...]
//
// It prints "rediscluster: seeds <seeds>" to stderr and runs the command with
// TASKD_TEST_REDIS_CLUSTER set to the seeds, comma-separated host:port. When the
// command ends it stops the cluster, removes the directory (-keep keeps it, with the
// nodes' logs) and exits with the command's status. SIGINT and SIGTERM are passed on to
// the command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/taskpull/taskd/internal/testenv"
)

func main() {
	os.Exit(run())
}

func run() int {
	keep := flag.Bool("keep", false, "keep the cluster's directory (node logs and configs) and print its path")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: rediscluster [-keep] -- command [args...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		return 2
	}

	// Both registered before the cluster starts, so no signal kills rediscluster and
	// leaves the nodes behind: one during the start cancels it, later ones wait in sigs
	// until the command runs.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	startCtx, stopStart := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopStart()

	dir, err := os.MkdirTemp("", "rediscluster-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "rediscluster: %v\n", err)
		return 1
	}
	defer func() {
		if *keep {
			fmt.Fprintf(os.Stderr, "rediscluster: kept %s\n", dir)
		} else if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "rediscluster: %v\n", err)
		}
	}()
	c, err := testenv.StartCluster(startCtx, dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rediscluster: %v\n", err)
		return 1
	}
	defer c.Stop() // before the directory goes
	stopStart()
	fmt.Fprintf(os.Stderr, "rediscluster: seeds %s\n", c.Seeds())

	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Env = append(os.Environ(), "TASKD_TEST_REDIS_CLUSTER="+c.Seeds())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "rediscluster: %v\n", err)
		return 1
	}
	go func() {
		for sig := range sigs {
			cmd.Process.Signal(sig) // fails only once the command has exited
		}
	}()
	err = cmd.Wait()
	signal.Stop(sigs)
	close(sigs)

	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exitErr):
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()) // as a shell reports it
		}
		return exitErr.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "rediscluster: %v\n", err)
		return 1
	}
}
