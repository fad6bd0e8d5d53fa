package app

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/taskpull/taskd/dispatch"
)

// The lease sweep, divided among the live nodes: the open dispatches are sweepShards
// parts by their user's hash, and each node sweeps the parts it holds, "sweeper:<n>"
// among its roles (queue.Shares: the parts divided by the live nodes, rounded up,
// under leases renewed at a third of DISPATCH_NODE_TIMEOUT; a dead node's parts move
// to the others within it). There is no per-node cap: a part nobody held would leave
// its users' quota slots held by agents that never came back. While the division is
// not known (Redis unreachable, or before the first round) a node sweeps every part,
// "sweeper" among its roles: an expiry is a conditional update, so two nodes sweeping
// one dispatch expire it once.

// sweepShards is how many parts the sweep is divided into: the most nodes that sweep
// at once.
const sweepShards = 8

// sweepUnits are the parts as units of work: "sweeper:0" to "sweeper:7".
var sweepUnits = func() []string {
	units := make([]string, sweepShards)
	for i := range units {
		units[i] = "sweeper:" + strconv.Itoa(i)
	}
	return units
}()

// DivideSweep is one round of dividing the sweep's parts among the live nodes.
func (a *App) DivideSweep(ctx context.Context) error {
	nodes, err := a.liveNodes(ctx)
	if err != nil {
		nodes = 1 // the Divide fails too, most likely, and this node sweeps every part
	}
	_, err = a.sweeps.Divide(ctx, sweepUnits, nodes, 0)
	return err
}

// Sweep expires the dispatches past their lease in the parts this node holds (all of
// them while the division is not known) and says how many it expired.
func (a *App) Sweep(ctx context.Context) (int, error) {
	return a.Dispatch.SweepExpired(ctx, a.sweepShards())
}

// sweepShards is what this node sweeps now.
func (a *App) sweepShards() dispatch.Shards {
	held, ok := a.sweeps.Held()
	if !ok {
		return dispatch.Shards{}
	}
	sh := dispatch.Shards{Of: sweepShards, Parts: []int{}}
	for _, u := range held {
		sh.Parts = append(sh.Parts, slices.Index(sweepUnits, u))
	}
	return sh
}

// sweepRoles are the sweep's roles of this node: the parts it holds, or "sweeper"
// while it sweeps them all.
func (a *App) sweepRoles() []string {
	held, ok := a.sweeps.Held()
	if !ok {
		return []string{"sweeper"}
	}
	return held
}

// divideSweeps divides the sweep every sixth of the node timeout (so a lease is
// renewed between a third and half of the way through) until ctx is done; then it
// gives this node's parts up. A round in progress then finishes (a Divide takes at
// most a third of the timeout): cut off, it could leave a lease it had just taken to
// run out.
func (a *App) divideSweeps(ctx context.Context) {
	work := context.WithoutCancel(ctx)
	t := time.NewTicker(a.cfg.NodeTimeout / 6)
	defer t.Stop()
	for {
		if err := a.DivideSweep(work); err != nil {
			a.deps.Log.WarnContext(ctx, "sweep division failed: this node sweeps every part until it succeeds", "err", err)
		}
		select {
		case <-ctx.Done():
			release, cancel := context.WithTimeout(work, time.Second)
			defer cancel()
			if err := a.sweeps.ReleaseAll(release); err != nil {
				a.deps.Log.WarnContext(ctx, "sweep parts not given up: the other nodes take them after DISPATCH_NODE_TIMEOUT", "err", err)
			}
			return
		case <-t.C:
		}
	}
}
