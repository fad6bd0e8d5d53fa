package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/testenv"
)

// Issue 42: a second dispatchd started with DISPATCH_NODE set to a live node's name
// refuses to start, naming the setting (before, it joined as the same node and held
// the same leases, silently).
func TestSecondDispatchdWithALiveNodesNameRefusesToStart(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	_, prefix := testenv.Redis(t)
	env := withTestRedis(map[string]string{
		"DISPATCH_ADDR": "127.0.0.1:0", "DISPATCH_MYSQL_DSN": dsn, "DISPATCH_REDIS_PREFIX": prefix,
		"DISPATCH_MYSQL_CONNS": "4", "DISPATCH_NODE": "twin", "DISPATCH_NODE_TIMEOUT": "1m",
	})
	_, stop := startDispatchd(t, env)
	defer stop()
	// Bounded, so that a second dispatchd that does start (the bug) ends and fails the
	// test rather than hanging it.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := run(ctx, nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "DISPATCH_NODE") || !strings.Contains(err.Error(), "twin") {
		t.Fatalf("a second dispatchd named twin: %v, want a refusal naming DISPATCH_NODE", err)
	}
}
