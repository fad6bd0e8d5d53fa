package app_test

import (
	"sync"
	"testing"
	"time"
)

// dispatch_rate_per_minute (the task's own, or its template's) bounds how many of the
// task's occurrences are claimed in a minute, over every instance: the others wait,
// told to come back when the next minute starts, and get theirs then.
func TestDispatchRatePerMinute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	uids, keys := e.groupOf("g", 40)
	tpl := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "slow", "schema": map[string]any{"type": "object"},
		"dispatch_rate_per_minute": 5})
	id := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-time.Minute)), "dispatch_times": -1,
		"template_id": tpl["id"]})
	got := func() (n int, next []time.Time) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i, k := range keys {
			wg.Go(func() {
				r := e.fetch(i%2, k)
				mu.Lock()
				defer mu.Unlock()
				if r.Task != nil {
					if r.Task.TaskID != id {
						t.Errorf("fetch: %+v", r.Task)
					}
					n++
					e.mustComplete(k, r.Task.LogID)
				} else if r.NextDueAt != nil {
					next = append(next, *r.NextDueAt)
				}
			})
		}
		wg.Wait()
		return n, next
	}
	n, next := got()
	if n != 5 {
		t.Fatalf("first minute: %d dispatched, want the rate, 5", n)
	}
	minute := t0.Truncate(time.Minute).Add(time.Minute)
	for _, at := range next {
		if !at.Equal(minute) {
			t.Fatalf("a user told to come back at %v, want the next minute %v", at, minute)
		}
	}
	if len(next) != len(uids)-5 {
		t.Fatalf("%d of %d waiting users told when to come back", len(next), len(uids)-5)
	}
	e.clock.Advance(time.Minute)
	if n, _ := got(); n != 5 {
		t.Fatalf("second minute: %d dispatched, want 5", n)
	}
	if c := e.count("SELECT COUNT(*) FROM dispatch"); c != 10 {
		t.Fatalf("%d dispatches in two minutes, want 10", c)
	}
	// The task's own value wins over the template's: none (0) lifts the bound, within a
	// second (a node remembers a used-up rate that long, not to ask MySQL each poll).
	e.admin("PATCH", "/v1/admin/tasks/once/"+id[len("once:"):], map[string]any{"dispatch_rate_per_minute": 0})
	e.clock.Advance(time.Second)
	if n, _ := got(); n != 30 {
		t.Fatalf("without a bound: %d dispatched, want the 30 left", n)
	}
}
