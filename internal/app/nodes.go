package app

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/web"
)

// Node membership: the background work beats this node into Redis every NodeHeartbeat
// with the work it holds; GET /v1/admin/nodes lists the nodes seen within
// NodeTimeout. A clean shutdown leaves at once.

// roles is the background work this node holds, as its beats report it.
type roles struct {
	mu     sync.Mutex
	static []string
	active map[string]func() bool
}

// AddRole makes the node report role while active says it holds it (the outbox relay's
// lease, say).
func (a *App) AddRole(role string, active func() bool) {
	a.roles.mu.Lock()
	defer a.roles.mu.Unlock()
	if a.roles.active == nil {
		a.roles.active = map[string]func() bool{}
	}
	a.roles.active[role] = active
}

func (a *App) currentRoles() []string {
	a.roles.mu.Lock()
	defer a.roles.mu.Unlock()
	out := append(a.sweepRoles(), a.roles.static...)
	for role, active := range a.roles.active {
		if active() {
			out = append(out, role)
		}
	}
	return append(out, a.Campaigns.Roles()...)
}

// Join takes this node's name (DISPATCH_NODE) in the membership before it serves or
// runs background work, and refuses while a live node holds the name (one that beats
// again within a heartbeat and a half; a name left by a killed process is taken over).
func (a *App) Join(ctx context.Context) error {
	if err := a.Members.Join(ctx, a.cfg.NodeHeartbeat); err != nil {
		return fmt.Errorf("DISPATCH_NODE: %w", err)
	}
	return nil
}

// beat reports this node alive every NodeHeartbeat until ctx is done. A beat in
// progress then finishes: cut off, it could still reach Redis after the node left.
func (a *App) beat(ctx context.Context) {
	t := time.NewTicker(a.cfg.NodeHeartbeat)
	defer t.Stop()
	for {
		if err := a.Members.Beat(context.WithoutCancel(ctx)); err != nil {
			a.deps.Log.WarnContext(ctx, "node heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// leave takes this node out of the membership at once (a clean stop), once it beats no
// more.
func (a *App) leave(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := a.Members.Leave(ctx); err != nil {
		a.deps.Log.WarnContext(ctx, "node leave failed: the others see it gone after DISPATCH_NODE_TIMEOUT", "err", err)
	}
}

// liveNodes counts the live nodes (the campaign runners' share is divided by it).
func (a *App) liveNodes(ctx context.Context) (int, error) {
	nodes, err := a.Members.List(ctx)
	return len(nodes), err
}

// nodes is GET /v1/admin/nodes.
func (a *App) nodes() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.Query()) > 0 {
			web.Error(w, r, a.deps.Log, taskd.Errorf(taskd.CodeInvalid, "GET /v1/admin/nodes takes no query parameters"))
			return
		}
		nodes, err := a.Members.List(r.Context())
		if err != nil {
			web.Error(w, r, a.deps.Log, err)
			return
		}
		web.Encode(w, http.StatusOK, map[string]any{"nodes": nodes})
	})
}
