package authguard

import (
	"strconv"
	"testing"
	"time"
)

func TestGuardBlocksAfterBurstAndRefills(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := New(3, 1, func() time.Time { return now })
	for i := 0; i < 3; i++ {
		if _, blocked := g.Blocked("a"); blocked {
			t.Fatalf("blocked after %d failures, burst is 3", i)
		}
		g.Fail("a")
	}
	wait, blocked := g.Blocked("a")
	if !blocked || wait <= 0 || wait > time.Second {
		t.Fatalf("after the burst: blocked %v wait %v", blocked, wait)
	}
	if _, blocked := g.Blocked("b"); blocked {
		t.Fatal("another source is blocked too")
	}
	now = now.Add(time.Second)
	if _, blocked := g.Blocked("a"); blocked {
		t.Fatal("still blocked after a refill")
	}
}

func TestGuardForgetsIdleSourcesWhenFull(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := New(2, 1, func() time.Time { return now })
	for i := 0; i < maxSources; i++ {
		g.Fail(strconv.Itoa(i))
	}
	g.Fail("busy")
	g.Fail("busy")
	now = now.Add(time.Hour) // every bucket but a fresh one is whole again
	g.Fail("new")
	if len(g.sources) != 1 {
		t.Fatalf("%d sources kept, want only the new one", len(g.sources))
	}
}
