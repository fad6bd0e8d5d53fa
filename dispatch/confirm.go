package dispatch

import (
	"context"
	"slices"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// Confirmed success (taskd.Dispatch.ConfirmStep): a success of a task with
// confirm_seconds counts once its user fetches again within that many seconds. The
// complete leaves the record unconfirmed, waiting beside the user's slot, and makes
// the user's heap stale: the rebuild puts a confirm entry at its front. So a fetch
// knows from its peek alone, on any node, whether its user has a success to confirm,
// and a warm empty poll of a user without one reads nothing from MySQL, as before.
// Every kind of fetch (plain, carrying a complete, batch, each round of a long poll)
// settles its user's successes first, once per request; the sweep (SweepUnconfirmed)
// settles those whose user did not come back.

// confirming is one fetch request's part in confirming its user's successes: when the
// request began (a success completed since, by the complete the request carried or
// another request of the user, is not confirmed by it: the agent has not come back
// after it) and whether it asked MySQL already (once is enough: what it could confirm
// then is all it may confirm).
type confirming struct {
	began  time.Time
	looked bool
}

// confirming starts a fetch request's part in confirming its user's successes.
func (s *Service) confirming() *confirming { return &confirming{began: s.now()} }

// takeable are the entries of due that a fetch may take: all but confirm entries,
// which it settles instead (confirm).
func takeable(due []schedule.Entry) []schedule.Entry {
	out := make([]schedule.Entry, 0, len(due))
	for _, e := range due {
		if !e.Confirm {
			out = append(out, e)
		}
	}
	return out
}

// confirm settles uid's unconfirmed successes when view shows a confirm entry, once
// per request (cf), and returns view without its confirm entries (they are never
// taken, and never the next due time). The entries of records settled (or settled
// before by another node or the sweep) leave the heap; the heap is rebuilt when a
// settling put something on offer (a lapse's retry, or an until_exhausted occurrence
// the user may take again), and then peeked again, up to n due entries, so that this
// very fetch may take it.
func (s *Service) confirm(ctx context.Context, uid string, view schedule.View, cf *confirming, now time.Time, n int) (schedule.View, error) {
	var entries []schedule.Entry
	for _, e := range view.Due {
		if e.Confirm {
			entries = append(entries, e)
		}
	}
	if len(entries) == 0 {
		return view, nil
	}
	view.Due = takeable(view.Due)
	if cf == nil || cf.looked {
		return view, nil
	}
	cf.looked = true
	settled, waiting, err := s.store.ConfirmSuccesses(ctx, uid, cf.began, now)
	if err != nil {
		return view, err
	}
	var popped []schedule.Entry
	for _, e := range entries {
		if !slices.Contains(waiting, e.LogID) {
			popped = append(popped, e)
		}
	}
	rebuild := false
	for _, d := range settled {
		s.finished(d)
		if d.State == taskd.StateDone {
			s.log.DebugContext(ctx, "success confirmed", "uid", uid, "log_id", d.LogID)
			s.cfg.Metrics.Completed(d.Occurrence.Task.Kind.String(), "confirmed")
		} else {
			s.lapsed(ctx, d)
		}
		rebuild = rebuild || d.State == taskd.StateRetryWait || d.Mode == taskd.ModeUntilExhausted
	}
	if rebuild {
		// The settling is committed: a cache failure leaves the heap to its refresh
		// (or the heap-change feed), as after an expiry.
		if err := s.invalidateUser(ctx, uid); err != nil {
			s.log.WarnContext(ctx, "cache update after a confirmation failed", "uid", uid, "err", err)
			return view, nil
		}
		if s.cache.Away() {
			// The invalidation was noted for the feed; a second read of MySQL for
			// the offer would spend another token of the budget.
			return view, nil
		}
		again, err := s.cache.PeekN(ctx, uid, "", now, n)
		if err != nil {
			return view, err
		}
		again.Due = takeable(again.Due)
		return again, nil
	}
	s.pop(ctx, uid, popped)
	return view, nil
}

// lapsed logs and counts a success that became a failure for want of a fetch. The
// completions metric counts a success of a task with confirm_seconds as unconfirmed
// at its complete, then as confirmed or lapsed.
func (s *Service) lapsed(ctx context.Context, d *taskd.Dispatch) {
	s.log.InfoContext(ctx, "success unconfirmed", "uid", d.UID, "log_id", d.LogID,
		"task_id", d.Occurrence.Task.String(), "state", taskd.DispatchStateName(d.State))
	s.cfg.Metrics.Completed(d.Occurrence.Task.Kind.String(), "lapsed")
}

// SweepUnconfirmed makes every unconfirmed success of sh whose deadline passed a
// failure (reason unconfirmed: retried while attempts are left, dead otherwise), and
// reports how many. A user's own fetch settles its successes first; the sweep settles
// those of users that did not come back. Several nodes may sweep the same ones: each
// is settled in its own transaction, on the record locked.
func (s *Service) SweepUnconfirmed(ctx context.Context, sh Shards) (int, error) {
	total := 0
	for {
		now := s.now()
		ids, err := s.store.LapsedConfirms(ctx, now, 200, sh.Of, sh.Parts)
		if err != nil {
			return total, err
		}
		for _, id := range ids {
			d, err := s.store.Lapse(ctx, id, now)
			if err != nil {
				return total, err
			}
			if d == nil {
				continue // confirmed or settled meanwhile
			}
			total++
			s.finished(d)
			s.lapsed(ctx, d)
			// The user's heap drops the confirm entry and, for a retry, takes the
			// retry. The lapse is committed; a cache failure must not stop the sweep.
			if err := s.invalidateUser(ctx, d.UID); err != nil {
				s.log.WarnContext(ctx, "cache update after an unconfirmed success failed", "uid", d.UID, "log_id", d.LogID, "err", err)
			}
		}
		if len(ids) < 200 {
			return total, nil
		}
	}
}
