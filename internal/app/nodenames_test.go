package app_test

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/testenv"
)

// Issue 42: two processes on one host with DISPATCH_NODE unset are two nodes. The
// default name is the host name and something of the process's own, so each process
// (and each restart) has a name of its own.
func TestDefaultNodeNamesDifferPerProcess(t *testing.T) {
	t.Parallel()
	host, _ := os.Hostname()
	env := func(string) string { return "" }
	a, err := app.LoadConfig(nil, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, err := app.LoadConfig(nil, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if a.Node == b.Node || !strings.HasPrefix(a.Node, host+"-") {
		t.Fatalf("default node names %q and %q: want two names starting with the host name %q", a.Node, b.Node, host)
	}
}

// Issue 42: a node refuses to join under a name a live node holds (two processes
// with one DISPATCH_NODE would hold each other's leases silently); a name whose holder
// stopped beating (a process killed a moment ago, restarted under its DISPATCH_NODE) is
// taken over at once, without waiting for DISPATCH_NODE_TIMEOUT.
func TestJoinRefusesALiveNodesName(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(t0)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(node string) *app.App {
		return app.New(app.Config{RedisPrefix: prefix, Node: node, NodeTimeout: 10 * time.Second, NodeHeartbeat: 100 * time.Millisecond},
			app.Deps{Store: st, Redis: rdb, Clock: clk, Log: log})
	}
	first := start("n1")
	if err := first.Join(t.Context()); err != nil {
		t.Fatalf("first join: %v", err)
	}
	// The first node is alive: it beats while the second one joins.
	beating, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(beating)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				clk.Advance(20 * time.Millisecond)
				first.Members.Beat(t.Context())
			}
		}
	}()
	err := start("n1").Join(t.Context())
	close(stop)
	<-beating
	if taskd.ErrorCode(err) != taskd.CodeConflict || !strings.Contains(err.Error(), "DISPATCH_NODE") {
		t.Fatalf("a second node named n1 while the first beats: %v, want a conflict naming DISPATCH_NODE", err)
	}
	if err := start("n2").Join(t.Context()); err != nil {
		t.Fatalf("another name: %v", err)
	}
	// The holder is killed (no more beats), and restarted under its name at once.
	if err := start("n1").Join(t.Context()); err != nil {
		t.Fatalf("a restart under the name of a node that stopped beating: %v", err)
	}
}
