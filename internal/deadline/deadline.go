// Package deadline bounds work by a deadline whose timer starts only when the work
// asks for it. context.WithTimeout starts a timer, and registers with its parent, for
// every bound made; a warm empty poll, which is bounded like any other request but only
// ever reads the deadline (its Redis round trip is bounded by the deadline it reads),
// would pay for a timer it never needs, about a microsecond and five allocations a
// poll. A Bound reports its deadline at once and becomes context.WithDeadline's own
// the first time something asks for its Done channel (MySQL and Redis clients do
// before they wait), or derives a context from it.
package deadline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// New is context.WithTimeout(parent, d), but for the timer, which starts when the
// Bound's Done is first called; its Deadline, Err and Value answer without one. As
// with context.WithTimeout, Cancel must be called when the work ends.
func New(parent context.Context, d time.Duration) *Bound {
	return &Bound{parent: parent, at: time.Now().Add(d)}
}

// Bound is a context that becomes context.WithDeadline(parent, at) when first waited
// on.
type Bound struct {
	parent context.Context
	at     time.Time

	started atomic.Pointer[context.Context] // the timed context, once started
	mu      sync.Mutex
	stop    context.CancelFunc // the timed context's cancel
	ended   bool               // cancel was called
}

// canceled is the context of work whose bound ended before it was ever waited on.
var canceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// timed returns the timed context, starting it if need be.
func (c *Bound) timed() context.Context {
	if t := c.started.Load(); t != nil {
		return *t
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.started.Load(); t != nil {
		return *t
	}
	var t context.Context
	if c.ended {
		t = canceled
	} else {
		t, c.stop = context.WithDeadline(c.parent, c.at)
	}
	c.started.Store(&t)
	return t
}

// Cancel ends the work: the context is canceled (its timer, if started, stopped).
func (c *Bound) Cancel() {
	c.mu.Lock()
	c.ended = true
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Deadline is the earlier of the bound and the parent's deadline.
func (c *Bound) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.at) {
		return d, true
	}
	return c.at, true
}

// Done starts the timer.
func (c *Bound) Done() <-chan struct{} { return c.timed().Done() }

// Err answers as the timed context would, without starting it.
func (c *Bound) Err() error {
	if t := c.started.Load(); t != nil {
		return (*t).Err()
	}
	c.mu.Lock()
	ended := c.ended
	c.mu.Unlock()
	switch {
	case ended:
		return context.Canceled
	case c.parent.Err() != nil:
		return c.parent.Err()
	case !time.Now().Before(c.at):
		return context.DeadlineExceeded
	}
	return nil
}

// Value is the timed context's value once started (so that a context derived from this
// one is canceled with it, by the context package's own bookkeeping), else the
// parent's.
func (c *Bound) Value(key any) any {
	if t := c.started.Load(); t != nil {
		return (*t).Value(key)
	}
	return c.parent.Value(key)
}

func (c *Bound) String() string { return "deadline.Bound" }
