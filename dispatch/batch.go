package dispatch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// Batch fetch (seed 004's hold-N): a fetch with max hands out up to min(max, free
// slots) distinct due tasks at once, in heap order, each its own dispatch with its own
// log id and lease, taking one of the user's open slots 1..max_in_flight (the open-slot
// key makes that bound MySQL's). The claims of one batch are submitted together, so
// that the group commit decides them in one transaction; quotas hold per task exactly
// as for single fetches. A client holding all its slots gets its open dispatches again
// (redo), as a single fetch gets its one open dispatch.

// Batch is what a batch fetch asks for.
type Batch struct {
	// Max is how many tasks at most (1..taskd.MaxInFlightLimit).
	Max int
	// Templates, when not empty, restricts the fetch to tasks of those templates.
	Templates []int64
}

// FetchBatch hands uid up to b.Max due tasks, bounded by its free slots; with wait > 0
// it long-polls until at least one is due or wait (capped) runs out.
func (s *Service) FetchBatch(ctx context.Context, uid, keyHash string, b Batch, wait time.Duration) (FetchResult, error) {
	if keyHash == "" {
		return FetchResult{}, taskd.Errorf(taskd.CodeUnauthenticated, "missing client key")
	}
	return s.counted(s.poll(ctx, wait, func(round context.Context) (FetchResult, error) {
		return s.batch(round, uid, keyHash, b)
	}))
}

// batch is one round of a batch fetch.
func (s *Service) batch(ctx context.Context, uid, keyHash string, b Batch) (FetchResult, error) {
	now := s.now()
	asked := s.peekSize(b.Max, 0)
	view, err := s.cache.PeekN(ctx, uid, keyHash, now, asked)
	if err != nil {
		return FetchResult{}, err
	}
	free, held, err := s.freeSlots(ctx, uid, now)
	if err != nil {
		return FetchResult{}, err
	}
	if free.expired {
		// An expiry put occurrences back on offer: the heap is rebuilt.
		if view, err = s.cache.PeekN(ctx, uid, "", now, asked); err != nil {
			return FetchResult{}, err
		}
	}
	slots := free.slots[:min(len(free.slots), b.Max)]
	res := FetchResult{NextDueAt: nextDue(nil, view.Due, view.Next)}
	if len(slots) > 0 {
		if res, err = s.takeBatch(ctx, uid, view, asked, slots, b, now); err != nil {
			return res, err
		}
	}
	if len(res.Tasks) < b.Max {
		// Campaign items hold no slot: the client holds up to its max_in_flight of
		// each campaign's items besides its tasks.
		if res, err = s.withItems(ctx, uid, res, b.Max-len(res.Tasks), free.limit, taskd.Take{Templates: b.Templates}, now); err != nil {
			return res, err
		}
	}
	if len(res.Tasks) == 0 && len(held) > 0 {
		// Nothing new: the held ones, again (a client that lost a reply gets its
		// dispatches back once no new work is ahead of them).
		return s.redoHeld(ctx, held, b, now, res.NextDueAt)
	}
	return res, err
}

// peekSize is how many due entries a batch peeks at: the entries it already decided to
// leave (skipped), and enough beyond them for want tasks with some refused.
func (s *Service) peekSize(want, skipped int) int {
	return min(skipped+2*want+8, maxPeek)
}

// maxPeek bounds a batch's peek.
const maxPeek = 1000

// freeState is a user's free open slots, in slot order, and whether finding them
// expired a dispatch past its lease.
type freeState struct {
	slots   []int
	expired bool
	limit   int // the client's max_in_flight
}

// freeSlots reads uid's max_in_flight and open dispatches, expires those past their
// lease (their slots are free then), and returns the free slots and the held ones'
// log ids (in slot order).
func (s *Service) freeSlots(ctx context.Context, uid string, now time.Time) (freeState, []string, error) {
	var f freeState
	mif, open, err := s.store.OpenSlots(ctx, uid)
	if err != nil {
		return f, nil, err
	}
	f.limit = mif
	slices.SortFunc(open, func(a, b taskd.OpenSlot) int { return a.Slot - b.Slot })
	taken := map[int]bool{}
	var held []string
	for _, o := range open {
		if o.LeaseExpiresAt != nil && !now.Before(*o.LeaseExpiresAt) {
			if err := s.expired(ctx, o.LogID, now); err != nil {
				return f, nil, err
			}
			f.expired = true
			continue
		}
		taken[o.Slot] = true
		held = append(held, o.LogID)
	}
	for slot := 1; slot <= mif; slot++ {
		if !taken[slot] {
			f.slots = append(f.slots, slot)
		}
	}
	return f, held, nil
}

// redoHeld hands out up to b.Max of the user's open dispatches of b's templates again
// (redo), when it has no slot free or nothing new is due: the client lost them, or
// asks before it finished any. next is the reply's next_due_at.
func (s *Service) redoHeld(ctx context.Context, held []string, b Batch, now time.Time, next *time.Time) (FetchResult, error) {
	var res FetchResult
	only := taskd.Take{Templates: b.Templates}
	for _, logID := range held {
		if len(res.Tasks) == b.Max {
			break
		}
		d, err := s.store.GetDispatch(ctx, logID)
		if errors.Is(err, taskd.ErrNotFound) {
			continue
		}
		if err != nil {
			return s.partial(res, err)
		}
		if d.State != taskd.StateOpen || !only.Allows(d.TemplateID) {
			continue // completed meanwhile, or of another template
		}
		redone, err := s.store.Redo(ctx, d, now)
		if err != nil {
			return s.partial(res, err)
		}
		if redone {
			res.Tasks = append(res.Tasks, assignment(d, true))
		}
	}
	return s.finishBatch(res, next), nil
}

// partial is a batch's answer when an error stopped it: the tasks it already handed
// out (they are dispatched, and the client must know of them), or the error when there
// are none.
func (s *Service) partial(res FetchResult, err error) (FetchResult, error) {
	if len(res.Tasks) == 0 {
		return FetchResult{}, err
	}
	return s.finishBatch(res, nil), nil
}

// finishBatch sets a batch answer's first task and next due time.
func (s *Service) finishBatch(res FetchResult, next *time.Time) FetchResult {
	if len(res.Tasks) > 0 {
		res.Task = res.Tasks[0]
	}
	if res.Tasks == nil {
		res.Tasks = []*Assignment{}
	}
	res.NextDueAt = next
	return res
}

// taken is one claim or resume of a batch.
type taken struct {
	entry   schedule.Entry
	slot    int
	outcome taskd.ClaimOutcome
	d       *taskd.Dispatch
	redo    bool
	err     error
}

// takeBatch walks uid's due entries in heap order and takes them into the free slots:
// each round submits as many claims as there are free slots, together (the group
// commit decides them in one transaction), and a slot whose claim was refused goes to
// the next entry. Entries refused for good are popped; entries left for another fetch
// (a retry not yet due, another template, an occurrence the user holds in another
// slot) stay and are not tried again in this fetch. A popped rotation's next
// occurrence takes its place, as the heap's pop does: when it is due it joins the
// walk at once, without another peek. view is a peek of asked entries: when it had
// that many and all are tried with slots left, the heap may have more, and it peeks
// again.
func (s *Service) takeBatch(ctx context.Context, uid string, view schedule.View, asked int, slots []int, b Batch, now time.Time) (FetchResult, error) {
	var res FetchResult
	var popped []schedule.Entry
	slot1 := "" // the log id dispatched into slot 1, for the single fetch's hint
	tried := map[schedule.Entry]bool{}
	var after []time.Time // the next occurrences, not yet due, of the entries popped
	walk := slices.Clone(view.Due)
	pop := func(e schedule.Entry) {
		popped = append(popped, e)
		if n, ok := e.Next(); ok {
			if n.DueAt.After(now) {
				after = append(after, n.DueAt)
			} else {
				walk = append(walk, n)
			}
		}
	}
	known := map[taskd.TaskKey]int64{} // the templates of the tasks seen, with template_ids
	for round := 0; len(slots) > 0 && round < maxRounds; round++ {
		if err := s.leaveOut(ctx, walk, tried, known, b); err != nil {
			return s.partial(s.withHint(ctx, uid, res, slot1, popped), err)
		}
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
				return s.partial(s.withHint(ctx, uid, res, slot1, nil), err)
			}
			walk = slices.Clone(view.Due)
			continue
		}
		var wg sync.WaitGroup
		for i := range batch {
			wg.Go(func() {
				t := &batch[i]
				t.outcome, t.d, t.redo, t.err = s.take(ctx, uid, t.entry, now, taskd.Take{Slot: t.slot, Templates: b.Templates})
			})
		}
		wg.Wait()
		var again []int // slots whose claim was refused: free for the next entries
		var failed error
		for _, t := range batch {
			tried[t.entry] = true
			switch {
			case t.err != nil:
				failed = t.err
			case t.outcome == taskd.Claimed:
				if !t.redo {
					s.cfg.Metrics.Dispatched(t.d.Occurrence.Task.Kind.String())
				}
				if !staysOnOffer(t.entry, t.d) {
					pop(t.entry)
				} else if n, ok := t.entry.Next(); ok {
					after = append(after, n.DueAt)
				}
				if t.slot == 1 {
					slot1 = t.d.LogID
				}
				res.Tasks = append(res.Tasks, assignment(t.d, t.redo))
			case t.outcome == taskd.UserBusy:
				// Another request of this user took the slot: it is not free, and the
				// entry may still go into another.
				s.cfg.Metrics.ClaimRefused("user_busy")
				delete(tried, t.entry)
				walk = append(walk, t.entry)
			case t.outcome == taskd.NotDue, t.outcome == taskd.Holding, t.outcome == taskd.Filtered:
				again = append(again, t.slot) // the entry stays in the heap
			case t.outcome == taskd.RateBound:
				// The task's rate is used up this minute: the entry stays, and the
				// minute's end is when to look again.
				s.cfg.Metrics.ClaimRefused("rate_bound")
				again = append(again, t.slot)
				after = append(after, now.Truncate(time.Minute).Add(time.Minute))
			default:
				s.cfg.Metrics.ClaimRefused(refusal(t.outcome))
				pop(t.entry)
				s.notTargeted(ctx, uid, t.outcome)
				again = append(again, t.slot)
			}
		}
		if failed != nil {
			s.forgetOpen(ctx, uid)
			s.pop(ctx, uid, popped)
			return s.partial(s.finishBatch(res, nil), failed)
		}
		slots = append(again, slots[len(batch):]...)
		slices.Sort(slots)
	}
	res = s.withHint(ctx, uid, res, slot1, popped)
	var next *time.Time
	consider := func(t time.Time) {
		if next == nil || t.Before(*next) {
			next = &t
		}
	}
	for _, e := range walk {
		if !tried[e] {
			consider(e.DueAt)
		}
	}
	if view.Next != nil {
		consider(view.Next.DueAt)
	}
	for _, t := range after {
		consider(t)
	}
	return s.finishBatch(res, next), nil
}

// leaveOut marks tried, with b's template_ids, the entries of tasks of other templates,
// reading the templates it does not know yet (into known) in one query: a due task of
// another template costs no claim. (The claim checks again: an edit in between gives
// Filtered.) A waiting dispatch's entry names no task, and is left to its resume.
func (s *Service) leaveOut(ctx context.Context, walk []schedule.Entry, tried map[schedule.Entry]bool, known map[taskd.TaskKey]int64, b Batch) error {
	if len(b.Templates) == 0 {
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
	only := taskd.Take{Templates: b.Templates}
	for _, e := range walk {
		if id := known[e.Task]; e.LogID == "" && id != 0 && !only.Allows(id) {
			tried[e] = true
		}
	}
	return nil
}

// withHint writes a batch's outcome to the cache: the popped entries go, and a
// dispatch into slot 1 becomes the open-dispatch hint (a fetch without max uses slot 1
// only, and reads the hint).
func (s *Service) withHint(ctx context.Context, uid string, res FetchResult, slot1 string, popped []schedule.Entry) FetchResult {
	if slot1 != "" {
		s.setOpen(ctx, uid, slot1, popped)
	} else {
		s.pop(ctx, uid, popped)
	}
	return res
}
