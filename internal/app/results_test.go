package app_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// A task's results (GET /v1/admin/tasks/{kind}/{id}/results): its finished dispatch
// records, each once, with a cursor, done, and a wait for the next.

// resultsReply is a results reply, its records as maps.
type resultsReply struct {
	TaskID  string
	Results []map[string]any
	Next    string
	Done    bool
}

// results reads a task's results through instance i; query is the query string (""
// for none). It fails the test on anything but 200 or a reply without its fields.
func (e *env) results(i int, taskID, query string) resultsReply {
	e.t.Helper()
	code, out := e.do(i, "GET", resultsPath(taskID, query), adminToken, nil)
	if code != 200 {
		e.t.Fatalf("results of %s?%s: %d %v", taskID, query, code, out)
	}
	return decodeResults(e.t, out)
}

func resultsPath(taskID, query string) string {
	p := "/v1/admin/tasks/" + strings.Replace(taskID, ":", "/", 1) + "/results"
	if query != "" {
		p += "?" + query
	}
	return p
}

func decodeResults(t testing.TB, out map[string]any) resultsReply {
	t.Helper()
	var r resultsReply
	var ok bool
	if r.TaskID, ok = out["task_id"].(string); !ok {
		t.Fatalf("no task_id: %v", out)
	}
	list, ok := out["results"].([]any)
	if !ok {
		t.Fatalf("results %v, want a list", out["results"])
	}
	for _, x := range list {
		r.Results = append(r.Results, x.(map[string]any))
	}
	if r.Next, ok = out["next_cursor"].(string); !ok || r.Next == "" {
		t.Fatalf("next_cursor %v, want a string, never empty", out["next_cursor"])
	}
	if r.Done, ok = out["done"].(bool); !ok {
		t.Fatalf("done %v, want a boolean", out["done"])
	}
	return r
}

// after is the query of a read from cursor, with more (url-encoded pairs) added.
func after(cursor string, more ...string) string {
	q := url.Values{"cursor": {cursor}}
	for i := 0; i+1 < len(more); i += 2 {
		q.Set(more[i], more[i+1])
	}
	return q.Encode()
}

// waitResults starts a read that waits through instance i, and returns where its
// reply comes.
func (e *env) waitResults(i int, taskID, query string) <-chan resultsReply {
	got := make(chan resultsReply, 1)
	go func() {
		code, out := e.do(i, "GET", resultsPath(taskID, query), adminToken, nil)
		if code != 200 {
			e.t.Errorf("waiting read of %s: %d %v", taskID, code, out)
			close(got)
			return
		}
		got <- decodeResults(e.t, out)
	}()
	return got
}

// untilWaiting returns once n requests of instance i wait for results (their read
// found nothing and they wait): what follows happens during their wait.
func (e *env) untilWaiting(i, n int) {
	e.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); e.apps[i].Admin.Waiting() != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("%d requests wait for results on instance %d, want %d", e.apps[i].Admin.Waiting(), i, n)
		}
	}
}

// A read that waits is answered by the complete that came during its wait, with the
// result; a once task for one uid is then done, and a read from the new cursor answers
// at once, empty and done, wait or no wait.
func TestResultsWaitEndsWithAComplete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0)})
	k := e.key("1")
	first := e.results(0, id, "")
	if len(first.Results) != 0 || first.Done || first.TaskID != id {
		t.Fatalf("before anything: %+v", first)
	}
	d := mustFetch(t, e, k)
	if r := e.results(0, id, after(first.Next)); len(r.Results) != 0 || r.Done {
		t.Fatalf("while open: %+v", r)
	}
	got := e.waitResults(0, id, after(first.Next, "wait", "1m"))
	e.untilWaiting(0, 1)
	e.mustComplete(k, d.LogID)
	r := <-got
	if len(r.Results) != 1 || !r.Done {
		t.Fatalf("the wait's reply: %+v, want the result and done", r)
	}
	res := r.Results[0]
	if res["log_id"] != d.LogID || res["state"] != "done" || res["result"] != "success" || res["uid"] != "1" ||
		res["task_id"] != id || res["finished_at"] == nil {
		t.Errorf("the result: %v", res)
	}
	for _, q := range []string{after(r.Next), after(r.Next, "wait", "1m")} {
		if again := e.results(0, id, q); len(again.Results) != 0 || !again.Done || again.Next != r.Next {
			t.Errorf("read from the new cursor (%s): %+v", q, again)
		}
	}
	if e.apps[0].Admin.Waiting() != 0 {
		t.Errorf("%d still waiting", e.apps[0].Admin.Waiting())
	}
}

// Reads that pass each reply's cursor back get every result once, in the order they
// finished, over completes of several users, a failure that will be retried (final
// false) and its retry's success among them; paging one at a time from the start
// gives the same; the task is done once its quota is used up and all finished.
func TestResultsCursorNeitherRepeatsNorMisses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1", "2", "3"}})
	id := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0), "dispatch_times": 3, "max_attempts": 2})
	keys := map[string]string{"1": e.key("1"), "2": e.key("2"), "3": e.key("3")}
	cursor := e.results(0, id, "").Next
	var order []string // the log ids as the reads answered them
	step := func(what string, want ...string) {
		t.Helper()
		r := e.results(0, id, after(cursor, "limit", "1000"))
		var states []string
		for _, res := range r.Results {
			order = append(order, res["log_id"].(string))
			states = append(states, res["uid"].(string)+":"+res["state"].(string))
		}
		if strings.Join(states, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: %v, want %v", what, states, want)
		}
		cursor = r.Next
		if wantDone := what == "the last success"; r.Done != wantDone {
			t.Fatalf("%s: done %v, want %v", what, r.Done, wantDone)
		}
	}
	complete := func(uid, result string) string {
		t.Helper()
		d := mustFetch(t, e, keys[uid])
		if code, out := e.complete(0, keys[uid], d.LogID, result); code != 200 {
			t.Fatalf("complete %s: %d %v", uid, code, out)
		}
		return d.LogID
	}
	failed := complete("1", "failure")
	step("a failure with attempts left", "1:retry_wait")
	if r := e.results(0, id, ""); r.Results[0]["final"] == true || r.Results[0]["attempt"] != 1.0 {
		t.Errorf("the failure: %v, want attempt 1, not final", r.Results[0])
	}
	complete("2", "success")
	step("another user's success", "2:done")
	retried := complete("1", "success")
	if retried == failed {
		t.Fatalf("the retry is the failed record again")
	}
	step("the retry's success", "1:done")
	complete("3", "success")
	step("the last success", "3:done")

	var paged []string
	c := ""
	for range 10 {
		r := e.results(0, id, after(c, "limit", "1"))
		for _, res := range r.Results {
			paged = append(paged, res["log_id"].(string))
		}
		c = r.Next
		if len(r.Results) == 0 {
			if !r.Done {
				t.Errorf("paged to the end: not done")
			}
			break
		}
	}
	if strings.Join(paged, ",") != strings.Join(order, ",") || len(order) != 4 {
		t.Fatalf("paged one by one: %v, step by step: %v", paged, order)
	}
	// Read again from the start, the failure shows what became of it.
	if r := e.results(0, id, ""); r.Results[0]["log_id"] != failed || r.Results[0]["state"] != "failed" || !r.Done {
		t.Errorf("read again: %v done %v", r.Results[0], r.Done)
	}
}

// A rotating task is never done while it rotates: after its results, a read says more
// can come. Once deleted it is done (its open dispatch cancelled: the last result),
// and it is still answered, not a 404.
func TestResultsOfARotatingTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("rotate", map[string]any{"executor": "uid_1", "start_time": ts(t0), "space_minutes": 1})
	k := e.key("1")
	e.mustComplete(k, mustFetch(t, e, k).LogID)
	e.clock.Advance(time.Minute)
	e.mustComplete(k, mustFetch(t, e, k).LogID)
	r := e.results(0, id, "")
	if len(r.Results) != 2 || r.Done {
		t.Fatalf("two runs in: %+v", r)
	}
	e.clock.Advance(time.Minute)
	open := mustFetch(t, e, k)
	got := e.waitResults(0, id, after(r.Next, "wait", "1m"))
	e.untilWaiting(0, 1)
	e.admin("DELETE", "/v1/admin/tasks/"+strings.Replace(id, ":", "/", 1), nil)
	last := <-got
	if len(last.Results) != 1 || last.Results[0]["log_id"] != open.LogID || last.Results[0]["state"] != "cancelled" || !last.Done {
		t.Fatalf("after the delete: %+v", last)
	}
}

// A wait longer than the longest one a fetch may wait (DISPATCH_MAX_WAIT) is cut to
// it: the read answers, empty, when that runs out, and its cursor still works.
func TestResultsWaitIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.MaxWait = 200 * time.Millisecond })
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0)})
	k := e.key("1")
	start := e.results(0, id, "")
	r := e.results(0, id, after(start.Next, "wait", "24h")) // answered: the test would time out otherwise
	if len(r.Results) != 0 || r.Done || r.Next != start.Next {
		t.Fatalf("a capped wait: %+v", r)
	}
	e.mustComplete(k, mustFetch(t, e, k).LogID)
	if r := e.results(0, id, after(r.Next)); len(r.Results) != 1 || !r.Done {
		t.Fatalf("after the wait: %+v", r)
	}
}

// A waiting read stops when its request ends.
func TestResultsWaitEndsWithItsRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0)})
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, "GET", e.urls[0]+resultsPath(id, "wait=1h"), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := e.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	e.untilWaiting(0, 1)
	cancel()
	<-done
	e.untilWaiting(0, 0)
}

// Refusals: a bad wait, cursor, limit or query parameter is a 400 naming it; an
// unknown task or kind a 404.
func TestResultsRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0)})
	other := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0)})
	otherCursor := e.results(0, other, "").Next
	for _, tc := range []struct {
		path, want string
		status     int
	}{
		{resultsPath(id, "wait=-1s"), "wait", 400},
		{resultsPath(id, "wait=soon"), "wait", 400},
		{resultsPath(id, "wait=30"), "wait", 400},
		{resultsPath(id, "cursor=nonsense"), "cursor", 400},
		{resultsPath(id, "cursor="+otherCursor), "cursor", 400},
		{resultsPath(id, "limit=0"), "limit", 400},
		{resultsPath(id, "since=1"), "since", 400},
		{resultsPath("once:999999", ""), "once:999999", 404},
		{"/v1/admin/tasks/weekly/1/results", "weekly", 404},
	} {
		code, out := e.do(0, "GET", tc.path, adminToken, nil)
		wantCode := map[int]string{400: "invalid_argument", 404: "not_found"}[tc.status]
		msg, _ := out["error"].(map[string]any)["message"].(string)
		if code != tc.status || errCode(out) != wantCode || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %d %v, want %d %s naming %s", tc.path, code, out, tc.status, wantCode, tc.want)
		}
	}
	if code, out := e.do(0, "GET", resultsPath(id, ""), "", nil); code != 401 {
		t.Errorf("without a token: %d %v", code, out)
	}
}

// A read waiting on one node is woken by a complete on another: by the node's look at
// the marks of the tasks waited on, as the complete does not reach it.
func TestResultsWaitWakesOnAnotherNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0)})
	k := e.key("1")
	d := mustFetch(t, e, k)
	start := e.results(0, id, "")
	got := e.waitResults(0, id, after(start.Next, "wait", "1m"))
	e.untilWaiting(0, 1)
	if code, out := e.complete(1, k, d.LogID, "success"); code != 200 {
		t.Fatalf("complete on the other node: %d %v", code, out)
	}
	r := <-got
	if len(r.Results) != 1 || r.Results[0]["log_id"] != d.LogID || !r.Done {
		t.Fatalf("woken by the other node: %+v", r)
	}
}

// An attempt whose lease ran out with attempts left waits for its user to take the
// next: the task is not done while it waits, however long (here past the catch-up
// window, after which a once task with nothing waiting has ended), and the next
// attempt's result comes after it.
func TestResultsNotDoneWhileAnAttemptWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "lease_seconds": 60, "max_attempts": 3})
	k := e.key("1")
	first := mustFetch(t, e, k)
	e.clock.Advance(61 * time.Second)
	if _, err := e.apps[0].Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Hour)
	r := e.results(0, id, "")
	if len(r.Results) != 1 || r.Results[0]["log_id"] != first.LogID || r.Results[0]["state"] != "expired" || r.Done {
		t.Fatalf("the expired attempt, two hours on: %+v; want it, not done", r)
	}
	second := mustFetch(t, e, k)
	if second.LogID == first.LogID {
		t.Fatalf("the second fetch handed out %s again", first.LogID)
	}
	e.mustComplete(k, second.LogID)
	last := e.results(0, id, after(r.Next))
	if len(last.Results) != 1 || last.Results[0]["state"] != "done" || !last.Done {
		t.Fatalf("after the second attempt: %+v; want its success, done", last)
	}
}
