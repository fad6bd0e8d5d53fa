package taskd_test

import (
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

// A finished once task does not look live: its outcome says done, dead or ended
// (issue 37).
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
	for _, tc := range []struct {
		name string
		t    taskd.Task
		f    taskd.OutcomeFigures
		want string
	}{
		{"nothing yet", once, taskd.OutcomeFigures{}, ""},
		{"a slot left", once, taskd.OutcomeFigures{Claimed: 1, Succeeded: 1}, ""},
		{"all claimed, one open", once, taskd.OutcomeFigures{Claimed: 2, Succeeded: 1, Unfinished: 1}, ""},
		{"done", once, taskd.OutcomeFigures{Claimed: 2, Succeeded: 1, Dead: 1}, taskd.OutcomeDone},
		{"dead", once, taskd.OutcomeFigures{Claimed: 2, Dead: 2}, taskd.OutcomeDead},
		{"unlimited stays on offer", unlimited, taskd.OutcomeFigures{Claimed: 9, Succeeded: 9}, ""},
		{"due before the offers start", past, taskd.OutcomeFigures{Claimed: 1, Succeeded: 1}, taskd.OutcomeEnded},
		{"due before, still open", past, taskd.OutcomeFigures{Claimed: 1, Unfinished: 1}, ""},
		{"rotating without end", rot, taskd.OutcomeFigures{}, ""},
		{"rotating past its end", ended, taskd.OutcomeFigures{Claimed: 30, Succeeded: 30}, taskd.OutcomeEnded},
	} {
		if got := tc.t.Outcome(tc.f, floor); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
