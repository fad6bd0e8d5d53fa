package queue

import (
	"context"
	"errors"
	"slices"
	"strings"
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
	// send runs one round trip for calls, setting each one's commands and error.
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

// sendPeeks is the pipeline's round trip: every call's script and generation reads in
// one pipeline (on a cluster, one per node concerned, in parallel). The script goes as
// EVALSHA_RO; a Redis that does not know that command (before 7.0) makes this cache
// send the plain script from then on. A call whose script Redis does not know
// (NOSCRIPT: after a restart or a failover, or on a new node) is sent once more after
// the script is loaded on every node; only the calls concerned are sent again.
func (c *Cache) sendPeeks(calls []*peekCall) {
	ctx, cancel := tripContext(calls)
	defer cancel()
	pending := calls
	// At most: EVALSHA_RO unknown, EVALSHA NOSCRIPT, EVALSHA after the load.
	for attempt := 0; attempt < 3; attempt++ {
		plain := c.plainPeek.Load()
		cmds, failed := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, call := range pending {
				if plain {
					call.script = peekScript.EvalSha(ctx, p, call.keys, call.args...)
				} else {
					call.script = peekScriptRO.EvalShaRO(ctx, p, call.keys, call.args...)
				}
				call.genCmds = call.cmdsBuf[:0]
				for _, k := range call.gens {
					call.genCmds = append(call.genCmds, p.Get(ctx, k))
				}
			}
			return nil
		})
		// A round trip that failed as a whole (no connection) leaves its commands
		// without an error of their own.
		if failed != nil && !errors.Is(failed, redis.Nil) {
			for _, cmd := range cmds {
				if e := cmd.Err(); e != nil && !errors.Is(e, redis.Nil) {
					failed = nil
					break
				}
			}
		} else {
			failed = nil
		}
		var again []*peekCall
		load := false
		for _, call := range pending {
			call.err = call.firstErr(failed)
			switch {
			case call.err == nil:
			case redis.HasErrorPrefix(call.err, "NOSCRIPT"):
				again, load = append(again, call), true
			case !plain && unknownCommand(call.err):
				c.plainPeek.Store(true)
				again = append(again, call)
			}
		}
		if len(again) == 0 {
			return
		}
		if load {
			script := peekScriptRO
			if plain {
				script = peekScript
			}
			if err := script.Load(ctx, c.rdb).Err(); err != nil {
				for _, call := range again {
					call.err = err
				}
				return
			}
		}
		pending = again
	}
}

// unknownCommand reports whether err is Redis's answer to a command it does not know.
func unknownCommand(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(strings.ToLower(err.Error()), "unknown command")
}

// firstErr is the first error of the call's commands (a missing key is none), or
// failed, the round trip's own, when they have none.
func (call *peekCall) firstErr(failed error) error {
	if e := call.script.Err(); e != nil && !errors.Is(e, redis.Nil) {
		return e
	}
	for _, g := range call.genCmds {
		if e := g.Err(); e != nil && !errors.Is(e, redis.Nil) {
			return e
		}
	}
	return failed
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
