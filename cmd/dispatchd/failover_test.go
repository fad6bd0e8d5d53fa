package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"os/exec"

	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// Two dispatchd nodes on a Redis Cluster of their own serve 100 agents running dispatch
// and complete cycles while a primary of the cluster dies (kill -9: its replica takes
// over after the node timeout) or, in a variant, while a replica takes over at once
// (CLUSTER FAILOVER TAKEOVER, which may drop writes the old primary had acknowledged
// and not yet passed on). The load tester's invariant checker then finds no occurrence
// over its quota, no user twice in once_per_user mode, every claimed counter equal to
// the live and completed dispatches, and every dispatch an agent was handed recorded
// in MySQL: MySQL decides every claim, Redis only caches.
func TestRedisFailoverKeepsTheQuotaInvariants(t *testing.T) {
	t.Parallel()
	dir := buildTools(t)
	for _, takeover := range []bool{false, true} {
		name := "kill -9 a primary"
		if takeover {
			name = "failover takeover"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			failoverMidRun(t, dir, takeover)
		})
	}
}

func failoverMidRun(t *testing.T, dir string, takeover bool) {
	cluster := testenv.NewCluster(t) // its own: this test kills its nodes
	dsn := testenv.MySQLDSN(t)
	st, err := store.Open(t.Context(), dsn, store.OpenOptions{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	base := childEnv()
	env := append(slices.Clone(base),
		"DISPATCH_REDIS_MODE=cluster",
		"DISPATCH_REDIS_ADDR="+cluster.Seeds(),
		"DISPATCH_REDIS_PREFIX=failover:",
		"DISPATCH_ADDR=127.0.0.1:0",
		"DISPATCH_MYSQL_DSN="+dsn,
		"DISPATCH_ADMIN_TOKEN=failover-test-token",
		"DISPATCH_SWEEP_INTERVAL=1s",
		"DISPATCH_MYSQL_CONNS=8",
		"DISPATCH_REQUEST_TIMEOUT=30s",
	)
	_, url1 := startProcess(t, dir, env)
	_, url2 := startProcess(t, dir, env)

	runID := "failover" + testenv.Suffix()
	loadtest := func(args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(dir, "loadtest"), append([]string{"-url", url1 + "," + url2, "-run-id", runID}, args...)...)
		cmd.Env = append(slices.Clone(base), "LOADTEST_ADMIN_TOKEN=failover-test-token")
		return cmd
	}
	var runOut testenv.SyncBuffer
	run := loadtest("-workload", "cycles", "-users", "200", "-groups", "4", "-templates", "1", "-once", "25",
		"-rotate", "8", "-agents", "100", "-duration", "10s", "-timeout", "20s", "-progress", "0")
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Process.Kill() })
	count := func() (n int) {
		st.DB().QueryRow("SELECT COUNT(*) FROM dispatch").Scan(&n)
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	for count() < 500 {
		if time.Now().After(deadline) {
			t.Fatalf("no dispatches under load:\n%s", runOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	primaries, err := cluster.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if takeover {
		replica, err := cluster.ReplicaOf(ctx, primaries[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := cluster.Failover(ctx, replica, true); err != nil {
			t.Fatal(err)
		}
	} else if err := cluster.Kill(primaries[0]); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	atFailover := count()
	if err := run.Wait(); err != nil {
		t.Fatalf("run across the failover: %v\n%s", err, runOut.String())
	}
	if after := count(); after <= atFailover {
		t.Fatalf("%d dispatches when the cluster was healthy again, %d at the end: nothing was dispatched after the failover\n%s",
			atFailover, after, runOut.String())
	}
	t.Logf("the run across the failover:\n%s", runOut.String())
	out, err := loadtest("-check-only").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("invariant check after the failover (takeover %v): %v\n%s\nrun:\n%s", takeover, err, out, runOut.String())
	}
}
