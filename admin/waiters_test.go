package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

// The waiters of a task are woken by Finished at once, and by a look whose mark of
// the task changed (the first look of a task, having nothing to compare with, wakes
// them too); an unchanged mark or a failed look wakes nobody; the looks stop when
// nobody waits, and start again with the next waiter.
func TestWaitersWake(t *testing.T) {
	t.Parallel()
	a, b := taskd.TaskKey{Kind: taskd.KindOnce, ID: 1}, taskd.TaskKey{Kind: taskd.KindRotate, ID: 1}
	var mu sync.Mutex
	marks := map[taskd.TaskKey]taskd.ResultsMark{a: {Seq: 1}, b: {Seq: 1}}
	var fail bool
	looks := make(chan struct{}, 1000)
	w := newWaiters(func(ctx context.Context, keys []taskd.TaskKey) (map[taskd.TaskKey]taskd.ResultsMark, error) {
		defer func() { looks <- struct{}{} }()
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return nil, errors.New("mysql is away")
		}
		out := map[taskd.TaskKey]taskd.ResultsMark{}
		for _, k := range keys {
			out[k] = marks[k]
		}
		return out, nil
	}, time.Millisecond, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// afterLooks returns once n more looks have been made, the last but one applied.
	afterLooks := func(n int) {
		t.Helper()
		for range n {
			<-looks
		}
	}
	woken := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ctx := t.Context()
	wa, leaveA := w.add(ctx, a)
	wb, leaveB := w.add(ctx, b)
	afterLooks(3) // b may have come after the first look's read
	if !woken(wa) || !woken(wb) {
		t.Fatal("the first look woke nobody")
	}
	w.Finished(a)
	if !woken(wa) || woken(wb) {
		t.Fatal("Finished(a) did not wake a alone")
	}
	afterLooks(3)
	if woken(wa) || woken(wb) {
		t.Fatal("an unchanged mark woke a waiter")
	}
	mu.Lock()
	fail = true
	marks[b] = taskd.ResultsMark{Seq: 1, Pending: true}
	mu.Unlock()
	afterLooks(3)
	if woken(wa) || woken(wb) {
		t.Fatal("a failed look woke a waiter")
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	afterLooks(3)
	if woken(wa) || !woken(wb) {
		t.Fatal("b's changed mark did not wake b alone")
	}
	leaveA()
	leaveB()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		looking := w.looking
		w.mu.Unlock()
		if !looking {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the looks go on with nobody waiting")
		}
	}
	for len(looks) > 0 {
		<-looks
	}
	again, leave := w.add(ctx, a)
	defer leave()
	afterLooks(2)
	if !woken(again) {
		t.Fatal("the looks did not start again for a new waiter")
	}
}
