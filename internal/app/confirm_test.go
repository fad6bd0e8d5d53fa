package app_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// confirm_seconds through the HTTP API (issue 44): a task-type setting of templates and
// tasks, checked, shown, patched and audited; an unconfirmed success shows in the
// dispatch list and counts in the stats only once confirmed, by a fetch through
// another instance.
func TestConfirmSecondsThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	tpl := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "firmware",
		"schema": map[string]any{"type": "object"}, "confirm_seconds": 60})
	if tpl["confirm_seconds"] != 60.0 {
		t.Fatalf("template: %v", tpl)
	}
	id := int64(tpl["id"].(float64))

	// Out of range: a 400 naming the field, on a task and on a template.
	e.expectMsg("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_1", "start_time": ts(t0),
		"template_id": id, "confirm_seconds": -1}, 400, "invalid_argument", "confirm_seconds")
	e.expectMsg("PATCH", fmt.Sprintf("/v1/admin/templates/%d", id), map[string]any{"confirm_seconds": 1e9},
		400, "invalid_argument", "confirm_seconds")

	task := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_1", "start_time": ts(t0),
		"template_id": id})
	if task["confirm_seconds"] != 60.0 || !slices.Contains(inheritedOf(task), "confirm_seconds") {
		t.Fatalf("task inheriting confirm_seconds: %v", task)
	}
	taskID := task["task_id"].(string)
	path := "/v1/admin/tasks/once/" + fmt.Sprint(task["id"])

	k := e.key("1")
	d := mustFetch(t, e, k)
	e.mustComplete(k, d.LogID)
	recs, _ := e.records(adminToken, "/v1/admin/dispatches?state=unconfirmed")
	if len(recs) != 1 || recs[0]["log_id"] != d.LogID || recs[0]["result"] != nil ||
		recs[0]["confirm_by"] != ts(t0.Add(time.Minute)) {
		t.Fatalf("unconfirmed records: %v", recs)
	}
	if s := e.stats(taskID); s["completed"] != 0.0 {
		t.Fatalf("stats before the confirmation: %v", s)
	}

	e.clock.Advance(5 * time.Second)
	if r := e.fetch(1, k); r.Task != nil {
		t.Fatalf("fetch through the other instance: %+v, want nothing", r.Task)
	}
	recs, _ = e.records(adminToken, "/v1/admin/dispatches?uid=1")
	if len(recs) != 1 || recs[0]["state"] != "done" || recs[0]["result"] != "success" {
		t.Fatalf("records after the confirmation: %v", recs)
	}
	if s := e.stats(taskID); s["completed"] != 1.0 {
		t.Fatalf("stats after the confirmation: %v", s)
	}
	evs := e.events("?type=complete&uid=1")
	if len(evs) != 1 || evs[0]["result"] != "success" || evs[0]["at"] != ts(t0.Add(5*time.Second)) {
		t.Fatalf("complete events: %v", evs)
	}

	// The task's own value wins and is audited; null inherits again.
	own := e.admin("PATCH", path, map[string]any{"confirm_seconds": 0})
	if own["confirm_seconds"] != 0.0 || slices.Contains(inheritedOf(own), "confirm_seconds") {
		t.Fatalf("task with its own confirm_seconds: %v", own)
	}
	entries := e.admin("GET", "/v1/admin/audit", nil)["entries"].([]any)
	if top := entries[0].(map[string]any); top["action"] != "task.patch" ||
		top["before"].(map[string]any)["confirm_seconds"] != nil || top["after"].(map[string]any)["confirm_seconds"] != 0.0 {
		t.Fatalf("audit: %v", top)
	}
	if back := e.admin("PATCH", path, map[string]any{"confirm_seconds": nil}); back["confirm_seconds"] != 60.0 ||
		!strings.Contains(strings.Join(inheritedOf(back), ","), "confirm_seconds") {
		t.Fatalf("task after confirm_seconds: null: %v", back)
	}
}
