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
	End   time.Time // zero: no end
	// LogID, when set, makes the entry a waiting dispatch of the user (a retry after
	// its backoff, or an open dispatch parked while its task was paused) that comes back
	// at DueAt; Task is then zero.
	LogID string
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
	if e.Task.Kind != taskd.KindRotate || e.Space <= 0 {
		return Entry{}, false
	}
	n := e
	n.DueAt = e.DueAt.Add(e.Space)
	if !e.End.IsZero() && n.DueAt.After(e.End) {
		return Entry{}, false
	}
	return n, true
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
