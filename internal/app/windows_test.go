package app_test

import (
	"fmt"
	"testing"
	"time"
)

// A task with a maintenance window is claimed only while it is open: outside, the
// fetch hands out nothing and next_due_at is the window's opening; at the opening, the
// other instance hands it out. A template's windows are its tasks' default, and a
// task's own [] opts out of them.
func TestMaintenanceWindows(t *testing.T) {
	e := newEnv(t, 2)
	e.clock.Set(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)) // a Thursday, 13:00 in Berlin
	key := e.key("win1")
	// 02:00 to 04:00 in Berlin, every night: 01:00 to 03:00 UTC in winter.
	nightly := []map[string]any{{"cron": "0 2 * * *", "minutes": 120, "time_zone": "Europe/Berlin"}}
	id := e.task("once", map[string]any{"executor": "uid_win1", "start_time": "2026-11-26T11:30:00Z", "windows": nightly})

	got := e.admin("GET", "/v1/admin/tasks/"+kindPath(id), nil)
	ws, _ := got["windows"].([]any)
	if len(ws) != 1 || ws[0].(map[string]any)["time_zone"] != "Europe/Berlin" || ws[0].(map[string]any)["minutes"] != float64(120) {
		t.Fatalf("the task's windows as read back: %v", got["windows"])
	}

	r := e.fetch(0, key)
	if r.Task != nil || r.NextDueAt == nil || ts(*r.NextDueAt) != "2026-11-27T01:00:00Z" {
		t.Fatalf("outside the window: task %v, next_due_at %v; want none and 2026-11-27T01:00:00Z", r.Task, r.NextDueAt)
	}
	e.clock.Set(time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC))
	if r = e.fetch(1, key); r.Task == nil || r.Task.TaskID != id {
		t.Fatalf("at the opening, through the other instance: %+v", r)
	}
	e.mustComplete(key, r.Task.LogID)

	// A retry waits for a window too: failed just before the window closes, its next
	// attempt comes the next night.
	retried := e.task("once", map[string]any{"executor": "uid_win1", "start_time": "2026-11-27T00:30:00Z", "windows": nightly,
		"max_attempts": 2})
	if r = e.fetch(0, key); r.Task == nil || r.Task.TaskID != retried {
		t.Fatalf("the second windowed task, inside the window: %+v", r)
	}
	e.clock.Set(time.Date(2026, 11, 27, 2, 59, 30, 0, time.UTC))
	if code, out := e.complete(1, key, r.Task.LogID, "failure"); code != 200 {
		t.Fatalf("complete: %d %v", code, out)
	}
	e.clock.Set(time.Date(2026, 11, 27, 3, 0, 30, 0, time.UTC))
	if r = e.fetch(1, key); r.Task != nil || r.NextDueAt == nil || ts(*r.NextDueAt) != "2026-11-28T01:00:00Z" {
		t.Fatalf("the retry, after the window closed: task %+v, next_due_at %v; want none and 2026-11-28T01:00:00Z", r.Task, r.NextDueAt)
	}
	e.clock.Set(time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC))
	if r = e.fetch(0, key); r.Task == nil || r.Task.TaskID != retried || r.Task.Attempt != 2 {
		t.Fatalf("the retry at the next opening: %+v", r.Task)
	}
	e.mustComplete(key, r.Task.LogID)

	// The template's windows are the default; a task's [] opts out.
	tpl := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "nightly", "schema": map[string]any{"type": "object"},
		"windows": nightly})
	if ws, _ := tpl["windows"].([]any); len(ws) != 1 {
		t.Fatalf("the template's windows: %v", tpl["windows"])
	}
	keyB, keyC := e.key("win2"), e.key("win3")
	inherits := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_win2", "start_time": "2026-11-28T04:00:00Z",
		"template_id": tpl["id"]})
	if inh, _ := inherits["inherited"].([]any); len(inh) == 0 || inh[len(inh)-1] != "windows" {
		t.Errorf("a task taking the template's windows: inherited %v", inherits["inherited"])
	}
	optsOut := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_win3", "start_time": "2026-11-28T04:00:00Z",
		"template_id": tpl["id"], "windows": []any{}})
	e.clock.Set(time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)) // 05:00 in Berlin: closed
	if r := e.fetch(0, keyB); r.Task != nil || r.NextDueAt == nil || ts(*r.NextDueAt) != "2026-11-29T01:00:00Z" {
		t.Errorf("the template's window, closed: task %v, next_due_at %v", r.Task, r.NextDueAt)
	}
	if r := e.fetch(1, keyC); r.Task == nil || r.Task.TaskID != optsOut["task_id"] {
		t.Errorf("a task with windows []: %+v", r)
	}

	// Closing the template's window to the whole day's hours reaches the heaps that
	// carry it: the task is handed out at once.
	e.admin("PATCH", "/v1/admin/templates/"+fmt.Sprint(tpl["id"]), map[string]any{"windows": []map[string]any{{"cron": "0 0 * * *", "minutes": 1440}}})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r := e.fetch(0, keyB); r.Task != nil {
			if r.Task.TaskID != inherits["task_id"] {
				t.Fatalf("after the template's edit: %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the template's new window did not reach the user's heap within 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	e.expectMsg("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_x", "start_time": "2026-11-28T04:00:00Z",
		"template_id": tpl["id"], "windows": []map[string]any{{"cron": "0 2 * * *", "minutes": 0}}}, 400, "invalid_argument", "windows[0].minutes")
	e.expectMsg("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_x", "start_time": "2026-11-28T04:00:00Z",
		"template_id": tpl["id"], "windows": []map[string]any{{"cron": "0 2 * * *", "minutes": 60, "time_zone": "Berlin"}}}, 400, "invalid_argument", "windows[0].time_zone")
}

// A campaign with a window hands out its items only while it is open; outside it, the
// fetch says when it opens.
func TestCampaignWindows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	// t0 is 10:00 UTC: the window opens at 12:00 for an hour.
	keys, _, path := e.runningCampaign(1, map[string]any{"windows": []map[string]any{{"cron": "0 12 * * *", "minutes": 60}}})
	got := e.admin("GET", path, nil)
	if ws, _ := got["windows"].([]any); len(ws) != 1 {
		t.Fatalf("the campaign's windows: %v", got["windows"])
	}
	r := e.batch(0, keys[0], 1, nil)
	if len(r.Tasks) != 0 || r.NextDueAt == nil || ts(*r.NextDueAt) != "2026-11-21T12:00:00Z" {
		t.Fatalf("outside the window: %+v, next_due_at %v; want none and 2026-11-21T12:00:00Z", r.Tasks, r.NextDueAt)
	}
	e.clock.Set(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	if items := e.items(1, keys[0], 1); len(items) != 1 {
		t.Fatalf("inside the window, through the other instance: %+v", items)
	}
	e.expectMsg("POST", "/v1/admin/campaigns", map[string]any{"name": "w", "template_id": e.template(), "executor": "gid_g",
		"items": map[string]any{"count": 1}, "windows": []map[string]any{{"cron": "0 12 * * *"}}}, 400, "invalid_argument", "windows[0].minutes")
}

// A rotating task with a window costs its users no heap rebuild per occurrence while
// the window is closed: the offer starts a catch-up before the next opening.
func TestRotatingWindowedTaskDoesNotRebuildWhileClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.clock.Set(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	key := e.key("winrot")
	id := e.task("rotate", map[string]any{"executor": "uid_winrot", "start_time": "2026-11-01T00:00:00Z", "space_minutes": 5,
		"dispatch_times": -1, "windows": []map[string]any{{"cron": "0 1 * * *", "minutes": 120}}})
	e.fetch(0, key)
	before := e.loaders[0].rebuilds.Load()
	for at := e.clock.Now(); at.Before(time.Date(2026, 11, 26, 23, 0, 0, 0, time.UTC)); at = at.Add(5 * time.Minute) {
		e.clock.Set(at)
		if r := e.fetch(0, key); r.Task != nil {
			t.Fatalf("at %s, outside the window: %+v", ts(at), r.Task)
		}
	}
	// Eleven hours: the heap's refresh (DISPATCH_HEAP_REFRESH, 6 h) rebuilds it once,
	// and nothing else does (one a poll, 131 of them, before).
	if n := e.loaders[0].rebuilds.Load() - before; n > 2 {
		t.Errorf("%d heap rebuilds while the window was closed, want at most the refresh's", n)
	}
	e.clock.Set(time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC))
	if r := e.fetch(0, key); r.Task == nil || r.Task.TaskID != id {
		t.Fatalf("at the opening: %+v", r)
	}
}
