package taskd_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

// The seed's rotation formula: start + ceil((t - start) / space) * space.
func TestFirstRotation(t *testing.T) {
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Duration // after start
		want time.Duration
	}{
		{-time.Hour, 0}, // before the start: the start
		{0, 0},          // at the start
		{time.Second, 5 * time.Minute},
		{5 * time.Minute, 5 * time.Minute}, // exactly on one
		{5*time.Minute + 1, 10 * time.Minute},
		{59 * time.Minute, time.Hour},
	} {
		if got := taskd.FirstRotation(start, 5*time.Minute, start.Add(tc.at)); !got.Equal(start.Add(tc.want)) {
			t.Errorf("at start%+v: %v, want start%+v", tc.at, got, tc.want)
		}
	}
}

func TestIsRotation(t *testing.T) {
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	end := start.Add(time.Hour)
	for _, tc := range []struct {
		due  time.Duration
		end  *time.Time
		want bool
	}{
		{0, nil, true},
		{10 * time.Minute, nil, true},
		{7 * time.Minute, nil, false},   // between rotations
		{-5 * time.Minute, nil, false},  // before the start
		{time.Hour, &end, true},         // the end is the last
		{65 * time.Minute, &end, false}, // after the end
	} {
		if got := taskd.IsRotation(start, 5*time.Minute, tc.end, start.Add(tc.due)); got != tc.want {
			t.Errorf("due start%+v end %v: %v, want %v", tc.due, tc.end, got, tc.want)
		}
	}
}

func TestIDsAndExecutors(t *testing.T) {
	for id, want := range map[string]bool{"42": true, "a-b_C": true, "": false, "uid_5": false, "gid_x": false,
		"has space": false, "x.y": false, string(make([]byte, 65)): false} {
		if got := taskd.ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v", id, got)
		}
	}
	// The loop decides as the pattern it replaced did, for every byte and every length.
	pattern := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	ids := []string{"ab\n", "é", strings.Repeat("a", 64), strings.Repeat("a", 65), "uid_", "uid", "gid_"}
	for b := range 256 {
		ids = append(ids, string([]byte{byte(b)}), "x"+string([]byte{byte(b)})+"y")
	}
	for _, id := range ids {
		want := pattern.MatchString(id) && !strings.HasPrefix(id, "uid_") && !strings.HasPrefix(id, "gid_")
		if got := taskd.ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
	for s, want := range map[string]taskd.Executor{"uid_42": {ID: "42"}, "gid_ops": {Group: true, ID: "ops"}} {
		e, err := taskd.ParseExecutor(s)
		if err != nil || e != want || e.String() != s {
			t.Errorf("ParseExecutor(%q) = %+v, %v", s, e, err)
		}
	}
	for _, bad := range []string{"42", "uid_", "gid_uid_1", "user_1"} {
		if _, err := taskd.ParseExecutor(bad); taskd.ErrorCode(err) != taskd.CodeInvalid {
			t.Errorf("ParseExecutor(%q): %v, want invalid", bad, err)
		}
	}
}

func TestKeysRoundTrip(t *testing.T) {
	occ := taskd.Occurrence{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 3},
		DueAt: time.Date(2026, 11, 23, 10, 5, 0, 0, time.UTC)}
	if s := occ.String(); s != "rotate:3@2026-11-23T10:05:00Z" {
		t.Fatalf("occurrence key %q", s)
	}
	back, err := taskd.ParseOccurrence(occ.String())
	if err != nil || back != occ {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	for _, bad := range []string{"once:0", "once:-1", "weekly:1", "once", "once:x"} {
		if _, err := taskd.ParseTaskKey(bad); err == nil {
			t.Errorf("ParseTaskKey(%q) accepted", bad)
		}
	}
	if id := taskd.EventID("l1", taskd.EventRedo, 2); id != "l1:redo:2" {
		t.Errorf("redo event id %q", id)
	}
	if id := taskd.EventID("l1", taskd.EventComplete, 0); id != "l1:complete" {
		t.Errorf("complete event id %q", id)
	}
}
