package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/taskpull/taskd/agent/internal/wire"
)

// session is one Run: the fetch loop, the tasks running, the results to send.
type session struct {
	a         *Agent
	h         Handler
	cfg       Config
	log       *slog.Logger
	m         *Metrics
	templates []int64
	batch     bool // fetch with max (and template_ids), not the single form

	// loopCtx ends the fetch loop: Run's context, or a fatal error. workCtx is the
	// parent of the handlers' contexts, cancelled at the end of the shutdown grace;
	// sendCtx carries results and progress reports, cancelled when the last flush
	// gives up.
	loopCtx  context.Context
	stopLoop context.CancelFunc
	workCtx  context.Context
	stopWork context.CancelCauseFunc
	sendCtx  context.Context
	stopSend context.CancelFunc

	mu      sync.Mutex
	running map[string]*run // by log id
	queue   []*completion   // results waiting for a fetch to carry them
	// finished holds the results of tasks this session finished, by log id: a redo of
	// one of them sends its result again instead of running it.
	finished *recent[*completion]
	// permanent holds the results of tasks failed for good, by occurrence and stage: a
	// server older than "retry" hands them out again, and they are failed at once.
	permanent *recent[*completion]
	// away says the fetch loop waits out an error or a rate limit: results go on their
	// own. full says the last fetch found nothing new while tasks run or results are
	// unacknowledged: the loop waits for one of those to change.
	away     bool
	full     bool
	pollGate time.Time // after a 429: no fetch or progress report before
	// told is what the server was last told of the agent: the generation of its
	// description and of the key a fetch carrying it was answered with (-1: nothing
	// told yet). Only the fetch loop uses it.
	told  struct{ desc, key int }
	fatal error
	wake  chan struct{}

	handlers sync.WaitGroup
	senders  sync.WaitGroup
	keepers  sync.WaitGroup
}

// recentSize bounds the results kept for redos and the occurrences failed for good.
const recentSize = 4096

func newSession(a *Agent, h Handler) *session {
	s := &session{a: a, h: h, cfg: a.cfg, log: a.log, m: a.metrics, templates: a.cfg.Templates,
		running: map[string]*run{}, finished: newRecent[*completion](recentSize),
		permanent: newRecent[*completion](recentSize), wake: make(chan struct{}, 1)}
	s.told.desc, s.told.key = -1, -1
	if len(s.templates) == 0 {
		if m, ok := h.(interface{ templates() []int64 }); ok {
			s.templates = m.templates()
		}
	}
	s.batch = s.cfg.Concurrency > 1 || len(s.templates) > 0
	return s
}

func (s *session) run(ctx context.Context) error {
	s.loopCtx, s.stopLoop = context.WithCancel(ctx)
	defer s.stopLoop()
	s.workCtx, s.stopWork = context.WithCancelCause(context.WithoutCancel(ctx))
	s.sendCtx, s.stopSend = context.WithCancel(context.WithoutCancel(ctx))
	defer s.stopSend()
	s.log.Info("agent started", "component", "agent", "concurrency", s.cfg.Concurrency, "templates", s.templates)
	s.fetchLoop()
	s.shutdown()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatal != nil {
		return fmt.Errorf("agent: %w", s.fatal)
	}
	return nil
}

// signal wakes the fetch loop if it waits.
func (s *session) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// fail stops the agent for err, which no retry mends.
func (s *session) fail(err error) {
	s.mu.Lock()
	if s.fatal == nil {
		s.fatal = err
		s.log.Error("agent stopping", "component", "agent", "err", err)
	}
	s.mu.Unlock()
	s.stopLoop()
}

// setPollGate holds fetches and progress reports back until t (a 429's Retry-After:
// the server counts both against one limit).
func (s *session) setPollGate(t time.Time) {
	s.mu.Lock()
	if t.After(s.pollGate) {
		s.pollGate = t
	}
	s.mu.Unlock()
}

func (s *session) gate() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pollGate
}

// taskOf is the Task a fetch's reply handed out as w.
func taskOf(w *wire.Task) *Task {
	t := &Task{LogID: w.LogID, TaskID: w.TaskID, Kind: w.Kind, TemplateID: w.TemplateID, DueAt: w.DueAt,
		Attempt: w.Attempt, Redo: w.Redo, LeaseExpiresAt: w.LeaseExpiresAt, Stage: w.Stage,
		StageContext: wire.OrNil(w.Context), LastCheckpoint: wire.OrNil(w.Checkpoint), Params: wire.OrNil(w.Params),
		Item: wire.OrNil(w.Item)}
	if w.CampaignID != nil {
		t.CampaignID = *w.CampaignID
	}
	return t
}

// occurrenceKey names the occurrence and stage a task works, for FailPermanent.
func occurrenceKey(t *Task) string {
	return t.TaskID + "@" + t.DueAt.UTC().Format(time.RFC3339Nano) + "#" + t.Stage
}

// emptyGap is the least time between two fetches that found nothing while nothing
// ran: the long poll does the waiting, this keeps a server that answers at once from
// being asked in a loop.
const emptyGap = time.Second

// fetchLoop is the agent's one fetch loop. Each turn it waits until it may fetch
// (a slot free, no error or rate limit to wait out, something worth asking for),
// then fetches as many tasks as it has free slots, carrying one finished task's
// result; the other results go on their own.
func (s *session) fetchLoop() {
	ctx := s.loopCtx
	var bo backoff
	var errUntil, idleUntil time.Time
	idleFull := false // the idle wait also ends when s.full is cleared
	for ctx.Err() == nil {
		now := time.Now()
		s.mu.Lock()
		if gate := later(errUntil, s.pollGate); now.Before(gate) {
			s.away = true
			s.sendQueuedAloneLocked()
			s.mu.Unlock()
			sleep(ctx, gate.Sub(now))
			continue
		}
		s.away = false
		free := s.cfg.Concurrency - len(s.running)
		idle := len(s.queue) == 0 && now.Before(idleUntil) && (!idleFull || s.full)
		if free <= 0 || idle {
			if free <= 0 {
				s.sendQueuedAloneLocked()
			}
			var timer *time.Timer
			var fired <-chan time.Time
			if free > 0 && now.Before(idleUntil) {
				timer = time.NewTimer(idleUntil.Sub(now))
				fired = timer.C
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-s.wake:
			case <-fired:
				idleUntil = time.Time{}
			}
			if timer != nil {
				timer.Stop()
			}
			continue
		}
		var carried *completion
		if len(s.queue) > 0 {
			carried, s.queue = s.queue[0], s.queue[1:]
			carried.state = stateCarried
			s.sendQueuedAloneLocked()
		}
		running := len(s.running)
		s.full = false
		s.mu.Unlock()

		req := wire.FetchRequest{}
		if carried != nil {
			req.Complete = &carried.body
		}
		if s.batch {
			req.Max, req.TemplateIDs = &free, s.templates
		}
		desc, descGen := s.a.description()
		if _, keyGen := s.a.currentKey(); descGen != s.told.desc || keyGen != s.told.key {
			// Not told yet, changed since, or told under a key since replaced: after
			// an enrollment the server is told again.
			req.Agent = &desc
		}
		// A long poll only while nothing runs: a task finishing meanwhile would wait
		// for it to end before its result went out. Only a long poll is cut short by
		// a stop; a short fetch is let finish, so that no task it hands out is lost.
		parent, bound := context.WithoutCancel(ctx), time.Minute
		if running == 0 && !s.cfg.Once {
			if ms := s.cfg.PollWait.Milliseconds(); ms > 0 {
				req.WaitMS = &ms
			}
			parent, bound = ctx, s.cfg.PollWait+time.Minute
		}
		fctx, cancel := context.WithTimeout(parent, bound)
		var reply wire.FetchReply
		meta, err := s.a.call(fctx, "/v1/fetch", req, &reply)
		cancel()
		took := time.Since(meta.sent)
		if err != nil {
			s.m.fetched("error", took)
			var fe *fatalError
			st := statusOf(err)
			switch {
			case errors.As(err, &fe):
				s.requeue(carried)
				s.fail(err)
				return
			case ctx.Err() != nil:
				s.requeue(carried)
				return
			case st == http.StatusConflict && carried != nil:
				// The carried result's task was taken away; nothing was fetched.
				s.stale(carried, err)
				continue
			case (st == http.StatusBadRequest || st == http.StatusRequestEntityTooLarge) && carried != nil:
				// The refusal may be the result's: sent on its own, its refusal names
				// what to mend.
				s.mu.Lock()
				s.sendAloneLocked(carried)
				s.mu.Unlock()
				continue
			}
			s.requeue(carried)
			d, ok := s.a.retryDelay(err, &bo, reqFetch)
			if !ok {
				// A refusal no retry mends (a bug, or a setting the server does not
				// take): logged, and asked again after a growing pause.
				s.log.Error("fetch refused", "component", "agent", "err", err)
				d = bo.next()
			} else {
				s.log.Warn("fetch failed; trying again", "component", "agent", "err", err, "wait", d)
			}
			if st == http.StatusTooManyRequests {
				s.setPollGate(time.Now().Add(d))
			} else {
				errUntil = time.Now().Add(d)
			}
			continue
		}
		bo.reset()
		if req.Agent != nil {
			s.told.desc, s.told.key = descGen, meta.keyGen
		}
		if carried != nil {
			s.acked(carried)
		}
		idleUntil, idleFull = s.take(reply, meta, free, running, took)
		if s.cfg.Once && reply.Task == nil && len(reply.Tasks) == 0 {
			s.mu.Lock()
			done := len(s.running) == 0
			s.mu.Unlock()
			if done {
				return // nothing is due and nothing runs: the shutdown sends what is left
			}
		}
	}
}

// take starts the tasks of a fetch's reply and says until when the loop need not
// fetch again.
func (s *session) take(reply wire.FetchReply, meta replyMeta, asked, running int, took time.Duration) (idleUntil time.Time, full bool) {
	tasks := reply.Tasks
	if len(tasks) == 0 && reply.Task != nil {
		tasks = []*wire.Task{reply.Task}
	}
	stopping := s.loopCtx.Err() != nil
	started, held, surplus := 0, 0, 0
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		if surplus > 0 {
			s.log.Warn("the server handed out more tasks than asked for; those past it are not run (the server hands them out again)",
				"component", "agent", "asked", asked, "handed_out", len(tasks), "not_run", surplus)
		}
	}()
	for _, w := range tasks {
		if _, ok := s.running[w.LogID]; ok {
			held++ // a redo of a task running here
			continue
		}
		if c, ok := s.finished.get(w.LogID); ok {
			// Finished here, its result not yet in: the server hands it out again.
			// It is not run again; its result is sent again if none is on its way.
			held++
			if c.state == stateAcked || c.state == stateDropped {
				c.state = stateQueued
				s.queue = append(s.queue, c)
			}
			s.log.Info("a task finished here was handed out again; sending its result again", "component", "agent",
				"log_id", w.LogID, "task_id", w.TaskID)
			continue
		}
		if started >= asked {
			// More than asked for: not run, and not completed (a failure would use
			// an attempt). The dispatch stays open; the server hands it out again
			// (redo) on a later fetch, or its lease lapses.
			surplus++
			continue
		}
		t := taskOf(w)
		started++
		if stopping {
			c := s.completionLocked(t, nil, GiveBack("agent stopping: the task came in after the agent stopped fetching"))
			s.enqueueLocked(c)
			continue
		}
		if p, ok := s.permanent.get(occurrenceKey(t)); ok && t.Attempt > 1 && !t.Redo {
			// Failed for good here before, and retried by a server that did not take
			// the final failure: failed again at once, with the same detail.
			c := &completion{logID: t.LogID, taskID: t.TaskID, template: t.TemplateID, body: p.body}
			c.body.LogID = t.LogID
			s.log.Info("a task failed for good here came back; failing it at once", "component", "agent",
				"log_id", t.LogID, "task_id", t.TaskID, "attempt", t.Attempt)
			s.m.ran(t.TemplateID, kindPermanent.label(), 0)
			s.finished.put(t.LogID, c)
			s.enqueueLocked(c)
			continue
		}
		s.startLocked(t, meta)
	}
	switch {
	case started > 0:
		s.m.fetched("task", took)
	default:
		s.m.fetched("empty", took)
	}
	now := time.Now()
	switch {
	case started >= asked:
		return time.Time{}, false
	case started == 0 && held == 0 && running == 0:
		// An empty long poll: it waited already.
		return meta.sent.Add(emptyGap), false
	}
	// Fewer than asked: nothing more is due, or the server has no slot free for the
	// uid. Ask again when something changes (a task finishes, a result is
	// acknowledged), when the next task is due, or after BusyPoll.
	full = held > 0 || reply.NextDueAt != nil && !reply.NextDueAt.After(now)
	s.full = full
	until := now.Add(s.cfg.BusyPoll)
	if n := reply.NextDueAt; n != nil && n.After(now) && n.Before(until) {
		until = *n
	}
	return until, full
}

// startLocked starts a handler on t, handed out by a fetch with meta.
func (s *session) startLocked(t *Task, meta replyMeta) {
	r := newRun(s, t, meta)
	s.running[t.LogID] = r
	s.m.inFlight.Inc()
	s.keepers.Add(1)
	go func() {
		defer s.keepers.Done()
		r.keep()
	}()
	s.handlers.Add(1)
	go func() {
		defer s.handlers.Done()
		started := time.Now()
		out := s.call(r)
		took := time.Since(started)
		r.finishing(out.kind != kindDone)
		s.m.ran(t.TemplateID, out.kind.label(), took)
		s.finish(r, out)
	}()
}

// stackLimit bounds the stack a panic's detail carries.
const stackLimit = 8 << 10

// call runs the handler on r's task; a panic is a failure with the stack.
func (s *session) call(r *run) (out Outcome) {
	defer func() {
		if p := recover(); p != nil {
			stack := debug.Stack()
			if len(stack) > stackLimit {
				stack = stack[:stackLimit]
			}
			s.log.Error("handler panicked", "component", "agent", "log_id", r.task.LogID, "task_id", r.task.TaskID,
				"panic", fmt.Sprint(p))
			out = Outcome{kind: kindPanic, err: fmt.Errorf("panic: %v", p), stack: string(stack)}
		}
	}()
	return s.h.Work(r.ctx, r.task)
}

// finish takes r's outcome: its result is queued, unless the server already took the
// task away (a result would be refused) or the shutdown gave it back.
func (s *session) finish(r *run, out Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.abandoned {
		return
	}
	delete(s.running, r.task.LogID)
	s.m.inFlight.Dec()
	if r.takenAway() {
		s.signal() // a slot is free
		return
	}
	c := s.completionLocked(r.task, r, out)
	if out.kind == kindPermanent {
		s.permanent.put(occurrenceKey(r.task), c)
	}
	s.enqueueLocked(c)
}

// requeue puts a carried result back first in line, after its fetch failed.
func (s *session) requeue(c *completion) {
	if c == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c.state = stateQueued
	s.queue = append([]*completion{c}, s.queue...)
}

// shutdown is Run's end: see Run.
func (s *session) shutdown() {
	s.mu.Lock()
	s.away = true
	s.sendQueuedAloneLocked()
	n := len(s.running)
	s.mu.Unlock()
	grace := s.cfg.ShutdownGrace
	if n > 0 {
		s.log.Info("stopping: waiting for running tasks", "component", "agent", "running", n, "grace", grace)
	}
	if !waitFor(&s.handlers, grace) {
		s.stopWork(ErrStopping)
		if !waitFor(&s.handlers, grace) {
			s.giveBackRunning()
		}
	}
	if !waitFor(&s.senders, grace) {
		s.stopSend()
		s.senders.Wait()
	}
	s.stopSend()
	s.keepers.Wait()
	s.log.Info("agent stopped", "component", "agent")
}

// giveBackRunning gives back the tasks whose handlers did not return in the grace.
func (s *session) giveBackRunning() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, r := range s.running {
		r.abandoned = true
		r.stopKeeping()
		delete(s.running, id)
		s.m.inFlight.Dec()
		s.log.Warn("handler did not return after its context was cancelled; giving its task back", "component", "agent",
			"log_id", id, "task_id", r.task.TaskID)
		s.enqueueLocked(s.completionLocked(r.task, r, GiveBack("agent stopped: the handler did not return within the shutdown grace")))
	}
}

// waitFor waits for wg up to d; false when d ran out first.
func waitFor(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// recent is a map of at most size entries that forgets the oldest first.
type recent[V any] struct {
	m     map[string]V
	order []string
	next  int
}

func newRecent[V any](size int) *recent[V] {
	return &recent[V]{m: map[string]V{}, order: make([]string, size)}
}

func (r *recent[V]) get(k string) (V, bool) {
	v, ok := r.m[k]
	return v, ok
}

func (r *recent[V]) put(k string, v V) {
	if _, ok := r.m[k]; !ok {
		if old := r.order[r.next]; old != "" {
			delete(r.m, old)
		}
		r.order[r.next] = k
		r.next = (r.next + 1) % len(r.order)
	}
	r.m[k] = v
}
