package app

import (
	"context"
	"github.com/taskpull/taskd/admin"
	"time"

	"github.com/taskpull/taskd/internal/store"
)

// The retention janitor: finished dispatch records older than DISPATCH_RETAIN_DISPATCHES,
// outbox rows older than DISPATCH_RETAIN_OUTBOX, the client_agent rows of uids that
// have not polled for DISPATCH_RETAIN_AGENTS and heap changes older than
// heapChangeRetention are deleted every
// DISPATCH_RETENTION_INTERVAL, in batches of pruneBatch rows, each its own short
// statement with a pause between (no long locks, no long transactions), by one node at
// a time (the janitor lease, a MySQL advisory lock).

// pruneBatch is how many rows of each kind one statement deletes at most.
const pruneBatch = 500

// heapChangeRetention is how long a heap change is kept: the feed reads the last 30 s
// (queue.HeapChangeWindow); what is kept beyond that lets a node whose reads failed
// for a while (MySQL or Redis away) tell the cache of the changes made meanwhile, for up
// to a quarter of an hour.
const heapChangeRetention = 15 * time.Minute

// runJanitor prunes every interval until ctx is done.
func (a *App) runJanitor(ctx context.Context) {
	if a.cfg.RetentionInterval <= 0 { // heap changes are always pruned
		return
	}
	t := time.NewTicker(a.cfg.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := a.Prune(ctx); err != nil && ctx.Err() == nil {
				a.deps.Log.WarnContext(ctx, "retention: prune failed", "err", err)
			}
		}
	}
}

// Pruned is what one Prune deleted; Skipped says another node holds the janitor lease.
type Pruned struct {
	Dispatches, Outbox, Agents, HeapChanges, IdempotencyKeys int64
	Skipped                                                  bool
}

// Prune deletes what is past its retention now, if this node gets the janitor lease.
func (a *App) Prune(ctx context.Context) (Pruned, error) {
	var p Pruned
	lease, err := a.deps.Store.TryLease(ctx, "janitor")
	if err != nil || lease == nil {
		p.Skipped = lease == nil
		return p, err
	}
	defer lease.Release()
	now := a.deps.Clock.Now().UTC()
	var c struct{ d, o time.Time }
	if a.cfg.RetainDispatches > 0 {
		c.d = now.Add(-a.cfg.RetainDispatches)
	}
	if a.cfg.RetainOutbox > 0 {
		c.o = now.Add(-a.cfg.RetainOutbox)
	}
	for {
		d, o, err := a.deps.Store.PruneBatch(ctx, store.Cutoffs{Dispatches: c.d, Offered: now.Add(-a.cfg.CatchUp), Outbox: c.o}, pruneBatch)
		p.Dispatches, p.Outbox = p.Dispatches+d, p.Outbox+o
		a.metrics.Pruned("dispatch", d)
		a.metrics.Pruned("event_outbox", o)
		if err != nil {
			return p, err
		}
		if d < pruneBatch && o < pruneBatch {
			break
		}
		t := time.NewTimer(10 * time.Millisecond) // let other work at the rows in between
		select {
		case <-ctx.Done():
			t.Stop()
			return p, ctx.Err()
		case <-t.C:
		}
	}
	if a.cfg.RetainAgents > 0 {
		if err := a.pruneAgents(ctx, now.Add(-a.cfg.RetainAgents), &p); err != nil {
			return p, err
		}
	}
	if err := a.pruneHeapChanges(ctx, now.Add(-heapChangeRetention), &p); err != nil {
		return p, err
	}
	if err := a.pruneRows(ctx, "idempotency_key", a.deps.Store.PruneIdempotency, now.Add(-admin.IdempotencyWindow), &p.IdempotencyKeys); err != nil {
		return p, err
	}
	if p.Outbox > 0 {
		a.deps.Log.WarnContext(ctx, "retention: outbox rows older than DISPATCH_RETAIN_OUTBOX deleted before Kafka took them",
			"count", p.Outbox)
	}
	if p.Dispatches > 0 {
		a.deps.Log.InfoContext(ctx, "retention: finished dispatch records deleted", "count", p.Dispatches)
	}
	if p.Agents > 0 {
		a.deps.Log.InfoContext(ctx, "retention: client_agent rows of quiet uids deleted", "count", p.Agents)
	}
	return p, nil
}

// pruneAgents deletes, in batches, the client_agent rows of uids that last polled
// before cutoff. A uid that polls again gets a row again at the next flush.
func (a *App) pruneAgents(ctx context.Context, cutoff time.Time, p *Pruned) error {
	return a.pruneRows(ctx, "client_agent", a.deps.Store.PruneAgents, cutoff, &p.Agents)
}

// pruneHeapChanges deletes, in batches, the heap changes noted before cutoff.
func (a *App) pruneHeapChanges(ctx context.Context, cutoff time.Time, p *Pruned) error {
	return a.pruneRows(ctx, "heap_change", a.deps.Store.PruneHeapChanges, cutoff, &p.HeapChanges)
}

// pruneRows runs prune, pruneBatch rows at a time, until it deletes fewer, counting
// them in count and the metrics under table.
func (a *App) pruneRows(ctx context.Context, table string, prune func(context.Context, time.Time, int) (int64, error),
	cutoff time.Time, count *int64) error {
	for {
		n, err := prune(ctx, cutoff, pruneBatch)
		*count += n
		a.metrics.Pruned(table, n)
		if err != nil || n < pruneBatch {
			return err
		}
		t := time.NewTimer(10 * time.Millisecond) // let other work at the rows in between
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
