package app_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Multi-stage tasks (seed 004's setTask): a complete naming the next stage keeps the
// occurrence with its user, who gets it back at that stage (after the delay) with the
// context; only the last stage's complete completes it.

// stageTemplate creates a template with stages.
func (e *env) stageTemplate(stages ...string) int64 {
	e.t.Helper()
	out := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "staged",
		"schema": map[string]any{"type": "object"}, "stages": stages})
	return int64(out["id"].(float64))
}

// completeStage completes logID's stage, handing it on to next.
func (e *env) completeStage(key, logID, next string, context any, delay int) (int, map[string]any) {
	e.t.Helper()
	body := map[string]any{"log_id": logID, "result": "success", "next_stage": next, "context": context}
	if delay > 0 {
		body["delay_seconds"] = delay
	}
	return e.do(0, "POST", "/v1/complete", key, body)
}

func TestThreeStageTaskReachesTheSameUserInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	tpl := e.stageTemplate("fetch", "parse", "store")
	e.admin("PUT", "/v1/admin/groups/crawlers/members", map[string]any{"uids": []string{"1", "2"}})
	id := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "gid_crawlers", "start_time": ts(t0),
		"template_id": tpl, "params": map[string]any{"url": "u"}, "lease_seconds": 300})["task_id"].(string)
	k1, k2 := e.key("1"), e.key("2")

	first := mustFetch(t, e, k1)
	if first.TaskID != id || first.Stage != "fetch" || first.Context != nil {
		t.Fatalf("first stage: %+v", first)
	}
	if code, out := e.progress(0, k1, first.LogID, map[string]any{"bytes": 10}, false); code != 200 {
		t.Fatalf("progress: %d %v", code, out)
	}
	if code, out := e.completeStage(k1, first.LogID, "parse", map[string]any{"body_ref": "s3://x"}, 60); code != 200 {
		t.Fatalf("complete fetch -> parse: %d %v", code, out)
	}
	// The quota's one slot stays with user 1; the next stage is not due before the delay.
	if r := e.fetch(1, k2); r.Task != nil {
		t.Fatalf("user 2 got %+v while user 1 holds the occurrence", r.Task)
	}
	early := e.fetch(1, k1)
	if early.Task != nil {
		t.Fatalf("next stage before its delay: %+v", early.Task)
	}
	timeEq(t, "during the delay", early.NextDueAt, t0.Add(60*time.Second))

	e.clock.Advance(60 * time.Second)
	second := e.fetch(1, k1).Task
	if second == nil || second.TaskID != id || second.Stage != "parse" || second.Attempt != 1 ||
		string(second.Context) != `{"body_ref":"s3://x"}` || string(second.Checkpoint) != `{"bytes":10}` {
		t.Fatalf("second stage: %+v", second)
	}
	// A failure at a stage retries that stage, with its context.
	if code, out := e.complete(0, k1, second.LogID, "failure"); code != 200 {
		t.Fatalf("failure at parse: %d %v", code, out)
	}
	retry := mustFetch(t, e, k1)
	if retry.Stage != "parse" || retry.Attempt != 2 || string(retry.Context) != `{"body_ref":"s3://x"}` {
		t.Fatalf("retry of the parse stage: %+v", retry)
	}
	if code, out := e.completeStage(k1, retry.LogID, "store", map[string]any{"rows": 3}, 0); code != 200 {
		t.Fatalf("complete parse -> store: %d %v", code, out)
	}
	third := mustFetch(t, e, k1)
	if third.Stage != "store" || string(third.Context) != `{"rows":3}` {
		t.Fatalf("third stage: %+v", third)
	}
	e.mustComplete(k1, third.LogID)
	if r := e.fetch(0, k1); r.Task != nil {
		t.Fatalf("after the last stage: %+v", r.Task)
	}
	if r := e.fetch(0, k2); r.Task != nil {
		t.Fatalf("user 2 after user 1 finished: %+v", r.Task)
	}

	// Each stage's complete is an event; the occurrence completed once.
	var stages []string
	for _, ev := range e.events("?type=complete") {
		stages = append(stages, fmt.Sprint(ev["stage"], "/", ev["result"]))
	}
	if got := strings.Join(stages, ","); got != "store/success,parse/success,parse/failure,fetch/success" {
		t.Fatalf("complete events, newest first: %s", got)
	}
	st := e.stats(id)
	if st["dispatched"] != 4.0 || st["claimed"] != 1.0 {
		t.Fatalf("stats: %v", st)
	}
	e.checkClaims()
}

func TestStageRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.stageTemplate("a", "b")
	e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "template_id": tpl})
	plain := e.task("once", map[string]any{"executor": "uid_2", "start_time": ts(t0)})
	k1, k2 := e.key("1"), e.key("2")
	d := mustFetch(t, e, k1)
	for _, tc := range []struct {
		body map[string]any
		code int
		want string
	}{
		{map[string]any{"next_stage": "zz"}, 400, `next_stage: "zz" is not a stage of template`},
		{map[string]any{"result": "failure", "next_stage": "b"}, 400, "next_stage: only with result success"},
		{map[string]any{"context": map[string]any{}}, 400, "only with next_stage"},
		{map[string]any{"next_stage": "b", "delay_seconds": -1}, 400, "delay_seconds: must be"},
		{map[string]any{"next_stage": "b", "context": []int{1}}, 400, "context: must be an object"},
		{map[string]any{"next_stage": "b", "context": map[string]any{"x": strings.Repeat("y", 16<<10)}}, 413, "context"},
	} {
		body := map[string]any{"log_id": d.LogID, "result": "success"}
		for k, v := range tc.body {
			body[k] = v
		}
		code, out := e.do(0, "POST", "/v1/complete", k1, body)
		if code != tc.code || !strings.Contains(fmt.Sprint(out["error"]), tc.want) {
			t.Errorf("complete %v: %d %v, want %d %q", tc.body, code, out, tc.code, tc.want)
		}
	}
	// Nothing changed: the dispatch is still open (a redo), at stage a.
	if again := mustFetch(t, e, k1); !again.Redo || again.LogID != d.LogID || again.Stage != "a" {
		t.Fatalf("after refused completes: %+v", again)
	}
	// A task whose template has no stages takes no next_stage.
	p := mustFetch(t, e, k2)
	if p.TaskID != plain || p.Stage != "" {
		t.Fatalf("plain task: %+v", p)
	}
	if code, out := e.completeStage(k2, p.LogID, "a", nil, 0); code != 400 || !strings.Contains(fmt.Sprint(out), "has no stages") {
		t.Fatalf("next_stage on a task without stages: %d %v", code, out)
	}
	// A stage move carried by a fetch: completed, then the next stage comes in the reply.
	code, out := e.do(0, "POST", "/v1/fetch", k1, map[string]any{"complete": map[string]any{"log_id": d.LogID,
		"result": "success", "next_stage": "b", "context": map[string]any{"n": 1}}})
	task, _ := out["task"].(map[string]any)
	if code != 200 || task == nil || task["stage"] != "b" || fmt.Sprint(task["context"]) != "map[n:1]" {
		t.Fatalf("fetch carrying a stage move: %d %v", code, out)
	}
}

// A next stage (like a retry) due at a fraction of a second is offered from the whole
// second after it, never before: next_due_at is never a time at which a fetch gets
// nothing.
func TestNextStageDueAtAFractionOfASecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.stageTemplate("a", "b")
	e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "template_id": tpl})
	k := e.key("1")
	e.clock.Advance(300 * time.Millisecond)
	d := mustFetch(t, e, k)
	if code, out := e.completeStage(k, d.LogID, "b", nil, 2); code != 200 {
		t.Fatalf("complete a -> b: %d %v", code, out)
	}
	r := e.fetch(0, k)
	if r.Task != nil {
		t.Fatalf("stage b before its delay: %+v", r.Task)
	}
	timeEq(t, "during the delay", r.NextDueAt, t0.Add(3*time.Second))
	e.clock.Set(*r.NextDueAt)
	if b := mustFetch(t, e, k); b.Stage != "b" {
		t.Fatalf("at next_due_at: %+v", b)
	}
}

// Deleting a task cancels a staged dispatch waiting for its next stage at once, with a
// cancel event, and the stage's completion keeps its time.
func TestDeletingATaskCancelsAStagedDispatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.stageTemplate("a", "b")
	id := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_1", "start_time": ts(t0),
		"template_id": tpl})["task_id"].(string)
	k := e.key("1")
	d := mustFetch(t, e, k)
	if code, out := e.completeStage(k, d.LogID, "b", map[string]any{"x": 1}, 600); code != 200 {
		t.Fatalf("stage: %d %v", code, out)
	}
	var finishedBefore time.Time
	e.store.DB().QueryRow("SELECT finished_at FROM dispatch WHERE log_id = ?", d.LogID).Scan(&finishedBefore)
	e.clock.Advance(10 * time.Second)
	e.admin("DELETE", "/v1/admin/tasks/"+"once/"+id[len("once:"):], nil)
	waiting := e.count("SELECT COUNT(*) FROM dispatch WHERE waiting_uid IS NOT NULL")
	cancels := len(e.events("?type=cancel"))
	t.Logf("after delete: waiting records %d, cancel events %d", waiting, cancels)
	if waiting != 0 || cancels != 1 {
		t.Errorf("after DELETE: %d staged records still waiting, %d cancel events; want 0 and 1", waiting, cancels)
	}
	// Later the user's heap offers it and Resume cancels it, rewriting finished_at.
	e.clock.Advance(600 * time.Second)
	e.fetch(0, k)
	var state int
	var finished time.Time
	e.store.DB().QueryRow("SELECT state, finished_at FROM dispatch WHERE log_id = ?", d.LogID).Scan(&state, &finished)
	t.Logf("after the delay: state %d finished_at %v (stage completed at %v)", state, finished, finishedBefore)
	if !finished.Equal(finishedBefore) {
		t.Errorf("the stage's complete time was rewritten from %v to %v: its derived complete event moved", finishedBefore, finished)
	}
}

// A template edit of max_attempts reaches a retry (Resume takes the task's settings as
// they are now).
func TestTemplateEditReachesARetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "x", "schema": map[string]any{"type": "object"},
		"max_attempts": 2})
	tplID := int64(tpl["id"].(float64))
	e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "template_id": tplID})
	k := e.key("1")
	d := mustFetch(t, e, k)
	if code, out := e.complete(0, k, d.LogID, "failure"); code != 200 {
		t.Fatalf("fail 1: %d %v", code, out)
	}
	e.admin("PATCH", fmt.Sprintf("/v1/admin/templates/%d", tplID), map[string]any{"max_attempts": 5, "retry_backoff_seconds": 0})
	r := mustFetch(t, e, k)
	if code, out := e.complete(0, k, r.LogID, "failure"); code != 200 {
		t.Fatalf("fail 2: %d %v", code, out)
	}
	var maxAttempts, state int
	e.store.DB().QueryRow("SELECT max_attempts, state FROM dispatch WHERE log_id = ?", r.LogID).Scan(&maxAttempts, &state)
	t.Logf("attempt %d: max_attempts %d, state %d", r.Attempt, maxAttempts, state)
	if state == 6 {
		t.Errorf("attempt 2 of 5 (template edited to 5) went dead: the retry kept max_attempts %d", maxAttempts)
	}
}

// until_exhausted: after the last stage's complete, the occurrence stays on offer to the
// same user while quota lasts, as a single-stage one does.
func TestUntilExhaustedStagedTaskStaysOnOffer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.stageTemplate("a", "b")
	id := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_1", "start_time": ts(t0),
		"template_id": tpl, "dispatch_times": 3, "mode": "until_exhausted"})["task_id"].(string)
	k := e.key("1")
	a := mustFetch(t, e, k)
	if code, out := e.completeStage(k, a.LogID, "b", nil, 60); code != 200 {
		t.Fatalf("stage: %d %v", code, out)
	}
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("during the delay: %+v", r.Task)
	}
	e.clock.Advance(60 * time.Second)
	b := mustFetch(t, e, k)
	if b.Stage != "b" {
		t.Fatalf("stage b: %+v", b)
	}
	e.mustComplete(k, b.LogID)
	r := e.fetch(0, k)
	t.Logf("after the last stage: %+v", r.Task)
	if r.Task == nil || r.Task.TaskID != id {
		t.Errorf("until_exhausted with 2 of 3 slots left: the user gets nothing after completing the last stage")
	}
	flushPrefix(e)
	r2 := e.fetch(0, k)
	if r2.Task == nil || r2.Task.TaskID != id || !r2.Task.Redo {
		t.Errorf("after a Redis flush: %+v, want the redo of %s", r2.Task, id)
	}
}

// A success without next_stage at a stage that is not the last hands the occurrence on
// to the stage that follows: only the last stage's complete completes it.
func TestPlainCompleteOfAnEarlyStageGoesToTheNext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.stageTemplate("a", "b")
	e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "template_id": tpl})
	k := e.key("1")
	a := mustFetch(t, e, k)
	e.mustComplete(k, a.LogID)
	b := mustFetch(t, e, k)
	if b.Stage != "b" || b.Attempt != 1 || b.Context != nil {
		t.Fatalf("after a plain complete of stage a: %+v, want stage b", b)
	}
	e.mustComplete(k, b.LogID)
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatalf("after the last stage: %+v", r.Task)
	}
}
