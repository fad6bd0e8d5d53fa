package schedule

import (
	"time"

	"github.com/taskpull/taskd"
)

// OnceTask is an active once task targeted at the user or one of its groups.
type OnceTask struct {
	ID       int64
	Start    time.Time
	Priority int
	Windows  string // the key of its maintenance windows (taskd.Windows.Key); "": none
	DDI      bool   // its template is a DDI deployment's (Entry.DDI)
}

// RotateTask is an active rotate task targeted at the user or one of its groups.
type RotateTask struct {
	ID       int64
	Start    time.Time
	Space    time.Duration
	Cron     *taskd.Cron // instead of Space: the wall times of a cron, from Start
	End      time.Time   // zero: no end
	Priority int
	Windows  string // the key of its maintenance windows (taskd.Windows.Key); "": none
	Misfire  taskd.Misfire
	DDI      bool // its template is a DDI deployment's (Entry.DDI)
}

// Rotation is when the task's occurrences fall.
func (t RotateTask) Rotation() taskd.Rotation {
	return taskd.Rotation{Start: t.Start, Space: t.Space, Cron: t.Cron, End: t.End}
}

// Source is everything a user's offer is built from, as read from MySQL.
type Source struct {
	Cursor  time.Time       // due time of the last completed occurrence; zero for a new user
	Exclude map[string]bool // occurrence keys completed at exactly Cursor
	Once    []OnceTask
	Rotate  []RotateTask
	Waiting []WaitingDispatch
	// WindowFrom is how far back a once task with windows is offered, whatever the
	// cursor: it waits for a window to open (taskd.MaxWindowWait), and its user may
	// have completed later tasks meanwhile (its once_per_user hold keeps it from being
	// handed out twice).
	WindowFrom time.Time
	// CatchUp is how far behind now an offer reaches (DISPATCH_CATCH_UP): a rotating
	// task with windows starts its offer no earlier than that before its next opening.
	CatchUp time.Duration
}

// WaitingDispatch is a dispatch of the user that waits beside its open slot: a failed
// attempt until its retry is due, or an open dispatch parked while its task was paused
// (due at once, when its task is active again).
type WaitingDispatch struct {
	LogID    string
	At       time.Time // when it may come back
	Priority int
	Windows  string // its task's maintenance windows (taskd.Windows.Key): it is resumed only inside one
	// Confirm makes it a success waiting for the user's next fetch to confirm it
	// (confirm_seconds): its entry is a confirm entry, due from the offer's start.
	Confirm bool
}

// EffectiveCursor is where a user's offer starts: its cursor, but never more than
// catchUp behind now (a new user starts there; a user back after a week does not grind
// through a week of stale rotations).
func EffectiveCursor(cursor, now time.Time, catchUp time.Duration) time.Time {
	floor := now.Add(-catchUp).Truncate(time.Second)
	if cursor.Before(floor) {
		return floor
	}
	return cursor
}

// Offer returns the entries on offer from `from` (the effective cursor) up to until,
// excluding the occurrences in src.Exclude that are due exactly at src.Cursor. Once
// tasks give their one occurrence; rotate tasks their first occurrence at or after from
// (start + ceil((from - start) / space) * space), stepping over an excluded one.
func Offer(src Source, from, until time.Time) []Entry {
	out := make([]Entry, 0, len(src.Once)+len(src.Rotate))
	excluded := func(o taskd.Occurrence) bool {
		return len(src.Exclude) > 0 && o.DueAt.Equal(src.Cursor) && src.Exclude[o.String()]
	}
	for _, t := range src.Once {
		lo := from
		if t.Windows != "" && !src.WindowFrom.IsZero() {
			lo = src.WindowFrom
		}
		if t.Start.Before(lo) || !t.Start.Before(until) {
			continue
		}
		e := Entry{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: t.ID}, DueAt: t.Start, Priority: t.Priority, Windows: t.Windows, DDI: t.DDI}
		if !excluded(e.Occurrence()) {
			out = append(out, e)
		}
	}
	for _, t := range src.Rotate {
		r := t.Rotation()
		start := from
		if t.Windows != "" && src.CatchUp > 0 {
			// Occurrences that would be older than the catch-up by the time a window
			// opens are never handed out: the offer starts at the first one that will
			// not be (so the entry does not go stale, and the heap is not rebuilt, at
			// each occurrence while the windows are closed).
			if ws, err := taskd.WindowsOf(t.Windows); err == nil {
				if open, ok := ws.OpenAt(from); ok && open.Add(-src.CatchUp).After(start) {
					start = open.Add(-src.CatchUp)
				}
			}
		}
		due, ok := r.First(start)
		if !ok {
			continue
		}
		e := Entry{
			Task:     taskd.TaskKey{Kind: taskd.KindRotate, ID: t.ID},
			DueAt:    due,
			Priority: t.Priority,
			Space:    t.Space,
			End:      t.End,
			Windows:  t.Windows,
			Misfire:  t.Misfire,
			DDI:      t.DDI,
		}
		if t.Cron != nil {
			e.Space, e.Cron = 0, t.Cron.Key()
		}
		if excluded(e.Occurrence()) {
			if e.DueAt, ok = r.After(e.DueAt); !ok {
				continue
			}
		}
		if !e.DueAt.Before(until) || (!t.End.IsZero() && e.DueAt.After(t.End)) {
			continue
		}
		out = append(out, e)
	}
	// A waiting dispatch is offered from its time (rounded up to whole seconds), but
	// never before from: it is the user's own, however old. A confirm entry (its time
	// zero, priority 9) is so at from, ahead of every task's entry: a fetch finds it
	// among the first it peeks at, however many tasks are due.
	for _, w := range src.Waiting {
		at := w.At.Truncate(time.Second)
		if at.Before(w.At) {
			at = at.Add(time.Second) // never before it is due
		}
		if at.Before(from) {
			at = from
		}
		if !at.Before(until) {
			continue
		}
		out = append(out, Entry{LogID: w.LogID, DueAt: at, Priority: w.Priority, Windows: w.Windows, Confirm: w.Confirm})
	}
	return out
}

// TaskSet is the active tasks of some executors that can have an occurrence in a
// time range, with their quotas: what a schedule report is built from.
type TaskSet struct {
	Once   []OnceTask
	Rotate []RotateTask
	Quota  map[taskd.TaskKey]int
}
