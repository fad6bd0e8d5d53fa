package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// A final failure (retry false) of an attempt with attempts left kills the record at
// once, in a batch of completes and alone alike: dead, no retry, the user's cursor
// past the occurrence, the record saying final, and its complete and dead events
// (outbox and events API) saying so too. A repeat of the complete changes nothing.
func TestFinalFailureIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	st.SetEvents(store.EventsConfig{Outbox: true, Node: "n1"})
	f := newBatchFixture(t, st)
	ctx := context.Background()
	occ := f.task(taskd.Unlimited, taskd.ModeOncePerUser, func(t *taskd.Task) { t.Own.MaxAttempts = new(3) })
	res := f.claims(claimOf("1", occ), claimOf("2", occ), claimOf("3", occ))
	logs := map[string]string{}
	for i, r := range res {
		if r.Outcome != taskd.Claimed {
			t.Fatalf("claim %d: %v", i, r.Outcome)
		}
		logs[r.D.UID] = r.D.LogID
	}
	later := batchAt.Add(2 * time.Second)

	// 1 in a batch, beside 3's ordinary failure; 2 alone (this store has no batcher).
	got, err := st.CompleteBatch(ctx, []store.BatchComplete{
		{UID: "1", LogID: logs["1"], Result: taskd.ResultFinalFailure, Now: later},
		{UID: "3", LogID: logs["3"], Result: taskd.ResultFailure, Now: later},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Outcome != taskd.Completed || got[0].D.State != taskd.StateDead || !got[0].D.Final {
		t.Errorf("batch final failure: %v %+v", got[0].Outcome, got[0].D)
	}
	if got[1].Outcome != taskd.RetryScheduled || got[1].D.Final {
		t.Errorf("batch ordinary failure: %v %+v", got[1].Outcome, got[1].D)
	}
	outcome, d, err := st.Complete(ctx, "2", logs["2"], taskd.ResultFinalFailure, json.RawMessage(`{"why":"bad input"}`), later)
	if err != nil || outcome != taskd.Completed || d.State != taskd.StateDead || !d.Final {
		t.Fatalf("alone final failure: %v %+v %v", outcome, d, err)
	}

	for _, uid := range []string{"1", "2"} {
		d, err := st.GetDispatch(ctx, logs[uid])
		if err != nil {
			t.Fatal(err)
		}
		if d.State != taskd.StateDead || d.Result != taskd.ResultFailure || !d.Final || d.RetryAt != nil || d.Attempt != 1 {
			t.Errorf("%s's record: %+v", uid, d)
		}
		var cursor time.Time
		if err := st.DB().QueryRow("SELECT cursor_at FROM user_state WHERE uid = ?", uid).Scan(&cursor); err != nil || !cursor.Equal(batchAt) {
			t.Errorf("%s's cursor %v (%v), want %v", uid, cursor, err, batchAt)
		}
		// A repeat (final or not) is answered as done and changes nothing.
		for _, r := range []taskd.Result{taskd.ResultFinalFailure, taskd.ResultFailure} {
			if o, _, err := st.Complete(ctx, uid, logs[uid], r, nil, later.Add(time.Second)); err != nil || o != taskd.AlreadyDone {
				t.Errorf("%s's repeat (%v): %v %v", uid, r, o, err)
			}
		}
	}
	if d, err := st.GetDispatch(ctx, logs["3"]); err != nil || d.State != taskd.StateRetryWait || d.Final {
		t.Errorf("3's record: %+v %v", d, err)
	}

	// The outbox: complete and dead events of 1 and 2 say final; 3's complete does not.
	lease, err := st.TryLeaseOutbox(ctx)
	if err != nil || lease == nil {
		t.Fatalf("lease: %v %v", lease, err)
	}
	defer lease.Release(ctx)
	rows, err := lease.ReadOutbox(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	final := map[string]bool{}
	for _, r := range rows {
		var ev taskd.Event
		if err := json.Unmarshal(r.Payload, &ev); err != nil {
			t.Fatal(err)
		}
		final[ev.EventID] = ev.Final
	}
	wantFinal := map[string]bool{
		taskd.EventID(logs["1"], taskd.EventComplete, 0): true, taskd.EventID(logs["1"], taskd.EventDead, 0): true,
		taskd.EventID(logs["2"], taskd.EventComplete, 0): true, taskd.EventID(logs["2"], taskd.EventDead, 0): true,
		taskd.EventID(logs["3"], taskd.EventComplete, 0): false,
	}
	for id, want := range wantFinal {
		if got, ok := final[id]; !ok || got != want {
			t.Errorf("outbox event %s: present %v final %v, want final %v", id, ok, got, want)
		}
	}

	// The events API, derived from the records, says the same.
	evs, err := st.Events(ctx, taskd.EventFilter{From: batchAt.Add(-time.Hour), To: later.Add(time.Hour)}, nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs {
		want, listed := wantFinal[e.EventID]
		if e.Final != want {
			t.Errorf("event %s (%s): final %v", e.EventID, e.Type, e.Final)
		}
		if listed {
			seen[e.EventID] = true
		}
	}
	if len(seen) != len(wantFinal) {
		t.Errorf("events API: %d of the %d events looked for: %+v", len(seen), len(wantFinal), evs)
	}
}
