package schedule

import (
	"container/heap"
	"time"

	"github.com/taskpull/taskd"
)

// Entry is one occurrence on offer to a user.
type Entry struct {
	Task     taskd.TaskKey
	DueAt    time.Time
	Priority int // 1..9, higher first
	// Rotate only: the period and the optional last due time, so that the heap can
	// advance the task to its next occurrence without asking MySQL.
	Space time.Duration
	// Cron, instead of Space, is the key of the task's cron (taskd.Cron.Key): its next
	// occurrence is the cron's next wall time.
	Cron string
	End  time.Time // zero: no end
	// Misfire is a rotate task's policy for the occurrences its user missed (0 and
	// catch_up: every one in turn).
	Misfire taskd.Misfire
	// Windows is the key of the task's maintenance windows (taskd.Windows.Key): it is
	// claimed only while one is open. "": any time.
	Windows string
	// LogID, when set, makes the entry a waiting dispatch of the user (a retry after
	// its backoff, or an open dispatch parked while its task was paused) that comes back
	// at DueAt; Task is then zero.
	LogID string
	// DDI says the task's template is a DDI deployment's: the entry is for the user's
	// DDI controller (a hawkBit poll) alone, and a fetch passes it by, as the DDI poll
	// passes by the others. A waiting dispatch's entry does not say (its resume checks).
	DDI bool
	// Confirm, with LogID, makes it a confirm entry: the user's success LogID waits
	// for a fetch to confirm it. A fetch settles it (it is never taken as a task).
	Confirm bool
}

// Occurrence is the entry's occurrence.
func (e Entry) Occurrence() taskd.Occurrence {
	return taskd.Occurrence{Task: e.Task, DueAt: e.DueAt}
}

// Next returns the entry for the task's next occurrence and true, or false for a once
// task or a rotate task past its end.
func (e Entry) Next() (Entry, bool) {
	if e.Task.Kind != taskd.KindRotate {
		return Entry{}, false
	}
	n := e
	switch {
	case e.Cron != "":
		c, err := taskd.CronOf(e.Cron)
		if err != nil {
			return Entry{}, false
		}
		var ok bool
		if n.DueAt, ok = c.After(e.DueAt); !ok {
			return Entry{}, false
		}
	case e.Space > 0:
		n.DueAt = e.DueAt.Add(e.Space)
	default:
		return Entry{}, false
	}
	if !e.End.IsZero() && n.DueAt.After(e.End) {
		return Entry{}, false
	}
	return n, true
}

// OpenAt is when the entry may be claimed from t on: t itself when its task has no
// windows or one is open then, else the next opening (false: none ever opens again).
func (e Entry) OpenAt(t time.Time) (time.Time, bool) {
	if e.Windows == "" {
		return t, true
	}
	ws, err := taskd.WindowsOf(e.Windows)
	if err != nil {
		return t, true // the claim decides
	}
	return ws.OpenAt(t)
}

// Less orders entries: earlier due time first, then higher priority, then task key
// (kind, then id).
func Less(a, b Entry) bool {
	if !a.DueAt.Equal(b.DueAt) {
		return a.DueAt.Before(b.DueAt)
	}
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if a.Task.Kind != b.Task.Kind {
		return a.Task.Kind < b.Task.Kind // a waiting dispatch (kind 0) first
	}
	if a.Confirm != b.Confirm {
		return a.Confirm // a confirm entry before another waiting dispatch
	}
	if a.Task.ID != b.Task.ID {
		return a.Task.ID < b.Task.ID
	}
	return a.LogID < b.LogID
}

// Heap is a binary min-heap of entries in Less order.
type Heap struct{ items entries }

type entries []Entry

func (h entries) Len() int           { return len(h) }
func (h entries) Less(i, j int) bool { return Less(h[i], h[j]) }
func (h entries) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *entries) Push(x any)        { *h = append(*h, x.(Entry)) }
func (h *entries) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// NewHeap heapifies es in O(n); it takes ownership of the slice.
func NewHeap(es []Entry) *Heap {
	h := &Heap{items: es}
	heap.Init(&h.items)
	return h
}

// Len is the number of entries.
func (h *Heap) Len() int { return len(h.items) }

// Pop removes and returns the first entry. A rotate entry's next occurrence, if any
// and before until, takes its place.
func (h *Heap) Pop(until time.Time) (Entry, bool) {
	if len(h.items) == 0 {
		return Entry{}, false
	}
	e := h.items[0]
	if next, ok := e.Next(); ok && next.DueAt.Before(until) {
		h.items[0] = next
		heap.Fix(&h.items, 0)
	} else {
		heap.Pop(&h.items)
	}
	return e, true
}
