package app_test

import (
	"fmt"
	"testing"
	"time"
)

// A user back after an hour, under each misfire policy of a task rotating every five
// minutes: catch_up hands out the oldest missed occurrence, latest the latest due one
// (the others recorded as one missed event, counted in stats), skip none until the
// next is due (all twelve missed). The return goes through the other instance.
func TestMisfirePolicies(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		take     string // the return's task due time, "" for none
		next     string // next_due_at when none
		missed   int
		from, to string
	}{
		{"catch_up", "10:05", "", 0, "", ""},
		{"latest", "11:00", "", 11, "10:05", "10:55"},
		{"skip", "", "11:05", 12, "10:05", "11:00"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 2)
			uid := "mis_" + tc.policy
			key := e.key(uid)
			id := e.task("rotate", map[string]any{"executor": "uid_" + uid, "start_time": ts(t0), "space_minutes": 5,
				"misfire": tc.policy, "dispatch_times": -1})
			if got := e.admin("GET", "/v1/admin/tasks/"+kindPath(id), nil)["misfire"]; got != tc.policy {
				t.Fatalf("misfire as read back: %v", got)
			}
			r := e.fetch(0, key)
			if r.Task == nil || !r.Task.DueAt.Equal(t0) {
				t.Fatalf("the first occurrence: %+v", r)
			}
			e.mustComplete(key, r.Task.LogID)

			e.clock.Set(t0.Add(62 * time.Minute)) // 11:02: twelve occurrences due since
			r = e.fetch(1, key)
			switch {
			case tc.take != "" && (r.Task == nil || r.Task.DueAt.Format("15:04") != tc.take):
				t.Fatalf("back at 11:02: %+v, want the occurrence due %s", r.Task, tc.take)
			case tc.take == "" && (r.Task != nil || r.NextDueAt == nil || r.NextDueAt.Format("15:04") != tc.next):
				t.Fatalf("back at 11:02: task %+v, next_due_at %v; want none and %s", r.Task, r.NextDueAt, tc.next)
			}
			evs := e.events("?type=missed&uid=" + uid)
			if tc.missed == 0 {
				if len(evs) != 0 {
					t.Fatalf("catch_up recorded missed events: %v", evs)
				}
				return
			}
			if len(evs) != 1 {
				t.Fatalf("missed events: %v", evs)
			}
			ev := evs[0]
			due, _ := time.Parse(time.RFC3339, ev["due_at"].(string))
			last, _ := time.Parse(time.RFC3339, ev["last_due_at"].(string))
			if ev["missed"] != float64(tc.missed) || due.Format("15:04") != tc.from || last.Format("15:04") != tc.to ||
				ev["task_id"] != id || ev["event_id"] != fmt.Sprintf("%s@%s:%s:missed", id, ev["due_at"], uid) {
				t.Fatalf("the missed event: %v; want %d from %s to %s", ev, tc.missed, tc.from, tc.to)
			}
			if st := e.stats(id); st == nil || st["missed"] != float64(tc.missed) {
				t.Fatalf("stats: %v", st)
			}
			// A fetch again records nothing more, and skip hands out the next on time.
			e.clock.Set(t0.Add(65*time.Minute + 30*time.Second))
			r = e.fetch(0, key)
			if tc.policy == "skip" && (r.Task == nil || r.Task.DueAt.Format("15:04") != "11:05") {
				t.Fatalf("skip at 11:05:30: %+v", r.Task)
			}
			if evs := e.events("?type=missed&uid=" + uid); len(evs) != 1 || evs[0]["missed"] != float64(tc.missed) {
				t.Fatalf("missed events after another fetch: %v", evs)
			}
		})
	}
}
