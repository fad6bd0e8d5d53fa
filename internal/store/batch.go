package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Group commit. Concurrent claims (and, apart, concurrent completes) share one
// transaction and its commit: each of a few lanes takes the first waiting request and
// every other one waiting at that moment, up to a maximum, and runs them together with
// multi-row statements. No request waits for company (a lone request runs at once);
// under load the queue fills while the lanes commit, so batches grow with the load.
// Every request is answered only after the commit that holds its writes, with its own
// outcome, decided as if the batch's requests had run one after another.

// errClosed answers a request queued when the store closes.
var errClosed = errors.New("store closed")

// job is one request in a batch: its input, and its outcome once done is closed.
type job[In, Out any] struct {
	ctx  context.Context
	in   In
	out  Out
	err  error
	done chan struct{}
}

// finish answers the job.
func (j *job[In, Out]) finish(out Out, err error) {
	j.out, j.err = out, err
	close(j.done)
}

// batcher runs jobs in batches of up to max on lanes goroutines.
type batcher[In, Out any] struct {
	queue  chan *job[In, Out]
	max    int
	run    func([]*job[In, Out])
	stop   chan struct{} // closed by close: lanes finish their batch and exit
	closed chan struct{} // closed when no lane runs and the queue is answered
	lanes  sync.WaitGroup
	once   sync.Once
}

// startBatcher starts lanes goroutines running batches of up to max jobs with run,
// which must finish every job it is given.
func startBatcher[In, Out any](lanes, max int, run func([]*job[In, Out])) *batcher[In, Out] {
	b := &batcher[In, Out]{
		queue:  make(chan *job[In, Out], 4*max*lanes),
		max:    max,
		run:    run,
		stop:   make(chan struct{}),
		closed: make(chan struct{}),
	}
	b.lanes.Add(lanes)
	for range lanes {
		go b.lane()
	}
	return b
}

// queued is how many jobs wait for a lane.
func (b *batcher[In, Out]) queued() int { return len(b.queue) }

// do queues in and waits for its outcome. A caller whose ctx ends stops waiting; if its
// batch was already running, the batch still commits (as a request cut off after its
// commit would).
func (b *batcher[In, Out]) do(ctx context.Context, in In) (Out, error) {
	var zero Out
	j := &job[In, Out]{ctx: ctx, in: in, done: make(chan struct{})}
	select {
	case b.queue <- j:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-b.stop:
		return zero, errClosed
	}
	select {
	case <-j.done:
		return j.out, j.err
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-b.closed:
		// Answered by the last drain, or queued after it.
		select {
		case <-j.done:
			return j.out, j.err
		default:
			return zero, errClosed
		}
	}
}

func (b *batcher[In, Out]) lane() {
	defer b.lanes.Done()
	for {
		var first *job[In, Out]
		select {
		case first = <-b.queue:
		case <-b.stop:
			return
		}
		if jobs := b.collect(first); len(jobs) > 0 {
			b.run(jobs)
		}
	}
}

// collect makes a batch of first and the jobs waiting behind it, answering at once
// those whose caller has already gone.
func (b *batcher[In, Out]) collect(first *job[In, Out]) []*job[In, Out] {
	jobs := make([]*job[In, Out], 0, 8)
	add := func(j *job[In, Out]) {
		if err := j.ctx.Err(); err != nil {
			var zero Out
			j.finish(zero, err)
			return
		}
		jobs = append(jobs, j)
	}
	add(first)
	for len(jobs) < b.max {
		select {
		case j := <-b.queue:
			add(j)
		default:
			return jobs
		}
	}
	return jobs
}

// close lets running batches finish, answers queued jobs with errClosed and stops the
// lanes.
func (b *batcher[In, Out]) close() {
	b.once.Do(func() {
		close(b.stop)
		b.lanes.Wait()
		var zero Out
		for {
			select {
			case j := <-b.queue:
				j.finish(zero, errClosed)
			default:
				close(b.closed)
				return
			}
		}
	})
}

// runBatch runs jobs with batch, one transaction for all, and answers them after its
// commit; then, one by one with alone, the jobs it left without an outcome (decided
// says which have one), or all of them if the batch failed: one job's error is its
// own. observe learns of the batch before anyone is answered.
func runBatch[In, Out any](jobs []*job[In, Out], observe func(error),
	batch func(context.Context, []*job[In, Out]) ([]Out, error),
	alone func(*job[In, Out]) (Out, error), decided func(Out) bool) {
	ctx, cancel := batchContext(jobs)
	outs, err := batch(ctx, jobs)
	cancel()
	observe(err)
	var rest []*job[In, Out]
	for i, j := range jobs {
		if err != nil || !decided(outs[i]) {
			rest = append(rest, j)
			continue
		}
		j.finish(outs[i], nil)
	}
	for _, j := range rest {
		j.finish(alone(j))
	}
}

// batchContext bounds a batch's transaction: it is not cut short by one of its callers
// leaving (the others wait for its commit), but it ends when all have left, so that a
// stalled database holds a lane no longer than the callers' own bounds; and it ends
// after maxBatchTime whatever they say.
func batchContext[In, Out any](jobs []*job[In, Out]) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), maxBatchTime)
	var waiting atomic.Int64
	waiting.Store(int64(len(jobs)))
	stops := make([]func() bool, len(jobs))
	for i, j := range jobs {
		stops[i] = context.AfterFunc(j.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// maxBatchTime bounds a batch whose callers set no deadline.
const maxBatchTime = 30 * time.Second
