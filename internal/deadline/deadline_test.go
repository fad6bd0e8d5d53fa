package deadline

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

type key struct{}

// A bound that nothing waits on reports its deadline, its parent's values and its
// errors without starting a timer (no allocation past its own).
func TestUnwaitedBoundStartsNothing(t *testing.T) {
	parent := context.WithValue(t.Context(), key{}, "v")
	allocs := testing.AllocsPerRun(100, func() {
		b := New(parent, time.Minute)
		if d, ok := b.Deadline(); !ok || time.Until(d) <= 0 {
			t.Fatalf("deadline %v %v", d, ok)
		}
		if b.Err() != nil || b.Value(key{}) != "v" {
			t.Fatalf("err %v value %v", b.Err(), b.Value(key{}))
		}
		b.Cancel()
		if !errors.Is(b.Err(), context.Canceled) {
			t.Fatalf("after Cancel: %v", b.Err())
		}
	})
	if allocs > 1 {
		t.Errorf("%v allocations a bound, want 1", allocs)
	}
}

// Waited on, a bound ends at its deadline, with DeadlineExceeded, and so does every
// context derived from it, without a goroutine of the context package's per child.
func TestWaitedBoundEndsAtItsDeadline(t *testing.T) {
	t.Parallel()
	b := New(t.Context(), 50*time.Millisecond)
	defer b.Cancel()
	before := runtime.NumGoroutine()
	children := make([]context.Context, 50)
	for i := range children {
		var cancel context.CancelFunc
		children[i], cancel = context.WithCancel(b)
		defer cancel()
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		t.Errorf("%d goroutines after deriving 50 contexts, %d before", n, before)
	}
	select {
	case <-b.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the bound did not end")
	}
	if !errors.Is(b.Err(), context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", b.Err())
	}
	for i, c := range children {
		select {
		case <-c.Done():
		case <-time.After(time.Second):
			t.Fatalf("child %d not canceled with the bound", i)
		}
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("child %d: %v", i, c.Err())
		}
	}
}

// Past its deadline a bound says so before anyone waits on it, and a wait then ends at
// once.
func TestBoundPastItsDeadline(t *testing.T) {
	t.Parallel()
	b := New(t.Context(), time.Millisecond)
	defer b.Cancel()
	time.Sleep(5 * time.Millisecond)
	if !errors.Is(b.Err(), context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", b.Err())
	}
	select {
	case <-b.Done():
	case <-time.After(time.Second):
		t.Fatal("Done not closed past the deadline")
	}
}

// A bound ends with its parent, waited on or not, and reports the earlier deadline.
func TestBoundEndsWithItsParent(t *testing.T) {
	t.Parallel()
	parent, cancel := context.WithTimeout(t.Context(), time.Hour)
	b := New(parent, 2*time.Hour)
	defer b.Cancel()
	if d, _ := b.Deadline(); d.After(time.Now().Add(time.Hour)) {
		t.Errorf("deadline %v: later than the parent's", d)
	}
	waited := New(parent, time.Hour)
	defer waited.Cancel()
	done := waited.Done()
	cancel()
	if !errors.Is(b.Err(), context.Canceled) {
		t.Errorf("unwaited bound after its parent ended: %v", b.Err())
	}
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("a waited bound outlived its parent")
	}
	if !errors.Is(waited.Err(), context.Canceled) {
		t.Errorf("waited bound after its parent ended: %v", waited.Err())
	}
}

// Canceled before anyone waited, a bound's Done is closed for whoever comes later;
// canceled after, its timer stops.
func TestCanceledBound(t *testing.T) {
	t.Parallel()
	b := New(t.Context(), time.Hour)
	b.Cancel()
	select {
	case <-b.Done():
	default:
		t.Fatal("Done of a canceled bound is open")
	}
	w := New(t.Context(), time.Hour)
	done := w.Done()
	w.Cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Cancel did not end a waited bound")
	}
	if !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("err %v", w.Err())
	}
}

func BenchmarkBound(b *testing.B) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("deadline.New", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := New(parent, 5*time.Second)
			c.Deadline()
			c.Cancel()
		}
	})
	b.Run("context.WithTimeout", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c, cancel := context.WithTimeout(parent, 5*time.Second)
			c.Done()
			cancel()
		}
	})
}
