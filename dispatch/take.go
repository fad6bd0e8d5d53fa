package dispatch

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// The take loop serves every fetch: a fetch without max takes into slot 1, a batch
// fetch into its free slots. It walks the user's due entries in heap order, each round
// submitting as many claims as there are free slots, together (the group commit
// decides them in one transaction), and a slot whose claim was refused goes to the
// next entry. Each outcome is handled here, once, by its step (taskd.ClaimOutcome.Step):
// a taken entry is handed out and popped (an until_exhausted occurrence stays on offer:
// see staysOnOffer); a retried one goes back into the walk for another slot (another
// request of the user took this one, and the caller hands out what holds it); a kept one
// stays in the heap, not tried again in this fetch (a rate-bound task is looked at again
// at the minute's end); a popped one is gone for good (NotTargeted also makes the user's
// heap stale).
//
// A popped rotation's next occurrence takes its place, as the heap's pop does: when it
// is due it joins the walk at once, without another peek. view is a peek of asked
// entries: when it had that many and all are tried with slots left, the heap may have
// more, and the loop peeks again.

// taking is what the take loop came to: the tasks handed out (in heap order) and when
// the next entry not tried is due; busy says a slot was found taken by another request
// of the user's, holding that an occurrence was found held open in another slot.
type taking struct {
	tasks   []*Assignment
	next    *time.Time
	busy    bool
	holding bool
}

// taken is one claim or resume of a round.
type taken struct {
	entry   schedule.Entry
	slot    int
	outcome taskd.ClaimOutcome
	d       *taskd.Dispatch
	redo    bool
	err     error
}

// takeInto takes uid's due entries in view into slots, for a fetch of only's templates
// (none: any) and channel (only.DDI: a DDI controller's, which takes the entries of DDI
// deployments and no other; any other fetch passes those by). An error after some tasks
// were handed out returns them with it: they are dispatched, and the client must know
// of them.
func (s *Service) takeInto(ctx context.Context, uid string, view schedule.View, asked int, slots []int, only taskd.Take, now time.Time) (taking, error) {
	templates := only.Templates
	var out taking
	var popped []schedule.Entry
	slot1 := "" // the log id dispatched into slot 1, for the single fetch's hint
	tried := map[schedule.Entry]bool{}
	var after []time.Time // the next occurrences, not yet due, of the entries popped
	walk := takeable(view.Due)
	later := func(e schedule.Entry, at time.Time) { // e may be claimed from at on: when, as its windows say
		if open, ok := e.OpenAt(at); ok {
			after = append(after, open)
		}
	}
	pop := func(e schedule.Entry) {
		popped = append(popped, e)
		if n, ok := e.Next(); ok {
			if n.DueAt.After(now) {
				later(n, n.DueAt)
			} else {
				walk = append(walk, n)
			}
		}
	}
	finish := func(err error) (taking, error) {
		if err != nil {
			s.forgetOpen(ctx, uid)
		}
		if slot1 != "" {
			s.setOpen(ctx, uid, slot1, keptCopy(out.tasks, slot1), popped)
		} else {
			s.pop(ctx, uid, popped)
		}
		return out, err
	}
	known := map[taskd.TaskKey]int64{} // the templates of the tasks seen, with templates
	for round := 0; len(slots) > 0 && round < maxRounds; round++ {
		if err := s.leaveOut(ctx, walk, tried, known, templates); err != nil {
			return finish(err)
		}
		var err error
		var steps []schedule.Entry
		if walk, steps, err = s.misfire(ctx, uid, walk, tried, now, later); err != nil {
			return finish(err)
		}
		popped = append(popped, steps...)
		slices.SortFunc(walk, func(a, b schedule.Entry) int {
			switch {
			case schedule.Less(a, b):
				return -1
			case schedule.Less(b, a):
				return 1
			}
			return 0
		})
		var batch []taken
		rest := walk[:0:0]
		for _, e := range walk {
			if !tried[e] && e.LogID == "" && e.DDI != only.DDI {
				tried[e] = true // the other channel's: not for this fetch, nor its next_due_at
				continue
			}
			if !tried[e] && e.Windows != "" {
				if open, _ := e.OpenAt(now); !open.Equal(now) {
					// Outside its task's windows: it stays, and is claimed once one
					// opens (the claim checks again: an edit may have changed them).
					tried[e] = true
					later(e, now)
					continue
				}
			}
			switch {
			case tried[e]:
			case len(batch) < len(slots):
				batch = append(batch, taken{entry: e, slot: slots[len(batch)]})
			default:
				rest = append(rest, e)
			}
		}
		walk = rest
		if len(batch) == 0 {
			if len(view.Due) < asked {
				break // the heap has no more due entries
			}
			s.pop(ctx, uid, popped)
			popped = nil
			asked = min(max(s.peekSize(len(slots), len(tried)), 2*asked), maxPeek)
			var err error
			if view, err = s.cache.PeekN(ctx, uid, "", now, asked); err != nil {
				return finish(err)
			}
			walk = takeable(view.Due)
			continue
		}
		s.takeAll(ctx, uid, batch, only, now)
		var again []int // slots whose claim was refused: free for the next entries
		var failed error
		for _, t := range batch {
			tried[t.entry] = true
			switch t.outcome.Step() {
			case 0:
				failed = t.err
			case taskd.EntryTaken:
				if !t.redo {
					s.cfg.Metrics.Dispatched(t.d.Occurrence.Task.Kind.String())
				}
				if !staysOnOffer(t.entry, t.d) {
					pop(t.entry)
				} else if n, ok := t.entry.Next(); ok {
					later(n, n.DueAt)
				}
				if t.slot == 1 {
					slot1 = t.d.LogID
				}
				out.tasks = append(out.tasks, assignment(t.d, t.redo))
			case taskd.EntryRetry:
				s.cfg.Metrics.ClaimRefused(t.outcome.String())
				out.busy = true
				delete(tried, t.entry)
				walk = append(walk, t.entry)
			case taskd.EntryKeep:
				again = append(again, t.slot)
				switch t.outcome {
				case taskd.Holding:
					s.cfg.Metrics.ClaimRefused(taskd.UserBusy.String()) // the occurrence is the user's, in another slot
					out.holding = true
				case taskd.RateBound:
					s.cfg.Metrics.ClaimRefused(t.outcome.String())
					after = append(after, now.Truncate(time.Minute).Add(time.Minute))
				case taskd.PhaseBound:
					s.cfg.Metrics.ClaimRefused(t.outcome.String()) // not what the user waits for: the next phase may give it a slot
				case taskd.OutsideWindow:
					// The task's windows changed since the heap was built (the edit's
					// invalidation is on its way): look again in a minute at the latest.
					s.cfg.Metrics.ClaimRefused(t.outcome.String())
					if open, ok := t.entry.OpenAt(now); ok && open.After(now) {
						after = append(after, open)
					} else {
						after = append(after, now.Add(time.Minute))
					}
				}
			case taskd.EntryPop:
				s.cfg.Metrics.ClaimRefused(t.outcome.String())
				pop(t.entry)
				s.notTargeted(ctx, uid, t.outcome)
				again = append(again, t.slot)
			}
		}
		if failed != nil {
			return finish(failed)
		}
		slots = append(again, slots[len(batch):]...)
		slices.Sort(slots)
	}
	consider := func(t time.Time) {
		if out.next == nil || t.Before(*out.next) {
			out.next = &t
		}
	}
	for _, e := range walk {
		if !tried[e] {
			consider(e.DueAt)
		}
	}
	if view.Next != nil {
		// Its due time, even if its windows open later: the heap's entries after it
		// are unknown here, and one of them may be due before that.
		consider(view.Next.DueAt)
	}
	for _, t := range after {
		consider(t)
	}
	return finish(nil)
}

// misfire applies the misfire policies of the due rotate entries in walk (those not
// tried yet) at now: an entry whose user missed occurrences under latest or skip is
// replaced by the one it takes (latest: the latest due; skip: that one if on time, else
// none, and the next occurrence is for later). The runs missed are recorded in MySQL
// first; then the steps the heap must pop to get there are returned, for the fetch to
// pop with its own (a failed record leaves the heap as it was: the next fetch records
// them again).
func (s *Service) misfire(ctx context.Context, uid string, walk []schedule.Entry, tried map[schedule.Entry]bool, now time.Time,
	later func(schedule.Entry, time.Time)) ([]schedule.Entry, []schedule.Entry, error) {
	if !slices.ContainsFunc(walk, func(e schedule.Entry) bool {
		return !tried[e] && e.Misfire > taskd.MisfireCatchUp && !e.DueAt.After(now)
	}) {
		return walk, nil, nil // most rounds: no policy to apply, nothing copied
	}
	var runs []taskd.Missed
	var steps []schedule.Entry
	out := walk[:0:0]
	for _, e := range walk {
		if tried[e] || e.Misfire <= taskd.MisfireCatchUp {
			out = append(out, e)
			continue
		}
		take, ok, passed, missed := e.Misfired(now)
		if len(passed) == 0 {
			out = append(out, e)
			continue
		}
		missed.UID = uid
		runs = append(runs, missed)
		steps = append(steps, passed...)
		if ok {
			out = append(out, take)
		} else if n, more := passed[len(passed)-1].Next(); more {
			later(n, n.DueAt)
		}
	}
	if len(runs) == 0 {
		return walk, nil, nil
	}
	if err := s.store.RecordMissed(ctx, runs, now); err != nil {
		return walk, nil, err
	}
	for _, r := range runs {
		s.cfg.Metrics.Missed(r.Task.Kind.String(), r.Count)
	}
	return out, steps, nil
}

// takeAll takes a round's entries, each into its slot: one alone at once, several
// together, so that their claims share a batch.
func (s *Service) takeAll(ctx context.Context, uid string, batch []taken, only taskd.Take, now time.Time) {
	one := func(t *taken) {
		t.outcome, t.d, t.redo, t.err = s.take(ctx, uid, t.entry, now, taskd.Take{Slot: t.slot, Templates: only.Templates, DDI: only.DDI})
		if t.err != nil {
			t.outcome = 0
		}
	}
	if len(batch) == 1 {
		one(&batch[0])
		return
	}
	var wg sync.WaitGroup
	for i := range batch {
		wg.Go(func() { one(&batch[i]) })
	}
	wg.Wait()
}

// take dispatches a due heap entry to uid, into the open slot tk names: it claims the
// entry's occurrence, or, for a waiting dispatch of the user, resumes it (redo says it
// is handed out again). A task whose dispatch rate this node found used up is refused
// without asking MySQL for a second (or to the minute's end, if sooner), so users
// waiting on it cost one claim a second, and an edit that lifts the bound reaches them
// within the second.
func (s *Service) take(ctx context.Context, uid string, e schedule.Entry, now time.Time, tk taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, bool, error) {
	if e.LogID != "" {
		outcome, d, redo, err := s.store.Resume(ctx, uid, e.LogID, now, tk)
		switch {
		case err != nil || s.results == nil:
		case outcome == taskd.Claimed, outcome == taskd.UserBusy, outcome == taskd.NotDue, outcome == taskd.Holding,
			outcome == taskd.Filtered, outcome == taskd.RateBound:
			// The dispatch waits on, or goes on as the next attempt.
		default:
			// Its wait ended without a next attempt (a cancel, an occurrence exhausted or
			// out of reach meanwhile): a result, or the task's last unfinished gone. A
			// wake for nothing costs the waiters a read.
			s.results.Finished(e.Task)
		}
		return outcome, d, redo, err
	}
	if until, ok := s.rateBound.Load(e.Task); ok {
		if now.Before(until.(time.Time)) {
			return taskd.RateBound, nil, false, nil
		}
		s.rateBound.Delete(e.Task)
	}
	outcome, d, err := s.store.Claim(ctx, uid, e.Occurrence(), now, tk)
	if outcome == taskd.RateBound {
		until := now.Add(time.Second)
		if minute := now.Truncate(time.Minute).Add(time.Minute); minute.Before(until) {
			until = minute
		}
		s.rateBound.Store(e.Task, until)
	}
	return outcome, d, false, err
}

// leaveOut marks tried, with templates, the entries of tasks of other templates,
// reading the templates it does not know yet (into known) in one query: a due task of
// another template costs no claim. (The claim checks again: an edit in between gives
// Filtered.) A waiting dispatch's entry names no task, and is left to its resume.
func (s *Service) leaveOut(ctx context.Context, walk []schedule.Entry, tried map[schedule.Entry]bool, known map[taskd.TaskKey]int64, templates []int64) error {
	if len(templates) == 0 {
		return nil
	}
	var unknown []taskd.TaskKey
	for _, e := range walk {
		if _, ok := known[e.Task]; !ok && e.LogID == "" && !tried[e] {
			known[e.Task] = 0 // asked for below
			unknown = append(unknown, e.Task)
		}
	}
	if len(unknown) > 0 {
		m, err := s.store.TaskTemplates(ctx, unknown)
		if err != nil {
			return err
		}
		for _, k := range unknown {
			known[k] = m[k] // 0: no such task; the claim finds it gone
		}
	}
	only := taskd.Take{Templates: templates}
	for _, e := range walk {
		if id := known[e.Task]; e.LogID == "" && id != 0 && !only.Allows(id) {
			tried[e] = true
		}
	}
	return nil
}
