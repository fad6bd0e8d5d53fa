package app_test

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// The dispatch lists (an agent's own, GET /v1/dispatches; an admin's, GET
// /v1/admin/dispatches) and the admin's interventions on one record (POST
// /v1/admin/dispatches/{log_id}/expire|retry|cancel).

// unknownLogID is a well-formed log id no record has.
const unknownLogID = "0192f5c4-0000-7000-8000-000000000000"

// list GETs a dispatch list as token and returns the status and the reply.
func (e *env) list(token, path string) (int, map[string]any) {
	e.t.Helper()
	return e.do(0, "GET", path, token, nil)
}

// records returns a list's dispatches and its next cursor, failing the test on
// anything but 200.
func (e *env) records(token, path string) ([]map[string]any, string) {
	e.t.Helper()
	code, out := e.list(token, path)
	if code != 200 {
		e.t.Fatalf("GET %s: %d %v", path, code, out)
	}
	var recs []map[string]any
	for _, r := range out["dispatches"].([]any) {
		recs = append(recs, r.(map[string]any))
	}
	next, ok := out["next_cursor"].(string)
	if !ok {
		e.t.Fatalf("GET %s: next_cursor %v, want a string", path, out["next_cursor"])
	}
	return recs, next
}

// allRecords pages through a list (path with its filter's query, if any) limit
// records a page, following next_cursor to the end; no record may come twice, and no
// page but the last may be short.
func (e *env) allRecords(token, path string, limit int) []map[string]any {
	e.t.Helper()
	var out []map[string]any
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			e.t.Fatalf("%s: more than 1000 pages", path)
		}
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		page, next := e.records(token, path+sep+q.Encode())
		for _, r := range page {
			id := r["log_id"].(string)
			if seen[id] {
				e.t.Fatalf("%s: %s on two pages", path, id)
			}
			seen[id] = true
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		if len(page) != limit {
			e.t.Fatalf("%s: a page of %d before the end, want %d", path, len(page), limit)
		}
		cursor = next
	}
}

// intervene POSTs an intervention (expire, retry, cancel) on logID as the admin.
func (e *env) intervene(logID, action string) (int, map[string]any) {
	e.t.Helper()
	return e.do(0, "POST", "/v1/admin/dispatches/"+logID+"/"+action, adminToken, nil)
}

// mustIntervene is intervene that fails the test on anything but 200; it returns the
// record.
func (e *env) mustIntervene(logID, action string) map[string]any {
	e.t.Helper()
	code, out := e.intervene(logID, action)
	if code != 200 {
		e.t.Fatalf("%s %s: %d %v", action, logID, code, out)
	}
	return out
}

// refused checks that a request was answered status with code.
func refused(t *testing.T, what string, code int, out map[string]any, status int, errcode string) {
	t.Helper()
	if code != status || errCode(out) != errcode {
		t.Fatalf("%s: %d %v, want %d %s", what, code, out, status, errcode)
	}
}

// logIDs lists the records' log ids in order.
func logIDs(recs []map[string]any) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r["log_id"].(string)
	}
	return out
}

func sameIDs(got []map[string]any, want ...string) bool {
	return strings.Join(logIDs(got), ",") == strings.Join(want, ",")
}

// An agent lists its own records, newest first, in pages, by state; the fields say
// what became of each.
func TestAgentListsItsOwnDispatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	for i := 3; i >= 1; i-- {
		e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Duration(i) * time.Minute))})
	}
	e.task("once", map[string]any{"executor": "uid_2", "start_time": ts(t0.Add(-time.Minute))})
	k1, k2 := e.key("1"), e.key("2")

	done := mustFetch(t, e, k1)
	if code, out := e.do(0, "POST", "/v1/complete", k1, map[string]any{"log_id": done.LogID, "result": "success",
		"detail": map[string]any{"rows": 7}}); code != 200 {
		t.Fatalf("complete: %d %v", code, out)
	}
	e.clock.Advance(time.Second)
	dead := mustFetch(t, e, k1) // one attempt: the failure kills it
	if code, out := e.complete(0, k1, dead.LogID, "failure"); code != 200 {
		t.Fatalf("complete failure: %d %v", code, out)
	}
	e.clock.Advance(time.Second)
	open := mustFetch(t, e, k1)
	if code, out := e.progress(0, k1, open.LogID, map[string]any{"page": 2}, false); code != 200 {
		t.Fatalf("progress: %d %v", code, out)
	}
	other := mustFetch(t, e, k2)

	recs, next := e.records(k1, "/v1/dispatches")
	if !sameIDs(recs, open.LogID, dead.LogID, done.LogID) || next != "" {
		t.Fatalf("user 1's list: %v (next %q), want %s, %s, %s", logIDs(recs), next, open.LogID, dead.LogID, done.LogID)
	}
	want := []map[string]any{
		{"state": "open", "result": nil, "detail": nil, "checkpoint": map[string]any{"page": 2.0}, "finished_at": nil},
		{"state": "dead", "result": "failure", "detail": nil, "checkpoint": nil, "finished_at": ts(t0.Add(time.Second))},
		{"state": "done", "result": "success", "detail": map[string]any{"rows": 7.0}, "checkpoint": nil, "finished_at": ts(t0)},
	}
	for i, r := range recs {
		for field, v := range want[i] {
			if got, _ := json.Marshal(r[field]); string(got) != mustJSON(v) {
				t.Errorf("%s %s: %s, want %s", r["log_id"], field, got, mustJSON(v))
			}
		}
		if r["uid"] != "1" || r["attempt"] != 1.0 || r["stage"] != nil || r["due_at"] == nil || r["dispatched_at"] == nil {
			t.Errorf("record %v", r)
		}
	}
	if recs[0]["task_id"] != open.TaskID || recs[0]["dispatched_at"] != ts(t0.Add(2*time.Second)) {
		t.Errorf("open record %v, want task %s dispatched at %s", recs[0], open.TaskID, ts(t0.Add(2*time.Second)))
	}

	// Only the caller's own, whatever it asks.
	if recs, _ := e.records(k2, "/v1/dispatches"); !sameIDs(recs, other.LogID) {
		t.Fatalf("user 2's list: %v", logIDs(recs))
	}
	for state, id := range map[string]string{"open": open.LogID, "dead": dead.LogID, "done": done.LogID} {
		if recs, _ := e.records(k1, "/v1/dispatches?state="+state); !sameIDs(recs, id) {
			t.Errorf("state=%s: %v, want %s", state, logIDs(recs), id)
		}
	}
	if recs, _ := e.records(k1, "/v1/dispatches?state=failed"); len(recs) != 0 {
		t.Errorf("state=failed: %v", logIDs(recs))
	}
	if paged := e.allRecords(k1, "/v1/dispatches", 1); !sameIDs(paged, open.LogID, dead.LogID, done.LogID) {
		t.Fatalf("pages of one: %v", logIDs(paged))
	}
	if paged := e.allRecords(k1, "/v1/dispatches?state=dead", 1); !sameIDs(paged, dead.LogID) {
		t.Fatalf("dead, pages of one: %v", logIDs(paged))
	}

	for _, q := range []string{"?state=bogus", "?state=retried", "?limit=0", "?limit=1001", "?limit=x", "?cursor=%21%21",
		"?cursor=" + url.QueryEscape(strings.Repeat("A", 20)), "?uid=2", "?task_id=once:1", "?from=" + ts(t0)} {
		code, out := e.list(k1, "/v1/dispatches"+q)
		refused(t, q, code, out, 400, "invalid_argument")
	}
	code, out := e.list("", "/v1/dispatches")
	refused(t, "no key", code, out, 401, "unauthenticated")
	code, out = e.list(k1+"x", "/v1/dispatches?state=bogus")
	refused(t, "a bad key with a bad query", code, out, 401, "unauthenticated")
	code, out = e.list(adminToken, "/v1/dispatches")
	refused(t, "the admin token", code, out, 401, "unauthenticated")
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The admin list filters by user, task, state and dispatch time, alone and together,
// and pages through each with no record twice and none left out.
func TestAdminListFiltersAndPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1", "2", "3"}})
	keys := map[string]string{"1": e.key("1"), "2": e.key("2"), "3": e.key("3")}
	group := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-time.Hour)), "dispatch_times": -1})
	rotate := e.task("rotate", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-50 * time.Minute)),
		"space_minutes": 10, "dispatch_times": -1})
	own := e.task("once", map[string]any{"executor": "uid_2", "start_time": ts(t0.Add(-55 * time.Minute))})
	// Each user takes whatever is due, a second apart: successes, and a failure (dead,
	// one attempt) every third; then one more left open.
	n := 0
	for round := 0; round < 8; round++ {
		for _, u := range []string{"1", "2", "3"} {
			r := e.fetch(0, keys[u])
			if r.Task == nil {
				continue
			}
			e.clock.Advance(time.Second)
			n++
			result := "success"
			if n%3 == 0 {
				result = "failure"
			}
			if code, out := e.complete(0, keys[u], r.Task.LogID, result); code != 200 {
				t.Fatalf("complete: %d %v", code, out)
			}
		}
	}
	e.task("once", map[string]any{"executor": "uid_3", "start_time": ts(t0)})
	mustFetch(t, e, keys["3"])
	n++
	all := e.allRecords(adminToken, "/v1/admin/dispatches", 1000)
	if len(all) != n || n < 15 {
		t.Fatalf("%d records listed, %d dispatched", len(all), n)
	}
	for i := 1; i < len(all); i++ {
		if all[i-1]["dispatched_at"].(string) < all[i]["dispatched_at"].(string) {
			t.Fatalf("not newest first at %d: %v then %v", i, all[i-1], all[i])
		}
	}
	from, to := t0.Add(5*time.Second), t0.Add(12*time.Second)
	match := func(rec map[string]any, uid, task, state string, ranged bool) bool {
		at, _ := time.Parse(time.RFC3339Nano, rec["dispatched_at"].(string))
		return (uid == "" || rec["uid"] == uid) && (task == "" || rec["task_id"] == task) &&
			(state == "" || rec["state"] == state) && (!ranged || (!at.Before(from) && at.Before(to)))
	}
	checked := 0
	for _, uid := range []string{"", "2"} {
		for _, task := range []string{"", group, rotate, own} {
			for _, state := range []string{"", "done", "dead", "open"} {
				for _, ranged := range []bool{false, true} {
					q := url.Values{}
					if uid != "" {
						q.Set("uid", uid)
					}
					if task != "" {
						q.Set("task_id", task)
					}
					if state != "" {
						q.Set("state", state)
					}
					if ranged {
						q.Set("from", ts(from))
						q.Set("to", ts(to))
					}
					var want []string
					for _, r := range all {
						if match(r, uid, task, state, ranged) {
							want = append(want, r["log_id"].(string))
						}
					}
					checked += len(want)
					path := "/v1/admin/dispatches?" + q.Encode()
					for _, limit := range []int{1, 3} {
						if got := e.allRecords(adminToken, path, limit); !sameIDs(got, want...) {
							t.Fatalf("%s, pages of %d: %v, want %v", path, limit, logIDs(got), want)
						}
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no filter matched anything")
	}

	for _, q := range []string{"?type=dispatch", "?uid=uid_1", "?uid=a%20b", "?task_id=once", "?task_id=job:1",
		"?state=failure", "?from=yesterday", "?to=" + ts(t0) + "&from=" + ts(t0), "?limit=0", "?limit=1001",
		"?cursor=x", "?cursor=" + url.QueryEscape("MjAyNg")} {
		code, out := e.list(adminToken, "/v1/admin/dispatches"+q)
		refused(t, q, code, out, 400, "invalid_argument")
	}
	code, out := e.list(keys["1"], "/v1/admin/dispatches")
	refused(t, "a client key", code, out, 403, "permission_denied")
	code, out = e.do(0, "POST", "/v1/admin/dispatches/"+all[0]["log_id"].(string)+"/expire", keys["1"], nil)
	refused(t, "an intervention with a client key", code, out, 403, "permission_denied")
}

// auditOf returns the audit entries of action on dispatch logID, newest first.
func (e *env) auditOf(action, logID string) []map[string]any {
	e.t.Helper()
	var out []map[string]any
	for _, a := range e.admin("GET", "/v1/admin/audit", nil)["entries"].([]any) {
		m := a.(map[string]any)
		if m["action"] == action && m["target"] == "dispatch:"+logID {
			out = append(out, m)
		}
	}
	return out
}

// wantAudit checks the one audit entry of action on logID: by the admin, the record's
// state before and after.
func (e *env) wantAudit(action, logID, before, after string) {
	e.t.Helper()
	entries := e.auditOf(action, logID)
	if len(entries) != 1 {
		e.t.Fatalf("audit of %s %s: %v", action, logID, entries)
	}
	a := entries[0]
	b, _ := a["before"].(map[string]any)
	f, _ := a["after"].(map[string]any)
	if a["actor"] != "admin" || b["state"] != before || f["state"] != after || b["log_id"] != logID {
		e.t.Fatalf("audit of %s %s: %v, want %s -> %s by admin", action, logID, a, before, after)
	}
}

// Expire ends an open dispatch now as its lease running out would: an attempt used,
// the user takes the occurrence again as its next attempt. On the last attempt the
// record is expired (not dead) and the slot goes back to the pool all the same; the
// user does not take it again. Audited, with expire events; anything not open is a
// conflict.
func TestAdminExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "lease_seconds": 600, "max_attempts": 2})
	k := e.key("1")
	first := mustFetch(t, e, k)
	e.clock.Advance(10 * time.Second)
	rec := e.mustIntervene(first.LogID, "expire")
	if rec["log_id"] != first.LogID || rec["state"] != "expired" || rec["finished_at"] != ts(t0.Add(10*time.Second)) ||
		rec["attempt"] != 1.0 || rec["task_id"] != id {
		t.Fatalf("expired record: %v", rec)
	}
	code, out := e.complete(0, k, first.LogID, "success")
	refused(t, "complete of the expired dispatch", code, out, 409, "stale_lease")
	second := mustFetch(t, e, k)
	if second.TaskID != id || second.Attempt != 2 || second.LogID == first.LogID || second.Redo {
		t.Fatalf("after the expiry: %+v, want %s attempt 2", second, id)
	}
	if rec := e.mustIntervene(second.LogID, "expire"); rec["state"] != "expired" || rec["attempt"] != 2.0 {
		t.Fatalf("expiry of the last attempt: %v", rec)
	}
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("occurrence dispatched again after its last attempt: %+v", r.Task)
	}
	if n := e.count("SELECT claimed FROM occurrence_claim"); n != 0 {
		t.Fatalf("claimed %d after the last attempt's expire, want 0 (the slot back in the pool)", n)
	}
	code, out = e.intervene(second.LogID, "expire")
	refused(t, "expire of an expired dispatch", code, out, 409, "conflict")
	code, out = e.intervene(unknownLogID, "expire")
	refused(t, "expire of an unknown log id", code, out, 404, "not_found")
	code, out = e.intervene(strings.Repeat("x", 65), "expire")
	refused(t, "expire of an overlong log id", code, out, 404, "not_found")

	e.wantAudit("dispatch.expire", first.LogID, "open", "expired")
	e.wantAudit("dispatch.expire", second.LogID, "open", "expired")
	if evs := e.events("?type=expire"); len(evs) != 2 || evs[0]["log_id"] != second.LogID || evs[1]["log_id"] != first.LogID {
		t.Fatalf("expire events: %v", evs)
	}
	if evs := e.events("?type=dead"); len(evs) != 0 {
		t.Fatalf("dead events: %v", evs)
	}
	e.checkClaims()
}

// An expiry gives the slot back to the pool: another member of the group takes a
// quota-1 occurrence whose only slot the expired dispatch held.
func TestAdminExpireGivesTheSlotBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1", "2"}})
	id := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0), "max_attempts": 2})
	k1, k2 := e.key("1"), e.key("2")
	held := mustFetch(t, e, k1)
	if r := e.fetch(1, k2); r.Task != nil {
		t.Fatalf("user 2 got %+v while user 1 holds the only slot", r.Task)
	}
	e.mustIntervene(held.LogID, "expire")
	got := e.fetch(1, k2).Task
	if got == nil || got.TaskID != id || got.Attempt != 1 {
		t.Fatalf("user 2 after the expiry: %+v, want %s", got, id)
	}
	e.mustComplete(k2, got.LogID)
	if r := e.fetch(0, k1); r.Task != nil {
		t.Fatalf("user 1 got %+v after user 2 took the slot", r.Task)
	}
	if n := e.count("SELECT claimed FROM occurrence_claim"); n != 1 {
		t.Fatalf("claimed %d, want 1", n)
	}
	e.checkClaims()
}

// Retry sends a dead occurrence back to its user with attempts counted afresh, on the
// slot it kept: the next fetch gets it as attempt 1, with its checkpoint. Only a dead
// record; an earlier failed attempt's refusal names the dead one.
func TestAdminRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "max_attempts": 2})
	k := e.key("1")
	first := mustFetch(t, e, k)
	if code, out := e.complete(0, k, first.LogID, "failure"); code != 200 {
		t.Fatalf("failure: %d %v", code, out)
	}
	second := mustFetch(t, e, k)
	if second.Attempt != 2 {
		t.Fatalf("retry: %+v", second)
	}
	if code, out := e.progress(0, k, second.LogID, map[string]any{"step": 4}, false); code != 200 {
		t.Fatalf("progress: %d %v", code, out)
	}
	code, out := e.intervene(second.LogID, "retry")
	refused(t, "retry of an open dispatch", code, out, 409, "conflict")
	if code, out := e.complete(0, k, second.LogID, "failure"); code != 200 {
		t.Fatalf("last failure: %d %v", code, out)
	}
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("dead occurrence dispatched: %+v", r.Task)
	}
	code, out = e.intervene(first.LogID, "retry")
	refused(t, "retry of the failed first attempt", code, out, 409, "conflict")
	if msg := out["error"].(map[string]any)["message"].(string); !strings.Contains(msg, second.LogID) {
		t.Fatalf("refusal %q does not name the dead attempt %s", msg, second.LogID)
	}
	code, out = e.intervene(unknownLogID, "retry")
	refused(t, "retry of an unknown log id", code, out, 404, "not_found")

	e.clock.Advance(time.Minute)
	rec := e.mustIntervene(second.LogID, "retry")
	if rec["state"] != "dead" || rec["attempt"] != 2.0 || rec["retry_at"] != ts(t0.Add(time.Minute)) ||
		rec["retried_at"] != ts(t0.Add(time.Minute)) || rec["result"] != "failure" {
		t.Fatalf("retried record: %v", rec)
	}
	code, out = e.intervene(second.LogID, "retry")
	refused(t, "a second retry", code, out, 409, "conflict")
	again := mustFetch(t, e, k)
	if again.TaskID != id || again.Attempt != 1 || again.Redo || again.LogID == second.LogID {
		t.Fatalf("after the retry: %+v, want %s attempt 1", again, id)
	}
	wantCheckpoint(t, "after the retry", again, `{"step":4}`)
	// The slot stayed the user's: still one claimed, and the retried attempt has its
	// attempts afresh (a failure now waits for a retry, it does not kill).
	if n := e.count("SELECT claimed FROM occurrence_claim"); n != 1 {
		t.Fatalf("claimed %d, want 1", n)
	}
	if code, out := e.complete(0, k, again.LogID, "failure"); code != 200 {
		t.Fatalf("failure after the retry: %d %v", code, out)
	}
	fourth := mustFetch(t, e, k)
	if fourth.Attempt != 2 {
		t.Fatalf("attempt after the retried one failed: %+v", fourth)
	}
	e.mustComplete(k, fourth.LogID)

	recs, _ := e.records(adminToken, "/v1/admin/dispatches?task_id="+id)
	var states []string
	for _, r := range recs {
		states = append(states, r["state"].(string)+"/"+strconv.Itoa(int(r["attempt"].(float64))))
	}
	if got := strings.Join(states, " "); got != "done/2 failed/1 dead/2 failed/1" {
		t.Fatalf("the occurrence's records: %s", got)
	}
	e.wantAudit("dispatch.retry", second.LogID, "dead", "dead")
	evs := e.events("?type=retry")
	if len(evs) != 1 || evs[0]["log_id"] != second.LogID || evs[0]["attempt"] != 2.0 || evs[0]["at"] != ts(t0.Add(time.Minute)) ||
		evs[0]["event_id"] != second.LogID+":retry" {
		t.Fatalf("retry events: %v", evs)
	}
	// What happened before the retry is still told.
	if evs := e.events("?type=dead"); len(evs) != 1 || evs[0]["log_id"] != second.LogID || evs[0]["attempt"] != 2.0 {
		t.Fatalf("dead events: %v", evs)
	}
	e.checkClaims()
}

// An agent long-polling with nothing due gets the dead task the admin retries
// meanwhile, as attempt 1, before its wait ends.
func TestRetryReachesALongPoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "lease_seconds": 30, "max_attempts": 1})
	k := e.key("1")
	d := mustFetch(t, e, k)
	e.clock.Advance(31 * time.Second)
	if r := e.fetch(0, k); r.Task != nil { // the lease ran out on the only attempt: dead
		t.Fatalf("after the expiry: %+v", r.Task)
	}
	got := make(chan map[string]any, 1)
	go func() {
		code, out := e.do(0, "POST", "/v1/fetch", k, map[string]any{"wait_ms": 3000})
		if code != 200 {
			t.Errorf("long poll: %d %v", code, out)
		}
		got <- out
	}()
	time.Sleep(300 * time.Millisecond) // the poll is waiting (were it not yet, it would find the task at once)
	e.mustIntervene(d.LogID, "retry")
	out := <-got
	task, _ := out["task"].(map[string]any)
	if task == nil || task["task_id"] != id || task["attempt"] != 1.0 || task["redo"] != false {
		t.Fatalf("long poll: %v, want %s attempt 1 before the wait ended", out, id)
	}
	e.checkClaims()
}

// Cancel ends a dispatch for good: open, waiting for its retry, waiting for its next
// stage, or expired and waiting to be taken again; the user is not offered the
// occurrence again (until_exhausted too). A finished one is a conflict.
func TestAdminCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	k := e.key("1")
	nothing := func(what string) {
		t.Helper()
		if r := e.fetch(0, k); r.Task != nil {
			t.Fatalf("%s: %+v dispatched", what, r.Task)
		}
	}

	// Open, until_exhausted with quota left: it would otherwise be offered again.
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-4 * time.Minute)),
		"mode": "until_exhausted", "dispatch_times": 5})
	open := mustFetch(t, e, k)
	rec := e.mustIntervene(open.LogID, "cancel")
	if rec["state"] != "cancelled" || rec["finished_at"] != ts(t0) {
		t.Fatalf("cancelled open record: %v", rec)
	}
	code, out := e.complete(0, k, open.LogID, "success")
	refused(t, "complete of the cancelled dispatch", code, out, 409, "stale_lease")
	nothing("after cancelling the open dispatch")

	// Waiting for its retry.
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-3 * time.Minute)),
		"max_attempts": 3, "retry_backoff_seconds": 60})
	failed := mustFetch(t, e, k)
	e.complete(0, k, failed.LogID, "failure")
	if rec := e.mustIntervene(failed.LogID, "cancel"); rec["state"] != "cancelled" {
		t.Fatalf("cancelled retry: %v", rec)
	}
	e.clock.Advance(61 * time.Second)
	nothing("after cancelling the retry")

	// Waiting for its next stage.
	tpl := e.stageTemplate("a", "b")
	e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-2 * time.Minute)),
		"template_id": tpl, "params": map[string]any{}})
	staged := mustFetch(t, e, k)
	if code, out := e.completeStage(k, staged.LogID, "b", nil, 30); code != 200 {
		t.Fatalf("complete stage: %d %v", code, out)
	}
	if rec := e.mustIntervene(staged.LogID, "cancel"); rec["state"] != "cancelled" || rec["stage"] != "a" {
		t.Fatalf("cancelled stage: %v", rec)
	}
	e.clock.Advance(31 * time.Second)
	nothing("after cancelling the next stage")

	// Expired and waiting to be taken again: it stops waiting and keeps its state (its
	// slot went back to the pool at the expiry, and stays there), marked cancelled.
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "max_attempts": 3})
	expiring := mustFetch(t, e, k)
	e.mustIntervene(expiring.LogID, "expire")
	if rec := e.mustIntervene(expiring.LogID, "cancel"); rec["state"] != "expired" || rec["cancelled_at"] == nil {
		t.Fatalf("cancelled expired record: %v", rec)
	}
	nothing("after cancelling the re-take")
	code, out = e.intervene(expiring.LogID, "cancel")
	refused(t, "a second cancel of the expired record", code, out, 409, "conflict")

	code, out = e.intervene(open.LogID, "cancel")
	refused(t, "cancel of a cancelled dispatch", code, out, 409, "conflict")
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Minute))})
	e.clock.Advance(time.Minute)
	finished := mustFetch(t, e, k)
	e.mustComplete(k, finished.LogID)
	code, out = e.intervene(finished.LogID, "cancel")
	refused(t, "cancel of a done dispatch", code, out, 409, "conflict")
	code, out = e.intervene(finished.LogID, "expire")
	refused(t, "expire of a done dispatch", code, out, 409, "conflict")
	code, out = e.intervene(finished.LogID, "retry")
	refused(t, "retry of a done dispatch", code, out, 409, "conflict")
	code, out = e.intervene(unknownLogID, "cancel")
	refused(t, "cancel of an unknown log id", code, out, 404, "not_found")

	e.wantAudit("dispatch.cancel", open.LogID, "open", "cancelled")
	e.wantAudit("dispatch.cancel", failed.LogID, "retry_wait", "cancelled")
	e.wantAudit("dispatch.cancel", staged.LogID, "staged", "cancelled")
	e.wantAudit("dispatch.cancel", expiring.LogID, "expired", "expired")
	evs := e.events("?type=cancel")
	if len(evs) != 4 || evs[0]["log_id"] != expiring.LogID {
		t.Fatalf("cancel events: %v", evs)
	}
	if n := e.count("SELECT COUNT(*) FROM dispatch WHERE waiting_uid IS NOT NULL OR open_uid IS NOT NULL"); n != 0 {
		t.Fatalf("%d records still open or waiting", n)
	}
	e.checkClaims()
}

// The events of the interventions are the same in the admin events API and in the
// outbox (and so in Kafka and Elasticsearch): same ids, same types.
func TestInterventionEventsAgreeAcrossAdminAPIAndOutbox(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.KafkaBrokers = []string{"127.0.0.1:9"} })
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "max_attempts": 1,
		"lease_seconds": 30})
	k := e.key("1")
	first := mustFetch(t, e, k)
	e.clock.Advance(31 * time.Second)
	if r := e.fetch(0, k); r.Task != nil { // the lease ran out on the only attempt: dead
		t.Fatalf("fetch after the lease: %+v", r.Task)
	}
	e.clock.Advance(time.Second)
	e.mustIntervene(first.LogID, "retry")
	e.clock.Advance(time.Second)
	again := mustFetch(t, e, k)
	if again.LogID == first.LogID || again.Attempt != 1 {
		t.Fatalf("after the retry: %+v", again)
	}
	e.mustIntervene(again.LogID, "cancel")

	outbox := map[string]string{}
	rows, err := e.store.DB().Query("SELECT payload FROM event_outbox")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var payload string
		rows.Scan(&payload)
		var ev struct {
			EventID string `json:"event_id"`
			Type    string `json:"type"`
		}
		json.Unmarshal([]byte(payload), &ev)
		outbox[ev.EventID] = ev.Type
	}
	rows.Close()
	api := e.events("")
	types := map[string]int{}
	for _, ev := range api {
		types[ev["type"].(string)]++
		if typ, ok := outbox[ev["event_id"].(string)]; !ok || typ != ev["type"] {
			t.Errorf("event %v: not in the outbox under its id (outbox: %v)", ev, outbox)
		}
	}
	if len(api) != len(outbox) {
		t.Errorf("admin API %d events %v, outbox %d %v", len(api), types, len(outbox), outbox)
	}
	for _, typ := range []string{"expire", "dead", "retry", "cancel"} {
		if types[typ] != 1 {
			t.Errorf("%d %s events, want 1 (%v)", types[typ], typ, types)
		}
	}
}
