package admin

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/targeting"
)

// The fleet: the clients (uids with keys, settings or polls) with when they last polled
// and the agent they run, the groups with their member counts, and dispatch outcomes by
// agent version.

// ListClients returns the clients f selects, in uid order after after.
func (s *Service) ListClients(ctx context.Context, f taskd.ClientFilter, after string, limit int) ([]taskd.Client, bool, error) {
	return s.store.ListClients(ctx, f, after, limit)
}

// ListGroups returns the groups in gid order after after.
func (s *Service) ListGroups(ctx context.Context, after string, limit int) ([]taskd.GroupSummary, bool, error) {
	return s.store.ListGroups(ctx, after, limit)
}

// VersionStats is dispatch outcomes in [from, to) by the agent version their uids
// report.
func (s *Service) VersionStats(ctx context.Context, from, to time.Time) ([]taskd.VersionStats, error) {
	return s.store.VersionStats(ctx, from, to)
}

// ListClients is GET /v1/admin/clients?group=&label=key=value&selector=&agent_version=&seen_before=&seen_after=&limit=&cursor=.
// label may repeat: a client has every label given; selector and agent_version are a
// dynamic group's rule (the clients whose latest report matches).
func (h *Handlers) ListClients() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		q := r.URL.Query()
		var f taskd.ClientFilter
		err := known(q, "group", "label", "selector", "agent_version", "seen_before", "seen_after", "limit", "cursor")
		if err == nil && q.Get("group") != "" {
			f.Group = q.Get("group")
			err = bareID("group", f.Group)
		}
		if rule := (taskd.DynamicGroup{Selector: q.Get("selector"), AgentVersion: q.Get("agent_version")}); err == nil && rule != (taskd.DynamicGroup{}) {
			var r targeting.Rule
			if r, err = targeting.Parse(rule); err == nil {
				f.Matches = r.Matches
			}
		}
		for _, l := range q["label"] {
			if err != nil {
				break
			}
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				err = taskd.Errorf(taskd.CodeInvalid, "label: want key=value, got %q", l)
				break
			}
			if err = taskd.CheckLabelKey("label", k); err == nil {
				if f.Labels == nil {
					f.Labels = map[string]string{}
				}
				f.Labels[k] = v
			}
		}
		for _, p := range []struct {
			name string
			to   **time.Time
		}{{"seen_before", &f.SeenBefore}, {"seen_after", &f.SeenAfter}} {
			if err == nil && q.Get(p.name) != "" {
				var t time.Time
				t, err = queryTime(q, p.name, time.Time{})
				*p.to = &t
			}
		}
		limit, lerr := queryLimit(q)
		after, cerr := decodeCursor(q)
		for _, e := range []error{err, lerr, cerr} {
			if e != nil {
				return 0, nil, e
			}
		}
		clients, more, err := h.svc.ListClients(r.Context(), f, after, limit)
		if err != nil {
			return 0, nil, err
		}
		next := ""
		if more {
			next = encodeCursor(clients[len(clients)-1].UID)
		}
		if clients == nil {
			clients = []taskd.Client{}
		}
		return http.StatusOK, map[string]any{"clients": clients, "next_cursor": next}, nil
	})
}

// ListGroups is GET /v1/admin/groups?limit=&cursor=.
func (h *Handlers) ListGroups() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		q := r.URL.Query()
		err := known(q, "limit", "cursor")
		limit, lerr := queryLimit(q)
		after, cerr := decodeCursor(q)
		for _, e := range []error{err, lerr, cerr} {
			if e != nil {
				return 0, nil, e
			}
		}
		groups, more, err := h.svc.ListGroups(r.Context(), after, limit)
		if err != nil {
			return 0, nil, err
		}
		next := ""
		if more {
			next = encodeCursor(groups[len(groups)-1].GID)
		}
		if groups == nil {
			groups = []taskd.GroupSummary{}
		}
		return http.StatusOK, map[string]any{"groups": groups, "next_cursor": next}, nil
	})
}

// VersionStats is GET /v1/admin/stats/agents?from=&to= (default: the last 24 h).
func (h *Handlers) VersionStats() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		from, to, err := h.dayRange(r)
		if err != nil {
			return 0, nil, err
		}
		stats, err := h.svc.VersionStats(r.Context(), from, to)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, map[string]any{"versions": stats}, nil
	})
}
