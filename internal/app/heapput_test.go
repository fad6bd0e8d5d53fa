package app_test

import (
	"testing"
	"time"
)

// A failure with attempts left puts its retry into the user's heap, where a rebuild
// would put it: the complete and the retry's fetch read no heap source from MySQL
// (issue 43), and the retry comes back at its time, to its user alone, with its
// attempt counted.
func TestRetryPutIntoTheHeapWithoutARebuild(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "max_attempts": 3,
		"retry_backoff_seconds": 30})
	k := e.key("1")
	first := mustFetch(t, e, k)
	built := e.loaders[0].rebuilds.Load()
	if code, out := e.complete(0, k, first.LogID, "failure"); code != 200 {
		t.Fatalf("failure: %d %v", code, out)
	}
	if r := e.fetch(0, k); r.Task != nil || r.NextDueAt == nil || !r.NextDueAt.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("fetch during the backoff: %+v; want nothing, next at the retry time %s", r, t0.Add(30*time.Second))
	}
	e.clock.Advance(30 * time.Second)
	retry := mustFetch(t, e, k)
	if retry.TaskID != id || retry.LogID == first.LogID || retry.Attempt != 2 {
		t.Fatalf("the retry: %+v; want %s's second attempt", retry, id)
	}
	if n := e.loaders[0].rebuilds.Load(); n != built {
		t.Fatalf("%d heap rebuilds from MySQL after the failure, want none", n-built)
	}
}
