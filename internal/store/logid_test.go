package store_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// Log ids sort as their dispatch times do, to the microsecond, across milliseconds;
// they are version-7 UUIDs carrying the millisecond; a time range's bounds hold every
// id of the range.
func TestLogIDsSortAsTheirDispatchTimes(t *testing.T) {
	base := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	var times []time.Time
	for i := range 2000 {
		times = append(times, base.Add(time.Duration(rand.IntN(5000))*time.Microsecond))
		if i%100 == 0 { // the last and first microsecond of a millisecond
			times = append(times, base.Add(time.Duration(i)*time.Millisecond-time.Microsecond), base.Add(time.Duration(i)*time.Millisecond))
		}
	}
	type rec struct {
		at time.Time
		id string
	}
	var recs []rec
	for _, at := range times {
		id := store.LogIDAt(at)
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("%s: not a version-7 UUID (%v)", id, err)
		}
		if got := time.Unix(u.Time().UnixTime()); got.UnixMilli() != at.UnixMilli() {
			t.Fatalf("%s carries %v, want the millisecond of %v", id, got, at)
		}
		recs = append(recs, rec{at, id})
	}
	slices.SortFunc(recs, func(a, b rec) int { return strings.Compare(a.id, b.id) })
	for i := 1; i < len(recs); i++ {
		if recs[i].at.Before(recs[i-1].at) {
			t.Fatalf("id %s (%v) sorts after %s (%v)", recs[i].id, recs[i].at, recs[i-1].id, recs[i-1].at)
		}
	}
	for _, r := range recs[:200] {
		for _, w := range []struct{ from, to time.Time }{
			{r.at, r.at.Add(time.Microsecond)},
			{r.at.Add(-time.Hour), r.at.Add(time.Hour)},
			{time.Time{}, time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)},
			{time.Unix(0, 0), r.at.Add(time.Microsecond)},
		} {
			lo, hi := store.LogIDBounds(w.from, w.to)
			if r.id < lo || r.id > hi {
				t.Fatalf("%s (%v) outside [%s, %s] of [%v, %v)", r.id, r.at, lo, hi, w.from, w.to)
			}
		}
	}
}

// Every kind of event is found in a window that holds its time and only there, though
// only the dispatch time and the latest later event have a key; so is a record whose
// id was taken a little after its dispatch time (as before migration 0024); the stats
// count what was dispatched and what finished in the window.
func TestEventsAndStatsOfAWindow(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return at.Add(time.Duration(n) * time.Second) }
	type planted struct {
		id                                 string
		state                              taskd.DispatchState
		result                             any
		dispatch                           time.Time
		finished, redo, retried, cancelled any
	}
	oldID := store.NewLogID(sec(0).Add(20 * time.Second)) // taken 20 s after its dispatch time
	rows := []planted{
		{store.NewLogID(sec(0)), taskd.StateDone, taskd.ResultSuccess, sec(0), sec(100), nil, nil, nil},
		{store.NewLogID(sec(1)), taskd.StateDone, taskd.ResultFailure, sec(1), sec(200), sec(50), nil, nil},
		{store.NewLogID(sec(2)), taskd.StateDead, nil, sec(2), sec(300), nil, sec(400), nil},
		{store.NewLogID(sec(3)), taskd.StateCancelled, nil, sec(3), sec(500), nil, nil, sec(500)},
		{store.NewLogID(sec(4)), taskd.StateOpen, nil, sec(4), nil, sec(600), nil, nil},
		{oldID, taskd.StateDone, taskd.ResultSuccess, sec(0), sec(700), nil, nil, nil},
	}
	for _, r := range rows {
		if _, err := st.DB().Exec(`INSERT INTO dispatch (log_id, uid, task_kind, task_id, due_at, mode, attempt, state, result,
			template_id, params, dispatched_at, finished_at, last_redo_at, redo_count, retried_at, cancelled_at)
			VALUES (?, 'u1', 1, 7, ?, 1, 1, ?, ?, 1, '{}', ?, ?, ?, IF(? IS NULL, 0, 1), ?, ?)`,
			r.id, at, r.state, r.result, r.dispatch, r.finished, r.redo, r.redo, r.retried, r.cancelled); err != nil {
			t.Fatal(err)
		}
	}
	events := func(from, to time.Time) []string {
		t.Helper()
		evs, err := st.Events(ctx, taskd.EventFilter{From: from, To: to}, nil, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			out = append(out, string(e.Type)+"@"+e.At.Sub(at).String())
		}
		slices.Sort(out)
		return out
	}
	for _, c := range []struct {
		from, to time.Time
		want     []string
	}{
		{sec(0), sec(5), []string{"dispatch@0s", "dispatch@0s", "dispatch@1s", "dispatch@2s", "dispatch@3s", "dispatch@4s"}},
		{sec(1), sec(2), []string{"dispatch@1s"}},
		{sec(40), sec(60), []string{"redo@50s"}},
		{sec(90), sec(210), []string{"complete@1m40s", "complete@3m20s"}},
		{sec(290), sec(310), []string{"dead@5m0s", "expire@5m0s"}},
		{sec(399), sec(401), []string{"retry@6m40s"}},
		{sec(500), sec(501), []string{"cancel@8m20s"}},
		{sec(599), sec(601), []string{"redo@10m0s"}},
		{sec(700), sec(800), []string{"complete@11m40s"}},
		{sec(801), sec(900), nil},
	} {
		if got := events(c.from, c.to); !slices.Equal(got, c.want) {
			t.Errorf("events of [%v, %v): %v, want %v", c.from.Sub(at), c.to.Sub(at), got, c.want)
		}
	}

	stats, err := st.Stats(ctx, sec(1), sec(250))
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].Dispatched != 4 || stats[0].Completed != 1 || stats[0].Failed != 1 || stats[0].Redo != 2 {
		t.Fatalf("stats of [1s, 250s): %+v, want 4 dispatched, 1 completed, 1 failed, 2 redos", stats)
	}
}

// Ids of one dispatch time sort in the order they were made: the records a user makes
// in a row under a fixed clock keep their order.
func TestLogIDsOfOneTimeSortInTheOrderMade(t *testing.T) {
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	last := store.NewLogID(at)
	for range 1000 {
		id := store.NewLogID(at)
		if id <= last {
			t.Fatalf("id %s not above the one made before it, %s", id, last)
		}
		if u := uuid.MustParse(id); u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("%s: not a version-7 UUID", id)
		}
		last = id
	}
}
