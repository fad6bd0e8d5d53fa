package admin

import (
	"context"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// Dispatches, for admins: the list of dispatch records (GET /v1/admin/dispatches) and
// the interventions on one (POST /v1/admin/dispatches/{log_id}/expire|retry|cancel),
// each audited, each answered with the record as the list shows it.

// ListDispatches returns up to limit records matching f, newest first, after the
// cursor after (nil: from the newest).
func (s *Service) ListDispatches(ctx context.Context, f taskd.DispatchFilter, after *taskd.DispatchCursor, limit int) ([]taskd.DispatchRecord, error) {
	return s.store.ListDispatches(ctx, f, after, limit)
}

// ExpireDispatch ends open dispatch logID now, as if its lease ran out now: the slot
// goes back to the pool while the user has attempts left (the user takes the
// occurrence again later), the occurrence is dead for the user on its last attempt.
func (s *Service) ExpireDispatch(ctx context.Context, logID string) (taskd.DispatchRecord, error) {
	c, err := s.store.ExpireDispatch(ctx, ActorFrom(ctx), logID, s.now())
	if err != nil {
		return taskd.DispatchRecord{}, err
	}
	s.afterChange(ctx, c)
	return c.Record, nil
}

// RetryDispatch sends dead dispatch logID's occurrence back to its user, attempts
// counted afresh: the user's next fetch gets it as attempt 1, on the slot the dead
// dispatch kept.
func (s *Service) RetryDispatch(ctx context.Context, logID string) (taskd.DispatchRecord, error) {
	c, err := s.store.RetryDispatch(ctx, ActorFrom(ctx), logID, s.now())
	if err != nil {
		return taskd.DispatchRecord{}, err
	}
	s.afterChange(ctx, c)
	return c.Record, nil
}

// CancelDispatch ends dispatch logID (open, or waiting for its retry, next stage or
// re-take) for good: the user is not offered its occurrence again.
func (s *Service) CancelDispatch(ctx context.Context, logID string) (taskd.DispatchRecord, error) {
	c, err := s.store.CancelDispatch(ctx, ActorFrom(ctx), logID, s.now())
	if err != nil {
		return taskd.DispatchRecord{}, err
	}
	if c.WasOpen {
		// A DDI controller's poll asks MySQL only while the hint says a dispatch may be
		// open: unknown (not none), it finds the cancel to show (a fetch finds nothing
		// open, and says none).
		c.WasOpen = false
		if err := s.cache.ForgetOpen(ctx, c.Record.UID); err != nil {
			s.log.WarnContext(ctx, "cache update after a cancel failed", "log_id", c.Record.LogID, "err", err)
		}
	}
	s.afterChange(ctx, c)
	return c.Record, nil
}

// afterChange brings the cache up to date with a committed change of one record, as
// the dispatch service does after an expiry, best effort (the change is committed and
// audited, and MySQL refuses whatever a stale cache still offers; a failure is
// logged): the user's open-dispatch hint stops naming
// a record that is no longer open (so that the next fetch does not ask MySQL for it),
// the user's heap is rebuilt (it offers the waiting record, or no longer offers the
// occurrence), and when the change gave a slot back to an occurrence whose quota was
// used up, the heaps of everyone its group task targets (they dropped it as
// exhausted). The waiters for the task's results on this node look again.
func (s *Service) afterChange(ctx context.Context, c taskd.DispatchChange) {
	uid := c.Record.UID
	if key, err := taskd.ParseTaskKey(c.Record.TaskID); err == nil {
		s.Finished(key) // an expiry or a cancel finished the record
	}
	var errs []error
	if c.WasOpen {
		errs = append(errs, s.cache.ClearOpen(ctx, uid, schedule.OpenIs(c.Record.LogID)))
	}
	errs = append(errs, s.cache.InvalidateUser(ctx, uid))
	if e, err := taskd.ParseExecutor(c.Executor); err == nil && e.Group && c.Reopened {
		errs = append(errs, s.cache.InvalidateGroup(ctx, e.ID))
	}
	if err := errors.Join(errs...); err != nil {
		s.log.WarnContext(ctx, "cache update after a dispatch change failed", "log_id", c.Record.LogID, "uid", uid, "err", err)
	}
}

// ListDispatches is GET /v1/admin/dispatches.
func (h *Handlers) ListDispatches() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		q := r.URL.Query()
		f := taskd.DispatchFilter{UID: q.Get("uid")}
		err := known(q, "uid", "task_id", "state", "from", "to", "limit", "cursor")
		if err == nil && f.UID != "" {
			err = bareID("uid", f.UID)
		}
		if err == nil && q.Get("task_id") != "" {
			f.Task, err = taskd.ParseTaskKey(q.Get("task_id"))
		}
		if err == nil && q.Get("state") != "" {
			f.State, err = taskd.ParseDispatchState(q.Get("state"))
		}
		if err == nil {
			f.From, f.To, err = queryRange(q, farPast, farFuture)
		}
		limit, lerr := queryLimit(q)
		after, cerr := taskd.ParseDispatchCursor(q.Get("cursor"))
		for _, e := range []error{err, lerr, cerr} {
			if e != nil {
				return 0, nil, e
			}
		}
		records, err := h.svc.ListDispatches(r.Context(), f, after, limit+1)
		if err != nil {
			return 0, nil, err
		}
		next := ""
		if len(records) > limit {
			records = records[:limit]
			last := records[limit-1]
			next = taskd.DispatchCursor{DispatchedAt: last.DispatchedAt, LogID: last.LogID}.Encode()
		}
		return http.StatusOK, map[string]any{"dispatches": records, "next_cursor": next}, nil
	})
}

// ExpireDispatch is POST /v1/admin/dispatches/{log_id}/expire.
func (h *Handlers) ExpireDispatch() http.Handler { return h.intervention((*Service).ExpireDispatch) }

// RetryDispatch is POST /v1/admin/dispatches/{log_id}/retry.
func (h *Handlers) RetryDispatch() http.Handler { return h.intervention((*Service).RetryDispatch) }

// CancelDispatch is POST /v1/admin/dispatches/{log_id}/cancel.
func (h *Handlers) CancelDispatch() http.Handler { return h.intervention((*Service).CancelDispatch) }

// intervention serves an intervention on the record the path names; it takes no body
// and answers the record as the list shows it after the change.
func (h *Handlers) intervention(change func(*Service, context.Context, string) (taskd.DispatchRecord, error)) http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		if err := known(r.URL.Query()); err != nil {
			return 0, nil, err
		}
		logID := chi.URLParam(r, "log_id")
		if len(logID) > 64 {
			// Not echoed: no record has an id that long (log ids are UUIDs).
			return 0, nil, taskd.Errorf(taskd.CodeNotFound, "log_id: no dispatch has an id of %d characters", len(logID))
		}
		rec, err := change(h.svc, r.Context(), logID)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, rec, nil
	})
}
