package dispatch

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/taskpull/taskd"
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
	cf := s.confirming()
	return s.counted(s.poll(ctx, wait, func(round context.Context) (FetchResult, error) {
		return s.batch(round, uid, keyHash, b, cf)
	}))
}

// batch is one round of a batch fetch; cf is the request's part in confirming its
// user's successes.
func (s *Service) batch(ctx context.Context, uid, keyHash string, b Batch, cf *confirming) (FetchResult, error) {
	now := s.now()
	asked := s.peekSize(b.Max, 0)
	view, err := s.cache.PeekN(ctx, uid, keyHash, now, asked)
	if err != nil {
		return FetchResult{}, err
	}
	if view, err = s.confirm(ctx, uid, view, cf, now, asked); err != nil {
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
		if view, err = s.confirm(ctx, uid, view, cf, now, asked); err != nil {
			return FetchResult{}, err
		}
	}
	slots := free.slots[:min(len(free.slots), b.Max)]
	res := FetchResult{NextDueAt: nextDue(nil, view.Due, view.Next)}
	if len(slots) > 0 {
		out, err := s.takeInto(ctx, uid, view, asked, slots, taskd.Take{Templates: b.Templates}, now)
		res = FetchResult{Tasks: out.tasks, NextDueAt: out.next}
		if err != nil {
			return s.partial(res, err)
		}
		res = s.finishBatch(res, out.next)
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
		if ddi, err := s.templateDDI(ctx, d.TemplateID); err != nil || ddi {
			if err != nil {
				return s.partial(res, err)
			}
			continue // a DDI controller's deployment
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
