package campaign

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/taskpull/taskd"
)

// The runners (seed 000's 启动器): every active campaign (running, paused, stopping) is
// run by one node at a time, under a lease in Redis renewed at a third of its TTL.
// Each node takes its share, the active campaigns divided by the live nodes and rounded
// up, capped by PerNode; a dead node's leases run out and the others take its
// campaigns. A runner, every SyncInterval, fails the leases that ran out, syncs the
// window to MySQL, takes to Redis a move that did not reach it, and ends a stopping
// campaign once nothing is in flight. Items flow without it: fetch and complete work
// on the window in Redis directly.

// Run runs this node's share of the campaigns until ctx is done, then stops: it starts
// no more rounds and no more syncs, lets the round in progress finish its sync (one cut
// off midway would be logged as failed, though nothing failed), and gives its leases
// up. Nothing is cut off, so whatever fails meanwhile is a real failure, and logged.
func (e *Engine) Run(ctx context.Context) {
	// The round in progress gets a third of the lease TTL past the stop, as a Divide has.
	work, cancel := outlive(ctx, e.cfg.LeaseTTL/3)
	defer cancel()
	t := time.NewTicker(e.cfg.SyncInterval)
	defer t.Stop()
	for {
		if err := e.round(ctx, work); err != nil {
			e.log.WarnContext(work, "campaign runners", "err", err)
		}
		select {
		case <-ctx.Done():
			release, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			if err := e.runners.ReleaseAll(release); err != nil {
				e.log.WarnContext(release, "campaign runners: leases not given up, their campaigns move to the other nodes after DISPATCH_NODE_TIMEOUT", "err", err)
			}
			return
		case <-t.C:
		}
	}
}

// RunOnce is one round of this node's runners.
func (e *Engine) RunOnce(ctx context.Context) error { return e.round(ctx, ctx) }

// round is one round of this node's runners, on work; once stop is done it starts no
// more syncs.
func (e *Engine) round(stop, work context.Context) error {
	active, err := e.store.ListCampaigns(work, []taskd.CampaignState{taskd.CampaignRunning, taskd.CampaignPaused, taskd.CampaignStopping}, 0, maxRunning)
	if err != nil {
		return err
	}
	sort.Slice(active, func(i, j int) bool { return active[i].ID < active[j].ID })
	nodes := 1
	if e.cfg.Nodes != nil {
		if n, err := e.cfg.Nodes(work); err == nil && n > 0 {
			nodes = n
		}
	}
	units := make([]string, len(active))
	byUnit := make(map[string]taskd.Campaign, len(active))
	for i, c := range active {
		units[i] = runnerUnit(c.ID)
		byUnit[units[i]] = c
	}
	held, err := e.runners.Divide(work, units, nodes, e.cfg.PerNode)
	for _, u := range held {
		if stop.Err() != nil {
			break
		}
		c := byUnit[u]
		if err := e.sync(work, c); err != nil {
			e.log.WarnContext(work, "campaign sync failed", "campaign", c.ID, "err", err)
		}
	}
	return err
}

// outlive is a context that ends grace after ctx does (or at cancel): the work in
// progress when ctx ends finishes, unless it takes longer than grace.
func outlive(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return work, func() {
		stop()
		cancel()
	}
}

// runnerUnit is campaign id's runner among the work the nodes divide.
func runnerUnit(id int64) string { return "campaign:" + strconv.FormatInt(id, 10) }

// sync is one runner round of campaign c (as MySQL has it).
func (e *Engine) sync(ctx context.Context, c taskd.Campaign) error {
	p, err := e.win.Sync(ctx, c.ID, e.now())
	switch {
	case err != nil:
		return err
	case p == nil:
		e.log.WarnContext(ctx, "campaign window missing in redis: restored from mysql", "campaign", c.ID, "offset", c.Offset)
		return e.win.Apply(ctx, c)
	case p.Epoch < c.Epoch:
		return e.win.Apply(ctx, c) // a move that did not reach Redis
	}
	after, err := e.store.SyncCampaign(ctx, c.ID, *p, e.now())
	if err != nil {
		return err
	}
	if err := e.drainEvents(ctx, after); err != nil {
		return err
	}
	if after.Epoch > p.Epoch { // stopped, now that nothing is in flight
		e.forget()
		return e.win.Apply(ctx, after)
	}
	if after.State != c.State {
		e.forget()
	}
	return nil
}

// drainEvents moves the events c's window recorded (while an outbox is configured) to
// the outbox, a thousand at a time, at most twenty thousand a round. An event is in the
// outbox before it leaves Redis: a crash in between sends it twice, with the same
// event id (Elasticsearch indexes it once).
func (e *Engine) drainEvents(ctx context.Context, c taskd.Campaign) error {
	due := c.CreatedAt
	if c.StartedAt != nil {
		due = *c.StartedAt
	}
	for range 20 {
		raw, err := e.win.ItemEvents(ctx, c.ID, 1000)
		if err != nil || len(raw) == 0 {
			return err
		}
		evs := make([]taskd.Event, 0, len(raw))
		for _, ev := range raw {
			if ev.Type == "" {
				continue // unreadable
			}
			logID := taskd.CampaignLog{Campaign: c.ID, Item: ev.Item, Attempt: ev.Attempt, UIDTag: tag(&c, ev.UID, ev.Item, ev.Attempt)}.String()
			evs = append(evs, taskd.Event{EventID: taskd.EventID(logID, ev.Type, 0), Type: ev.Type, LogID: logID,
				UID: ev.UID, TaskID: taskd.CampaignTaskID(c.ID), Kind: "campaign", DueAt: due, Attempt: ev.Attempt,
				Result: ev.Result, Final: ev.Final, Node: e.cfg.Node, At: ev.At})
		}
		if len(evs) > 0 {
			if err := e.store.AppendOutbox(ctx, evs...); err != nil {
				return err
			}
		}
		if err := e.win.DropEvents(ctx, c.ID, len(raw)); err != nil {
			return err
		}
		if len(raw) < 1000 {
			return nil
		}
	}
	return nil
}

// Roles are the campaigns this node runs, as its node beats report them.
func (e *Engine) Roles() []string {
	held, _ := e.runners.Held()
	return held
}
