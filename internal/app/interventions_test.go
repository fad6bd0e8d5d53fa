package app_test

import (
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

// Edge cases of the interventions a review found: what a late complete of a retried
// record gets, how attempts count after a retry and a completion, that a cancel holds
// in MySQL (not only in the cache), and that an admin's expire of a task with the
// defaults gives the slot back.

// A complete of an attempt that died by its lease running out comes too late, before
// and after an admin retried the occurrence, and after the next attempt started.
func TestLateCompleteOfARetriedRecordIsStale(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "lease_seconds": 30, "max_attempts": 1})
	k := e.key("1")
	died := mustFetch(t, e, k)
	e.clock.Advance(31 * time.Second)
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("fetch after the lease: %+v", r.Task)
	}
	code, out := e.complete(0, k, died.LogID, "success")
	refused(t, "complete of the dead attempt", code, out, 409, "stale_lease")
	e.mustIntervene(died.LogID, "retry")
	code, out = e.complete(0, k, died.LogID, "success")
	refused(t, "complete of the dead attempt after the retry", code, out, 409, "stale_lease")
	again := mustFetch(t, e, k)
	if again.Attempt != 1 || again.LogID == died.LogID {
		t.Fatalf("after the retry: %+v", again)
	}
	code, out = e.complete(0, k, died.LogID, "success")
	refused(t, "complete of the dead attempt after the next started", code, out, 409, "stale_lease")
	e.mustComplete(k, again.LogID)
	e.checkClaims()
}

// until_exhausted: the attempts after an admin's retry count from 1 (the expired
// attempts before the death do not count again), a completion starts the count afresh
// for the next take, and an occurrence completed after a retry stays on offer while
// its quota lasts.
func TestUntilExhaustedAttemptsAfterRetryAndCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "mode": "until_exhausted",
		"dispatch_times": 10, "lease_seconds": 30, "max_attempts": 2})
	k := e.key("1")
	expireAll := func(want ...int) string {
		t.Helper()
		var last string
		for _, n := range want {
			d := mustFetch(t, e, k)
			if d.TaskID != id || d.Attempt != n {
				t.Fatalf("fetch: %+v, want %s attempt %d", d, id, n)
			}
			e.clock.Advance(31 * time.Second)
			last = d.LogID
		}
		return last
	}
	dead := expireAll(1, 2)
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("dead occurrence dispatched: %+v", r.Task)
	}
	e.mustIntervene(dead, "retry")
	expireAll(1) // after the retry: attempt 1, then 2 (not 3)
	second := mustFetch(t, e, k)
	if second.Attempt != 2 {
		t.Fatalf("after the retried attempt expired: %+v, want attempt 2", second)
	}
	e.mustComplete(k, second.LogID)
	// Completed (a record made from a waiting one): still on offer, attempts afresh.
	next := mustFetch(t, e, k)
	if next.TaskID != id || next.Attempt != 1 {
		t.Fatalf("after the completion: %+v, want %s attempt 1", next, id)
	}
	e.clock.Advance(31 * time.Second)
	if again := mustFetch(t, e, k); again.Attempt != 2 {
		t.Fatalf("after an expiry following a completion: %+v, want attempt 2", again)
	}
}

// An until_exhausted occurrence an admin retried, whose retried attempt succeeds, is
// offered to the user again (quota left).
func TestUntilExhaustedRetriedSuccessStaysOnOffer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "mode": "until_exhausted",
		"dispatch_times": 5})
	k := e.key("1")
	d := mustFetch(t, e, k)
	if code, out := e.complete(0, k, d.LogID, "failure"); code != 200 { // max_attempts 1: dead
		t.Fatalf("failure: %d %v", code, out)
	}
	e.clock.Advance(10 * time.Second)
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("dead occurrence dispatched: %+v", r.Task)
	}
	e.mustIntervene(d.LogID, "retry")
	retried := mustFetch(t, e, k)
	e.mustComplete(k, retried.LogID)
	if next := e.fetch(0, k).Task; next == nil || next.TaskID != id {
		t.Fatalf("after the retried attempt succeeded: %+v, want %s again", next, id)
	}
}

// A cancel holds in MySQL: a claim straight after it (a stale heap, a fetch racing
// the cache update) is refused, for an expired once_per_user attempt waiting to be
// taken again and for an open until_exhausted one.
func TestCancelHoldsInMySQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	k := e.key("1")
	claim := func(taskID string, due time.Time) taskd.ClaimOutcome {
		t.Helper()
		key, err := taskd.ParseTaskKey(taskID)
		if err != nil {
			t.Fatal(err)
		}
		outcome, _, err := e.store.Claim(t.Context(), "1", taskd.Occurrence{Task: key, DueAt: due}, e.clock.Now(), taskd.Single)
		if err != nil {
			t.Fatal(err)
		}
		return outcome
	}
	once := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-2 * time.Minute)), "max_attempts": 3})
	d := mustFetch(t, e, k)
	e.mustIntervene(d.LogID, "expire")
	e.mustIntervene(d.LogID, "cancel")
	if o := claim(once, t0.Add(-2*time.Minute)); o == taskd.Claimed {
		t.Fatalf("once_per_user claimed after the cancel of its waiting expired attempt")
	}
	ue := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "mode": "until_exhausted",
		"dispatch_times": 5})
	d = mustFetch(t, e, k)
	if d.TaskID != ue {
		t.Fatalf("fetch: %+v, want %s", d, ue)
	}
	e.mustIntervene(d.LogID, "cancel")
	if o := claim(ue, t0.Add(-time.Minute)); o == taskd.Claimed {
		t.Fatalf("until_exhausted claimed after the cancel of its open dispatch")
	}
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("fetch after the cancels: %+v", r.Task)
	}
	e.checkClaims()
}

// An admin's expire of a task with the defaults (no lease, one attempt) gives the slot
// back to the pool: another member of the group takes it.
func TestAdminExpireOfADefaultTaskGivesTheSlotBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1", "2"}})
	id := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0)})
	k1, k2 := e.key("1"), e.key("2")
	held := mustFetch(t, e, k1)
	if rec := e.mustIntervene(held.LogID, "expire"); rec["state"] != "expired" {
		t.Fatalf("expired record: %v", rec)
	}
	got := e.fetch(0, k2).Task
	if got == nil || got.TaskID != id {
		t.Fatalf("user 2 after the expire: %+v, want %s", got, id)
	}
	if r := e.fetch(0, k1); r.Task != nil {
		t.Fatalf("user 1 took the occurrence again after its only attempt: %+v", r.Task)
	}
	e.mustComplete(k2, got.LogID)
	e.checkClaims()
}
