package app_test

import (
	"testing"
	"time"
)

// The task list says when a task is over though its status is still active (issue
// 37): a once task done or dead, a task ended; nothing while more may be handed out.
func TestTaskListOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	k1, k2 := e.key("1"), e.key("2")
	done := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0)})
	dead := e.task("once", map[string]any{"executor": "uid_2", "start_time": ts(t0), "lease_seconds": 60, "max_attempts": 1})
	open := e.task("once", map[string]any{"executor": "uid_3", "start_time": ts(t0.Add(time.Hour))})
	missed := e.task("once", map[string]any{"executor": "uid_3", "start_time": ts(t0.Add(-2 * time.Hour))})
	over := e.task("rotate", map[string]any{"executor": "uid_3", "start_time": ts(t0.Add(-48 * time.Hour)), "space_minutes": 60,
		"end_time": ts(t0.Add(-2 * time.Hour))})
	running := e.task("rotate", map[string]any{"executor": "uid_3", "start_time": ts(t0.Add(-48 * time.Hour)), "space_minutes": 60})

	d1 := e.fetch(0, k1).Task
	if d1 == nil || d1.TaskID != done {
		t.Fatalf("uid 1 fetched %+v, want %s", d1, done)
	}
	outcomes := func() map[string]any {
		got := map[string]any{}
		for _, x := range e.admin("GET", "/v1/admin/tasks?limit=100", nil)["tasks"].([]any) {
			m := x.(map[string]any)
			got[m["task_id"].(string)] = m["outcome"]
		}
		return got
	}
	if o := outcomes(); o[done] != nil {
		t.Fatalf("a once task with its dispatch open: outcome %v", o[done])
	}
	e.mustComplete(k1, d1.LogID)
	d2 := e.fetch(0, k2).Task
	if d2 == nil || d2.TaskID != dead {
		t.Fatalf("uid 2 fetched %+v, want %s", d2, dead)
	}
	if code, out := e.complete(0, k2, d2.LogID, "failure"); code != 200 {
		t.Fatalf("complete: %d %v", code, out)
	}
	want := map[string]any{done: "done", dead: "dead", open: nil, missed: "ended", over: "ended", running: nil}
	got := outcomes()
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: outcome %v, want %v", id, got[id], w)
		}
	}
}
