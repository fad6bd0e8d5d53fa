package taskd_test

import (
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

// A finished once task does not look live: its outcome says done, dead or ended
// (issue 37); a task with an outcome, or deleted, with nothing unfinished is over: its
// results are all in (issue 39).
func TestTaskOutcome(t *testing.T) {
	floor := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	once := taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce, ID: 1}, StartTime: floor.Add(time.Minute), DispatchTimes: 2}
	before := floor.Add(-time.Minute)
	past := once
	past.StartTime = before
	unlimited := once
	unlimited.DispatchTimes = taskd.Unlimited
	rot := taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindRotate, ID: 1}, StartTime: floor.Add(-48 * time.Hour), SpaceMinutes: 60, DispatchTimes: 1}
	ended := rot
	ended.EndTime = &before
	deleted := rot
	deleted.Status = taskd.StatusDeleted
	for _, tc := range []struct {
		name string
		t    taskd.Task
		f    taskd.OutcomeFigures
		want string
		over bool
	}{
		{"nothing yet", once, taskd.OutcomeFigures{}, "", false},
		{"a slot left", once, taskd.OutcomeFigures{Claimed: 1, Succeeded: 1}, "", false},
		{"all claimed, one open", once, taskd.OutcomeFigures{Claimed: 2, Succeeded: 1, Unfinished: 1}, "", false},
		{"done", once, taskd.OutcomeFigures{Claimed: 2, Succeeded: 1, Dead: 1}, taskd.OutcomeDone, true},
		{"dead", once, taskd.OutcomeFigures{Claimed: 2, Dead: 2}, taskd.OutcomeDead, true},
		{"unlimited stays on offer", unlimited, taskd.OutcomeFigures{Claimed: 9, Succeeded: 9}, "", false},
		{"due before the offers start", past, taskd.OutcomeFigures{Claimed: 1, Succeeded: 1}, taskd.OutcomeEnded, true},
		{"due before, still open", past, taskd.OutcomeFigures{Claimed: 1, Unfinished: 1}, "", false},
		{"rotating without end", rot, taskd.OutcomeFigures{}, "", false},
		{"rotating past its end", ended, taskd.OutcomeFigures{Claimed: 30, Succeeded: 30}, taskd.OutcomeEnded, true},
		{"deleted", deleted, taskd.OutcomeFigures{Claimed: 3, Succeeded: 3}, "", true},
		{"deleted, a success unconfirmed", deleted, taskd.OutcomeFigures{Claimed: 3, Unfinished: 1}, "", false},
	} {
		if got := tc.t.Outcome(tc.f, floor); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if got := tc.t.Over(tc.f, floor); got != tc.over {
			t.Errorf("%s: over %v, want %v", tc.name, got, tc.over)
		}
	}
}
