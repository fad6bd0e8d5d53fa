package queue

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/taskpull/taskd"
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
			res, err := e.c.peek(e.ctx, "u1", "g1,g2", "", tc.due, testMaxDue, "")
			if err != nil || res.status != "ok" || len(res.view.Due) != 1 || res.view.Due[0].LogID != "L8" {
				t.Fatalf("peek at its due time: %+v, %v; want the heap valid, the waiting dispatch due", res, err)
			}
		})
	}
}

// A change the heap-change feed tells after a waiting dispatch was put into the heap
// makes it stale when the heap was built before the change: the put moved the
// version, not what the heap read. A heap built after the change is left alone.
func TestHeapFeedAfterAPut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		built time.Duration // when the heap read MySQL, from the change
		stale bool
	}{
		{"built before the change", -time.Minute, true},
		{"built after the change", 10 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			changed := time.Now().Add(-20 * time.Second)
			e.warm("u1", once(1, t0.Add(time.Hour), 5))
			e.hset(e.keys.User("u1"), "hat", strconv.FormatInt(changed.Add(tc.built).UnixMicro(), 10))
			if put, err := e.c.PutWaiting(e.ctx, "u1", waiting("L8", t0.Add(time.Minute), 5)); err != nil || !put {
				t.Fatalf("PutWaiting: %v, %v", put, err)
			}
			if err := e.c.heapsChangedAt(e.ctx, []taskd.HeapChange{{ID: 1, Target: "uid_u1", At: changed}}); err != nil {
				t.Fatal(err)
			}
			h := e.hgetall(e.keys.User("u1"))
			if stale := h["hver"] != h["ver"]; stale != tc.stale {
				t.Fatalf("after the feed told the change: hash %v, stale %v; want %v", h, stale, tc.stale)
			}
		})
	}
}

// A rebuild that read MySQL before the waiting dispatch was committed, and writes after
// the put, is refused: the put's entry stays, in a heap still valid.
func TestPutWaitingRefusesARebuildUnderWay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.groups = []string{"g1", "g2"}
	e.l.src = peekSource()
	e.warm("u1", once(1, t0.Add(time.Hour), 5))
	entry := waiting("L8", t0.Add(time.Minute), 5)
	e.l.onSource = func(int) {
		if put, err := e.c.PutWaiting(e.ctx, "u1", entry); err != nil || !put {
			t.Errorf("PutWaiting during the rebuild: %v, %v", put, err)
		}
	}
	b, err := e.c.build(e.ctx, "u1")
	if err != nil {
		t.Fatal(err)
	}
	h := e.hgetall(e.keys.User("u1"))
	if b.written || h["hver"] != h["ver"] || !slices.Contains(e.zrange(e.keys.Heap("u1")), at(entry)) {
		t.Fatalf("rebuild written %v; hash %v, heap %v; want it refused, the put's entry kept, the heap valid",
			b.written, h, e.zrange(e.keys.Heap("u1")))
	}
}
