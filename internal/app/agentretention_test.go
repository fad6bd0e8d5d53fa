package app_test

import (
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// Issue 42, retention: the janitor deletes the client_agent row of a uid that has not
// polled for DISPATCH_RETAIN_AGENTS; a uid that polled within it keeps its row.
func TestRetentionPrunesQuietAgents(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) {
		c.RetainDispatches, c.RetainAgents, c.RetentionInterval = 0, 30*24*time.Hour, time.Hour
	})
	quiet, busy := e.key("quiet"), e.key("busy")
	agent := map[string]any{"agent": map[string]any{"version": "1.0", "hostname": "h"}}
	for _, k := range []string{quiet, busy} {
		if code, out := e.do(0, "POST", "/v1/fetch", k, agent); code != 200 {
			t.Fatalf("fetch: %d %v", code, out)
		}
	}
	e.flush()
	e.clock.Advance(20 * 24 * time.Hour)
	if code, out := e.do(0, "POST", "/v1/fetch", busy, nil); code != 200 {
		t.Fatalf("fetch: %d %v", code, out)
	}
	e.flush()
	e.clock.Advance(11 * 24 * time.Hour) // quiet: 31 days; busy: 11 days
	p, err := e.apps[0].Prune(t.Context())
	if err != nil || p.Skipped || p.Agents != 1 {
		t.Fatalf("prune: %+v %v, want one client_agent row", p, err)
	}
	if n := e.count("SELECT COUNT(*) FROM client_agent WHERE uid = 'quiet'"); n != 0 {
		t.Errorf("quiet uid's row kept")
	}
	if n := e.count("SELECT COUNT(*) FROM client_agent WHERE uid = 'busy' AND version = '1.0'"); n != 1 {
		t.Errorf("busy uid's row (and its agent) gone")
	}
}
