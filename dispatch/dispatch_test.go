package dispatch_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/dispatch"
)

// The service's fetch and complete, called directly, against real MySQL and Redis
// (DESIGN.md section 3). Each test: setup, act, assert.

func TestFetchNothingDueSaysWhenToComeBack(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	a := b.agent("1")

	if res := b.mustGetNothing(svc, a); res.NextDueAt != nil {
		t.Fatalf("nothing scheduled: next_due_at %v, want none", res.NextDueAt)
	}

	later := b.task("uid_1", t0.Add(2*time.Hour))
	b.task("uid_2", t0.Add(-time.Minute)) // due, but someone else's
	res := b.mustGetNothing(svc, a)
	sameTime(t, "next_due_at", res.NextDueAt, t0.Add(2*time.Hour))

	b.clock.Advance(2 * time.Hour)
	b.mustGet(svc, a, later)
}

func TestFetchDueTaskThenCompleteMovesTheCursor(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	due := t0.Add(-time.Minute)
	key := b.task("uid_1", due, params(`{"url":"https://example.com/a"}`))
	a := b.agent("1")

	got := b.mustGet(svc, a, key)
	if got.LogID == "" || got.Redo || got.Attempt != 1 || !got.DueAt.Equal(due) || got.Kind != "once" ||
		got.TemplateID != b.template || got.LeaseExpiresAt != nil {
		t.Fatalf("assignment: %+v", got)
	}
	var p map[string]string
	if err := json.Unmarshal(got.Params, &p); err != nil || p["url"] != "https://example.com/a" {
		t.Fatalf("params %s (%v)", got.Params, err)
	}
	if rec := b.record(got.LogID); rec.State != taskd.StateOpen || rec.UID != "1" {
		t.Fatalf("record after fetch: state %d uid %s, want open for 1", rec.State, rec.UID)
	}

	b.complete(svc, a, got.LogID, taskd.ResultSuccess)

	if rec := b.record(got.LogID); rec.State != taskd.StateDone || rec.Result != taskd.ResultSuccess {
		t.Fatalf("record after complete: state %d result %d", rec.State, rec.Result)
	}
	var cursor time.Time
	var exclude []byte
	if err := b.store.DB().QueryRowContext(b.ctx, "SELECT cursor_at, exclude_keys FROM user_state WHERE uid = '1'").
		Scan(&cursor, &exclude); err != nil {
		t.Fatalf("cursor: %v", err)
	}
	occ := taskd.Occurrence{Task: key, DueAt: due}.String()
	if !cursor.Equal(due) || !strings.Contains(string(exclude), `"`+occ+`"`) {
		t.Fatalf("cursor %v exclude %s, want the cursor at %v and %s excluded", cursor, exclude, due, occ)
	}
	b.mustGetNothing(svc, a)
	// The cursor and the exclude set are in MySQL: a heap rebuilt from scratch agrees.
	b.flushRedis()
	b.mustGetNothing(svc, a)
	// A repeated complete is answered as the first and records nothing new.
	b.complete(svc, a, got.LogID, taskd.ResultSuccess)
	if n := b.count("SELECT COUNT(*) FROM dispatch"); n != 1 {
		t.Fatalf("dispatch records %d, want 1", n)
	}
}

func TestGroupQuotaGoesToTheFirstN(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	uids := []string{"1", "2", "3", "4"}
	b.group("g", uids...)
	key := b.task("gid_g", t0.Add(-time.Minute), quota(3))

	for i, u := range uids {
		a := b.agent(u)
		if i == 3 {
			b.mustGetNothing(svc, a)
			continue
		}
		d := b.mustGet(svc, a, key)
		b.complete(svc, a, d.LogID, taskd.ResultSuccess)
	}

	b.wantClaimed(3)
	if n := b.count("SELECT COUNT(DISTINCT uid) FROM dispatch"); n != 3 {
		t.Fatalf("users dispatched to %d, want 3", n)
	}
}

func TestQuotaModes(t *testing.T) {
	t.Parallel()
	// A quota of 3 for a group of two: once_per_user gives each member the occurrence
	// once; until_exhausted lets the first member take it again until it is gone.
	for _, tc := range []struct {
		mode       taskd.Mode
		user1      int // times user 1 takes the occurrence before it stops being offered
		user2      int
		wantClaims int
	}{
		{taskd.ModeOncePerUser, 1, 1, 2},
		{taskd.ModeUntilExhausted, 3, 0, 3},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			svc, b := setup(t)
			b.group("g", "1", "2")
			key := b.task("gid_g", t0.Add(-time.Minute), quota(3), mode(tc.mode))

			for _, u := range []struct {
				a     agent
				times int
			}{{b.agent("1"), tc.user1}, {b.agent("2"), tc.user2}} {
				var seen []string
				for range u.times {
					d := b.mustGet(svc, u.a, key)
					if slices.Contains(seen, d.LogID) || d.Redo {
						t.Fatalf("user %s: %+v is not a new dispatch", u.a.uid, d)
					}
					seen = append(seen, d.LogID)
					b.complete(svc, u.a, d.LogID, taskd.ResultSuccess)
				}
				b.mustGetNothing(svc, u.a)
			}

			b.wantClaimed(tc.wantClaims)
		})
	}
}

// An until_exhausted occurrence stays on offer to its user after each completion,
// including one whose attempt came back from a retry (its heap entry was the retry's,
// not the occurrence's), until the quota is used up.
func TestUntilExhaustedStaysOnOfferAfterARetry(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	key := b.task("uid_1", t0.Add(-time.Minute), quota(3), mode(taskd.ModeUntilExhausted), attempts(2, 0))
	a := b.agent("1")

	first := b.mustGet(svc, a, key)
	b.complete(svc, a, first.LogID, taskd.ResultFailure) // a retry, due at once
	retry := b.mustGet(svc, a, key)
	if retry.Attempt != 2 || retry.LogID == first.LogID {
		t.Fatalf("after a failure: %+v, want attempt 2 of a new record", retry)
	}
	b.complete(svc, a, retry.LogID, taskd.ResultSuccess)
	for i := range 2 { // the two slots left
		d := b.mustGet(svc, a, key)
		if d.Redo || d.Attempt != 1 {
			t.Fatalf("take %d after the retry's success: %+v, want a new dispatch", i+1, d)
		}
		b.complete(svc, a, d.LogID, taskd.ResultSuccess)
	}
	b.mustGetNothing(svc, a)
	b.wantClaimed(3)
}

func TestOpenDispatchIsRedoneUntilCompleted(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	first := b.task("uid_1", t0.Add(-2*time.Minute))
	second := b.task("uid_1", t0.Add(-time.Minute))
	a := b.agent("1")

	d := b.mustGet(svc, a, first)
	again := b.mustGet(svc, a, first)
	b.flushRedis() // the open dispatch is in MySQL, not only in the cache
	third := b.mustGet(svc, a, first)

	for i, r := range []*dispatch.Assignment{again, third} {
		if r.LogID != d.LogID || !r.Redo || r.Attempt != 1 {
			t.Fatalf("fetch %d with a dispatch open: %+v, want a redo of %s", i+2, r, d.LogID)
		}
	}
	if rec := b.record(d.LogID); rec.RedoCount != 2 {
		t.Fatalf("redo_count %d, want 2", rec.RedoCount)
	}
	b.complete(svc, a, d.LogID, taskd.ResultSuccess)
	if next := b.mustGet(svc, a, second); next.Redo || next.LogID == d.LogID {
		t.Fatalf("after complete: %+v", next)
	}
}

func TestFailureIsRetriedAfterBackoffThenDead(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	key := b.task("uid_1", t0, attempts(3, 10))
	a := b.agent("1")

	var logs []string
	backoff := 10 * time.Second // doubles after each failure
	for attempt := 1; attempt <= 3; attempt++ {
		d := b.mustGet(svc, a, key)
		if d.Attempt != attempt || d.Redo || slices.Contains(logs, d.LogID) {
			t.Fatalf("attempt %d: %+v", attempt, d)
		}
		logs = append(logs, d.LogID)
		b.complete(svc, a, d.LogID, taskd.ResultFailure)
		if attempt == 3 {
			break
		}
		res := b.mustGetNothing(svc, a)
		sameTime(t, "next_due_at during the backoff", res.NextDueAt, b.clock.Now().Add(backoff))
		b.clock.Advance(backoff - time.Second)
		b.mustGetNothing(svc, a)
		b.clock.Advance(time.Second)
		backoff *= 2
	}

	if res := b.mustGetNothing(svc, a); res.NextDueAt != nil {
		t.Fatalf("dead occurrence: next_due_at %v, want none", res.NextDueAt)
	}
	b.clock.Advance(time.Hour)
	b.mustGetNothing(svc, a)
	for i, want := range []taskd.DispatchState{taskd.StateRetried, taskd.StateRetried, taskd.StateDead} {
		if rec := b.record(logs[i]); rec.State != want || rec.Result != taskd.ResultFailure {
			t.Fatalf("attempt %d: state %d result %d, want state %d, failure", i+1, rec.State, rec.Result, want)
		}
	}
	// A repeat of the last failure changes nothing; the slot stays taken.
	b.complete(svc, a, logs[2], taskd.ResultFailure)
	b.wantClaimed(1)
}

func TestSweepExpiredGivesTheSlotBack(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	b.group("g", "1", "2")
	key := b.task("gid_g", t0.Add(-time.Minute), leaseSeconds(60), attempts(3, 0))
	u1, u2 := b.agent("1"), b.agent("2")

	d := b.mustGet(svc, u1, key)
	sameTime(t, "lease_expires_at", d.LeaseExpiresAt, t0.Add(time.Minute))
	b.mustGetNothing(svc, u2) // the one slot is taken: user 2 drops the occurrence

	b.clock.Advance(59 * time.Second)
	if n, err := svc.SweepExpired(b.ctx, dispatch.Shards{}); err != nil || n != 0 {
		t.Fatalf("sweep within the lease: %d, %v; want 0", n, err)
	}
	b.clock.Advance(time.Second)
	if n, err := svc.SweepExpired(b.ctx, dispatch.Shards{}); err != nil || n != 1 {
		t.Fatalf("sweep at the lease's end: %d, %v; want 1", n, err)
	}
	if rec := b.record(d.LogID); rec.State != taskd.StateExpired {
		t.Fatalf("state %d, want expired", rec.State)
	}
	if n, err := svc.SweepExpired(b.ctx, dispatch.Shards{}); err != nil || n != 0 {
		t.Fatalf("second sweep: %d, %v; want 0", n, err)
	}

	b.mustGet(svc, u2, key) // the returned slot reaches a member who had dropped it
	wantCode(t, "late complete", svc.Complete(b.ctx, u1.uid, u1.hash, d.LogID, taskd.ResultSuccess, nil), taskd.CodeStaleLease)
	b.wantClaimed(1)
}

func TestCompleteOfAnythingButYourOpenDispatchIsStale(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	b.group("g", "1", "2")
	key := b.task("gid_g", t0.Add(-time.Minute), quota(2))
	leased := b.task("uid_3", t0.Add(-time.Minute), leaseSeconds(30), attempts(2, 0))
	u1, u2, u3 := b.agent("1"), b.agent("2"), b.agent("3")
	d := b.mustGet(svc, u1, key)
	l := b.mustGet(svc, u3, leased)
	b.clock.Advance(30 * time.Second) // l's lease runs out; nothing has swept it

	for _, c := range []struct {
		name  string
		a     agent
		logID string
	}{
		{"another user's", u2, d.LogID},
		{"unknown", u1, "no-such-log-id"},
		{"past its lease", u3, l.LogID},
	} {
		err := svc.Complete(b.ctx, c.a.uid, c.a.hash, c.logID, taskd.ResultSuccess, nil)
		wantCode(t, c.name, err, taskd.CodeStaleLease)
	}

	if rec := b.record(d.LogID); rec.State != taskd.StateOpen || rec.UID != "1" {
		t.Fatalf("after the refused completes: state %d uid %s, want open for 1", rec.State, rec.UID)
	}
	if rec := b.record(l.LogID); rec.State != taskd.StateExpired {
		t.Fatalf("the late complete expired nothing: state %d", rec.State)
	}
	b.complete(svc, u1, d.LogID, taskd.ResultSuccess)
	// The expired occurrence is on offer again to its user, as its next attempt.
	if again := b.mustGet(svc, u3, leased); again.LogID == l.LogID || again.Attempt != 2 {
		t.Fatalf("after expiry: %+v", again)
	}
}

func TestRevokedKeyIsRefused(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	key := b.task("uid_1", t0.Add(-time.Minute))
	a := b.agent("1")
	d := b.mustGet(svc, a, key)

	if n, err := b.keys.Revoke(b.ctx, "test", "1"); err != nil || n != 1 {
		t.Fatalf("revoke: %d, %v", n, err)
	}

	_, err := svc.Fetch(b.ctx, a.uid, a.hash, 0)
	wantCode(t, "fetch with a revoked key", err, taskd.CodeUnauthenticated)
	err = svc.Complete(b.ctx, a.uid, a.hash, d.LogID, taskd.ResultSuccess, nil)
	wantCode(t, "complete with a revoked key", err, taskd.CodeUnauthenticated)
	fresh := b.agent("1")
	_, err = svc.Fetch(b.ctx, "2", fresh.hash, 0)
	wantCode(t, "user 1's key used as user 2", err, taskd.CodeUnauthenticated)
	_, err = svc.Fetch(b.ctx, "1", "", 0)
	wantCode(t, "fetch without a key", err, taskd.CodeUnauthenticated)
	// The refusals changed nothing: a new key of the user completes the dispatch.
	if redo := b.mustGet(svc, fresh, key); redo.LogID != d.LogID || !redo.Redo {
		t.Fatalf("with a new key: %+v, want a redo of %s", redo, d.LogID)
	}
	b.complete(svc, fresh, d.LogID, taskd.ResultSuccess)
}
