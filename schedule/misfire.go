package schedule

import (
	"time"

	"github.com/taskpull/taskd"
)

// maxMissedWalk bounds the occurrences Misfire steps over in one call (a heap is
// rebuilt from the catch-up window long before a rotation could go further).
const maxMissedWalk = 100_000

// Misfired applies a due rotate entry's misfire policy at now. It returns the entry to
// take, if any (take false: none is on time, under skip), and steps, the entries the
// heap must pop to get there: each occurrence passed over, in order, the last of which
// advances to take (or, without one, to the next occurrence not yet due). missed is
// how many occurrences were passed over, first and last their due times. Under
// catch_up, or with nothing missed, it is e itself and no steps.
func (e Entry) Misfired(now time.Time) (take Entry, ok bool, steps []Entry, missed taskd.Missed) {
	if e.Task.Kind != taskd.KindRotate || e.Misfire == taskd.MisfireCatchUp || e.Misfire == 0 || e.DueAt.After(now) {
		return e, true, nil, missed
	}
	cur := e
	for len(steps) < maxMissedWalk {
		n, more := cur.Next()
		if !more || n.DueAt.After(now) {
			break
		}
		steps = append(steps, cur)
		cur = n
	}
	if e.Misfire == taskd.MisfireSkip && now.Sub(cur.DueAt) > taskd.MisfireGrace {
		steps = append(steps, cur) // late too: nothing is on time
		ok = false
	} else {
		take, ok = cur, true
	}
	if len(steps) > 0 {
		missed = taskd.Missed{Task: e.Task, First: steps[0].DueAt, Last: steps[len(steps)-1].DueAt, Count: len(steps)}
	}
	return take, ok, steps, missed
}
