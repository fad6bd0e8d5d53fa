package keyrate

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)

// A key has its burst at once, then the rate; an event past it is refused with the
// time to wait, and is not counted; other keys have buckets of their own.
func TestBurstThenRate(t *testing.T) {
	t.Parallel()
	l := New(10, 3) // one every 100 ms, three at once
	for i := range 3 {
		if _, ok := l.Allow("u1", t0); !ok {
			t.Fatalf("event %d of the burst refused", i+1)
		}
	}
	wait, ok := l.Allow("u1", t0)
	if ok || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("the fourth event: ok %v, wait %v; want refused, at most 100 ms", ok, wait)
	}
	if _, ok := l.Allow("u2", t0); !ok {
		t.Fatal("another key refused")
	}
	// Refused events cost nothing: after the wait given, one event passes.
	for range 5 {
		l.Allow("u1", t0.Add(wait/2))
	}
	if _, ok := l.Allow("u1", t0.Add(wait)); !ok {
		t.Fatalf("refused after the wait given (%v)", wait)
	}
	if _, ok := l.Allow("u1", t0.Add(wait)); ok {
		t.Fatal("a second event at the same instant let through")
	}
}

// The rate is kept exactly: 600 a second lets 600 through a second of events every
// millisecond, plus the burst.
func TestHighRate(t *testing.T) {
	t.Parallel()
	l := New(600, 5)
	allowed := 0
	for i := range 1000 {
		if _, ok := l.Allow("u1", t0.Add(time.Duration(i)*time.Millisecond)); ok {
			allowed++
		}
	}
	if allowed < 598 || allowed > 606 {
		t.Fatalf("%d events let through in a second at 600/s", allowed)
	}
}

// Keys whose bucket has filled up again are dropped: the limiter holds only the keys
// of the last few seconds, however many keys it has seen; a key still refilling is kept,
// so that its refusals hold.
func TestIdleKeysAreDropped(t *testing.T) {
	t.Parallel()
	l := New(1, 2) // a bucket fills in 2 s
	const n = 20_000
	for i := range n { // one event each: full again a second later
		l.Allow("old"+strconv.Itoa(i), t0)
	}
	if got := l.Len(); got != n {
		t.Fatalf("%d keys held, want %d", got, n)
	}
	for i := range n { // the whole burst each: full again 2 s later
		k := "busy" + strconv.Itoa(i)
		l.Allow(k, t0.Add(time.Second))
		l.Allow(k, t0.Add(time.Second))
	}
	if got := l.Len(); got != 2*n {
		t.Fatalf("a second on: %d keys held, want %d", got, 2*n)
	}
	// Past the sweep interval every shard sweeps at its next event: the full buckets
	// go, the refilling ones stay.
	at := t0.Add(2100 * time.Millisecond)
	for i := range n {
		l.Allow("new"+strconv.Itoa(i), at)
	}
	if got := l.Len(); got != 2*n {
		t.Fatalf("past the fill time of the first keys: %d keys held, want %d (the busy and the new)", got, 2*n)
	}
	// busy0 has 1.1 of its 2 tokens: one event, not its whole burst.
	if _, ok := l.Allow("busy0", at); !ok {
		t.Fatal("a key refilling: its one token refused")
	}
	if wait, ok := l.Allow("busy0", at); ok || wait <= 0 || wait > time.Second {
		t.Fatalf("a key refilling, its second event: ok %v, wait %v; want refused, at most 1 s", ok, wait)
	}
	for i := range 2 {
		if _, ok := l.Allow("old0", at); !ok {
			t.Fatalf("a dropped key's event %d refused: its burst is whole again", i+1)
		}
	}
}

// BenchmarkAllow is one event of one of 100,000 keys; it reports the memory a held
// key costs.
func BenchmarkAllow(b *testing.B) {
	const keys = 100_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "uid-" + strconv.Itoa(i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := New(1e9, 100) // never refuses
	for _, k := range names {
		l.Allow(k, t0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		l.Allow(names[i%keys], t0)
		i++
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "heap-bytes/key")
}
