package schedule

import (
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func once(id int64, due time.Time, prio int) Entry {
	return Entry{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: id}, DueAt: due, Priority: prio}
}

func TestHeapPopsInDueThenPriorityThenKeyOrder(t *testing.T) {
	es := []Entry{
		once(3, t0.Add(time.Minute), 5),
		once(2, t0, 5),
		once(1, t0, 5),
		once(9, t0, 9),
		{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 1}, DueAt: t0, Priority: 5, Space: time.Hour},
	}
	h := NewHeap(es)
	var got []string
	for h.Len() > 0 {
		e, _ := h.Pop(t0) // until t0: rotate entries are not advanced
		got = append(got, e.Occurrence().String())
	}
	want := []string{
		"once:9@2026-11-21T10:00:00Z", // same due, higher priority first
		"once:1@2026-11-21T10:00:00Z", // then once before rotate, then by id
		"once:2@2026-11-21T10:00:00Z",
		"rotate:1@2026-11-21T10:00:00Z",
		"once:3@2026-11-21T10:01:00Z",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("pop order\n got %v\nwant %v", got, want)
	}
}

func TestHeapPopAdvancesRotateWithinWindow(t *testing.T) {
	end := t0.Add(2 * time.Hour)
	r := Entry{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 7}, DueAt: t0, Priority: 5, Space: time.Hour, End: end}
	h := NewHeap([]Entry{r})
	var dues []time.Time
	for h.Len() > 0 {
		e, _ := h.Pop(t0.Add(24 * time.Hour))
		dues = append(dues, e.DueAt)
	}
	if len(dues) != 3 || !dues[2].Equal(end) {
		t.Fatalf("rotate occurrences until end: %v, want 10:00, 11:00, 12:00", dues)
	}
	h = NewHeap([]Entry{r})
	h.Pop(t0.Add(90 * time.Minute)) // the window ends before the second occurrence
	h.Pop(t0.Add(90 * time.Minute))
	if h.Len() != 0 {
		t.Fatalf("rotate entry past the window stayed: %d entries", h.Len())
	}
}

func TestOffer(t *testing.T) {
	now := t0
	from := EffectiveCursor(time.Time{}, now, time.Hour) // a new user starts an hour back
	if !from.Equal(now.Add(-time.Hour)) {
		t.Fatalf("new user's cursor: %v", from)
	}
	src := Source{
		Once: []OnceTask{
			{ID: 1, Start: now.Add(-2 * time.Hour), Priority: 5}, // older than catch-up: missed
			{ID: 2, Start: now.Add(-30 * time.Minute), Priority: 5},
			{ID: 3, Start: now.Add(25 * time.Hour), Priority: 5}, // past the window
		},
		Rotate: []RotateTask{
			// daily at 08:00 since a week ago: first occurrence at or after 09:00 is tomorrow 08:00
			{ID: 1, Start: now.Add(-7*24*time.Hour - 2*time.Hour), Space: 24 * time.Hour, Priority: 5},
			// every 7 minutes from 09:00: ceil((09:00-09:00)/7m) = 0 -> 09:00
			{ID: 2, Start: now.Add(-time.Hour), Space: 7 * time.Minute, Priority: 5},
			// ended before the cursor
			{ID: 3, Start: now.Add(-5 * time.Hour), Space: time.Hour, End: now.Add(-90 * time.Minute), Priority: 5},
		},
	}
	got := Offer(src, from, now.Add(25*time.Hour))
	var keys []string
	for _, e := range got {
		keys = append(keys, e.Occurrence().String())
	}
	want := []string{
		"once:2@2026-11-21T09:30:00Z",
		"rotate:1@2026-11-22T08:00:00Z",
		"rotate:2@2026-11-21T09:00:00Z",
	}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("offer\n got %v\nwant %v", keys, want)
	}

	// A user whose cursor is at 09:30 with once:2 and rotate:2's 09:30 occurrence done.
	src.Cursor = now.Add(-30 * time.Minute)
	src.Exclude = map[string]bool{"once:2@2026-11-21T09:30:00Z": true}
	src.Rotate[1].Space = 30 * time.Minute
	src.Exclude["rotate:2@2026-11-21T09:30:00Z"] = true
	got = Offer(src, EffectiveCursor(src.Cursor, now, time.Hour), now.Add(25*time.Hour))
	keys = keys[:0]
	for _, e := range got {
		keys = append(keys, e.Occurrence().String())
	}
	want = []string{"rotate:1@2026-11-22T08:00:00Z", "rotate:2@2026-11-21T10:00:00Z"}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("offer after completions\n got %v\nwant %v", keys, want)
	}
}
