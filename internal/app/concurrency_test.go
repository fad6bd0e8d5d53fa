package app_test

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// groupOf makes n users, members of group gid, with a key each (issued directly, not
// through HTTP, to keep the set-up short).
func (e *env) groupOf(gid string, n int) (uids, keys []string) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		uids = append(uids, uidN(i))
	}
	e.admin("PUT", "/v1/admin/groups/"+gid+"/members", map[string]any{"uids": uids})
	for _, u := range uids {
		k, err := e.apps[0].Keys.Issue(e.t.Context(), "test", u)
		if err != nil {
			e.t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return uids, keys
}

// checkClaims checks the invariant at rest: for every occurrence, claimed equals its
// live and completed dispatches (dead and cancelled ones keep their slots too, but for
// a dead one an admin retried whose next attempt started: that one holds the slot),
// and no user has it twice.
func (e *env) checkClaims() {
	e.t.Helper()
	const holds = `state IN (1, 2, 3, 6, 7) AND (retried_at IS NULL OR waiting_uid IS NOT NULL OR cancelled_at IS NOT NULL)`
	if n := e.count(`SELECT COUNT(*) FROM occurrence_claim c WHERE c.claimed <> (
		SELECT COUNT(*) FROM dispatch d WHERE d.task_kind = c.task_kind AND d.task_id = c.task_id
		AND d.due_at = c.due_at AND ` + holds + `)`); n != 0 {
		e.t.Errorf("%d occurrences whose claimed count is not live + completed dispatches", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM (SELECT uid FROM dispatch WHERE mode = 1 AND ` + holds + `
		GROUP BY task_kind, task_id, due_at, uid HAVING COUNT(*) > 1) x`); n != 0 {
		e.t.Errorf("%d users got a once_per_user occurrence twice", n)
	}
}

func TestQuotaUnderConcurrencyAcrossTwoInstances(t *testing.T) {
	const members = 1000
	for _, quota := range []int{1, 6, 999, 1000, -1} {
		t.Run(fmt.Sprintf("quota=%d", quota), func(t *testing.T) {
			e := newEnv(t, 2)
			_, keys := e.groupOf("g", members)
			e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-time.Minute)), "dispatch_times": quota})

			var wg sync.WaitGroup
			var mu sync.Mutex
			var logIDs []string
			byKey := map[string]string{}
			for i, k := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := e.fetch(i%2, k)
					if r.Task != nil {
						mu.Lock()
						logIDs = append(logIDs, r.Task.LogID)
						byKey[k] = r.Task.LogID
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			want := members
			if quota != -1 {
				want = min(quota, members)
			}
			if len(logIDs) != want {
				t.Fatalf("dispatched %d, want %d", len(logIDs), want)
			}
			if n := e.count("SELECT COUNT(DISTINCT uid) FROM dispatch"); n != want {
				t.Fatalf("distinct users dispatched %d, want %d", n, want)
			}
			if n := e.count("SELECT claimed FROM occurrence_claim"); n != want {
				t.Fatalf("claimed %d, want %d", n, want)
			}
			for k, id := range byKey {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if code, out := e.complete(1, k, id, "success"); code != 200 {
						t.Errorf("complete: %d %v", code, out)
					}
				}()
			}
			wg.Wait()
			if n := e.count("SELECT COUNT(*) FROM dispatch WHERE state = 3"); n != want {
				t.Fatalf("completed %d, want %d", n, want)
			}
			e.checkClaims()
		})
	}
}

func TestStampedeOfOneColdUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Hour))})
	k := e.key("1")
	var wg sync.WaitGroup
	var mu sync.Mutex
	logIDs := map[string]int{}
	for i := 0; i < 1000; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.fetch(i%2, k)
			if r.Task != nil {
				mu.Lock()
				logIDs[r.Task.LogID]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i, l := range e.loaders {
		if n := l.rebuilds.Load(); n > 1 {
			t.Errorf("instance %d rebuilt the heap %d times, want at most 1", i, n)
		}
	}
	if len(logIDs) != 1 {
		t.Fatalf("one user, one due task: %d different dispatches %v", len(logIDs), logIDs)
	}
	e.checkClaims()
}

// A rebuild that read MySQL before an admin edit committed, and writes to Redis after
// the edit's invalidation, must not leave its stale heap behind.
func TestInvalidationRaceWithSlowRebuild(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(e *env, taskID string)
	}{
		{"pause user task", func(e *env, id string) {
			e.admin("PUT", "/v1/admin/tasks/once/"+id[len("once:"):], map[string]any{"executor": "uid_1",
				"start_time": ts(t0.Add(-time.Minute)), "template_id": e.template(), "status": "paused"})
		}},
		{"delete group task", func(e *env, id string) {
			e.admin("DELETE", "/v1/admin/tasks/once/"+id[len("once:"):], nil)
		}},
		{"remove from group", func(e *env, id string) {
			e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1)
			e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1"}})
			executor := "gid_g"
			if tc.name == "pause user task" {
				executor = "uid_1"
			}
			id := e.task("once", map[string]any{"executor": executor, "start_time": ts(t0.Add(-time.Minute))})
			k := e.key("1")

			read := make(chan struct{})
			release := make(chan struct{})
			var once sync.Once
			l := e.loaders[0]
			l.mu.Lock()
			l.hold = func() { once.Do(func() { close(read); <-release }) }
			l.mu.Unlock()

			done := make(chan fetchReply)
			go func() { done <- e.fetch(0, k) }()
			<-read // the rebuild has read MySQL (the task is on offer) ...
			tc.edit(e, id)
			close(release) // ... and writes to Redis only after the edit's invalidation
			r := <-done
			if r.Task != nil {
				t.Fatalf("fetch after the edit got %s from a stale heap", r.Task.TaskID)
			}
			if n := l.rebuilds.Load(); n != 2 {
				t.Fatalf("rebuilds %d, want 2 (the stale write refused, then a fresh one)", n)
			}
			if n, _ := e.rdb.ZCard(t.Context(), e.apps[0].Cache.Keys().Heap("1")).Result(); n != 0 {
				t.Fatalf("heap at rest has %d entries, want 0", n)
			}
		})
	}
}

// Redis is a cache: flushing it mid-run loses no open dispatch or cursor and lets no
// quota be over-dispatched.
func TestRedisFlushedMidRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	_, keys := e.groupOf("g", 200)
	for i := 0; i < 5; i++ {
		e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-time.Duration(i+1) * time.Minute)),
			"dispatch_times": 40})
	}
	e.task("rotate", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-30 * time.Minute)),
		"space_minutes": 10, "dispatch_times": 30, "mode": "until_exhausted"})

	// one user holds an open dispatch across the flush
	holder := keys[0]
	held := mustFetch(t, e, holder)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, k := range keys[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < 20; round++ {
				select {
				case <-stop:
					return
				default:
				}
				r := e.fetch(i%2, k)
				if r.Task == nil {
					continue
				}
				if code, out := e.complete((i+1)%2, k, r.Task.LogID, "success"); code != 200 {
					t.Errorf("complete: %d %v", code, out)
				}
			}
		}()
	}
	for i := 0; i < 3; i++ {
		time.Sleep(20 * time.Millisecond)
		flushPrefix(e)
	}
	close(stop)
	wg.Wait()

	again := e.fetch(1, holder)
	if again.Task == nil || again.Task.LogID != held.LogID || !again.Task.Redo {
		t.Fatalf("open dispatch after flush: %+v, want redo of %s", again.Task, held.LogID)
	}
	if n := e.count("SELECT COUNT(*) FROM occurrence_claim c JOIN task_once t ON c.task_kind = 1 AND t.id = c.task_id WHERE c.claimed > t.dispatch_times"); n != 0 {
		t.Fatalf("%d once occurrences over quota", n)
	}
	if n := e.count("SELECT COUNT(*) FROM occurrence_claim c JOIN task_rotate t ON c.task_kind = 2 AND t.id = c.task_id WHERE c.claimed > t.dispatch_times"); n != 0 {
		t.Fatalf("%d rotate occurrences over quota", n)
	}
	e.checkClaims()

	// after another flush, cursors and open dispatches come back from MySQL: no
	// completed dispatch is handed out again, and checkClaims finds no user with a
	// once_per_user occurrence twice
	flushPrefix(e)
	for _, k := range keys[1:20] {
		if r := e.fetch(0, k); r.Task != nil && r.Task.Redo {
			t.Fatalf("redo of a completed dispatch after flush: %+v", r.Task)
		}
	}
	e.checkClaims()
}
