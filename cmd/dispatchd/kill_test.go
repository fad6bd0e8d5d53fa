package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// dispatchd is killed with SIGKILL while 100 agents claim and complete concurrently,
// then restarted on the same MySQL database (and, in a variant, on a Redis that lost
// its keys); the load tester's invariant checker then finds no occurrence over its
// quota, no user twice in once_per_user mode, every claimed counter equal to the live
// and completed dispatches, and every dispatch an agent was handed recorded in MySQL.
func TestKilledDispatchdKeepsTheQuotaInvariants(t *testing.T) {
	t.Parallel()
	dir := buildTools(t)
	for _, flush := range []bool{false, true} {
		t.Run(fmt.Sprintf("flush redis %v", flush), func(t *testing.T) {
			t.Parallel()
			killMidRun(t, dir, flush)
		})
	}
}

func killMidRun(t *testing.T, dir string, flushRedis bool) {
	dsn := testenv.MySQLDSN(t) // a migrated database of the test's own, dropped at the end
	st, err := store.Open(t.Context(), dsn, store.OpenOptions{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rdb, prefix := testenv.Redis(t)
	base := childEnv()
	env := append(slices.Concat(base, testenv.RedisEnv()),
		"DISPATCH_ADDR=127.0.0.1:0",
		"DISPATCH_MYSQL_DSN="+dsn,
		"DISPATCH_REDIS_PREFIX="+prefix,
		"DISPATCH_ADMIN_TOKEN=kill-test-token",
		"DISPATCH_SWEEP_INTERVAL=1s",
		// Modest on shared machines: the whole suite runs in parallel on one MariaDB.
		"DISPATCH_MYSQL_CONNS=8",
		"DISPATCH_REQUEST_TIMEOUT=30s",
	)
	start := func() (*exec.Cmd, string) { return startProcess(t, dir, env) }
	server, url := start()

	runID := "kill" + testenv.Suffix()
	loadtest := func(args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(dir, "loadtest"), append([]string{"-url", url, "-run-id", runID}, args...)...)
		cmd.Env = append(slices.Clone(base), "LOADTEST_ADMIN_TOKEN=kill-test-token")
		return cmd
	}
	// Once tasks with small quotas in both modes, shared by groups of 50: claims race.
	var runOut testenv.SyncBuffer
	run := loadtest("-workload", "mixed", "-users", "200", "-groups", "4", "-templates", "1", "-once", "60",
		"-rotate", "8", "-agents", "100", "-duration", "8s", "-timeout", "20s", "-progress", "0")
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Process.Kill() })
	// Kill once the run phase has dispatched a good part of the work.
	deadline := time.Now().Add(60 * time.Second)
	for n := 0; n < 300; {
		if time.Now().After(deadline) {
			t.Fatalf("no dispatches under load:\n%s", runOut.String())
		}
		time.Sleep(20 * time.Millisecond)
		st.DB().QueryRow("SELECT COUNT(*) FROM dispatch").Scan(&n)
	}
	if err := server.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	server.Wait()
	if flushRedis {
		testenv.DeletePrefix(t, rdb, prefix)
	}
	time.Sleep(500 * time.Millisecond) // agents see the server gone
	var atKill int
	st.DB().QueryRow("SELECT COUNT(*) FROM dispatch").Scan(&atKill)
	env = append(env, "DISPATCH_ADDR="+strings.TrimPrefix(url, "http://")) // the agents' address
	start()
	// The run's own check cross-checks what its agents saw: every dispatch an agent
	// received is recorded in MySQL (no reply went out before its commit), every
	// acknowledged complete too.
	if err := run.Wait(); err != nil {
		t.Fatalf("run across the kill: %v\n%s", err, runOut.String())
	}

	// The restarted server served: the agents got work after the kill.
	var after int
	st.DB().QueryRow("SELECT COUNT(*) FROM dispatch").Scan(&after)
	if after <= atKill {
		t.Fatalf("%d dispatches at the kill, %d at the end: nothing was dispatched after the restart", atKill, after)
	}
	// And once more at rest, after the restarted server settled.
	out, err := loadtest("-check-only").CombinedOutput()
	if err != nil { // exit status 1: violations; 2: the check could not run
		t.Fatalf("invariant check after kill -9 (flush redis %v): %v\n%s\nrun:\n%s", flushRedis, err, out, runOut.String())
	}
	if !strings.Contains(string(out), "PASS") {
		t.Fatalf("check did not pass:\n%s", out)
	}
}

// buildTools builds dispatchd and the load tester into a directory of t's own.
func buildTools(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, cmd := range []string{"dispatchd", "loadtest"} {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, cmd), "../"+cmd)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", cmd, err, out)
		}
	}
	return dir
}

// childEnv is the environment of the test's children: the caller's without its
// DISPATCH_* and LOADTEST_* variables, which must not change the test.
func childEnv() []string {
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DISPATCH_") && !strings.HasPrefix(kv, "LOADTEST_") {
			base = append(base, kv)
		}
	}
	return base
}

// startProcess starts the dispatchd built in dir with env, killed when t ends, and
// returns it once it listens, with its base URL.
func startProcess(t *testing.T, dir string, env []string) (*exec.Cmd, string) {
	t.Helper()
	var stdout, stderr testenv.SyncBuffer
	cmd := exec.Command(filepath.Join(dir, "dispatchd"))
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
	cmd.Dir = t.TempDir() // where the default artifact directory is made
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, addr, ok := strings.Cut(stdout.String(), "dispatchd listening on "); ok {
			return cmd, "http://" + strings.TrimSpace(addr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("dispatchd did not start:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
