package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// A released lease frees its lock for another process at once (two pools: two nodes).
func TestLeaseReleaseFreesTheLock(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	open := func() *store.Store {
		s, err := store.Open(context.Background(), dsn, store.OpenOptions{MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	la, err := a.TryLease(t.Context(), "janitor")
	if err != nil || la == nil {
		t.Fatalf("node a: %v %v", la, err)
	}
	if lb, err := b.TryLease(t.Context(), "janitor"); err != nil || lb != nil {
		t.Fatalf("node b while a holds it: %v %v", lb, err)
	}
	if err := la.Release(); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryLease(t.Context(), "janitor")
	if err != nil || lb == nil {
		t.Fatalf("node b after a released: %v %v", lb, err)
	}
	lb.Release()
}

// The rate window never goes back: a claim whose now is a little older (late from the
// queue, a node's clock behind) counts in the later minute, not in a fresh one of its
// own that would let the later minute start again from zero.
func TestRateWindowNeverGoesBack(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	f := newBatchFixture(t, st)
	occ := f.task(taskd.Unlimited, taskd.ModeOncePerUser, func(t *taskd.Task) { t.Own.DispatchRatePerMinute = new(2) })
	m := batchAt.Truncate(time.Minute).Add(time.Minute)
	claimed := 0
	for i, at := range []time.Time{m.Add(500 * time.Millisecond), m.Add(-100 * time.Millisecond), m.Add(2 * time.Second),
		m.Add(3 * time.Second), m.Add(4 * time.Second)} {
		o, _, err := st.Claim(context.Background(), string(rune('a'+i)), occ, at, taskd.Single)
		if err != nil {
			t.Fatal(err)
		}
		if o == taskd.Claimed {
			claimed++
		}
	}
	if claimed != 2 {
		t.Fatalf("%d claims in about one minute at a rate of 2", claimed)
	}
}

// Retention keeps what is still told or still decides: a record whose retry, cancel
// or redo is recent (its event), and one whose occurrence is still on offer (a dead
// until_exhausted attempt keeps its user from taking it again).
func TestPruneKeepsRecentEventsAndOfferedOccurrences(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	old := now.Add(-40 * 24 * time.Hour)
	rows := []struct {
		id, extra string
		due       time.Time
		keep      bool
	}{
		{"old", "", old, false},
		{"retried", "retried_at", old, true},
		{"cancelled", "cancelled_at", old, true},
		{"redone", "last_redo_at", old, true},
		{"offered", "", now.Add(-30 * time.Minute), true},
	}
	for _, r := range rows {
		q := `INSERT INTO dispatch (log_id, uid, task_kind, task_id, due_at, mode, attempt, state, template_id, params,
			dispatched_at, finished_at) VALUES (?, 'u', 1, 1, ?, 2, 1, 6, 1, '{}', ?, ?)`
		if _, err := st.DB().Exec(q, r.id, r.due, old, old); err != nil {
			t.Fatal(err)
		}
		if r.extra != "" {
			if _, err := st.DB().Exec("UPDATE dispatch SET "+r.extra+" = ? WHERE log_id = ?", now.Add(-time.Hour), r.id); err != nil {
				t.Fatal(err)
			}
		}
	}
	d, _, err := st.PruneBatch(t.Context(), store.Cutoffs{Dispatches: now.Add(-30 * 24 * time.Hour), Offered: now.Add(-time.Hour)}, 100)
	if err != nil || d != 1 {
		t.Fatalf("pruned %d (%v), want the one old record", d, err)
	}
	for _, r := range rows {
		var n int
		st.DB().QueryRow("SELECT COUNT(*) FROM dispatch WHERE log_id = ?", r.id).Scan(&n)
		if (n == 1) != r.keep {
			t.Errorf("%s: kept %v, want %v", r.id, n == 1, r.keep)
		}
	}
}

// A run of missed occurrences recorded twice (two nodes, or again after Redis refused
// the heap's step) is one event, the longest; the janitor prunes it with the records.
func TestMissedRunsKeepTheLongestAndArePruned(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 28, 11, 2, 0, 0, time.UTC)
	first := time.Date(2026, 11, 28, 10, 5, 0, 0, time.UTC)
	run := taskd.Missed{UID: "u1", Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 7}, First: first, Last: first.Add(50 * time.Minute), Count: 11}
	longer := run
	longer.Last, longer.Count = first.Add(55*time.Minute), 12
	for _, r := range []taskd.Missed{run, longer, run} {
		if err := st.RecordMissed(ctx, []taskd.Missed{r}, at); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := st.Events(ctx, taskd.EventFilter{Type: taskd.EventMissed, From: at.Add(-time.Hour), To: at.Add(time.Hour)}, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Missed != 12 || evs[0].LastDueAt == nil || !evs[0].LastDueAt.Equal(longer.Last) ||
		evs[0].EventID != taskd.MissedEventID(taskd.Occurrence{Task: run.Task, DueAt: first}, "u1") {
		t.Fatalf("missed events: %+v", evs)
	}
	if _, _, err := st.PruneBatch(ctx, store.Cutoffs{Dispatches: at.Add(time.Second), Offered: at}, 100); err != nil {
		t.Fatal(err)
	}
	if evs, _ := st.Events(ctx, taskd.EventFilter{Type: taskd.EventMissed, From: at.Add(-time.Hour), To: at.Add(time.Hour)}, nil, 10); len(evs) != 0 {
		t.Fatalf("after the prune: %+v", evs)
	}
}

// A once task with windows due before the catch-up stays on the offers of the users
// that have not had it (it waits for a window), and leaves the offer of one that holds
// it: otherwise it would cost that user a refused claim at every rebuild for a week.
func TestWindowedOnceTaskLeavesTheOfferOfItsHolder(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	f := newBatchFixture(t, st)
	ws := taskd.Windows{{Cron: "0 9 * * *", Minutes: 120}} // open at the claim, 10:00
	occ := f.task(taskd.Unlimited, taskd.ModeOncePerUser, func(t *taskd.Task) { t.OwnWindows = ws })
	if o, _, err := st.Claim(context.Background(), "a", occ, batchAt, taskd.Single); err != nil || o != taskd.Claimed {
		t.Fatalf("claim: %v %v", o, err)
	}
	floor := batchAt.Add(3 * time.Hour) // the task is due before it
	for uid, want := range map[string]int{"a": 0, "b": 1} {
		src, err := st.LoadSource(context.Background(), uid, []string{"g"}, floor, floor.Add(48*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if len(src.Once) != want {
			t.Errorf("%s's offer: %d once tasks, want %d", uid, len(src.Once), want)
		}
	}
}
