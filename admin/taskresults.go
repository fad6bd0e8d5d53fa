package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/taskpull/taskd"
)

// A task's results, for admins and producers (GET /v1/admin/tasks/{kind}/{id}/results,
// issue 39): the task's dispatch records that finished, each attempt once, in the order
// they became visible, with a cursor that passed back gives only those that finished
// after, and whether more can come. With wait, a request that finds nothing new waits
// for a result (or for the end) up to the wait, woken as waiters.go tells.
//
// A result is a record that finished: completed (success or failure, a failure waiting
// for its retry among them), expired, dead or cancelled, or a stage completed; an
// unconfirmed success becomes one when its user confirms it or it lapses. The record is
// shown as it is when it is read (a failure answered while it waited for its retry and
// read again later shows failed). Results are numbered as they become visible
// (internal/store's NumberResults): the cursor is a number, so that a complete that
// commits after a later one (on another node, say) is not skipped.
//
// Done says no more results can come (taskd.Task.Over, the rule the task lists' outcome
// follows): every result of the task has been answered up to the cursor, nothing of it
// is unfinished (open, waiting for a retry or the next stage, unconfirmed), and the
// task is deleted or has an outcome: a once task whose quota is used up (done or
// dead), or a task none of whose occurrences is on anyone's offer any more (a once task
// due before the catch-up window, a rotating task whose end_time is; a rotating task
// without an end is never done until it is deleted). It holds as things stand: an
// admin's later change (a higher dispatch_times, a retry of a dead dispatch) may bring
// more.

// numberChunk is the most results one read numbers.
const numberChunk = 500

// TaskResults is a page of a task's results.
type TaskResults struct {
	Results []taskd.NumberedRecord
	// Next is where the next read starts: after the last result answered, or where the
	// read started when it answered none.
	Next taskd.ResultsCursor
	// Done says no more results can come (see above).
	Done bool
}

// Finished tells this node's waiters for task's results that a dispatch of it
// finished: they look at once (the dispatch service tells it after its commits).
func (s *Service) Finished(task taskd.TaskKey) { s.waiters.Finished(task) }

// TaskResults returns up to limit results of after's task after after (its zero Seq:
// from the first), and whether more can come. When there is nothing new and more can
// come, it waits up to wait (capped by the maximum wait) for a result to come or for
// the end, then answers what it has; it stops when ctx ends. Each read of MySQL is
// bounded by the round timeout, the wait is not. not_found for a task that never
// existed; a deleted one is answered, and is done once nothing of it is open.
func (s *Service) TaskResults(ctx context.Context, after taskd.ResultsCursor, limit int, wait time.Duration) (TaskResults, error) {
	wait = min(wait, s.maxWait)
	var wake <-chan struct{}
	if wait > 0 {
		var leave func()
		wake, leave = s.waiters.add(ctx, after.Task)
		defer leave()
	}
	// The wait is the client's, in real time (an injected clock does not stretch it).
	end := time.Now().Add(wait)
	for {
		round, cancel := context.WithTimeout(ctx, s.roundTimeout)
		res, err := s.taskResults(round, after, limit)
		cancel()
		if err != nil || len(res.Results) > 0 || res.Done || !time.Now().Before(end) {
			return res, err
		}
		if woken := s.await(ctx, wake, end); !woken {
			return res, nil
		}
	}
}

// await waits for wake until end or ctx's end, counted among the waiting, and says
// whether wake came.
func (s *Service) await(ctx context.Context, wake <-chan struct{}, end time.Time) bool {
	s.waiters.waiting.Add(1)
	defer s.waiters.waiting.Add(-1)
	t := time.NewTimer(time.Until(end))
	defer t.Stop()
	select {
	case <-wake:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// Waiting is how many requests of this node wait for a task's results (their read
// found nothing new).
func (s *Service) Waiting() int { return int(s.waiters.waiting.Load()) }

// taskResults reads the results after after once. Whether the task is over is read
// first: if nothing of it was unfinished then, every result it will have is committed,
// and the numbering and the read that follow see them all.
func (s *Service) taskResults(ctx context.Context, after taskd.ResultsCursor, limit int) (TaskResults, error) {
	t, err := s.store.LookupTask(ctx, after.Task)
	if err != nil {
		return TaskResults{}, err
	}
	figures, err := s.store.OutcomeFigures(ctx, []taskd.TaskKey{t.Key})
	if err != nil {
		return TaskResults{}, err
	}
	over := t.Over(figures[t.Key], s.offerFloor())
	numbered, err := s.store.NumberResults(ctx, t.Key, numberChunk)
	if err != nil {
		return TaskResults{}, err
	}
	recs, err := s.store.ResultsAfter(ctx, t.Key, after.Seq, limit+1)
	if err != nil {
		return TaskResults{}, err
	}
	more := numbered == numberChunk // more may wait for their numbers
	if len(recs) > limit {
		recs, more = recs[:limit], true
	}
	res := TaskResults{Results: recs, Next: after, Done: over && !more}
	if len(recs) > 0 {
		res.Next.Seq = recs[len(recs)-1].Seq
	}
	return res, nil
}

// taskResultsView is the reply of GET /v1/admin/tasks/{kind}/{id}/results.
type taskResultsView struct {
	TaskID     string                 `json:"task_id"`
	Results    []taskd.DispatchRecord `json:"results"`
	NextCursor string                 `json:"next_cursor"`
	Done       bool                   `json:"done"`
}

// TaskResults is GET /v1/admin/tasks/{kind}/{id}/results?wait=&cursor=&limit=: a
// page of the task's results (Service.TaskResults), as {"task_id", "results" (the
// records as GET /v1/admin/dispatches shows them), "next_cursor" (never empty: passed
// back, it gives only the results after these), "done"}. wait is a Go duration (30s,
// 500ms; absent or 0: answer at once), capped by DISPATCH_MAX_WAIT; a negative or
// unreadable one, a cursor this server did not give out for the task, or an unknown
// query parameter is a 400.
func (h *Handlers) TaskResults() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		key, err := pathTaskKey(r)
		if err != nil {
			return 0, nil, err
		}
		q := r.URL.Query()
		if err := known(q, "wait", "cursor", "limit"); err != nil {
			return 0, nil, err
		}
		wait, err := queryWait(q.Get("wait"))
		if err != nil {
			return 0, nil, err
		}
		limit, err := queryLimit(q)
		if err != nil {
			return 0, nil, err
		}
		after, err := taskd.ParseResultsCursor(q.Get("cursor"), key)
		if err != nil {
			return 0, nil, err
		}
		res, err := h.svc.TaskResults(r.Context(), after, limit, wait)
		if err != nil {
			return 0, nil, err
		}
		view := taskResultsView{TaskID: key.String(), Results: make([]taskd.DispatchRecord, len(res.Results)),
			NextCursor: res.Next.Encode(), Done: res.Done}
		for i, n := range res.Results {
			view.Results[i] = n.Record
		}
		return http.StatusOK, view, nil
	})
}

// queryWait parses a wait: a Go duration, at least 0; "" is 0.
func queryWait(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, taskd.Errorf(taskd.CodeInvalid, "wait: must be a duration of 0 or more, such as 30s or 500ms, got %q", v)
	}
	return d, nil
}
