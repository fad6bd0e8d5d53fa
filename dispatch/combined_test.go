package dispatch_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/queue"
	"github.com/taskpull/taskd/schedule"
)

// A fetch carrying a complete (CompleteAndFetch) goes on from the view it peeked before
// the complete. These are the cases where that view must not be trusted.

// hookCache is the real cache, with a SetOpen that can be held until released and a
// hook that runs after a peek.
type hookCache struct {
	dispatch.Cache
	mu        sync.Mutex
	holdSet   func(logID string) bool
	entered   chan string
	release   chan struct{}
	afterPeek func()
}

func (h *hookCache) SetOpen(ctx context.Context, uid, logID string, kept []byte, popped []schedule.Entry) error {
	h.mu.Lock()
	hold := h.holdSet != nil && h.holdSet(logID)
	if hold {
		h.holdSet = nil // once
	}
	h.mu.Unlock()
	if hold {
		h.entered <- logID
		<-h.release
	}
	return h.Cache.SetOpen(ctx, uid, logID, kept, popped)
}

func (h *hookCache) PeekN(ctx context.Context, uid, keyHash string, now time.Time, n int) (schedule.View, error) {
	return h.hooked(h.Cache.PeekN(ctx, uid, keyHash, now, n))
}

func (h *hookCache) PeekCompleting(ctx context.Context, uid, keyHash, logID string, now time.Time, n int) (schedule.View, bool, error) {
	v, dropped, err := h.Cache.PeekCompleting(ctx, uid, keyHash, logID, now, n)
	v, err = h.hooked(v, err)
	return v, dropped, err
}

// hooked runs the after-peek hook, once, and returns the peek's answer.
func (h *hookCache) hooked(v schedule.View, err error) (schedule.View, error) {
	h.mu.Lock()
	f := h.afterPeek
	h.afterPeek = nil
	h.mu.Unlock()
	if f != nil {
		f()
	}
	return v, err
}

func setupHooked(t *testing.T) (*dispatch.Service, *bundle, *hookCache) {
	t.Helper()
	_, b := setup(t)
	h := &hookCache{Cache: b.cache, entered: make(chan string, 1), release: make(chan struct{})}
	return dispatch.NewService(b.store, h, b.clock, b.log, dispatch.Config{RequestTimeout: time.Minute}), b, h
}

// setHint writes the user's open-dispatch hint as a stale cache might hold it.
func (b *bundle) setHint(uid, logID string) {
	b.t.Helper()
	if err := b.rdb.HSet(b.ctx, queue.Keys{Prefix: b.prefix}.User(uid), "open", logID).Err(); err != nil {
		b.t.Fatal(err)
	}
}

// A resend of a fetch carrying the complete of L1, racing the first: the first has
// committed the complete and claimed L2 but not yet written L2's hint. The resend's
// complete is a repeat (it commits nothing), so the hint still naming L1 says nothing
// about what is open: the resend must find L2 in MySQL and hand it out again.
func TestResentCombinedFetchFindsTheDispatchItsFirstMade(t *testing.T) {
	t.Parallel()
	svc, b, h := setupHooked(t)
	x1 := b.task("uid_1", t0.Add(-2*time.Minute))
	x2 := b.task("uid_1", t0.Add(-time.Minute))
	a := b.agent("1")
	first := b.mustGet(svc, a, x1)
	h.holdSet = func(id string) bool { return id != first.LogID }
	done := make(chan fetched, 1)
	go func() {
		res, err := svc.CompleteAndFetch(b.ctx, a.uid, a.hash, first.LogID, taskd.ResultSuccess, nil, 0)
		done <- fetched{res, err}
	}()
	l2 := <-h.entered // committed; its hint not written yet
	res, err := svc.CompleteAndFetch(b.ctx, a.uid, a.hash, first.LogID, taskd.ResultSuccess, nil, 0)
	close(h.release)
	if f := <-done; f.err != nil || f.res.Task == nil || f.res.Task.LogID != l2 {
		t.Fatalf("first request: %+v %v", f.res.Task, f.err)
	}
	if err != nil || res.Task == nil || res.Task.LogID != l2 || !res.Task.Redo || res.Task.TaskID != x2.String() {
		t.Fatalf("the resend: %+v %v; want a redo of %s", res.Task, err, l2)
	}
}

// A stale hint naming L1 while L2 is open: a resent combined fetch of L1's complete
// (success, or a failure whose retry waits) hands out L2 and leaves the hint to MySQL's
// word, so a later plain fetch finds L2 too.
func TestResentCombinedFetchDoesNotTrustAStaleHint(t *testing.T) {
	t.Parallel()
	for _, result := range []taskd.Result{taskd.ResultSuccess, taskd.ResultFailure} {
		t.Run(result.String(), func(t *testing.T) {
			t.Parallel()
			svc, b := setup(t)
			x1 := b.task("uid_1", t0.Add(-2*time.Minute), attempts(2, 60))
			x2 := b.task("uid_1", t0.Add(-time.Minute))
			a := b.agent("1")
			first := b.mustGet(svc, a, x1)
			res, err := svc.CompleteAndFetch(b.ctx, a.uid, a.hash, first.LogID, result, nil, 0)
			if err != nil || res.Task == nil || res.Task.TaskID != x2.String() {
				t.Fatalf("combined fetch: %+v %v", res.Task, err)
			}
			l2 := res.Task.LogID
			b.setHint("1", first.LogID)
			res, err = svc.CompleteAndFetch(b.ctx, a.uid, a.hash, first.LogID, result, nil, 0)
			if err != nil || res.Task == nil || res.Task.LogID != l2 {
				t.Fatalf("the resend: %+v %v; want a redo of %s", res.Task, err, l2)
			}
			if later := b.fetch(svc, a); later.Task == nil || later.Task.LogID != l2 {
				t.Fatalf("a plain fetch after: %+v; want a redo of %s", later.Task, l2)
			}
		})
	}
}

// What comes due while the complete runs is handed out by the same request: the view
// peeked before the complete did not have it as due.
func TestCombinedFetchHandsOutWhatCameDueDuringTheComplete(t *testing.T) {
	t.Parallel()
	svc, b, h := setupHooked(t)
	x1 := b.task("uid_1", t0.Add(-time.Minute))
	x2 := b.task("uid_1", t0.Add(time.Second))
	a := b.agent("1")
	first := b.mustGet(svc, a, x1)
	h.afterPeek = func() { b.clock.Advance(2 * time.Second) } // the complete takes its time
	res, err := svc.CompleteAndFetch(b.ctx, a.uid, a.hash, first.LogID, taskd.ResultSuccess, nil, 0)
	if err != nil || res.Task == nil || res.Task.TaskID != x2.String() {
		t.Fatalf("combined fetch: %+v %v (next_due_at %v); want %s, due during the complete", res.Task, err, res.NextDueAt, x2)
	}
}
