package queue

import (
	"container/heap"
	"fmt"
	"strconv"
	"strings"
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

// Peek returns the first entry without removing it.
func (h *Heap) Peek() (Entry, bool) {
	if len(h.items) == 0 {
		return Entry{}, false
	}
	return h.items[0], true
}

// Push adds an entry.
func (h *Heap) Push(e Entry) { heap.Push(&h.items, e) }

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

// Member is the sorted-set member of an entry. Among equal scores Redis orders members
// by their bytes, and this encoding makes that order Less's: 9-priority first, then kind,
// then the zero-padded id. A rotate member carries its period and end after the key, so
// it is one member per task however often it rotates.
func Member(e Entry) string {
	var b strings.Builder
	b.Grow(40)
	b.WriteByte(byte('0' + 9 - e.Priority))
	b.WriteByte('|')
	if e.LogID != "" {
		b.WriteString("d|") // sorts before o and r, as kind 0 does in Less
		b.WriteString(e.LogID)
		return b.String()
	}
	b.WriteByte(kindLetter(e.Task.Kind))
	b.WriteByte('|')
	id := strconv.FormatInt(e.Task.ID, 10)
	for i := len(id); i < 19; i++ {
		b.WriteByte('0')
	}
	b.WriteString(id)
	if e.Task.Kind == taskd.KindRotate {
		b.WriteByte('|')
		b.WriteString(strconv.FormatInt(int64(e.Space/time.Second), 10))
		b.WriteByte('|')
		if !e.End.IsZero() {
			b.WriteString(strconv.FormatInt(e.End.Unix(), 10))
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}

func kindLetter(k taskd.Kind) byte {
	if k == taskd.KindRotate {
		return 'r'
	}
	return 'o'
}

// ParseMember is the inverse of Member, given the score (due time in Unix seconds).
func ParseMember(member string, score int64) (Entry, error) {
	parts := strings.Split(member, "|")
	if len(parts) != 3 && len(parts) != 5 || len(parts[0]) != 1 || len(parts[1]) != 1 {
		return Entry{}, fmt.Errorf("heap member %q: malformed", member)
	}
	e := Entry{Priority: 9 - int(parts[0][0]-'0'), DueAt: time.Unix(score, 0).UTC()}
	switch parts[1] {
	case "d":
		if len(parts) != 3 || parts[2] == "" {
			return Entry{}, fmt.Errorf("heap member %q: bad waiting dispatch", member)
		}
		e.LogID = parts[2]
		return e, nil
	case "o":
		e.Task.Kind = taskd.KindOnce
	case "r":
		e.Task.Kind = taskd.KindRotate
	default:
		return Entry{}, fmt.Errorf("heap member %q: bad kind", member)
	}
	id, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return Entry{}, fmt.Errorf("heap member %q: %w", member, err)
	}
	e.Task.ID = id
	if e.Task.Kind == taskd.KindRotate {
		if len(parts) != 5 {
			return Entry{}, fmt.Errorf("heap member %q: rotate without period", member)
		}
		space, err1 := strconv.ParseInt(parts[3], 10, 64)
		end, err2 := strconv.ParseInt(parts[4], 10, 64)
		if err1 != nil || err2 != nil || space <= 0 {
			return Entry{}, fmt.Errorf("heap member %q: bad period or end", member)
		}
		e.Space = time.Duration(space) * time.Second
		if end != 0 {
			e.End = time.Unix(end, 0).UTC()
		}
	}
	return e, nil
}
