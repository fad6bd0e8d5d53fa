package app_test

import (
	"hash/crc32"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// The lease sweep is divided among the live nodes: each sweeps the users whose uid
// hashes into the parts it holds, and a dead node's parts move to the others once it
// is gone from the membership and its leases ran out. With the division unknown (no
// round yet) a node sweeps everything.
func TestSweepIsDividedAmongNodes(t *testing.T) {
	t.Parallel()
	// Wide enough that a loaded machine (the race detector, packages in parallel)
	// finishes a division within its bound (a third of it) and sweeps while the
	// leases it renewed are fresh (two thirds of it).
	const timeout = 1500 * time.Millisecond
	e := newEnvWith(t, 2, func(c *app.Config) { c.NodeTimeout = timeout })
	a, b := e.apps[0], e.apps[1]
	ctx := t.Context()
	var uids []string
	for i := range 40 {
		uids = append(uids, uidN(i))
	}
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": uids})
	keys := map[string]string{}
	for _, u := range uids {
		keys[u] = e.key(u)
	}
	// lease lets every user take a new occurrence and lets its lease run out.
	lease := func() {
		t.Helper()
		e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(e.clock.Now().Add(-time.Minute)),
			"dispatch_times": -1, "lease_seconds": 60})
		for _, u := range uids {
			if r := e.fetch(0, keys[u]); r.Task == nil {
				t.Fatalf("%s got nothing", u)
			}
		}
		e.clock.Advance(61 * time.Second)
	}
	// in counts the users whose uid falls in parts (CRC-32 modulo 8, as MySQL's CRC32).
	in := func(parts ...int) int {
		n := 0
		for _, u := range uids {
			if slices.Contains(parts, int(crc32.ChecksumIEEE([]byte(u))%8)) {
				n++
			}
		}
		return n
	}
	beat := func(apps ...*app.App) {
		for _, x := range apps {
			if err := x.Members.Beat(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	divide := func(x *app.App) {
		if err := x.DivideSweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// sweep divides (as the background loop does every sixth of the timeout: a node
	// works on a part only while its lease is fresh), then sweeps.
	sweep := func(x *app.App) int {
		divide(x)
		n, err := x.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	lease()
	beat(a, b)
	divide(a)
	divide(b)
	first, second := in(0, 1, 2, 3), in(4, 5, 6, 7)
	if first == 0 || second == 0 {
		t.Fatalf("40 users all in one half (%d, %d): pick other uids", first, second)
	}
	if n := sweep(b); n != second {
		t.Fatalf("node-b swept %d, want its half's %d", n, second)
	}
	if n := sweep(a); n != first {
		t.Fatalf("node-a swept %d, want its half's %d", n, first)
	}

	// node-b dies: no more beats, no more rounds. Until it is gone from the membership
	// and its leases ran out, its half waits.
	lease()
	beat(a, b) // (the lease moved the clock on past the beats) node-b's last beat
	if n := sweep(a); n != first {
		t.Fatalf("node-a swept %d with node-b alive, want %d", n, first)
	}
	e.clock.Advance(2 * time.Second) // past the membership's timeout
	beat(a)
	time.Sleep(timeout + 100*time.Millisecond) // node-b's leases run out
	divide(a)
	if n := sweep(a); n != second {
		t.Fatalf("node-a swept %d of node-b's half, want %d", n, second)
	}

	// A node that has not divided yet sweeps everything.
	c := app.New(app.Config{RedisPrefix: e.prefix, Node: "node-c", NodeTimeout: timeout}, app.Deps{Store: e.store,
		Redis: e.rdb, Clock: e.clock, Log: slog.New(slog.DiscardHandler)})
	lease()
	if n, err := c.Sweep(ctx); err != nil || n != len(uids) {
		t.Fatalf("node-c, undivided, swept %d, want all %d", n, len(uids))
	}
}
