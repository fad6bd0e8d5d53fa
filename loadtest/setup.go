package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// Deployed is a scenario as created on the server: the users' client keys and the
// server's task keys.
type Deployed struct {
	Scenario *Scenario
	Keys     []string        // client key of Scenario.Users[i]
	TaskIDs  map[string]bool // task keys (once:12) of the scenario's tasks
	// Campaigns are the server ids of Scenario.Campaigns, created and not started.
	Campaigns []int64
	Requests  int64 // admin requests the setup made
	Took      time.Duration
}

// membersChunk bounds one membership request (well under the 1 MiB body limit).
const membersChunk = 1000

// Setup creates sc on the server with at most concurrency admin requests in flight:
// templates, one client key per user (and its max_in_flight, for a batch run), group
// memberships, then the tasks.
func Setup(ctx context.Context, c *Client, sc *Scenario, concurrency int, progress func(stage string, done, total int)) (*Deployed, error) {
	start := time.Now()
	d := &Deployed{Scenario: sc, Keys: make([]string, len(sc.Users)), TaskIDs: map[string]bool{}}
	var requests atomic.Int64
	call := func(ctx context.Context, method, path string, body, out any) error {
		var err error
		for attempt := 0; attempt < 8; attempt++ { // transient failures: 5xx, 429, transport (up to ~6 s in all)
			requests.Add(1)
			err = c.Admin(ctx, method, path, body, out)
			var ae *APIError
			if err == nil || !errors.As(err, &ae) || (ae.Status != 0 && ae.Status != 429 && ae.Status < 500) {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
			}
		}
		return err
	}
	report := func(stage string, done *atomic.Int64, total int) {
		if progress != nil {
			progress(stage, int(done.Load()), total)
		}
	}

	templateIDs := make([]int64, len(sc.Templates))
	for i, t := range sc.Templates {
		var r struct {
			ID int64 `json:"id"`
		}
		if err := call(ctx, http.MethodPost, "/v1/admin/templates", t.Body(), &r); err != nil {
			return nil, fmt.Errorf("create template %s: %w", t.Name, err)
		}
		templateIDs[i] = r.ID
	}

	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for i, uid := range sc.Users {
		g.Go(func() error {
			var r struct {
				ClientKey string `json:"client_key"`
			}
			if err := call(gctx, http.MethodPost, "/v1/admin/clients/"+idPath(uid)+"/keys", nil, &r); err != nil {
				return fmt.Errorf("issue key for %s: %w", uid, err)
			}
			if sc.MaxInFlight > 1 {
				if err := call(gctx, http.MethodPut, "/v1/admin/clients/"+idPath(uid), map[string]any{"max_in_flight": sc.MaxInFlight}, nil); err != nil {
					return fmt.Errorf("set max_in_flight of %s: %w", uid, err)
				}
			}
			d.Keys[i] = r.ClientKey
			if n := done.Add(1); n%5000 == 0 {
				report("keys", &done, len(sc.Users))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for _, gid := range sc.GroupIDs {
		members := sc.Groups[gid]
		for lo := 0; lo < len(members); lo += membersChunk {
			chunk := members[lo:min(lo+membersChunk, len(members))]
			g.Go(func() error {
				if err := call(gctx, http.MethodPost, "/v1/admin/groups/"+idPath(gid)+"/members", map[string]any{"uids": chunk}, nil); err != nil {
					return fmt.Errorf("add members to %s: %w", gid, err)
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	done.Store(0)
	ids := make([]string, len(sc.Tasks))
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for i, t := range sc.Tasks {
		g.Go(func() error {
			var r struct {
				TaskID string `json:"task_id"`
			}
			if err := call(gctx, http.MethodPost, "/v1/admin/tasks/"+t.Kind, t.Body(templateIDs[t.Template]), &r); err != nil {
				return fmt.Errorf("create %s task %d: %w", t.Kind, i, err)
			}
			ids[i] = r.TaskID
			if n := done.Add(1); n%1000 == 0 {
				report("tasks", &done, len(sc.Tasks))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, id := range ids {
		d.TaskIDs[id] = true
	}
	for _, cs := range sc.Campaigns {
		var r struct {
			ID int64 `json:"id"`
		}
		if err := call(ctx, http.MethodPost, "/v1/admin/campaigns", cs.Body(templateIDs[cs.Template]), &r); err != nil {
			return nil, fmt.Errorf("create campaign %s: %w", cs.Name, err)
		}
		d.Campaigns = append(d.Campaigns, r.ID)
	}
	d.Requests = requests.Load()
	d.Took = time.Since(start)
	return d, nil
}
