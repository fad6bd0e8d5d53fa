package queue

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/internal/testenv"
)

var eight = []string{"sweeper:0", "sweeper:1", "sweeper:2", "sweeper:3", "sweeper:4", "sweeper:5", "sweeper:6", "sweeper:7"}

// Two nodes divide eight units four and four; a node gives up what is over its share
// when a node joins and takes a dead node's units once their leases ran out; the
// per-node cap holds; a lease another node took meanwhile is dropped at the renewal.
func TestSharesDivideTheWork(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	keys := Keys{Prefix: prefix}
	ctx := t.Context()
	const ttl = 600 * time.Millisecond
	a, b := NewShares(rdb, keys, "node-a", ttl), NewShares(rdb, keys, "node-b", ttl)
	divide := func(s *Shares, nodes, perNode int) []string {
		t.Helper()
		held, err := s.Divide(ctx, eight, nodes, perNode)
		if err != nil {
			t.Fatal(err)
		}
		if list, ok := s.Held(); !ok || !slices.Equal(list, held) {
			t.Fatalf("Held %v %v, Divide said %v", list, ok, held)
		}
		return held
	}
	if held, ok := a.Held(); ok || len(held) != 0 {
		t.Fatalf("before the first division: %v %v", held, ok)
	}

	// node-a alone takes everything; node-b joins: node-a keeps the first half.
	if got := divide(a, 1, 0); !slices.Equal(got, eight) {
		t.Fatalf("alone: %v", got)
	}
	if got := divide(b, 2, 0); len(got) != 0 {
		t.Fatalf("node-b while node-a still holds all: %v", got)
	}
	if got := divide(a, 2, 0); !slices.Equal(got, eight[:4]) {
		t.Fatalf("node-a at its share: %v", got)
	}
	if got := divide(b, 2, 0); !slices.Equal(got, eight[4:]) {
		t.Fatalf("node-b at its share: %v", got)
	}
	// Renewed a third of the way through, the leases outlive their first TTL.
	for range 4 {
		time.Sleep(ttl / 2)
		divide(a, 2, 0)
		divide(b, 2, 0)
	}
	if got := divide(a, 2, 0); !slices.Equal(got, eight[:4]) {
		t.Fatalf("after renewals: %v", got)
	}

	// node-b dies: once its leases ran out, node-a (counting one node) takes its half.
	if got := divide(a, 1, 0); !slices.Equal(got, eight[:4]) {
		t.Fatalf("node-b's leases still live: %v", got)
	}
	time.Sleep(ttl + 50*time.Millisecond)
	if got := divide(a, 1, 0); !slices.Equal(got, eight) {
		t.Fatalf("after node-b's leases ran out: %v", got)
	}
	// The cap: at most three, whatever the share.
	if got := divide(a, 1, 3); !slices.Equal(got, eight[:3]) {
		t.Fatalf("capped at 3: %v", got)
	}
	// A unit no longer among the work is given up.
	if got, err := a.Divide(ctx, eight[1:], 1, 3); err != nil || !slices.Equal(got, eight[1:4]) {
		t.Fatalf("unit 0 gone from the work: %v %v", got, err)
	}
	if v, _ := rdb.Get(ctx, keys.lease("sweeper:0")).Result(); v != "" {
		t.Errorf("unit 0's lease still held by %q", v)
	}
	// Another node took unit 1 (node-a's lease ran out unrenewed): node-a drops it at
	// its next renewal and takes a free one in its place.
	rdb.Set(ctx, keys.lease("sweeper:1"), "node-c", time.Minute)
	time.Sleep(ttl / 2)
	if got := divide(a, 1, 3); !slices.Equal(got, []string{"sweeper:2", "sweeper:3", "sweeper:4"}) {
		t.Fatalf("after losing unit 1: %v", got)
	}
	a.ReleaseAll(context.Background())
	if held, ok := a.Held(); ok || len(held) != 0 {
		t.Fatalf("after ReleaseAll: %v %v", held, ok)
	}
	if n, _ := rdb.Exists(ctx, keys.lease("sweeper:2"), keys.lease("sweeper:3"), keys.lease("sweeper:4")).Result(); n != 0 {
		t.Errorf("%d leases left after ReleaseAll", n)
	}
}

// Held sorts the units by number, not by bytes.
func TestSharesHeldInNumberOrder(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	s := NewShares(rdb, Keys{Prefix: prefix}, "n", time.Minute)
	units := []string{"campaign:9", "campaign:10", "campaign:100"}
	if _, err := s.Divide(t.Context(), units, 1, 0); err != nil {
		t.Fatal(err)
	}
	if held, _ := s.Held(); !slices.Equal(held, units) {
		t.Errorf("held %v", held)
	}
	s.ReleaseAll(context.Background())
}

// failKeys fails every command naming a key that contains key, while on.
type failKeys struct {
	key string
	on  *atomic.Bool
}

func (f failKeys) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f failKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (f failKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && f.on.Load() && strings.Contains(s, f.key) {
				cmd.SetErr(errors.New("injected: the slot is down"))
				return cmd.Err()
			}
		}
		return next(ctx, cmd)
	}
}

// A node that cannot renew one lease (its slot down) ends every round there, so the
// units after it go unrenewed: it stops working on them before their leases can run
// out and another node take them. No unit is ever worked on by two nodes.
func TestSharesNeverTwoNodesOnAUnit(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	keys := Keys{Prefix: prefix}
	ctx := t.Context()
	const ttl = 300 * time.Millisecond
	units := []string{"campaign:1", "campaign:2", "campaign:3"}
	var down atomic.Bool
	rdbA := testenv.RedisClient(t)
	defer rdbA.Close()
	rdbA.AddHook(failKeys{key: keys.lease("campaign:1"), on: &down})
	a, b := NewShares(rdbA, keys, "node-a", ttl), NewShares(rdb, keys, "node-b", ttl)
	if got, err := a.Divide(ctx, units, 2, 0); err != nil || !slices.Equal(got, units[:2]) {
		t.Fatalf("node-a: %v %v", got, err)
	}
	if got, err := b.Divide(ctx, units, 2, 0); err != nil || !slices.Equal(got, units[2:]) {
		t.Fatalf("node-b: %v %v", got, err)
	}
	down.Store(true)
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		time.Sleep(ttl / 10)
		gotA, errA := a.Divide(ctx, units, 2, 0)
		gotB, errB := b.Divide(ctx, units, 1, 0) // node-b counts one node: it would take anything free
		if errB != nil {
			t.Fatal(errB)
		}
		for _, u := range gotA {
			if slices.Contains(gotB, u) {
				t.Fatalf("%s worked on by both nodes: node-a %v (%v), node-b %v", u, gotA, errA, gotB)
			}
		}
		if held, known := a.Held(); known && errA != nil || len(held) > len(gotA) {
			t.Fatalf("node-a's Held %v (known %v) after a failed round that left %v", held, known, gotA)
		}
	}
	if got, _ := b.Divide(ctx, units, 1, 0); !slices.Equal(got, units) {
		t.Errorf("node-b took over what node-a could not renew: %v", got)
	}
}
