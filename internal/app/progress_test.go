package app_test

import (
	"strings"
	"testing"
	"time"
)

// Checkpoints (POST /v1/progress): saved once per call in MySQL, they come back with
// every later dispatch of the occurrence to the same user.

// progress saves a checkpoint through instance i.
func (e *env) progress(i int, key, logID string, checkpoint any, extend bool) (int, map[string]any) {
	e.t.Helper()
	return e.do(i, "POST", "/v1/progress", key, map[string]any{"log_id": logID, "checkpoint": checkpoint, "extend_lease": extend})
}

func wantCheckpoint(t *testing.T, what string, got *task, want string) {
	t.Helper()
	if string(got.Checkpoint) != want {
		t.Fatalf("%s: checkpoint %s, want %s", what, got.Checkpoint, want)
	}
}

// A checkpoint comes back on a redo, on the retry after a failure and on the re-take
// after an expiry, and survives a Redis flush and a fresh server process.
func TestCheckpointComesBackWithEveryLaterDispatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "lease_seconds": 60,
		"max_attempts": 4, "retry_backoff_seconds": 10})
	k := e.key("1")
	first := mustFetch(t, e, k)
	if first.Checkpoint != nil {
		t.Fatalf("first dispatch carries a checkpoint: %s", first.Checkpoint)
	}
	if code, out := e.progress(0, k, first.LogID, map[string]any{"page": 3}, false); code != 200 || out["ok"] != true {
		t.Fatalf("progress: %d %v", code, out)
	}
	// Nothing in Redis and a server that never saw the user: MySQL has it.
	flushPrefix(e)
	redo := e.fetch(1, k).Task
	if redo == nil || !redo.Redo || redo.LogID != first.LogID {
		t.Fatalf("fetch after a flush: %+v, want the redo of %s", redo, first.LogID)
	}
	wantCheckpoint(t, "redo after a flush", redo, `{"page":3}`)

	// A failure: the retry after the backoff starts from the checkpoint.
	if code, out := e.complete(1, k, first.LogID, "failure"); code != 200 {
		t.Fatalf("complete failure: %d %v", code, out)
	}
	e.clock.Advance(11 * time.Second)
	retry := mustFetch(t, e, k)
	if retry.TaskID != id || retry.Attempt != 2 {
		t.Fatalf("retry: %+v", retry)
	}
	wantCheckpoint(t, "retry", retry, `{"page":3}`)
	if code, out := e.progress(0, k, retry.LogID, map[string]any{"page": 7}, false); code != 200 {
		t.Fatalf("progress of the retry: %d %v", code, out)
	}

	// An expiry: the re-take starts from the retry's checkpoint.
	e.clock.Advance(61 * time.Second)
	flushPrefix(e)
	again := e.fetch(1, k).Task
	if again == nil || again.TaskID != id || again.Attempt != 3 || again.LogID == retry.LogID {
		t.Fatalf("re-take after expiry: %+v", again)
	}
	wantCheckpoint(t, "re-take after expiry", again, `{"page":7}`)
	e.mustComplete(k, again.LogID)
}

// extend_lease pushes the lease out by the lease length from now; the reply says when
// it ends, and the dispatch lives past its first end.
func TestProgressExtendsTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "lease_seconds": 60})
	k := e.key("1")
	d := mustFetch(t, e, k)
	e.clock.Advance(50 * time.Second)
	code, out := e.progress(0, k, d.LogID, nil, true)
	if code != 200 {
		t.Fatalf("progress: %d %v", code, out)
	}
	want := t0.Add(110 * time.Second)
	if out["lease_expires_at"] != want.Format(time.RFC3339) {
		t.Fatalf("lease_expires_at %v, want %v", out["lease_expires_at"], want)
	}
	e.clock.Advance(30 * time.Second) // past the first lease, within the second
	e.mustComplete(k, d.LogID)

	// Without extend_lease the lease stays; a task with no lease says null.
	e.task("once", map[string]any{"executor": "uid_2", "start_time": ts(t0)})
	k2 := e.key("2")
	d2 := mustFetch(t, e, k2)
	if code, out := e.progress(0, k2, d2.LogID, map[string]any{}, true); code != 200 || out["lease_expires_at"] != nil {
		t.Fatalf("progress without a lease: %d %v", code, out)
	}
}

// Progress of anything but one of the caller's open dispatches within its lease is 409
// stale_lease and changes nothing; a checkpoint over 16 KiB is 413; a checkpoint that is
// not an object is 400.
func TestProgressRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "lease_seconds": 60, "max_attempts": 2})
	k1, k2 := e.key("1"), e.key("2")
	d := mustFetch(t, e, k1)
	stale := func(what, key, logID string) {
		t.Helper()
		code, out := e.progress(0, key, logID, map[string]any{"x": what}, true)
		if code != 409 || out["error"].(map[string]any)["code"] != "stale_lease" {
			t.Fatalf("%s: %d %v, want 409 stale_lease", what, code, out)
		}
	}
	stale("someone else's", k2, d.LogID)
	stale("unknown", k1, "0192f5c4-0000-7000-8000-000000000000")
	code, out := e.progress(0, k1, d.LogID, map[string]any{"blob": strings.Repeat("x", 16<<10)}, false)
	if code != 413 || out["error"].(map[string]any)["code"] != "too_large" {
		t.Fatalf("17 KiB checkpoint: %d %v", code, out)
	}
	if code, out := e.progress(0, k1, d.LogID, []int{1}, false); code != 400 {
		t.Fatalf("array checkpoint: %d %v", code, out)
	}
	if code, out := e.do(0, "POST", "/v1/progress", k1, map[string]any{"checkpoint": map[string]any{}}); code != 400 {
		t.Fatalf("no log_id: %d %v", code, out)
	}
	e.clock.Advance(61 * time.Second)
	stale("expired", k1, d.LogID)
	again := mustFetch(t, e, k1)
	if again.Checkpoint != nil {
		t.Fatalf("refused progress left a checkpoint: %s", again.Checkpoint)
	}
	e.mustComplete(k1, again.LogID)
	stale("completed", k1, again.LogID)
}
