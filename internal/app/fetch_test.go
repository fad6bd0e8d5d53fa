package app_test

import (
	"testing"
	"time"

	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/schedule"
)

// DESIGN.md section 3, case by case, through the HTTP API.

func TestFetchOrderTiesAndExclusion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	due := t0.Add(-10 * time.Minute)
	low := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(due), "priority": 3})
	high := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(due), "priority": 8})
	tie := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(due), "priority": 3})
	later := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-5 * time.Minute)), "priority": 9})
	future := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(2 * time.Hour))})
	k := e.key("1")

	// equal due: higher priority first, then task key; then the later due time
	for _, want := range []string{high, low, tie, later} {
		r := e.fetch(0, k)
		if r.Task == nil || r.Task.TaskID != want || r.Task.Redo || r.Task.Attempt != 1 {
			t.Fatalf("fetch: got %+v, want %s", r.Task, want)
		}
		e.mustComplete(k, r.Task.LogID)
	}
	// ties at the cursor are excluded, not dispatched again; the future task is next
	r := e.fetch(0, k)
	if r.Task != nil {
		t.Fatalf("after all due tasks: got %+v", r.Task)
	}
	if r.NextDueAt == nil || !r.NextDueAt.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("next_due_at: %v, want %v", r.NextDueAt, t0.Add(2*time.Hour))
	}
	// the cached heap is rebuilt from MySQL after a flush: exclusion holds there too
	flushPrefix(e)
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("after flush: got %+v", r.Task)
	}
	e.clock.Advance(2 * time.Hour)
	if got := e.taskOf(k); got != future {
		t.Fatalf("at its due time: got %q, want %s", got, future)
	}
}

func TestRedoUntilCompleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Second))})
	k := e.key("1")
	first := e.fetch(0, k)
	if first.Task == nil || first.Task.TaskID != id {
		t.Fatalf("first fetch: %+v", first.Task)
	}
	for i := 0; i < 3; i++ {
		again := e.fetch(0, k)
		if again.Task == nil || again.Task.LogID != first.Task.LogID || !again.Task.Redo {
			t.Fatalf("fetch with an open dispatch: %+v, want redo of %s", again.Task, first.Task.LogID)
		}
	}
	if n := e.count("SELECT redo_count FROM dispatch WHERE log_id = ?", first.Task.LogID); n != 3 {
		t.Fatalf("redo_count %d, want 3", n)
	}
	e.mustComplete(k, first.Task.LogID)
	if got := e.fetch(0, k); got.Task == nil || got.Task.LogID == first.Task.LogID || got.Task.Redo {
		t.Fatalf("after complete: %+v", got.Task)
	}
}

func TestCompleteConflictsAndIdempotence(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-time.Minute)), "dispatch_times": 2})
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1", "2"}})
	k1, k2 := e.key("1"), e.key("2")
	r := e.fetch(0, k1)
	if r.Task == nil {
		t.Fatal("no task")
	}
	for name, c := range map[string]struct{ key, logID string }{
		"someone else's": {k2, r.Task.LogID},
		"unknown":        {k1, "01a1fd72-0000-7000-8000-000000000000"},
	} {
		code, out := e.complete(0, c.key, c.logID, "success")
		if code != 409 || out["error"].(map[string]any)["code"] != "stale_lease" {
			t.Errorf("%s: %d %v, want 409 stale_lease", name, code, out)
		}
	}
	e.mustComplete(k1, r.Task.LogID)
	e.mustComplete(k1, r.Task.LogID) // second time: 200, nothing new
	if n := e.count("SELECT COUNT(*) FROM dispatch WHERE state = 3"); n != 1 {
		t.Fatalf("done dispatches %d, want 1", n)
	}
	if n := e.count("SELECT claimed FROM occurrence_claim"); n != 1 {
		t.Fatalf("claimed %d, want 1", n)
	}
}

func TestNewUserCatchUpAndStaleUserSkipsOldRotations(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-3 * time.Hour))}) // missed
	recent := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-50 * time.Minute))})
	rot := e.task("rotate", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-24 * time.Hour)), "space_minutes": 20})
	k := e.key("1")
	// catch-up: a new user starts an hour back; the rotation's first occurrence at or
	// after 09:00 is 09:00 itself
	want := []string{rot + "@09:00", recent + "@09:10", rot + "@09:20", rot + "@09:40", rot + "@10:00"}
	for _, w := range want {
		r := e.fetch(0, k)
		if r.Task == nil || r.Task.TaskID+"@"+r.Task.DueAt.Format("15:04") != w {
			t.Fatalf("got %+v, want %s", r.Task, w)
		}
		e.mustComplete(k, r.Task.LogID)
	}
	// back after a week: only the last hour of rotations, not a week of them
	e.clock.Advance(7 * 24 * time.Hour)
	r := e.fetch(0, k)
	if r.Task == nil || !r.Task.DueAt.Equal(t0.Add(7*24*time.Hour-time.Hour)) {
		t.Fatalf("after a week: %+v, want the occurrence an hour back", r.Task)
	}
}

func TestRotateAcrossTheCacheWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	// every 6 hours: over three days the heap's window (25h) must be renewed twice
	rot := e.task("rotate", map[string]any{"executor": "uid_1", "start_time": ts(t0), "space_minutes": 360,
		"end_time": ts(t0.Add(72 * time.Hour))})
	k := e.key("1")
	var got []time.Time
	for step := 0; step < 80; step++ {
		r := e.fetch(0, k)
		if r.Task != nil {
			if r.Task.TaskID != rot {
				t.Fatalf("unexpected %s", r.Task.TaskID)
			}
			got = append(got, r.Task.DueAt)
			e.mustComplete(k, r.Task.LogID)
			continue
		}
		if r.NextDueAt == nil {
			break
		}
		if r.NextDueAt.Sub(e.clock.Now()) > 24*time.Hour+time.Second {
			t.Fatalf("next_due_at %v is beyond a day from %v", r.NextDueAt, e.clock.Now())
		}
		e.clock.Set(*r.NextDueAt)
	}
	if len(got) != 13 { // 0h, 6h, ..., 72h
		t.Fatalf("rotations delivered: %d (%v), want 13", len(got), got)
	}
	for i, d := range got {
		if !d.Equal(t0.Add(time.Duration(i) * 6 * time.Hour)) {
			t.Fatalf("rotation %d at %v", i, d)
		}
	}
}

func TestQuotaOncePerUserAndUntilExhausted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	var uids []string
	for i := 0; i < 20; i++ {
		uids = append(uids, uidN(i))
	}
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": uids})
	start := t0.Add(-time.Minute)
	once := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(start), "dispatch_times": 6})
	keys := map[string]string{}
	for _, u := range uids {
		keys[u] = e.key(u)
	}
	got := 0
	for _, u := range uids {
		r := e.fetch(0, keys[u])
		if r.Task != nil {
			got++
			e.mustComplete(keys[u], r.Task.LogID)
			// completed, quota left, but once_per_user: not again
			if again := e.fetch(0, keys[u]); again.Task != nil {
				t.Fatalf("%s got %s twice", u, again.Task.TaskID)
			}
		}
	}
	if got != 6 {
		t.Fatalf("%s dispatched %d times, want 6", once, got)
	}

	// until_exhausted: one user may take it again after completing, while quota lasts
	ue := e.task("once", map[string]any{"executor": "uid_solo", "start_time": ts(start), "dispatch_times": 3,
		"mode": "until_exhausted"})
	k := e.key("solo")
	for i := 0; i < 3; i++ {
		r := e.fetch(0, k)
		if r.Task == nil || r.Task.TaskID != ue {
			t.Fatalf("round %d: %+v", i, r.Task)
		}
		e.mustComplete(k, r.Task.LogID)
	}
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("quota of 3 exhausted, got %+v", r.Task)
	}
}

func TestLeaseExpiryReturnsSlotAndFencesLateComplete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1", "2"}})
	id := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-time.Minute)), "lease_seconds": 60})
	k1, k2 := e.key("1"), e.key("2")
	r := e.fetch(0, k1)
	if r.Task == nil || r.Task.LeaseExp == nil || !r.Task.LeaseExp.Equal(t0.Add(time.Minute)) {
		t.Fatalf("leased dispatch: %+v", r.Task)
	}
	if r2 := e.fetch(0, k2); r2.Task != nil {
		t.Fatalf("quota 1 taken, user 2 got %+v", r2.Task)
	}
	e.clock.Advance(61 * time.Second)
	n, err := e.apps[0].Dispatch.SweepExpired(t.Context(), dispatch.Shards{})
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	if code, out := e.complete(0, k1, r.Task.LogID, "success"); code != 409 {
		t.Fatalf("late complete: %d %v, want 409", code, out)
	}
	if r2 := e.fetch(0, k2); r2.Task == nil || r2.Task.TaskID != id {
		t.Fatalf("slot returned, user 2 got %+v", r2.Task)
	}
	if n := e.count("SELECT COUNT(*) FROM dispatch WHERE state = 4"); n != 1 {
		t.Fatalf("expired records %d, want 1", n)
	}
}

func TestLeaseExpiresLazilyOnFetch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "lease_seconds": 30})
	k := e.key("1")
	first := e.fetch(0, k)
	e.clock.Advance(31 * time.Second)
	again := e.fetch(0, k) // expires the old one, and the occurrence is on offer again
	if again.Task == nil || again.Task.TaskID != id || again.Task.LogID == first.Task.LogID || again.Task.Redo {
		t.Fatalf("after lease: %+v (first %s)", again.Task, first.Task.LogID)
	}
	if code, _ := e.complete(0, k, first.Task.LogID, "success"); code != 409 {
		t.Fatalf("complete of expired dispatch: %d, want 409", code)
	}
	e.mustComplete(k, again.Task.LogID)
	if n := e.count("SELECT claimed FROM occurrence_claim"); n != 1 {
		t.Fatalf("claimed %d, want 1 (live + completed)", n)
	}
}

func TestFailureRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)),
		"max_attempts": 3, "retry_backoff_seconds": 10})
	k := e.key("1")
	r := e.fetch(0, k)
	for attempt, wait := 1, 10*time.Second; attempt <= 3; attempt, wait = attempt+1, wait*2 {
		if r.Task == nil || r.Task.TaskID != id || r.Task.Attempt != attempt {
			t.Fatalf("attempt %d: %+v", attempt, r.Task)
		}
		if code, out := e.complete(0, k, r.Task.LogID, "failure"); code != 200 {
			t.Fatalf("complete failure: %d %v", code, out)
		}
		if attempt == 3 {
			break
		}
		if early := e.fetch(0, k); early.Task != nil || early.NextDueAt == nil || !early.NextDueAt.Equal(e.clock.Now().Add(wait)) {
			t.Fatalf("during backoff: %+v next %v", early.Task, early.NextDueAt)
		}
		e.clock.Advance(wait)
		r = e.fetch(0, k)
	}
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("attempts exhausted, got %+v", r.Task)
	}
	if n := e.count("SELECT claimed FROM occurrence_claim"); n != 1 {
		t.Fatalf("retries keep one slot: claimed %d", n)
	}
}

func TestEditsReachTheNextFetch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1"}})
	tpl := e.template()
	base := map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-time.Minute)), "template_id": tpl, "params": map[string]any{}}
	id := e.admin("POST", "/v1/admin/tasks/once", base)["task_id"].(string)
	k := e.key("1")
	first := mustFetch(t, e, k) // the heap is warm now; each change below must reach the next fetch
	if first.TaskID != id {
		t.Fatalf("first fetch: %s, want %s", first.TaskID, id)
	}
	e.mustComplete(k, first.LogID)

	// a new task for the group
	t2 := e.admin("POST", "/v1/admin/tasks/once", base)["task_id"].(string)
	paused := map[string]any{}
	for k, v := range base {
		paused[k] = v
	}
	paused["status"] = "paused"
	e.admin("PUT", "/v1/admin/tasks/once/"+t2[len("once:"):], paused)
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("paused task dispatched: %+v", r.Task)
	}
	e.admin("PUT", "/v1/admin/tasks/once/"+t2[len("once:"):], base)
	if got := mustFetch(t, e, k); got.TaskID != t2 {
		t.Fatalf("resumed task: got %s", got.TaskID)
	}
}

func mustFetch(t *testing.T, e *env, key string) *task {
	t.Helper()
	r := e.fetch(0, key)
	if r.Task == nil {
		t.Fatalf("fetch: no task (next %v)", r.NextDueAt)
	}
	return r.Task
}

func TestMembershipAndDeleteTakeTasksAway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1"}})
	e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(time.Minute))})
	own := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(2 * time.Minute))})
	k := e.key("1")
	if r := e.fetch(0, k); r.NextDueAt == nil || !r.NextDueAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("next due: %v", r.NextDueAt)
	}
	e.admin("DELETE", "/v1/admin/groups/g/members/1", nil)
	if r := e.fetch(0, k); r.NextDueAt == nil || !r.NextDueAt.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("after leaving the group, next due: %v", r.NextDueAt)
	}
	e.admin("DELETE", "/v1/admin/tasks/once/"+own[len("once:"):], nil)
	if r := e.fetch(0, k); r.NextDueAt != nil || r.Task != nil {
		t.Fatalf("after delete: %+v %v", r.Task, r.NextDueAt)
	}
}

func TestRevokedKeyStopsWorking(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	k := e.key("1")
	if code, _ := e.do(1, "POST", "/v1/fetch", k, nil); code != 200 {
		t.Fatalf("fetch with a fresh key: %d", code)
	}
	e.admin("DELETE", "/v1/admin/clients/1/keys", nil)
	for i := range e.urls {
		if code, out := e.do(i, "POST", "/v1/fetch", k, nil); code != 401 {
			t.Fatalf("instance %d, revoked key: %d %v", i, code, out)
		}
		if code, _ := e.complete(i, k, "x", "success"); code != 401 {
			t.Fatalf("instance %d, complete with revoked key: %d", i, code)
		}
	}
	code, out := e.do(0, "POST", "/v1/enroll", "", map[string]any{"uid": "1", "enroll_secret": "enroll-secret"})
	if code != 200 {
		t.Fatalf("enroll: %d %v", code, out)
	}
	if code, _ := e.do(1, "POST", "/v1/fetch", out["client_key"].(string), nil); code != 200 {
		t.Fatalf("fetch with an enrolled key: %d", code)
	}
}

// flushPrefix deletes every Redis key of the test: its own FLUSHDB.
func flushPrefix(e *env) {
	e.t.Helper()
	iter := e.rdb.Scan(e.t.Context(), 0, e.prefix+"*", 1000).Iterator()
	for iter.Next(e.t.Context()) {
		e.rdb.Del(e.t.Context(), iter.Val())
	}
}

func TestLongPollReturnsWhenATaskFallsDue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Minute))})
	k := e.key("1")
	done := make(chan map[string]any)
	go func() {
		_, out := e.do(0, "POST", "/v1/fetch", k, map[string]any{"wait_ms": 4000})
		done <- out
	}()
	// the long poll looks again every second (real time); the task falls due meanwhile
	time.Sleep(100 * time.Millisecond)
	e.clock.Advance(time.Minute)
	out := <-done
	got, _ := out["task"].(map[string]any)
	if got == nil || got["task_id"] != id {
		t.Fatalf("long poll: %v, want %s", out, id)
	}
}

// Every key the server writes to Redis expires some day: a user who never comes back
// leaves nothing behind for good.
func TestEveryRedisKeyExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1", "2"}})
	id := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-time.Minute))})
	e.admin("DELETE", "/v1/admin/tasks/once/"+id[len("once:"):], nil) // bumps the group's generation
	k := e.key("1")
	e.fetch(0, k)
	e.admin("DELETE", "/v1/admin/clients/2/keys", nil)
	iter := e.rdb.Scan(t.Context(), 0, e.prefix+"*", 100).Iterator()
	n := 0
	for iter.Next(t.Context()) {
		n++
		if ttl := e.rdb.TTL(t.Context(), iter.Val()).Val(); ttl < 0 {
			t.Errorf("key %s has no expiry (%v)", iter.Val(), ttl)
		}
	}
	if n < 4 {
		t.Fatalf("only %d keys written; the test should see users, heap, keys and a generation", n)
	}
}

// The cursor never lags more than catch-up behind now, even while a heap built earlier
// is still cached: occurrences older than that are missed.
func TestCatchUpBoundsAWarmHeap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	rot := e.task("rotate", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Hour)), "space_minutes": 20})
	k := e.key("1")
	first := mustFetch(t, e, k) // 09:00, from the catch-up floor
	e.mustComplete(k, first.LogID)
	e.clock.Advance(55 * time.Minute) // 10:55: the floor is 09:55; the heap still holds 09:20
	r := mustFetch(t, e, k)
	if r.TaskID != rot || r.DueAt.Before(e.clock.Now().Add(-time.Hour)) {
		t.Fatalf("dispatched %s@%v, older than the catch-up floor %v", r.TaskID, r.DueAt, e.clock.Now().Add(-time.Hour))
	}
	if want := t0; !r.DueAt.Equal(want) { // every 20 minutes from 09:00: 10:00 is the first at or after 09:55
		t.Fatalf("first occurrence at or after the floor: %v, want %v", r.DueAt, want)
	}
}

// A retry of a task deleted during the backoff is not dispatched: the failure is final
// and the user moves on.
func TestRetryOfADeletedTaskIsNotDispatched(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)),
		"max_attempts": 3, "retry_backoff_seconds": 10})
	next := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-30 * time.Second))})
	k := e.key("1")
	d := mustFetch(t, e, k)
	if code, _ := e.complete(0, k, d.LogID, "failure"); code != 200 {
		t.Fatal("complete failure")
	}
	e.admin("DELETE", "/v1/admin/tasks/once/"+id[len("once:"):], nil)
	e.clock.Advance(11 * time.Second)
	if r := mustFetch(t, e, k); r.TaskID != next {
		t.Fatalf("after the deleted task's backoff: got %s attempt %d, want %s", r.TaskID, r.Attempt, next)
	}
	e.checkClaims()
}

// Clearing the open-dispatch hint after an expiry (or a complete) must not wipe out the
// hint of a dispatch made meanwhile: the agent would be told nothing is open.
func TestLateHintClearDoesNotHideANewDispatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "lease_seconds": 30})
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-30 * time.Second))})
	k := e.key("1")
	old := mustFetch(t, e, k)
	e.clock.Advance(31 * time.Second)
	if _, err := e.store.Expire(t.Context(), old.LogID, e.clock.Now()); err != nil { // the sweeper's MySQL part
		t.Fatal(err)
	}
	cur := mustFetch(t, e, k) // a fetch in between dispatches anew (the expired one is on offer again too)
	if cur.LogID == old.LogID {
		t.Fatalf("the expired dispatch was handed out again")
	}
	if err := e.apps[0].Cache.ClearOpen(t.Context(), "1", schedule.OpenIs(old.LogID)); err != nil { // the sweeper's late cache part
		t.Fatal(err)
	}
	again := e.fetch(0, k)
	if again.Task == nil || again.Task.LogID != cur.LogID || !again.Task.Redo {
		t.Fatalf("open dispatch %s (%s) not handed out again: got %+v", cur.LogID, cur.TaskID, again.Task)
	}
}
