package queue

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// A waiting dispatch is put into a valid heap whose window reaches it, which stays
// valid with it (the version moves on, and the heap with it); a heap that is stale,
// cold, or whose window ends before the entry is made stale instead, and is not
// written. A rebuild under way is refused either way (TestRebuildRefusesWhenVersionsMoved).
func TestPutWaiting(t *testing.T) {
	t.Parallel()
	win := t0.Add(testHorizon + testRefresh)
	for _, tc := range []struct {
		name   string
		before func(e *env) // from a warm heap at version 3
		due    time.Time
		put    bool
	}{
		{"valid heap", func(*env) {}, t0.Add(10 * time.Minute), true},
		{"due at once", func(*env) {}, t0, true},
		{"past the window", func(*env) {}, win, false},
		{"stale heap", func(e *env) { e.hset(e.keys.User("u1"), "ver", "4") }, t0.Add(10 * time.Minute), false},
		{"cold heap", func(e *env) { e.rdb.HDel(e.ctx, e.keys.User("u1"), "hver") }, t0.Add(10 * time.Minute), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.warm("u1", once(1, t0.Add(time.Hour), 5))
			tc.before(e)
			verBefore, _ := strconv.ParseInt(e.hgetall(e.keys.User("u1"))["ver"], 10, 64)
			hverBefore := e.hgetall(e.keys.User("u1"))["hver"]
			entry := waiting("L8", tc.due, 7)
			put, err := e.c.PutWaiting(e.ctx, "u1", entry)
			if err != nil || put != tc.put {
				t.Fatalf("PutWaiting: %v, %v; want %v", put, err, tc.put)
			}
			h := e.hgetall(e.keys.User("u1"))
			ver := e.newer(h["ver"], verBefore)
			heap := e.zrange(e.keys.Heap("u1"))
			if !tc.put {
				if h["hver"] != hverBefore || slices.Contains(heap, at(entry)) {
					t.Fatalf("not put: hash %v, heap %v; want the heap as it was, now stale", h, heap)
				}
				return
			}
			if h["hver"] != strconv.FormatInt(ver, 10) || !slices.Contains(heap, at(entry)) {
				t.Fatalf("put: hash %v, heap %v; want the entry in, hver = ver", h, heap)
			}
			res, err := e.c.peek(e.ctx, "u1", "g1,g2", "", tc.due, testMaxDue)
			if err != nil || res.status != "ok" || len(res.view.Due) != 1 || res.view.Due[0].LogID != "L8" {
				t.Fatalf("peek at its due time: %+v, %v; want the heap valid, the waiting dispatch due", res, err)
			}
		})
	}
}
