package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/queue"
)

// Node membership: every node beats into Redis with the background work it holds;
// GET /v1/admin/nodes lists the ones seen within DISPATCH_NODE_TIMEOUT. A node that
// stops cleanly leaves at once, and gives its parts of the sweep up to the others; one
// that dies (no more beats) is gone after the timeout.
func TestNodeMembership(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(t0)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(node string, retain time.Duration) (*app.App, context.CancelFunc, chan struct{}) {
		cfg := app.Config{RedisPrefix: prefix, AdminTokens: []string{adminToken}, Node: node, SweepInterval: time.Second,
			NodeHeartbeat: 20 * time.Millisecond, NodeTimeout: 3 * time.Second, RetainDispatches: retain}
		a := app.New(cfg, app.Deps{Store: st, Redis: rdb, Clock: clk, Log: log})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { a.RunBackground(ctx); close(done) }()
		return a, cancel, done
	}
	a, stopA, doneA := start("node-a", 0)
	defer func() { stopA(); <-doneA }()
	var relay atomic.Bool
	a.AddRole("relay", relay.Load)
	_, stopB, doneB := start("node-b", time.Hour)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	type node struct {
		Node      string    `json:"node"`
		StartedAt time.Time `json:"started_at"`
		LastSeen  time.Time `json:"last_seen"`
		Roles     []string  `json:"roles"`
	}
	list := func() map[string]node {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/v1/admin/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Nodes []node }
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil {
			t.Fatalf("GET /v1/admin/nodes: %d", resp.StatusCode)
		}
		m := map[string]node{}
		for _, n := range out.Nodes {
			m[n.Node] = n
		}
		return m
	}
	// until waits (in real time: the beats are) for the list to satisfy ok.
	until := func(what string, ok func(map[string]node) bool) map[string]node {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second) // the sweep is divided every half second
		for {
			m := list()
			if ok(m) {
				return m
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: nodes %v", what, m)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The sweep's eight parts divided four and four (which four depends on who came
	// first), node-b a janitor too.
	parts := func(n node) []string {
		var out []string
		for _, r := range n.Roles {
			if strings.HasPrefix(r, "sweeper:") {
				out = append(out, r)
			}
		}
		return out
	}
	divided := func(m map[string]node) bool {
		a, b := parts(m["node-a"]), parts(m["node-b"])
		all := map[string]bool{}
		for _, p := range append(a, b...) {
			all[p] = true
		}
		return len(a) == 4 && len(b) == 4 && len(all) == 8
	}
	m := until("both nodes listed, the sweep divided", func(m map[string]node) bool {
		return len(m) == 2 && divided(m) && slices.Contains(m["node-b"].Roles, "janitor") &&
			!slices.Contains(m["node-a"].Roles, "janitor")
	})
	if a := m["node-a"]; !a.StartedAt.Equal(t0) || !a.LastSeen.Equal(t0) {
		t.Fatalf("nodes: %+v", m)
	}
	relay.Store(true)
	until("the relay's holder says so", func(m map[string]node) bool {
		return divided(m) && slices.Contains(m["node-a"].Roles, "relay") && len(m["node-a"].Roles) == 5
	})

	stopB() // a clean stop leaves at once, and gives its parts up
	<-doneB
	if m := list(); len(m) != 1 || m["node-a"].Node == "" {
		t.Fatalf("after node-b stopped: %v", m)
	}
	until("node-a sweeps every part", func(m map[string]node) bool {
		return len(parts(m["node-a"])) == 8
	})
	// A node that dies beats no more: gone once the timeout has passed, while the live
	// one's beats keep it listed.
	ghost := queue.NewMembers(rdb, queue.Keys{Prefix: prefix}, clk, "ghost", 3*time.Second, func() []string { return nil })
	if err := ghost.Beat(t.Context()); err != nil {
		t.Fatal(err)
	}
	if m := list(); len(m) != 2 {
		t.Fatalf("with the ghost: %v", m)
	}
	clk.Advance(4 * time.Second)
	until("the ghost gone, node-a kept", func(m map[string]node) bool {
		_, ghost := m["ghost"]
		return !ghost && m["node-a"].LastSeen.Equal(t0.Add(4*time.Second))
	})
}
