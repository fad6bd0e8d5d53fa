package app_test

import (
	"strings"
	"testing"
	"time"
)

// A cron task in Europe/Berlin, across both of 2026's daylight-saving changes, served
// by two instances: the 02:30 that does not exist on 29 March happens at 03:00 CEST,
// the 02:30 that happens twice on 25 October happens once, the first time; each
// instance hands out what the other's heap computed.
func TestCronTaskAcrossDaylightSavingChanges(t *testing.T) {
	e := newEnv(t, 2)
	key := e.key("cron1")
	e.clock.Set(time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC))
	id := e.task("rotate", map[string]any{"executor": "uid_cron1", "start_time": "2026-03-01T00:00:00Z",
		"cron": "30 2 * * *", "time_zone": "Europe/Berlin", "dispatch_times": -1})

	got := e.admin("GET", "/v1/admin/tasks/"+kindPath(id), nil)
	if got["cron"] != "30 2 * * *" || got["time_zone"] != "Europe/Berlin" || got["space_minutes"] != nil {
		t.Fatalf("the task as read back: %v", got)
	}

	// The day's 02:30 (01:30 UTC) is beyond the hour of catch-up: the next is the
	// gap's, at 03:00 CEST.
	step := func(i int, want, next string) {
		t.Helper()
		r := e.fetch(i, key)
		if r.Task == nil {
			t.Fatalf("fetch at %s through instance %d: no task (next_due_at %v), want one due %s", ts(e.clock.Now()), i, r.NextDueAt, want)
		}
		if ts(r.Task.DueAt) != want || r.Task.TaskID != id {
			t.Fatalf("fetch at %s: %s due %s, want %s due %s", ts(e.clock.Now()), r.Task.TaskID, ts(r.Task.DueAt), id, want)
		}
		if code, out := e.complete(1-i, key, r.Task.LogID, "success"); code != 200 {
			t.Fatalf("complete: %d %v", code, out)
		}
		r = e.fetch(1-i, key)
		if r.Task != nil || r.NextDueAt == nil || ts(*r.NextDueAt) != next {
			t.Fatalf("after the complete: task %v, next_due_at %v, want none and %s", r.Task, r.NextDueAt, next)
		}
		e.clock.Set(*r.NextDueAt)
	}
	r := e.fetch(0, key)
	if r.Task != nil || r.NextDueAt == nil || ts(*r.NextDueAt) != "2026-03-29T01:00:00Z" {
		t.Fatalf("at %s: task %v, next_due_at %v, want none and 2026-03-29T01:00:00Z (03:00 CEST)", ts(e.clock.Now()), r.Task, r.NextDueAt)
	}
	e.clock.Set(*r.NextDueAt)
	step(1, "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z") // 03:00 CEST, then 02:30 CEST
	step(0, "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z")

	// October: 02:30 CEST (00:30 UTC) on the 25th, not 02:30 CET (01:30 UTC) as well.
	e.clock.Set(time.Date(2026, 10, 24, 23, 45, 0, 0, time.UTC))
	r = e.fetch(0, key)
	if r.Task != nil || r.NextDueAt == nil || ts(*r.NextDueAt) != "2026-10-25T00:30:00Z" {
		t.Fatalf("at %s: task %v, next_due_at %v, want none and 2026-10-25T00:30:00Z", ts(e.clock.Now()), r.Task, r.NextDueAt)
	}
	e.clock.Set(*r.NextDueAt)
	step(1, "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z")

	// The schedule view shows the wall time beside UTC.
	s := e.admin("GET", "/v1/admin/schedule?executor=uid_cron1&from=2026-10-24T00:00:00Z&to=2026-10-26T00:00:00Z", nil)
	occ := s["occurrences"].([]any)
	var local []string
	for _, o := range occ {
		m := o.(map[string]any)
		local = append(local, m["due_at"].(string)+" "+m["local_time"].(string)+" "+m["time_zone"].(string))
	}
	want := []string{"2026-10-24T00:30:00Z 2026-10-24T02:30:00+02:00 Europe/Berlin", "2026-10-25T00:30:00Z 2026-10-25T02:30:00+02:00 Europe/Berlin"}
	if len(local) != len(want) || local[0] != want[0] || local[1] != want[1] {
		t.Errorf("schedule: %q, want %q", local, want)
	}
}

// What a cron task refuses, each naming its field.
func TestCronTaskRefusals(t *testing.T) {
	e := newEnv(t, 1)
	tpl := e.template()
	body := func(extra map[string]any) map[string]any {
		b := map[string]any{"executor": "uid_x", "start_time": "2026-11-21T00:00:00Z", "template_id": tpl}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	e.expectMsg("POST", "/v1/admin/tasks/rotate", body(map[string]any{"cron": "0 3 * * *", "time_zone": "Mars/Olympus_Mons"}),
		400, "invalid_argument", "time_zone")
	e.expectMsg("POST", "/v1/admin/tasks/rotate", body(map[string]any{"cron": "0 0 30 2 *"}), 422, "unsatisfiable", "cron", "never fires")
	e.expectMsg("POST", "/v1/admin/tasks/rotate", body(map[string]any{"cron": "0 25 * * *"}), 400, "invalid_argument", "cron")
	e.expectMsg("POST", "/v1/admin/tasks/rotate", body(map[string]any{"cron": "0 3 * * *", "space_minutes": 5}), 400, "invalid_argument", "cron, space_minutes")
	e.expectMsg("POST", "/v1/admin/tasks/rotate", body(map[string]any{"space_minutes": 5, "time_zone": "Europe/Berlin"}), 400, "invalid_argument", "time_zone")
	e.expectMsg("POST", "/v1/admin/tasks/rotate", body(nil), 400, "invalid_argument", "space_minutes or cron")
	e.expectMsg("POST", "/v1/admin/tasks/once", body(map[string]any{"cron": "0 3 * * *"}), 400, "invalid_argument", "rotate tasks only")
	e.expectMsg("POST", "/v1/admin/tasks/once", body(map[string]any{"misfire": "latest"}), 400, "invalid_argument", "rotate tasks only")
	e.expectMsg("POST", "/v1/admin/tasks/rotate", body(map[string]any{"space_minutes": 5, "misfire": "never"}), 400, "invalid_argument", "misfire")

	// A patch switches a task from a period to a cron by setting the other to null.
	id := e.task("rotate", map[string]any{"executor": "uid_x", "start_time": "2026-11-21T00:00:00Z", "space_minutes": 60})
	e.expectMsg("PATCH", "/v1/admin/tasks/"+kindPath(id), map[string]any{"cron": "0 9 * * 1-5"}, 400, "invalid_argument", "not both")
	out := e.admin("PATCH", "/v1/admin/tasks/"+kindPath(id), map[string]any{"cron": "0 9 * * 1-5", "time_zone": "Asia/Tokyo", "space_minutes": nil})
	if out["cron"] != "0 9 * * 1-5" || out["time_zone"] != "Asia/Tokyo" || out["space_minutes"] != nil {
		t.Errorf("after the patch: %v", out)
	}
}

// kindPath is a task id's path under /v1/admin/tasks/: "rotate:3" is "rotate/3".
func kindPath(taskID string) string { return strings.Replace(taskID, ":", "/", 1) }
