package app_test

import (
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// The retention janitor deletes finished dispatch records and outbox rows past their
// ages, in batches, and nothing else: an open dispatch, a failed attempt waiting for its
// retry and recent records stay. One node at a time: while another holds the janitor
// lease, a node prunes nothing.
func TestRetentionJanitor(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 2, func(c *app.Config) {
		c.KafkaBrokers = []string{"127.0.0.1:9"} // the outbox fills (no relay runs here)
		c.RetainDispatches, c.RetainOutbox, c.RetentionInterval = 30*24*time.Hour, 7*24*time.Hour, time.Hour
	})
	k := e.key("1")
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-20 * time.Minute)), "max_attempts": 2,
		"retry_backoff_seconds": 86400})
	for i := range 3 {
		e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Duration(i-10) * time.Minute))})
	}
	waiting := mustFetch(t, e, k) // fails; its retry is a day away
	if code, out := e.complete(0, k, waiting.LogID, "failure"); code != 200 {
		t.Fatalf("failure: %d %v", code, out)
	}
	done := mustFetch(t, e, k)
	e.mustComplete(k, done.LogID)
	failed := mustFetch(t, e, k)
	if code, out := e.complete(0, k, failed.LogID, "failure"); code != 200 { // its only attempt: dead
		t.Fatalf("failure: %d %v", code, out)
	}
	open := mustFetch(t, e, k)
	outbox := e.count("SELECT COUNT(*) FROM event_outbox")
	if outbox == 0 {
		t.Fatal("no outbox rows to prune")
	}

	// A week and a day later: the outbox rows go, the dispatch records stay.
	e.clock.Advance(8 * 24 * time.Hour)
	p, err := e.apps[0].Prune(t.Context())
	if err != nil || p.Skipped || p.Outbox != int64(outbox) || p.Dispatches != 0 {
		t.Fatalf("after 8 days: %+v %v, want %d outbox rows and no dispatch", p, err, outbox)
	}
	// Another node holds the lease: nothing is pruned meanwhile.
	lease, err := e.store.TryLease(t.Context(), "janitor")
	if err != nil || lease == nil {
		t.Fatalf("lease: %v %v", lease, err)
	}
	e.clock.Advance(30 * 24 * time.Hour)
	if p, err := e.apps[1].Prune(t.Context()); err != nil || !p.Skipped || p.Dispatches != 0 {
		t.Fatalf("while another node holds the lease: %+v %v", p, err)
	}
	lease.Release()
	p, err = e.apps[1].Prune(t.Context())
	if err != nil || p.Skipped || p.Dispatches != 2 {
		t.Fatalf("after 38 days: %+v %v, want the two finished records", p, err)
	}
	for _, id := range []string{done.LogID, failed.LogID} {
		if n := e.count("SELECT COUNT(*) FROM dispatch WHERE log_id = ?", id); n != 0 {
			t.Errorf("finished record %s kept", id)
		}
	}
	for _, id := range []string{waiting.LogID, open.LogID} {
		if n := e.count("SELECT COUNT(*) FROM dispatch WHERE log_id = ?", id); n != 1 {
			t.Errorf("live record %s deleted", id)
		}
	}
	// In batches: 1,200 old finished records take three statements, and go.
	if _, err := e.store.DB().Exec(`INSERT INTO dispatch (log_id, uid, task_kind, task_id, due_at, mode, attempt, state,
		template_id, params, dispatched_at, finished_at)
		SELECT UUID(), 'x', 1, 1, ?, 1, 1, 3, 1, '{}', ?, ? FROM seq_1_to_1200`, t0, t0, t0); err != nil {
		t.Fatal(err)
	}
	if p, err := e.apps[0].Prune(t.Context()); err != nil || p.Dispatches != 1200 {
		t.Fatalf("1,200 old records: %+v %v", p, err)
	}
	if n := e.count("SELECT COUNT(*) FROM dispatch"); n != 2 {
		t.Fatalf("%d records left, want the 2 live ones", n)
	}
}
