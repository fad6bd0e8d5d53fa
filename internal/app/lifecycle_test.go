package app_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// Tests of the dispatch lifecycle's edges: what a reply says comes next, expiries as
// attempts, retries beside the open slot, paused and deleted tasks, event ids, stats.

// stats returns the stats entry of taskID over the default range, or nil.
func (e *env) stats(taskID string) map[string]any {
	e.t.Helper()
	for _, s := range e.admin("GET", "/v1/admin/stats", nil)["tasks"].([]any) {
		if m := s.(map[string]any); m["task_id"] == taskID {
			return m
		}
	}
	return nil
}

// events returns the admin events API's events, newest first.
func (e *env) events(query string) []map[string]any {
	e.t.Helper()
	var out []map[string]any
	for _, ev := range e.admin("GET", "/v1/admin/events"+query, nil)["events"].([]any) {
		out = append(out, ev.(map[string]any))
	}
	return out
}

// An open dispatch in the range is counted as dispatched, not a 503.
func TestStatsCountAnOpenDispatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	k := e.key("1")
	mustFetch(t, e, k)
	code, out := e.do(0, "GET", "/v1/admin/stats", adminToken, nil)
	if code != 200 {
		t.Fatalf("stats with an open dispatch: %d %v", code, out)
	}
	st := e.stats(id)
	if st == nil || st["dispatched"] != 1.0 || st["completed"] != 0.0 || st["dead"] != 0.0 {
		t.Fatalf("stats of %s: %v", id, st)
	}
}

func timeEq(t *testing.T, what string, got *time.Time, want time.Time) {
	t.Helper()
	if got == nil || !got.Equal(want) {
		t.Fatalf("%s: next_due_at %v, want %v", what, got, want)
	}
}

// A reply that dispatches says when the user's next occurrence is due: the task's own
// next rotation, or another task's occurrence, whichever comes first; a redo too.
func TestNextDueAtInADispatchingReply(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("rotate", map[string]any{"executor": "uid_1", "start_time": ts(t0), "space_minutes": 10})
	k := e.key("1")
	r := e.fetch(0, k)
	if r.Task == nil {
		t.Fatal("no task")
	}
	timeEq(t, "rotate task alone", r.NextDueAt, t0.Add(10*time.Minute))
	redo := e.fetch(0, k)
	if redo.Task == nil || !redo.Task.Redo {
		t.Fatalf("want a redo, got %+v", redo.Task)
	}
	timeEq(t, "redo", redo.NextDueAt, t0.Add(10*time.Minute))
	e.mustComplete(k, r.Task.LogID)

	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(4 * time.Minute))})
	e.clock.Advance(10 * time.Minute)
	r = e.fetch(0, k) // the 10:10 rotation; the once task at 10:04 is due too and comes first
	if r.Task == nil {
		t.Fatal("no task")
	}
	timeEq(t, "two due", r.NextDueAt, t0.Add(10*time.Minute))
}

// A once task alone: nothing more is scheduled, so next_due_at is null.
func TestNextDueAtNullWhenNothingMore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0)})
	k := e.key("1")
	if r := e.fetch(0, k); r.Task == nil || r.NextDueAt != nil {
		t.Fatalf("got %+v next %v, want a task and no next", r.Task, r.NextDueAt)
	}
}

// An occurrence whose dispatch always outlives its lease is not re-dispatched forever:
// each expiry is an attempt, and after max_attempts the occurrence is dead.
func TestExpiryCountsAsAnAttempt(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"once_per_user", "until_exhausted"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			expiryCountsAsAnAttempt(t, mode)
		})
	}
}

func expiryCountsAsAnAttempt(t *testing.T, mode string) {
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "lease_seconds": 30, "max_attempts": 3,
		"mode": mode})
	k := e.key("1")
	var last *task
	for attempt := 1; attempt <= 3; attempt++ {
		r := mustFetch(t, e, k)
		if r.TaskID != id || r.Attempt != attempt {
			t.Fatalf("fetch %d: %s attempt %d", attempt, r.TaskID, r.Attempt)
		}
		last = r
		e.clock.Advance(31 * time.Second)
	}
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("dead occurrence dispatched again: %+v", r.Task)
	}
	if code, out := e.complete(0, k, last.LogID, "success"); code != 409 || out["error"].(map[string]any)["code"] != "stale_lease" {
		t.Fatalf("late complete of the dead dispatch: %d %v", code, out)
	}
	st := e.stats(id)
	if st["dead"] != 1.0 || st["expired"] != 3.0 || st["dispatched"] != 3.0 {
		t.Fatalf("stats: %v", st)
	}
	if evs := e.events("?type=dead"); len(evs) != 1 || evs[0]["log_id"] != last.LogID {
		t.Fatalf("dead events: %v", evs)
	}
	// The slot stays taken: a quota-1 occurrence is not offered to anyone else.
	e.checkClaims()
	if n := e.count("SELECT claimed FROM occurrence_claim"); n != 1 {
		t.Fatalf("claimed %d after death, want 1 (the slot is not returned)", n)
	}
}

// The last attempt failing makes the occurrence dead too, with a dead event.
func TestFinalFailureIsDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0)})
	k := e.key("1")
	r := mustFetch(t, e, k)
	if code, _ := e.complete(0, k, r.LogID, "failure"); code != 200 {
		t.Fatal("complete failure")
	}
	if code, _ := e.complete(0, k, r.LogID, "failure"); code != 200 {
		t.Fatal("a repeated complete of the final failure is answered as the first")
	}
	if st := e.stats(id); st["dead"] != 1.0 || st["failed"] != 1.0 {
		t.Fatalf("stats: %v", st)
	}
	e.checkClaims()
}

// A failed occurrence waiting out its backoff does not block the user's other tasks;
// the retry comes back when due.
func TestRetryBackoffDoesNotBlockOtherTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	a := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-2 * time.Minute)),
		"max_attempts": 2, "retry_backoff_seconds": 60})
	b := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	k := e.key("1")
	first := mustFetch(t, e, k)
	if first.TaskID != a {
		t.Fatalf("first: %s", first.TaskID)
	}
	if code, _ := e.complete(0, k, first.LogID, "failure"); code != 200 {
		t.Fatal("complete failure")
	}
	r := e.fetch(0, k)
	if r.Task == nil || r.Task.TaskID != b {
		t.Fatalf("during the backoff: got %+v, want %s", r.Task, b)
	}
	timeEq(t, "beside a waiting retry", r.NextDueAt, t0.Add(60*time.Second))
	e.mustComplete(k, r.Task.LogID)
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("before the retry is due: %+v", r.Task)
	}
	e.clock.Advance(61 * time.Second)
	retry := mustFetch(t, e, k)
	if retry.TaskID != a || retry.Attempt != 2 || retry.LogID == first.LogID {
		t.Fatalf("retry: %+v", retry)
	}
	e.mustComplete(k, retry.LogID)
	e.checkClaims()
}

// The retry survives Redis losing the heap: it is rebuilt from MySQL.
func TestRetryComesBackAfterRedisFlush(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	a := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0),
		"max_attempts": 2, "retry_backoff_seconds": 10})
	k := e.key("1")
	first := mustFetch(t, e, k)
	e.complete(0, k, first.LogID, "failure")
	e.clock.Advance(11 * time.Second)
	keys, _ := e.rdb.Keys(t.Context(), e.prefix+"*").Result()
	e.rdb.Del(t.Context(), keys...)
	if r := mustFetch(t, e, k); r.TaskID != a || r.Attempt != 2 {
		t.Fatalf("after a flush: %+v", r)
	}
}

// put replaces a task with the given fields changed (PUT takes every field).
func (e *env) put(taskID string, change map[string]any) {
	e.t.Helper()
	path := "/v1/admin/tasks/" + strings.Replace(taskID, ":", "/", 1)
	cur := e.admin("GET", path, nil)
	body := map[string]any{}
	for _, f := range []string{"executor", "start_time", "template_id", "params", "dispatch_times", "mode",
		"priority", "status", "lease_seconds", "max_attempts", "retry_backoff_seconds", "space_minutes", "end_time"} {
		if v, ok := cur[f]; ok {
			body[f] = v
		}
	}
	for f, v := range change {
		body[f] = v
	}
	e.admin("PUT", path, body)
}

// An open dispatch of a task paused since is not redone: the user's other tasks flow,
// a complete still counts, and the resume hands it out again.
func TestPausedTaskOpenDispatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	a := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-2 * time.Minute))})
	b := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	c := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-30 * time.Second))})
	k := e.key("1")
	open := mustFetch(t, e, k)
	if open.TaskID != a {
		t.Fatalf("first: %s", open.TaskID)
	}
	e.put(a, map[string]any{"status": "paused"})
	r := mustFetch(t, e, k)
	if r.TaskID != b || r.Redo {
		t.Fatalf("with %s paused: got %+v, want %s", a, r, b)
	}
	e.mustComplete(k, r.LogID)
	e.mustComplete(k, open.LogID) // a complete of the paused task's dispatch still counts
	if st := e.stats(a); st["completed"] != 1.0 {
		t.Fatalf("stats of the paused task: %v", st)
	}
	if r := mustFetch(t, e, k); r.TaskID != c {
		t.Fatalf("next: %+v", r)
	}
	e.checkClaims()
}

func TestResumedTaskHandsItsParkedDispatchOutAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	a := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	k := e.key("1")
	open := mustFetch(t, e, k)
	e.put(a, map[string]any{"status": "paused"})
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("paused: got %+v", r.Task)
	}
	e.put(a, map[string]any{"status": "active"})
	r := mustFetch(t, e, k)
	if r.LogID != open.LogID || !r.Redo {
		t.Fatalf("after resume: %+v, want a redo of %s", r, open.LogID)
	}
	e.mustComplete(k, r.LogID)
	e.checkClaims()
}

// An open dispatch of a deleted task is cancelled with an event; a complete answers 409.
func TestDeletedTaskOpenDispatchIsCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	a := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	b := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-30 * time.Second))})
	k := e.key("1")
	open := mustFetch(t, e, k)
	e.admin("DELETE", "/v1/admin/tasks/"+strings.Replace(a, ":", "/", 1), nil)
	if r := mustFetch(t, e, k); r.TaskID != b || r.Redo {
		t.Fatalf("after delete: %+v, want %s", r, b)
	}
	if code, out := e.complete(0, k, open.LogID, "success"); code != 409 {
		t.Fatalf("complete of a cancelled dispatch: %d %v", code, out)
	}
	if evs := e.events("?type=cancel"); len(evs) != 1 || evs[0]["log_id"] != open.LogID {
		t.Fatalf("cancel events: %v", evs)
	}
	e.checkClaims()
}

// An event has one id: the one the admin events API shows is the one the outbox (and so
// Kafka and Elasticsearch) carries.
func TestEventIDsAgreeAcrossAdminAPIAndOutbox(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.KafkaBrokers = []string{"127.0.0.1:9"} })
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	k := e.key("1")
	r := mustFetch(t, e, k)
	e.fetch(0, k) // a redo
	e.mustComplete(k, r.LogID)
	outbox := map[string]string{}
	rows, err := e.store.DB().Query("SELECT event_id, payload FROM event_outbox")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, payload string
		rows.Scan(&id, &payload)
		var ev struct {
			EventID string `json:"event_id"`
			Type    string `json:"type"`
		}
		json.Unmarshal([]byte(payload), &ev)
		if ev.EventID != id {
			t.Errorf("outbox row %s carries event id %s", id, ev.EventID)
		}
		outbox[id] = ev.Type
	}
	rows.Close()
	api := e.events("")
	if len(api) != 3 || len(outbox) != 3 {
		t.Fatalf("admin API %d events, outbox %d", len(api), len(outbox))
	}
	for _, ev := range api {
		if typ, ok := outbox[ev["event_id"].(string)]; !ok || typ != ev["type"] {
			t.Errorf("event %v: not in the outbox under its id (outbox: %v)", ev, outbox)
		}
	}
}

// An attempt that expires after the user's cursor moved past its occurrence (the user
// completed later tasks while its retry waited) is still taken again: the expired
// record waits beside the user's slot until it is.
func TestExpiredRetryComesBackAfterTheCursorMovedOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	a := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-2 * time.Minute)),
		"lease_seconds": 60, "max_attempts": 3, "retry_backoff_seconds": 300})
	b := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	k := e.key("1")
	first := mustFetch(t, e, k)
	if first.TaskID != a {
		t.Fatalf("first: %s", first.TaskID)
	}
	e.complete(0, k, first.LogID, "failure")
	if r := mustFetch(t, e, k); r.TaskID != b {
		t.Fatalf("during the backoff: %s", r.TaskID)
	} else {
		e.mustComplete(k, r.LogID) // the cursor moves past a's occurrence
	}
	e.clock.Advance(301 * time.Second)
	second := mustFetch(t, e, k)
	if second.TaskID != a || second.Attempt != 2 {
		t.Fatalf("retry: %+v", second)
	}
	e.clock.Advance(61 * time.Second) // the retry's lease runs out
	third := e.fetch(0, k)
	if third.Task == nil || third.Task.TaskID != a || third.Task.Attempt != 3 {
		t.Fatalf("after the retry expired: %+v, want %s attempt 3", third.Task, a)
	}
	e.mustComplete(k, third.Task.LogID)
	e.checkClaims()
}

// A waiting dispatch older than the catch-up floor (the user was busy with another
// dispatch all along) does not make the heap stale on every poll.
func TestOldWaitingDispatchDoesNotRebuildEveryPoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)),
		"max_attempts": 2, "retry_backoff_seconds": 60})
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0)})
	k := e.key("1")
	first := mustFetch(t, e, k)
	e.complete(0, k, first.LogID, "failure")
	busy := mustFetch(t, e, k) // the other task, kept open
	e.clock.Advance(3 * time.Hour)
	e.fetch(0, k) // rebuilds: the window and floor moved
	before := e.loaders[0].rebuilds.Load()
	for i := 0; i < 5; i++ {
		e.clock.Advance(time.Second)
		if r := e.fetch(0, k); r.Task == nil || r.Task.LogID != busy.LogID || !r.Task.Redo {
			t.Fatalf("poll %d: %+v, want a redo of %s", i, r.Task, busy.LogID)
		}
	}
	if n := e.loaders[0].rebuilds.Load() - before; n > 0 {
		t.Fatalf("%d rebuilds in 5 polls of a busy user", n)
	}
}
