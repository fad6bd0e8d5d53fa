package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/taskpull/taskd/agent/internal/wire"
)

// run is one task running here: its handler's context, and the keeper that extends
// its lease and sends its checkpoints.
type run struct {
	s      *session
	task   *Task
	ctx    context.Context
	cancel context.CancelCauseFunc

	stopOnce sync.Once
	stop     chan struct{} // closed: the keeper stops
	stopped  chan struct{} // closed by the keeper when it has stopped
	poke     chan struct{} // a checkpoint is waiting

	// abandoned is guarded by the session's mutex: the shutdown gave the task back.
	abandoned bool

	mu sync.Mutex
	// leaseLen is the lease's length as the agent reckons it (0: no lease), deadline
	// when it lapses by the agent's clock, counted from when the request that set it
	// was sent, and nextExtend when to extend it.
	leaseLen   time.Duration
	deadline   time.Time
	nextExtend time.Time
	// latest is the checkpoint to send (pending), seq counts checkpoints taken, and
	// lastSent is when one was last sent.
	latest   json.RawMessage
	pending  bool
	seq      int
	lastSent time.Time
	// lost says the lease lapsed or the server took the task away (away: a 409);
	// counted says the loss is in the metrics; done that the handler returned.
	lost    bool
	away    bool
	counted bool
	done    bool
}

func newRun(s *session, t *Task, meta replyMeta) *run {
	r := &run{s: s, task: t, stop: make(chan struct{}), stopped: make(chan struct{}), poke: make(chan struct{}, 1)}
	t.run = r
	r.ctx, r.cancel = context.WithCancelCause(s.workCtx)
	if l := leaseLength(t.LeaseExpiresAt, meta); l > 0 {
		r.leaseLen = l
		r.deadline = meta.sent.Add(l)
		r.nextExtend = meta.sent.Add(l / 3)
	}
	return r
}

// leaseLength reckons a lease's length from its end (by the server's clock) and the
// reply that gave it: the end minus the reply's Date, in whole seconds (a lease is a
// whole number of seconds; Date is cut to the second, so this errs short by at most
// one), or, without a Date, the end minus when the request was sent (clocks in step).
// Zero: no lease.
func leaseLength(end *time.Time, meta replyMeta) time.Duration {
	if end == nil {
		return 0
	}
	if meta.date.IsZero() {
		return max(end.Sub(meta.sent), time.Millisecond)
	}
	raw := end.Sub(meta.date)
	if l := raw.Truncate(time.Second); l >= time.Second {
		return l
	}
	return max(raw, time.Millisecond)
}

// margin is how long before the lease lapses the handler's context is cancelled: a
// tenth of the lease, at most 2 s, so that the result of a handler that stops then
// still arrives in time.
func margin(lease time.Duration) time.Duration { return min(lease/10, 2*time.Second) }

// checkpoint takes b as the latest checkpoint.
func (r *run) checkpoint(b json.RawMessage) error {
	r.mu.Lock()
	switch {
	case r.lost:
		r.mu.Unlock()
		return ErrLeaseLost
	case r.done:
		r.mu.Unlock()
		return errors.New("agent: checkpoint of a finished task")
	}
	r.latest, r.pending = b, true
	r.seq++
	r.mu.Unlock()
	select {
	case r.poke <- struct{}{}:
	default:
	}
	return nil
}

// keep extends the lease every third of its length and sends checkpoints, until the
// handler returns, the lease is lost, or the agent's last flush ends.
func (r *run) keep() {
	defer close(r.stopped)
	s := r.s
	var bo backoff
	var retryAt time.Time
	for {
		r.mu.Lock()
		var due, cancelAt time.Time
		if r.leaseLen > 0 {
			due = r.nextExtend
			cancelAt = r.deadline.Add(-margin(r.leaseLen))
		}
		if r.pending {
			if cp := r.lastSent.Add(s.cfg.CheckpointInterval); due.IsZero() || cp.Before(due) {
				due = cp
			}
		}
		r.mu.Unlock()
		if !due.IsZero() {
			due = later(later(due, retryAt), s.gate())
		}
		now := time.Now()
		if !cancelAt.IsZero() && !now.Before(cancelAt) {
			r.lose(false, nil)
			return
		}
		var dueC, cancelC <-chan time.Time
		var timers []*time.Timer
		if !due.IsZero() {
			t := time.NewTimer(due.Sub(now))
			timers, dueC = append(timers, t), t.C
		}
		if !cancelAt.IsZero() {
			t := time.NewTimer(cancelAt.Sub(now))
			timers, cancelC = append(timers, t), t.C
		}
		sendNow := false
		select {
		case <-r.stop:
		case <-s.sendCtx.Done():
		case <-r.poke:
		case <-cancelC:
		case <-dueC:
			sendNow = true
		}
		for _, t := range timers {
			t.Stop()
		}
		select {
		case <-r.stop:
			return
		case <-s.sendCtx.Done():
			return
		default:
		}
		if sendNow && !r.report(&bo, &retryAt) {
			return
		}
	}
}

// report sends one progress report: the pending checkpoint, if any, and the lease
// extension, if the task has a lease. It returns false when the keeper should stop.
func (r *run) report(bo *backoff, retryAt *time.Time) bool {
	s := r.s
	r.mu.Lock()
	body := wire.ProgressRequest{LogID: r.task.LogID, ExtendLease: r.leaseLen > 0}
	seq := -1
	if r.pending {
		body.Checkpoint, seq = r.latest, r.seq
	}
	leased, deadline := r.leaseLen > 0, r.deadline
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.sendCtx, 30*time.Second)
	if leased {
		ctx, cancel = context.WithDeadline(s.sendCtx, deadline)
	}
	var out wire.ProgressReply
	meta, err := s.a.call(ctx, "/v1/progress", body, &out)
	cancel()
	if err == nil {
		bo.reset()
		*retryAt = time.Time{}
		r.mu.Lock()
		if seq >= 0 {
			r.lastSent = meta.sent
			if r.seq == seq {
				r.pending = false
			}
		}
		if leased && out.LeaseExpiresAt != nil {
			r.leaseLen = max(r.leaseLen, leaseLength(out.LeaseExpiresAt, meta))
			r.deadline = meta.sent.Add(r.leaseLen)
			r.nextExtend = meta.sent.Add(r.leaseLen / 3)
		}
		r.mu.Unlock()
		return true
	}
	var fe *fatalError
	st := statusOf(err)
	switch {
	case errors.As(err, &fe):
		s.fail(err)
		return false
	case s.sendCtx.Err() != nil:
		return false
	case st == http.StatusConflict:
		r.lose(true, err)
		return false
	case (st == http.StatusBadRequest || st == http.StatusRequestEntityTooLarge) && seq >= 0:
		s.log.Error("checkpoint refused; dropping it", "component", "agent", "log_id", r.task.LogID, "err", err)
		r.mu.Lock()
		r.lastSent = meta.sent
		if r.seq == seq {
			r.pending = false
		}
		r.mu.Unlock()
		return true
	}
	d, ok := s.a.retryDelay(err, bo, reqProgress)
	if !ok {
		s.log.Error("progress report refused", "component", "agent", "log_id", r.task.LogID, "err", err)
		d = bo.next()
	} else {
		s.log.Warn("progress report failed; trying again", "component", "agent", "log_id", r.task.LogID, "err", err, "wait", d)
	}
	if st == http.StatusTooManyRequests {
		s.setPollGate(time.Now().Add(d))
	}
	*retryAt = time.Now().Add(d)
	return true
}

// lose cancels the handler: the server took the task away (away, err the 409), or the
// lease is about to lapse with no extension in.
func (r *run) lose(away bool, err error) {
	r.mu.Lock()
	if r.lost || r.done {
		r.mu.Unlock()
		return
	}
	r.lost, r.away = true, away
	r.mu.Unlock()
	if away {
		r.s.log.Warn("the server took the task away; cancelling its handler", "component", "agent",
			"log_id", r.task.LogID, "task_id", r.task.TaskID, "err", err)
	} else {
		r.s.log.Warn("the lease is about to lapse unextended; cancelling the handler", "component", "agent",
			"log_id", r.task.LogID, "task_id", r.task.TaskID)
	}
	r.countLost()
	r.cancel(ErrLeaseLost)
}

// countLost counts the loss of r's lease once.
func (r *run) countLost() {
	r.mu.Lock()
	counted := r.counted
	r.counted = true
	r.mu.Unlock()
	if !counted {
		r.s.m.leaseLost.Inc()
	}
}

// takenAway reports whether the server said the task is no longer this agent's.
func (r *run) takenAway() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.away
}

func (r *run) stopKeeping() {
	r.stopOnce.Do(func() { close(r.stop) })
}

// finishing is called when the handler has returned: the keeper stops and, with
// flush, a checkpoint not yet sent is sent (a later dispatch of the occurrence
// brings it back).
func (r *run) finishing(flush bool) {
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
	r.stopKeeping()
	<-r.stopped
	defer r.cancel(context.Canceled)
	r.mu.Lock()
	send := flush && r.pending && !r.lost
	r.mu.Unlock()
	if !send {
		return
	}
	var bo backoff
	var retryAt time.Time
	for range 3 {
		if retryAt.After(time.Now()) && !sleep(r.s.sendCtx, time.Until(retryAt)) {
			return
		}
		if !r.report(&bo, &retryAt) {
			return
		}
		r.mu.Lock()
		pending := r.pending
		r.mu.Unlock()
		if !pending {
			return
		}
	}
}
