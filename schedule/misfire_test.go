package schedule

import (
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

func TestMisfired(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	every5 := func(m taskd.Misfire) Entry {
		return Entry{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 1}, DueAt: t0, Priority: 5, Space: 5 * time.Minute, Misfire: m}
	}
	back := t0.Add(62 * time.Minute) // 13 occurrences due: 10:00 to 11:00
	for _, tc := range []struct {
		name     string
		e        Entry
		now      time.Time
		take     string // "" for none
		steps    int
		first    string
		last     string
		missedTo int
	}{
		{"catch_up takes the oldest", every5(taskd.MisfireCatchUp), back, "10:00", 0, "", "", 0},
		{"latest takes the latest", every5(taskd.MisfireLatest), back, "11:00", 12, "10:00", "10:55", 12},
		{"skip: the latest is 2 min late", every5(taskd.MisfireSkip), back, "", 13, "10:00", "11:00", 13},
		{"skip: the latest is on time", every5(taskd.MisfireSkip), t0.Add(60*time.Minute + 30*time.Second), "11:00", 12, "10:00", "10:55", 12},
		{"latest, nothing missed", every5(taskd.MisfireLatest), t0.Add(3 * time.Minute), "10:00", 0, "", "", 0},
		{"skip, on time", every5(taskd.MisfireSkip), t0.Add(30 * time.Second), "10:00", 0, "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			take, ok, steps, missed := tc.e.Misfired(tc.now)
			got := ""
			if ok {
				got = take.DueAt.Format("15:04")
			}
			if got != tc.take || len(steps) != tc.steps || missed.Count != tc.missedTo {
				t.Fatalf("take %q, %d steps, missed %+v; want %q, %d, %d", got, len(steps), missed, tc.take, tc.steps, tc.missedTo)
			}
			if missed.Count > 0 && (missed.First.Format("15:04") != tc.first || missed.Last.Format("15:04") != tc.last) {
				t.Fatalf("missed %s to %s, want %s to %s", missed.First, missed.Last, tc.first, tc.last)
			}
			for i := 1; i < len(steps); i++ { // each step is the one before it advanced
				if n, _ := steps[i-1].Next(); n != steps[i] {
					t.Fatalf("step %d is not the next of step %d", i, i-1)
				}
			}
		})
	}
}
