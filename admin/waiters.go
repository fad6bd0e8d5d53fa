package admin

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskpull/taskd"
)

// Waking the requests that wait for a task's results (GET
// /v1/admin/tasks/{kind}/{id}/results with wait). A dispatch that finishes on this
// node wakes its task's waiters here at once: the dispatch service tells Finished
// after each complete, expiry and settled confirmation it commits, the admin service
// after each intervention and task deletion. One that finishes on another node is
// found by a look at the marks of the tasks waited on (taskd.ResultsMark: the last
// result number, a finished record waiting for its number, the task's status and
// version) every resultsRecheck, as a fetch's long poll looks at its heap each poll
// step: one read per node for every task waited on (in chunks), whatever the number of
// waiters, and none while nobody waits. A woken waiter reads the results again; a
// wake that brought nothing new (the mark moved because another waiter numbered what
// it found) costs it one read.

// resultsRecheck is how often a node looks at the marks of the tasks its requests wait
// on.
const resultsRecheck = time.Second

// marksFunc reads the results marks of tasks (internal/store's ResultsMarks).
type marksFunc func(ctx context.Context, tasks []taskd.TaskKey) (map[taskd.TaskKey]taskd.ResultsMark, error)

// waiters are this node's requests waiting for tasks' results, by task.
type waiters struct {
	marks marksFunc
	every time.Duration // how often the marks are looked at
	bound time.Duration // bounds one look
	log   *slog.Logger

	// waiting counts the waiters whose read found nothing new and who wait; watched
	// the tasks waited on (len(tasks)), read without the lock by Finished, which every
	// complete calls, so that a node nobody waits on takes no lock for it.
	waiting atomic.Int64
	watched atomic.Int64

	mu    sync.Mutex
	tasks map[taskd.TaskKey]*watched
	// looking says the look loop runs; it stops when no task is waited on.
	looking bool
}

// watched is one task's waiters (each woken through its channel, which holds one
// wake) and its mark as last looked at.
type watched struct {
	wake   map[chan struct{}]struct{}
	mark   taskd.ResultsMark
	looked bool
}

func newWaiters(marks marksFunc, every, bound time.Duration, log *slog.Logger) *waiters {
	return &waiters{marks: marks, every: every, bound: bound, log: log, tasks: map[taskd.TaskKey]*watched{}}
}

// add makes the caller a waiter for task's results until it calls leave: the channel
// receives when a dispatch of the task may have finished. The caller reads the
// results after add, so that a finish between its read and its wait wakes it. The
// first look at a task newly waited on wakes its waiters whatever the mark (there is
// no earlier mark to compare it with, and the finish may have come between their read
// and the look).
func (w *waiters) add(ctx context.Context, task taskd.TaskKey) (wake <-chan struct{}, leave func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tasks[task]
	if t == nil {
		t = &watched{wake: map[chan struct{}]struct{}{}}
		w.tasks[task] = t
		w.watched.Store(int64(len(w.tasks)))
	}
	t.wake[ch] = struct{}{}
	if !w.looking {
		w.looking = true
		// The loop outlives the request that started it (others may wait after it
		// has gone); it ends when nobody waits.
		go w.look(context.WithoutCancel(ctx))
	}
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(t.wake, ch)
		if len(t.wake) == 0 && w.tasks[task] == t {
			delete(w.tasks, task)
			w.watched.Store(int64(len(w.tasks)))
		}
	}
}

// Finished wakes this node's waiters for task's results.
func (w *waiters) Finished(task taskd.TaskKey) {
	if w.watched.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.tasks[task]; t != nil {
		t.signal()
	}
}

// signal wakes t's waiters (w.mu held).
func (t *watched) signal() {
	for ch := range t.wake {
		select {
		case ch <- struct{}{}:
		default: // woken already
		}
	}
}

// look reads the marks of the tasks waited on every w.every and wakes the waiters of
// each task whose mark changed, until no task is waited on.
func (w *waiters) look(ctx context.Context) {
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		<-tick.C
		w.mu.Lock()
		if len(w.tasks) == 0 {
			w.looking = false
			w.mu.Unlock()
			return
		}
		keys := make([]taskd.TaskKey, 0, len(w.tasks))
		for k := range w.tasks {
			keys = append(keys, k)
		}
		w.mu.Unlock()
		bounded, cancel := context.WithTimeout(ctx, w.bound)
		marks, err := w.marks(bounded, keys)
		cancel()
		if err != nil {
			// The waiters' own bound ends their waits; the next look may fare better.
			w.log.WarnContext(ctx, "looking for the results of waited tasks failed", "tasks", len(keys), "err", err)
			continue
		}
		w.mu.Lock()
		for _, k := range keys {
			t := w.tasks[k]
			if t == nil {
				continue // nobody waits any more
			}
			// A task that is gone has no mark: the zero mark wakes its waiters, who
			// find it gone.
			if m := marks[k]; !t.looked || m != t.mark {
				t.mark, t.looked = m, true
				t.signal()
			}
		}
		w.mu.Unlock()
	}
}
