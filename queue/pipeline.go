package queue

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Shared round trips. Concurrent peeks (most of them empty polls) share Redis round
// trips, as concurrent claims share a MySQL commit (internal/store/batch.go): a peek
// that finds fewer than peekFlights round trips in flight sends its own at once, alone;
// one that finds them all in flight waits, and when a round trip lands, the peeks that
// waited meanwhile go out together in the next, one pipeline. No peek waits for company
// (there is no timer): batches form only while Redis is busy, and grow with the load.
// Each peek keeps its own script call (its own key check, its own reads) and gets its
// own reply; only the round trip is shared.
//
// A peek does not watch its caller's context, only its deadline: a round trip carries
// its calls under a context of its own that ends at the earliest of their deadlines,
// and a waiting peek is bounded by the round trips ahead of it, whose callers came
// earlier under the same request bound (DISPATCH_REQUEST_TIMEOUT) and so have earlier
// deadlines. A poll's bound then needs no timer of its own (see internal/deadline).

// peekFlights is how many peek round trips may be in flight at once: two, so that one
// batch's replies are decoded while Redis runs the next.
const peekFlights = 2

// maxPeekBatch bounds how many peeks share one round trip.
const maxPeekBatch = 256

// peekCall is one peek: what to send, and its commands once sent.
type peekCall struct {
	ctx  context.Context
	keys []string // peekScript's
	args []any
	gens []string // the generation keys read in the same round trip

	script  *redis.Cmd
	genCmds []*redis.StringCmd
	// dropLog: the round trip also runs dropCopyScript for that log id, before its
	// complete (PeekCompleting); dropCmd is its command, whose error is its own (the
	// peek's answer stands without it).
	dropLog string
	dropCmd *redis.Cmd
	err     error // of this call's commands, or of the round trip

	done chan struct{} // closed when answered, or handed lead
	lead []*peekCall   // the batch this call sends (lead[0] is itself)

	// Room for a typical call's slices, so that a peek allocates less.
	keysBuf [3]string
	argsBuf [6]any
	gensBuf [2]string
	cmdsBuf [2]*redis.StringCmd
	alone   [1]*peekCall
}

// peekCalls recycles peek calls: a call is most of what a poll allocates for its peek.
var peekCalls = sync.Pool{New: func() any { return new(peekCall) }}

// newPeekCall is an empty call for a peek under ctx, to be released once its reply is
// read.
func newPeekCall(ctx context.Context) *peekCall {
	c := peekCalls.Get().(*peekCall)
	c.ctx = ctx
	return c
}

// release empties c and recycles it. Nothing refers to a call once do has returned
// (a round trip's leader is done with the calls it answered before it answers them).
func (c *peekCall) release() {
	*c = peekCall{}
	peekCalls.Put(c)
}

// peekPipeline sends peeks in shared round trips.
type peekPipeline struct {
	mu      sync.Mutex
	flying  int // round trips in flight
	waiting []*peekCall
	flights int
	// send runs one round trip for calls, setting each one's commands and error
	// (Cache.sendPeeks, in peek.go beside the script it runs).
	send func(calls []*peekCall)
}

// do sends c, alone at once or in the next shared round trip, and returns once c has
// its reply (c.err nil) or its round trip failed. A caller whose context has ended is
// not sent.
func (p *peekPipeline) do(c *peekCall) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	if p.flying < p.flights {
		p.flying++
		p.mu.Unlock()
		c.alone[0] = c
		p.fly(c.alone[:])
		return c.err
	}
	c.done = make(chan struct{})
	p.waiting = append(p.waiting, c)
	p.mu.Unlock()
	<-c.done
	if c.lead != nil {
		p.fly(c.lead)
	}
	return c.err
}

// fly sends calls (calls[0] is the caller's own) in one round trip and answers the
// others; then it hands the peeks that waited meanwhile to the first of them, who sends
// them as the next round trip, or, when none waits, ends the flight.
func (p *peekPipeline) fly(calls []*peekCall) {
	p.send(calls)
	for _, c := range calls[1:] {
		close(c.done)
	}
	p.mu.Lock()
	next := p.take()
	if len(next) == 0 {
		p.flying--
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	next[0].lead = next
	close(next[0].done)
}

// take removes from the queue, and returns, up to maxPeekBatch peeks (p.mu held).
func (p *peekPipeline) take() []*peekCall {
	batch := slices.Clone(p.waiting[:min(len(p.waiting), maxPeekBatch)])
	n := copy(p.waiting, p.waiting[len(batch):])
	clear(p.waiting[n:])
	p.waiting = p.waiting[:n]
	return batch
}

// tripContext is the context of a round trip: none of its callers' (a caller's leaving
// does not cut short the others'), ending at the earliest of their deadlines (none if
// none has one).
func tripContext(calls []*peekCall) (context.Context, context.CancelFunc) {
	var earliest time.Time
	for _, call := range calls {
		if d, ok := call.ctx.Deadline(); ok && (earliest.IsZero() || d.Before(earliest)) {
			earliest = d
		}
	}
	base := context.WithoutCancel(calls[0].ctx)
	if earliest.IsZero() {
		return base, func() {}
	}
	return context.WithDeadline(base, earliest)
}
