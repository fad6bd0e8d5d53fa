package dispatch_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/queue"
)

// Confirmed success (issue 44): a success of a task with confirm_seconds counts once
// its user fetches again within that many seconds, else it becomes a failure with
// reason unconfirmed, retried while attempts are left.

func confirmSeconds(n int) func(*taskd.Task) {
	return func(t *taskd.Task) { t.Own.ConfirmSeconds = &n }
}

// secondNode is another server instance over the same MySQL and Redis: its own cache
// client state and service, as a second dispatchd process has.
func (b *bundle) secondNode() *dispatch.Service {
	b.t.Helper()
	cache := queue.NewCache(b.rdb, b.store, b.clock, queue.Config{Prefix: b.prefix, CatchUp: time.Hour})
	return dispatch.NewService(b.store, cache, b.clock, slog.New(slog.DiscardHandler), dispatch.Config{RequestTimeout: time.Minute})
}

// wantState fails the test unless the record logID is in state with result.
func (b *bundle) wantState(logID string, state taskd.DispatchState, result taskd.Result) *taskd.Dispatch {
	b.t.Helper()
	d := b.record(logID)
	if d.State != state || d.Result != result {
		b.t.Fatalf("record %s: state %s result %q, want %s %q", logID, taskd.DispatchStateName(d.State), d.Result,
			taskd.DispatchStateName(state), result)
	}
	return d
}

// A success waits, unconfirmed, with its deadline; the fetch that carried its complete
// does not confirm it, nor does a fetch at the instant of the complete; the user's open
// slot is free meanwhile (it takes its next task); the first fetch after it, on another
// node, confirms it, and the record is then done with its success, finished at the
// confirmation.
func TestConfirmedByTheNextFetchOnAnotherNode(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	first := b.task("uid_c1", t0, confirmSeconds(60))
	second := b.task("uid_c1", t0.Add(time.Minute), confirmSeconds(60))
	a := b.agent("c1")
	b.clock.Set(t0.Add(2 * time.Minute))
	got := b.mustGet(svc, a, first)

	res, err := svc.CompleteAndFetch(b.ctx, a.uid, a.hash, got.LogID, taskd.ResultSuccess, nil, 0)
	if err != nil {
		t.Fatalf("complete and fetch: %v", err)
	}
	if res.Task == nil || res.Task.TaskID != second.String() {
		t.Fatalf("the fetch carrying the complete: got %+v, want the next task %s (the slot is free)", res.Task, second)
	}
	d := b.wantState(got.LogID, taskd.StateUnconfirmed, 0)
	sameTime(t, "confirm_by", d.ConfirmBy, t0.Add(3*time.Minute))

	// The next fetch at the same instant began no later than the complete.
	b.mustGet(svc, a, second) // the second task again, a redo
	b.wantState(got.LogID, taskd.StateUnconfirmed, 0)

	b.clock.Advance(time.Second)
	other := b.secondNode()
	if res := b.fetch(other, a); res.Task == nil || !res.Task.Redo {
		t.Fatalf("fetch on the second node: %+v, want the second task again", res.Task)
	}
	d = b.wantState(got.LogID, taskd.StateDone, taskd.ResultSuccess)
	sameTime(t, "finished_at", d.FinishedAt, b.clock.Now())
	evs, err := b.store.Events(b.ctx, taskd.EventFilter{UID: "c1", Type: taskd.EventComplete, From: t0, To: t0.Add(time.Hour)}, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].LogID != got.LogID || evs[0].Result != "success" || !evs[0].At.Equal(b.clock.Now()) {
		t.Fatalf("complete events: %+v, want the confirmed success's at the confirmation", evs)
	}
	// Confirmed once: a fetch after it asks nothing more of the record.
	b.clock.Advance(time.Second)
	b.fetch(svc, a)
	b.wantState(got.LogID, taskd.StateDone, taskd.ResultSuccess)
}

// A batch fetch confirms too, and the confirmation survives a Redis flush (the confirm
// entry is rebuilt from MySQL); once confirmed, a warm empty poll reads nothing from
// MySQL.
func TestConfirmedByABatchFetchAfterARedisFlush(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	key := b.task("uid_c2", t0, confirmSeconds(30))
	a := b.agent("c2")
	got := b.mustGet(svc, a, key)
	b.complete(svc, a, got.LogID, taskd.ResultSuccess)
	b.wantState(got.LogID, taskd.StateUnconfirmed, 0)
	b.flushRedis()
	b.clock.Advance(10 * time.Second)
	res, err := svc.FetchBatch(b.ctx, a.uid, a.hash, dispatch.Batch{Max: 4}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tasks) != 0 {
		t.Fatalf("batch fetch: %+v, want nothing (the occurrence is done for the user)", res.Tasks)
	}
	b.wantState(got.LogID, taskd.StateDone, taskd.ResultSuccess)

	// Confirmed, its entry gone: the user's warm empty poll needs no MySQL again.
	b.mustGetNothing(svc, a) // learns that nothing is open (the flush lost the hint)
	b.store.DB().Close()
	b.mustGetNothing(svc, a)
}

// Past its deadline, an unconfirmed success is a failure with reason unconfirmed: with
// attempts left retried (the user takes the occurrence again as its next attempt, on
// the same quota slot), on the last attempt dead. The sweep settles the first (the user
// never came back), the user's own late fetch the second.
func TestUnconfirmedSuccessBecomesAFailure(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	key := b.task("uid_c3", t0, confirmSeconds(60), attempts(2, 0))
	a := b.agent("c3")
	got := b.mustGet(svc, a, key)
	b.complete(svc, a, got.LogID, taskd.ResultSuccess)

	b.clock.Advance(60 * time.Second) // at the deadline: not yet
	if n, err := svc.SweepUnconfirmed(b.ctx, dispatch.Shards{}); err != nil || n != 0 {
		t.Fatalf("sweep at the deadline: %d, %v; want none", n, err)
	}
	b.clock.Advance(time.Second)
	if n, err := svc.SweepUnconfirmed(b.ctx, dispatch.Shards{}); err != nil || n != 1 {
		t.Fatalf("sweep past the deadline: %d, %v; want 1", n, err)
	}
	d := b.wantState(got.LogID, taskd.StateRetryWait, taskd.ResultFailure)
	if d.Reason != taskd.ReasonUnconfirmed {
		t.Fatalf("reason %q, want %q", d.Reason, taskd.ReasonUnconfirmed)
	}
	lapsedAt := b.clock.Now()

	retry := b.mustGet(svc, a, key)
	if retry.Attempt != 2 || retry.LogID == got.LogID {
		t.Fatalf("retry: %+v, want attempt 2 of its own", retry)
	}
	b.wantClaimed(1)
	b.complete(svc, a, retry.LogID, taskd.ResultSuccess)
	b.clock.Advance(2 * time.Minute)
	b.mustGetNothing(svc, a) // the late fetch settles it: dead, and nothing to take
	d = b.wantState(retry.LogID, taskd.StateDead, taskd.ResultFailure)
	if d.Reason != taskd.ReasonUnconfirmed {
		t.Fatalf("reason %q, want %q", d.Reason, taskd.ReasonUnconfirmed)
	}
	b.wantClaimed(1)

	evs, err := b.store.Events(b.ctx, taskd.EventFilter{UID: "c3", From: t0, To: t0.Add(time.Hour)}, nil, 20)
	if err != nil {
		t.Fatal(err)
	}
	var failures, deaths int
	for _, e := range evs {
		switch {
		case e.Type == taskd.EventComplete && e.Result == "failure" && e.Reason == taskd.ReasonUnconfirmed:
			failures++
			if e.LogID == got.LogID && !e.At.Equal(lapsedAt) {
				t.Fatalf("the first lapse's complete event at %v, want %v", e.At, lapsedAt)
			}
		case e.Type == taskd.EventComplete:
			t.Fatalf("complete event %+v: want only failures with reason unconfirmed", e)
		case e.Type == taskd.EventDead:
			deaths++
		}
	}
	if failures != 2 || deaths != 1 {
		t.Fatalf("events %+v: %d unconfirmed failures and %d deaths, want 2 and 1", evs, failures, deaths)
	}
}

// A rollout gate counts a success only once it is confirmed, and an unconfirmed one
// that lapsed as a failure. The rollout's own confirm_seconds is its task's default.
func TestRolloutGateCountsConfirmedSuccessesOnly(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	b.group("fleet", "r1", "r2")
	one, all := 1, 100.0
	key := b.task("gid_fleet", t0, quota(2), func(t *taskd.Task) {
		t.Rollout = &taskd.Rollout{Phases: []taskd.Phase{{Count: &one}, {Percent: &all}},
			Gate:    taskd.Gate{MinFinished: 1, SuccessRatio: 1, FailureRatio: 0.5},
			Advance: taskd.AdvanceManual, Targeting: taskd.TargetingContinuous, OnAbort: taskd.OnAbortKeep,
			ConfirmSeconds: 60}
	})
	figures := func() taskd.RolloutView {
		t.Helper()
		v, err := b.store.TaskRollout(b.ctx, key, b.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a := b.agent("r1")
	got := b.mustGet(svc, a, key)
	b.complete(svc, a, got.LogID, taskd.ResultSuccess)
	v := figures()
	if f := v.Figures; f.Unconfirmed != 1 || f.Finished != 0 || f.Succeeded != 0 || v.Rollout.Gate.Verdict(f) != taskd.GatePending {
		t.Fatalf("figures of an unconfirmed success: %+v (%s), want 1 unconfirmed, none finished, gate pending", f, v.Rollout.Gate.Verdict(f))
	}
	b.clock.Advance(61 * time.Second)
	if _, err := svc.SweepUnconfirmed(b.ctx, dispatch.Shards{}); err != nil {
		t.Fatal(err)
	}
	v = figures()
	if f := v.Figures; f.Unconfirmed != 0 || f.Finished != 1 || f.Failed != 1 || v.Status.State != taskd.RolloutWaiting || !v.Status.GateFailed {
		t.Fatalf("after the lapse: %+v, state %s gate_failed %v; want 1 failed, the gate failed (waiting)", f, v.Status.State, v.Status.GateFailed)
	}

	// The same rollout on a second task, confirmed this time: the gate passes.
	key2 := b.task("gid_fleet", b.clock.Now(), quota(2), func(t *taskd.Task) {
		t.Rollout = &taskd.Rollout{Phases: []taskd.Phase{{Count: &one}, {Percent: &all}},
			Gate:    taskd.Gate{MinFinished: 1, SuccessRatio: 1, FailureRatio: 0.5},
			Advance: taskd.AdvanceManual, Targeting: taskd.TargetingContinuous, OnAbort: taskd.OnAbortKeep,
			ConfirmSeconds: 60}
	})
	key = key2
	a2 := b.agent("r2")
	got = b.mustGet(svc, a2, key2)
	b.complete(svc, a2, got.LogID, taskd.ResultSuccess)
	if f := figures().Figures; f.Unconfirmed != 1 || f.Succeeded != 0 {
		t.Fatalf("figures of an unconfirmed success: %+v", f)
	}
	b.clock.Advance(time.Second)
	b.fetch(svc, a2)
	v = figures()
	if f := v.Figures; f.Unconfirmed != 0 || f.Succeeded != 1 || f.Finished != 1 || v.Status.State != taskd.RolloutWaiting || v.Status.GateFailed {
		t.Fatalf("after the confirmation: %+v, state %s gate_failed %v; want 1 succeeded, the gate passed (waiting)", f, v.Status.State, v.Status.GateFailed)
	}
}

// An until_exhausted occurrence is not taken again by its user while a success of it
// waits for its confirmation (it may yet be retried); the fetch that confirms it takes
// it again at once. A lapse whose retry is due at once is taken by the fetch that
// finds it lapsed.
func TestConfirmationPutsTheOccurrenceBackOnOffer(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	key := b.task("uid_c4", t0, confirmSeconds(60), quota(5), mode(taskd.ModeUntilExhausted), attempts(2, 0))
	a := b.agent("c4")
	first := b.mustGet(svc, a, key)
	res, err := svc.CompleteAndFetch(b.ctx, a.uid, a.hash, first.LogID, taskd.ResultSuccess, nil, 0)
	if err != nil || res.Task != nil {
		t.Fatalf("the fetch carrying the success: %+v, %v; want nothing while it is unconfirmed", res.Task, err)
	}
	b.clock.Advance(time.Second)
	second := b.mustGet(svc, a, key) // confirms the first, and takes the occurrence again
	if second.LogID == first.LogID || second.Redo {
		t.Fatalf("second take: %+v", second)
	}
	b.wantState(first.LogID, taskd.StateDone, taskd.ResultSuccess)

	b.complete(svc, a, second.LogID, taskd.ResultSuccess)
	b.clock.Advance(2 * time.Minute)
	retry := b.mustGet(svc, a, key) // finds the second lapsed, and takes its retry
	if retry.Attempt != 2 {
		t.Fatalf("after the lapse: %+v, want the retry (attempt 2)", retry)
	}
	b.wantState(second.LogID, taskd.StateRetried, taskd.ResultFailure)
	b.wantClaimed(2)
}
