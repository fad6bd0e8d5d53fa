package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/schedule"
)

// Each Lua script of the package is tested here through the method that runs it,
// against the real Redis (a prefix of the test's own), with a fake Loader and a fake
// clock; its effect is read back from the keys themselves.

// ---- peekScript (sendPeeks, Cache.peek, Peek) ----

// warm writes a heap that peekScript finds valid at e.now for a caller that believes
// the user is in g1,g2 and skips or passes the key check with h1: ver = hver = 3, g1's
// generation 2 and g2's none, a window reaching now+Horizon+Refresh, open hint L9.
func (e *env) warm(uid string, es ...schedule.Entry) {
	e.t.Helper()
	e.hset(e.keys.User(uid), "ver", "3", "hver", "3", "groups", "g1,g2", "gens", "2,0",
		"win", unix(e.now.Add(testHorizon+testRefresh)), "open", "L9")
	if err := e.rdb.Set(e.ctx, e.keys.GenerationOf("g1", uid), "2", 0).Err(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.rdb.SAdd(e.ctx, e.keys.ClientKeys(uid), "-", "h1").Err(); err != nil {
		e.t.Fatal(err)
	}
	e.zadd(e.keys.Heap(uid), es...)
}

// peekHeap is the warm heap the peek tests start from, in heap order: a waiting
// dispatch older than the catch-up floor (it must not make the heap stale), three
// entries due at t0 (the last one exactly at now), then two not yet due.
func peekHeap() []schedule.Entry {
	floor := t0.Add(-testCatchUp)
	return []schedule.Entry{
		waiting("L7", floor.Add(-2*time.Hour), 5),
		once(1, t0.Add(-30*time.Minute), 5),
		once(2, t0.Add(-10*time.Minute), 7),
		once(3, t0, 5),
		rotate(4, t0.Add(5*time.Minute), 5, 30*time.Minute, time.Time{}),
		once(5, t0.Add(time.Hour), 5),
	}
}

func TestPeekScriptOKReturnsDueUpToMaxAndNext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	heap := peekHeap()
	e.warm("u1", heap...)
	for _, tc := range []struct {
		max  int
		due  []schedule.Entry
		next schedule.Entry
	}{
		{max: 2, due: heap[:2], next: heap[4]},
		{max: 3, due: heap[:3], next: heap[4]},
		{max: 10, due: heap[:4], next: heap[4]}, // due at now is due; next is after now
	} {
		res, err := e.c.peek(e.ctx, "u1", "g1,g2", "h1", e.now, tc.max, "")
		if err != nil {
			t.Fatal(err)
		}
		if res.status != "ok" || res.open != "L9" || res.ver != "3" {
			t.Fatalf("max %d: peek = %+v, want ok, L9, 3, due, next", tc.max, res)
		}
		v := res.view
		if got, want := ats(v.Due), ats(tc.due); !slices.Equal(got, want) {
			t.Errorf("max %d: due\n got %v\nwant %v", tc.max, got, want)
		}
		if v.Next == nil || at(*v.Next) != at(tc.next) {
			t.Errorf("max %d: next = %v, want %v", tc.max, v.Next, at(tc.next))
		}
		if v.Open != schedule.OpenIs("L9") {
			t.Errorf("max %d: open = %+v", tc.max, v.Open)
		}
	}
	// Nothing after now: next is empty.
	e.rdb.ZRem(e.ctx, e.keys.Heap("u1"), Member(heap[4]), Member(heap[5]))
	res, err := e.c.peek(e.ctx, "u1", "g1,g2", "", e.now, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.status != "ok" || len(res.view.Due) != 4 || res.view.Next != nil {
		t.Fatalf("peek with nothing after now = %+v, want 4 entries due and no next", res)
	}
	// As many due as asked for, and more: next is still the first after now.
	for _, max := range []int{0, 1, 3} {
		e.rdb.ZAdd(e.ctx, e.keys.Heap("u1"), redis.Z{Score: float64(heap[5].DueAt.Unix()), Member: Member(heap[5])})
		res, err := e.c.peek(e.ctx, "u1", "g1,g2", "", e.now, max, "")
		if err != nil {
			t.Fatal(err)
		}
		if res.status != "ok" || len(res.view.Due) != max || res.view.Next == nil || at(*res.view.Next) != at(heap[5]) {
			t.Fatalf("max %d, more due: peek = %+v, want %d due and next %v", max, res, max, at(heap[5]))
		}
	}
}

func TestPeekScriptStatuses(t *testing.T) {
	t.Parallel()
	floor := t0.Add(-testCatchUp)
	cases := []struct {
		name   string
		setup  func(e *env)
		groups string // the caller's belief; "g1,g2" unless set
		key    string
		want   []any // the whole answer unless ok
	}{
		{name: "ok", key: "h1", want: []any{"ok"}},
		{name: "key check skipped", key: "", want: []any{"ok"},
			setup: func(e *env) { e.rdb.Del(e.ctx, e.keys.ClientKeys("u1")) }},
		{name: "badkey", key: "hX", want: []any{"badkey"}},
		{name: "nokeys", key: "h1", want: []any{"nokeys", "ok"},
			setup: func(e *env) { e.rdb.Del(e.ctx, e.keys.ClientKeys("u1")) }},
		{name: "nokeys, heap stale", key: "h1", want: []any{"nokeys", "stale"},
			setup: func(e *env) {
				e.rdb.Del(e.ctx, e.keys.ClientKeys("u1"))
				e.rdb.HIncrBy(e.ctx, e.keys.User("u1"), "ver", 1)
			}},
		{name: "empty set marked loaded is badkey", key: "h1", want: []any{"badkey"},
			setup: func(e *env) { e.rdb.SRem(e.ctx, e.keys.ClientKeys("u1"), "h1") }},
		{name: "cold: no heap metadata", want: []any{"cold", "L9", "g1,g2", "3"},
			setup: func(e *env) { e.rdb.HDel(e.ctx, e.keys.User("u1"), "hver") }},
		{name: "cold: no user hash", want: []any{"cold", "", "", "0"},
			setup: func(e *env) { e.rdb.Del(e.ctx, e.keys.User("u1")) }},
		{name: "stale: version moved", want: []any{"stale", "L9", "g1,g2", "4"},
			setup: func(e *env) { e.rdb.HIncrBy(e.ctx, e.keys.User("u1"), "ver", 1) }},
		{name: "stale: window short of the horizon", want: []any{"stale", "L9", "g1,g2", "3"},
			setup: func(e *env) { e.hset(e.keys.User("u1"), "win", unix(t0.Add(testHorizon-time.Second))) }},
		{name: "ok: window exactly at the horizon", want: []any{"ok"},
			setup: func(e *env) { e.hset(e.keys.User("u1"), "win", unix(t0.Add(testHorizon))) }},
		{name: "stale: once older than the floor", want: []any{"stale", "L9", "g1,g2", "3"},
			setup: func(e *env) { e.zadd(e.keys.Heap("u1"), once(9, floor.Add(-time.Second), 5)) }},
		{name: "stale: rotate older than the floor, behind dispatches", want: []any{"stale", "L9", "g1,g2", "3"},
			setup: func(e *env) {
				e.zadd(e.keys.Heap("u1"), waiting("L1", floor.Add(-3*time.Hour), 9), waiting("L2", floor.Add(-3*time.Hour), 8),
					rotate(9, floor.Add(-time.Hour), 1, time.Hour, time.Time{}))
			}},
		{name: "stale: once older than the floor, behind more dispatches than a page", want: []any{"stale", "L9", "g1,g2", "3"},
			setup: func(e *env) {
				for i := range 40 {
					e.zadd(e.keys.Heap("u1"), waiting(fmt.Sprintf("W%02d", i), floor.Add(-3*time.Hour), 9))
				}
				e.zadd(e.keys.Heap("u1"), once(9, floor.Add(-time.Hour), 1))
			}},
		{name: "ok: occurrence exactly at the floor", want: []any{"ok"},
			setup: func(e *env) { e.zadd(e.keys.Heap("u1"), once(9, floor, 5)) }},
		{name: "ok: waiting dispatches older than the floor", want: []any{"ok"},
			setup: func(e *env) {
				e.zadd(e.keys.Heap("u1"), waiting("L1", floor.Add(-48*time.Hour), 9), waiting("L2", floor.Add(-time.Second), 1))
			}},
		{name: "ok: a confirm entry older than the floor", want: []any{"ok"},
			setup: func(e *env) {
				c := waiting("L3", floor.Add(-time.Minute), 9)
				c.Confirm = true
				e.zadd(e.keys.Heap("u1"), c)
			}},
		{name: "ok: a once task with windows older than the floor (it waits for one)", want: []any{"ok"},
			setup: func(e *env) {
				o := once(9, floor.Add(-48*time.Hour), 5)
				o.Windows = "0 1 * * *;UTC;60"
				e.zadd(e.keys.Heap("u1"), o)
			}},
		{name: "stale: a rotating task with windows older than the floor", want: []any{"stale", "L9", "g1,g2", "3"},
			setup: func(e *env) {
				r := rotate(9, floor.Add(-time.Hour), 1, time.Hour, time.Time{})
				r.Windows = "0 1 * * *;UTC;60"
				e.zadd(e.keys.Heap("u1"), r)
			}},
		{name: "stale: group generation moved", want: []any{"stale", "L9", "g1,g2", "3"},
			setup: func(e *env) { e.rdb.Incr(e.ctx, e.keys.GenerationOf("g1", "u1")) }},
		{name: "ok: another copy of a group generation moved", want: []any{"ok"},
			setup: func(e *env) { e.rdb.Incr(e.ctx, e.keys.Generation("g1", otherCopy("g1", "u1"))) }},
		{name: "stale: group generation appeared", want: []any{"stale", "L9", "g1,g2", "3"},
			setup: func(e *env) { e.rdb.Incr(e.ctx, e.keys.GenerationOf("g2", "u1")) }},
		{name: "groups: caller believes fewer", groups: "g1", want: []any{"groups", "L9", "g1,g2", "3"}},
		{name: "groups: caller believes none", groups: "-", want: []any{"groups", "L9", "g1,g2", "3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.warm("u1", peekHeap()...)
			if tc.setup != nil {
				tc.setup(e)
			}
			groups := tc.groups
			switch groups {
			case "":
				groups = "g1,g2"
			case "-":
				groups = ""
			}
			res, err := e.c.peek(e.ctx, "u1", groups, tc.key, e.now, testMaxDue, "")
			if err != nil {
				t.Fatal(err)
			}
			if res.status != tc.want[0] {
				t.Fatalf("peek = %+v, want %q", res, tc.want)
			}
			var got []any
			switch res.status {
			case "ok":
				return
			case "badkey":
				got = []any{res.status}
			case "nokeys":
				got = []any{res.status, res.heap}
			default:
				got = []any{res.status, res.open, res.groups, res.ver}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("peek = %q, want %q", got, tc.want)
			}
		})
	}
}

// What the Peek tests' loader offers at t0 (floor 09:00, window until t0+25h).
func peekSource() schedule.Source {
	return schedule.Source{
		Once: []schedule.OnceTask{
			{ID: 1, Start: t0.Add(-30 * time.Minute), Priority: 5},
			{ID: 2, Start: t0.Add(2 * time.Hour), Priority: 5},
			{ID: 8, Start: t0.Add(-2 * time.Hour), Priority: 5}, // before the floor: missed
		},
		// 07:00 every 40 minutes: first at or after 09:00 is 09:00.
		Rotate:  []schedule.RotateTask{{ID: 3, Start: t0.Add(-3 * time.Hour), Space: 40 * time.Minute, Priority: 6}},
		Waiting: []schedule.WaitingDispatch{{LogID: "L5", At: t0.Add(-3 * time.Hour), Priority: 2}},
	}
}

// peekOffer is peekSource's offer in heap order.
func peekOffer() []schedule.Entry {
	floor := t0.Add(-testCatchUp)
	return []schedule.Entry{
		rotate(3, floor, 6, 40*time.Minute, time.Time{}),
		waiting("L5", floor, 2),
		once(1, t0.Add(-30*time.Minute), 5),
		once(2, t0.Add(2*time.Hour), 5),
	}
}

func checkView(t *testing.T, what string, v schedule.View, open schedule.OpenHint, due []schedule.Entry, next *schedule.Entry) {
	t.Helper()
	if v.Open != open {
		t.Errorf("%s: open = %+v, want %+v", what, v.Open, open)
	}
	if got, want := ats(v.Due), ats(due); !slices.Equal(got, want) {
		t.Errorf("%s: due\n got %v\nwant %v", what, got, want)
	}
	switch {
	case next == nil && v.Next != nil:
		t.Errorf("%s: next = %v, want none", what, at(*v.Next))
	case next != nil && (v.Next == nil || at(*v.Next) != at(*next)):
		t.Errorf("%s: next = %v, want %v", what, v.Next, at(*next))
	}
}

func TestPeekRebuildsColdHeapThenServesItWarm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.groups = []string{"g2", "g1"}
	e.l.src = peekSource()
	offer := peekOffer()

	v, err := e.c.Peek(e.ctx, "u1", "", e.now)
	if err != nil {
		t.Fatal(err)
	}
	checkView(t, "cold peek", v, schedule.OpenHint{}, offer[:3], &offer[3])
	if g, s, _ := e.l.counts(); g != 1 || s != 1 {
		t.Fatalf("cold peek read the loader %d/%d times, want once", g, s)
	}
	if e.exists(e.keys.Lock("u1")) {
		t.Error("the rebuild lock outlived the rebuild")
	}
	if got := e.zrange(e.keys.Heap("u1")); !slices.Equal(got, ats(offer)) {
		t.Errorf("heap\n got %v\nwant %v", got, ats(offer))
	}

	// Warm: one round trip, no loader.
	v, err = e.c.Peek(e.ctx, "u1", "", e.now)
	if err != nil {
		t.Fatal(err)
	}
	checkView(t, "warm peek", v, schedule.OpenHint{}, offer[:3], &offer[3])
	// Another node, which has not learnt the user's groups: "groups", then ok.
	v, err = e.newCache().Peek(e.ctx, "u1", "", e.now)
	if err != nil {
		t.Fatal(err)
	}
	checkView(t, "peek from another node", v, schedule.OpenHint{}, offer[:3], &offer[3])
	if g, s, _ := e.l.counts(); g != 1 || s != 1 {
		t.Fatalf("warm peeks read the loader (%d/%d calls)", g, s)
	}

	// An invalidation makes the next peek rebuild.
	if err := e.c.InvalidateUser(e.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Peek(e.ctx, "u1", "", e.now); err != nil {
		t.Fatal(err)
	}
	if _, s, _ := e.l.counts(); s != 2 {
		t.Fatalf("peek after invalidation: %d loads, want 2", s)
	}
}

func TestPeekChecksClientKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.hashes = []string{"h1"}
	e.l.src = peekSource()
	if _, err := e.c.Peek(e.ctx, "u1", "h1", e.now); err != nil {
		t.Fatalf("peek with a valid key: %v", err)
	}
	if _, err := e.c.Peek(e.ctx, "u1", "h2", e.now); !errors.Is(err, ErrBadKey) {
		t.Fatalf("peek with an unknown key: %v, want ErrBadKey", err)
	}
	if _, _, k := e.l.counts(); k != 1 {
		t.Fatalf("client keys loaded %d times, want once", k)
	}
}

func TestPeekServesRefusedRebuildAfterMaxRefusals(t *testing.T) {
	t.Parallel()
	for _, refusals := range []int{maxRefusals - 1, maxRefusals, maxRefusals + 5} {
		t.Run(strconv.Itoa(refusals), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.l.src = peekSource()
			e.hset(e.keys.User("u1"), "open", "L4")
			// Every read from MySQL is overtaken by an invalidation, refusals times.
			e.l.onSource = func(n int) {
				if n <= refusals {
					if err := e.c.InvalidateUser(context.Background(), "u1"); err != nil {
						t.Error(err)
					}
				}
			}
			offer := peekOffer()
			v, err := e.c.Peek(e.ctx, "u1", "", e.now)
			if err != nil {
				t.Fatal(err)
			}
			checkView(t, "peek", v, schedule.OpenIs("L4"), offer[:3], &offer[3])
			_, loads, _ := e.l.counts()
			h := e.hgetall(e.keys.User("u1"))
			if refusals < maxRefusals {
				// The last rebuild was written; the peek served it from Redis.
				if loads != refusals+1 || h["hver"] == "" || h["hver"] != h["ver"] {
					t.Fatalf("%d loads, user hash %v; want %d loads and hver the last ver", loads, h, refusals+1)
				}
				return
			}
			if loads != maxRefusals {
				t.Fatalf("%d loads, want %d", loads, maxRefusals)
			}
			if _, ok := h["hver"]; ok || e.exists(e.keys.Heap("u1")) {
				t.Fatalf("a refused rebuild reached Redis: %v, heap %v", h, e.zrange(e.keys.Heap("u1")))
			}
		})
	}
}

// A group generation that moves after every rebuild's reads lets each write through
// (it is on another slot) and makes what it wrote stale: the peek counts those too, and
// serves the offer it read after maxRefusals of them.
func TestPeekServesRebuildOvertakenByGroupEdits(t *testing.T) {
	t.Parallel()
	for _, edits := range []int{maxRefusals - 1, maxRefusals + 5} {
		t.Run(strconv.Itoa(edits), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.l.groups = []string{"g1"}
			e.l.src = peekSource()
			e.l.onSource = func(n int) {
				if n <= edits {
					if err := e.c.InvalidateGroup(context.Background(), "g1"); err != nil {
						t.Error(err)
					}
				}
			}
			offer := peekOffer()
			v, err := e.c.Peek(e.ctx, "u1", "", e.now)
			if err != nil {
				t.Fatal(err)
			}
			checkView(t, "peek", v, schedule.OpenHint{}, offer[:3], &offer[3])
			want := min(edits+1, maxRefusals)
			if _, loads, _ := e.l.counts(); loads != want {
				t.Fatalf("%d loads, want %d", loads, want)
			}
		})
	}
}

// ---- rebuildScript, versionScript, generationScript (writeHeap, readVersion, keepGenerations; build, Rebuild) ----

// A heap holds at most MaxHeap entries, the offer's first in heap order; it is served
// until it is empty, then rebuilt with what the offer holds then.
func TestCutHeapServesTheOffersFirstEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.cfg.MaxHeap = 6
	e.c = e.newCache()
	var offer []schedule.Entry // ids 1-4 due (the 4th exactly now), 5-10 not yet
	var src schedule.Source
	for i := int64(1); i <= 10; i++ {
		due := t0.Add(time.Duration(i-4) * time.Minute)
		offer = append(offer, once(i, due, 5))
		src.Once = append(src.Once, schedule.OnceTask{ID: i, Start: due, Priority: 5})
	}
	e.l.src = src
	v, err := e.c.Peek(e.ctx, "u1", "", e.now)
	if err != nil {
		t.Fatal(err)
	}
	checkView(t, "cold peek", v, schedule.OpenHint{}, offer[:testMaxDue], &offer[4])
	if got := e.zrange(e.keys.Heap("u1")); !slices.Equal(got, ats(offer[:6])) {
		t.Fatalf("cut heap\n got %v\nwant %v", got, ats(offer[:6]))
	}
	if h := e.hgetall(e.keys.User("u1")); h["cut"] != "1" || h["win"] != unix(offer[6].DueAt) {
		t.Fatalf("user hash %v: want cut 1, win the due time of the first entry left out (%s)", h, unix(offer[6].DueAt))
	}
	// Served warm while entries remain; the next one is the offer's.
	if err := e.c.Pop(e.ctx, "u1", offer[:4]); err != nil {
		t.Fatal(err)
	}
	v, err = e.c.Peek(e.ctx, "u1", "", e.now)
	if err != nil {
		t.Fatal(err)
	}
	checkView(t, "warm peek of what is left", v, schedule.OpenHint{}, nil, &offer[4])
	if _, loads, _ := e.l.counts(); loads != 1 {
		t.Fatalf("%d loads, want 1: a cut heap with entries left is served warm", loads)
	}
	// Empty: stale, rebuilt from what the offer holds now (the cursor moved on).
	if err := e.c.Pop(e.ctx, "u1", offer[4:6]); err != nil {
		t.Fatal(err)
	}
	e.l.src.Once = src.Once[6:]
	v, err = e.c.Peek(e.ctx, "u1", "", e.now)
	if err != nil {
		t.Fatal(err)
	}
	checkView(t, "peek after the cut heap emptied", v, schedule.OpenHint{}, nil, &offer[6])
	if _, loads, _ := e.l.counts(); loads != 2 {
		t.Fatalf("%d loads, want 2: an empty cut heap is rebuilt", loads)
	}
	if h := e.hgetall(e.keys.User("u1")); h["cut"] != "0" {
		t.Fatalf("user hash %v: the rest fits, want cut 0", h)
	}
	if got := e.zrange(e.keys.Heap("u1")); !slices.Equal(got, ats(offer[6:])) {
		t.Fatalf("heap\n got %v\nwant %v", got, ats(offer[6:]))
	}
}

// A cut heap is stale, like a whole one, once it holds an occurrence older than the
// catch-up floor, or is as old as a whole heap may get (Refresh).
func TestCutHeapGoesStale(t *testing.T) {
	t.Parallel()
	for _, later := range []time.Duration{testCatchUp + time.Minute, testRefresh + time.Second} {
		t.Run(later.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.cfg.MaxHeap = 2
			e.c = e.newCache()
			for i := int64(1); i <= 4; i++ {
				e.l.src.Once = append(e.l.src.Once, schedule.OnceTask{ID: i, Start: t0.Add(time.Duration(i) * 20 * time.Minute), Priority: 5})
			}
			if _, err := e.c.Peek(e.ctx, "u1", "", e.now); err != nil {
				t.Fatal(err)
			}
			e.clk.Advance(later)
			if _, err := e.c.Peek(e.ctx, "u1", "", e.now.Add(later)); err != nil {
				t.Fatal(err)
			}
			if _, loads, _ := e.l.counts(); loads != 2 {
				t.Fatalf("%d loads, want 2: the cut heap was not found stale %v later", loads, later)
			}
		})
	}
}

// A cut heap keeps no entry due in its window's last second, where a rotate entry
// moving there would be dropped and come after entries it precedes.
func TestCutOfferLeavesTheLastSecondOut(t *testing.T) {
	t.Parallel()
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	es := []schedule.Entry{once(1, at(1), 5), once(2, at(2), 5), once(3, at(3), 5), once(4, at(3), 4), once(5, at(4), 5)}
	if cached, win, _ := cutOffer(es, 3); len(cached) != 2 || win != at(3).Unix() {
		t.Errorf("cut at 3 of %v: %d entries, window to %d; want 2, %d", ats(es), len(cached), win, at(3).Unix())
	}
	same := []schedule.Entry{once(1, at(1), 5), once(2, at(1), 5), once(3, at(1), 5)}
	if cached, win, _ := cutOffer(same, 2); len(cached) != 2 || win != at(1).Unix() {
		t.Errorf("all in one second: %d entries, want the first 2 (window %d)", len(cached), win)
	}
}

// A warm user's key set, expired, is loaded whatever the rebuild budget says: only a
// poll that needs a rebuild too is turned away.
func TestExpiredKeySetOfAWarmUserIgnoresTheBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.src = peekSource()
	e.l.hashes = []string{"h1"}
	cfg := e.cfg
	cfg.RebuildRate, cfg.RebuildBurst = 0.001, 1
	c := NewCache(e.rdb, e.l, e.clk, cfg)
	if _, err := c.Peek(e.ctx, "u1", "h1", e.now); err != nil { // the one token
		t.Fatal(err)
	}
	e.rdb.Del(e.ctx, e.keys.ClientKeys("u1"))
	if _, err := c.Peek(e.ctx, "u1", "h1", e.now); err != nil {
		t.Fatalf("a warm user's poll with its key set expired, budget spent: %v", err)
	}
	if err := c.VerifyKey(e.ctx, "u1", "h1"); err != nil {
		t.Fatalf("a complete's key check, budget spent: %v", err)
	}
}

// A backlog of more due entries than a heap holds is served from the front, without a
// rebuild per poll.
func TestCutHeapOfDueEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.cfg.MaxHeap = 4
	e.c = e.newCache()
	var offer []schedule.Entry
	for i := int64(1); i <= 9; i++ {
		offer = append(offer, once(i, t0.Add(-time.Minute), 5)) // all due, all at once
		e.l.src.Once = append(e.l.src.Once, schedule.OnceTask{ID: i, Start: t0.Add(-time.Minute), Priority: 5})
	}
	for range 3 {
		v, err := e.c.Peek(e.ctx, "u1", "", e.now)
		if err != nil {
			t.Fatal(err)
		}
		// Next: the due time of the first entry left out (a time, no task).
		checkView(t, "peek", v, schedule.OpenHint{}, offer[:testMaxDue], &schedule.Entry{DueAt: t0.Add(-time.Minute)})
	}
	if _, loads, _ := e.l.counts(); loads != 1 {
		t.Fatalf("%d loads, want 1", loads)
	}
	if n := len(e.zrange(e.keys.Heap("u1"))); n != 4 {
		t.Fatalf("heap of %d entries, want 4", n)
	}
}

func TestRebuildWritesHeapAndMetadata(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.groups = []string{"g2", "g1"}
	e.l.src = peekSource()
	e.hset(e.keys.User("u1"), "ver", "7", "open", "L2", "kver", "4")
	e.rdb.Set(e.ctx, e.keys.GenerationOf("g2", "u1"), "5", 0)
	e.zadd(e.keys.Heap("u1"), once(99, t0, 5)) // an old heap's leftover

	if err := e.c.Rebuild(e.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	until := t0.Add(testHorizon + testRefresh)
	want := map[string]string{"ver": "7", "open": "L2", "kver": "4",
		"hver": "7", "groups": "g1,g2", "gens": "0,5", "win": unix(until), "cut": "0", "exp": unix(t0.Add(testRefresh))}
	got := e.hgetall(e.keys.User("u1"))
	// hat is Redis's time when the rebuild read the version, before MySQL.
	before := time.Now().Add(-time.Minute).UnixMicro()
	if hat, err := strconv.ParseInt(got["hat"], 10, 64); err != nil || hat < before {
		t.Errorf("hat = %q, want Redis's time of the rebuild in µs", got["hat"])
	}
	delete(got, "hat")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("user hash\n got %v\nwant %v", got, want)
	}
	wantHeap := []string{
		"3|r|0000000000000000003|2400|0@" + unix(t0.Add(-time.Hour)),
		"7|d|L5@" + unix(t0.Add(-time.Hour)),
		"4|o|0000000000000000001@" + unix(t0.Add(-30*time.Minute)),
		"4|o|0000000000000000002@" + unix(t0.Add(2*time.Hour)),
	}
	if got := e.zrange(e.keys.Heap("u1")); !slices.Equal(got, wantHeap) {
		t.Errorf("heap\n got %v\nwant %v", got, wantHeap)
	}
	e.wantTTL(e.keys.User("u1"), testTTL)
	e.wantTTL(e.keys.Heap("u1"), testTTL)
	// The generation the heap recorded outlives it (one with no TTL gets one too): an
	// expired counter would start again at 1 and could repeat it.
	e.wantTTL(e.keys.GenerationOf("g2", "u1"), testTTL+time.Minute)
	if !e.l.from.Equal(t0.Add(-testCatchUp)) || !e.l.until.Equal(until) || !slices.Equal(e.l.gotGroups, []string{"g1", "g2"}) {
		t.Errorf("LoadSource(%v, %v, %v), want groups g1,g2 from the floor to the window's end", e.l.gotGroups, e.l.from, e.l.until)
	}

	// An empty offer empties the heap and still writes the metadata.
	e.l.src = schedule.Source{}
	e.rdb.HIncrBy(e.ctx, e.keys.User("u1"), "ver", 1)
	if err := e.c.Rebuild(e.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if e.exists(e.keys.Heap("u1")) {
		t.Errorf("heap after an empty rebuild: %v", e.zrange(e.keys.Heap("u1")))
	}
	if h := e.hgetall(e.keys.User("u1")); h["hver"] != "8" {
		t.Errorf("hver after the second rebuild = %q, want 8", h["hver"])
	}
	v, err := e.c.Peek(e.ctx, "u1", "", e.now)
	if err != nil {
		t.Fatal(err)
	}
	checkView(t, "peek of an empty heap", v, schedule.OpenIs("L2"), nil, nil)
	if _, s, _ := e.l.counts(); s != 2 {
		t.Errorf("the empty heap was not served warm: %d loads, want 2", s)
	}
}

// More entries than one ZADD call takes (the script adds them 500 at a time).
func TestRebuildWritesLargeHeap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.cfg.MaxHeap = 2000
	e.c = e.newCache()
	const n = 1203
	var src schedule.Source
	for i := 1; i <= n; i++ {
		src.Once = append(src.Once, schedule.OnceTask{ID: int64(i), Start: t0.Add(time.Duration(i) * time.Second), Priority: 5})
	}
	e.l.src = src
	if err := e.c.Rebuild(e.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	got := e.zrange(e.keys.Heap("u1"))
	if len(got) != n {
		t.Fatalf("heap has %d members, want %d", len(got), n)
	}
	for i, m := range got {
		if want := at(once(int64(i+1), t0.Add(time.Duration(i+1)*time.Second), 5)); m != want {
			t.Fatalf("heap[%d] = %s, want %s", i, m, want)
		}
	}
}

// A user version that moved while a rebuild read MySQL refuses its write; a group
// generation, on another slot, cannot be checked by the write: the heap is written
// with the generation read before MySQL, and the next peek finds it stale.
func TestRebuildRefusesWhenVersionsMoved(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		between func(c *Cache) error // lands between the rebuild's reads and its write
		written bool
		stale   bool // the next peek finds what was written stale
	}{
		{"user version", func(c *Cache) error { return c.InvalidateUser(context.Background(), "u1") }, false, false},
		{"group generation", func(c *Cache) error { return c.InvalidateGroup(context.Background(), "g2") }, true, true},
		{"absent group generation", func(c *Cache) error { return c.InvalidateGroup(context.Background(), "g1") }, true, true},
		{"another group's generation", func(c *Cache) error { return c.InvalidateGroup(context.Background(), "g3") }, true, false},
		{"another user's version", func(c *Cache) error { return c.InvalidateUser(context.Background(), "u2") }, true, false},
		{"client keys", func(c *Cache) error { return c.KeysChanged(context.Background(), "u1") }, true, false},
		{"a waiting dispatch put", func(c *Cache) error {
			_, err := c.PutWaiting(context.Background(), "u1", waiting("L8", t0, 5))
			return err
		}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.l.groups = []string{"g1", "g2"}
			e.l.src = peekSource()
			e.hset(e.keys.User("u1"), "ver", "2")
			e.rdb.Set(e.ctx, e.keys.GenerationOf("g2", "u1"), "5", 0)
			old := once(99, t0, 5)
			e.zadd(e.keys.Heap("u1"), old)
			e.l.onSource = func(int) {
				if err := tc.between(e.c); err != nil {
					t.Error(err)
				}
			}
			b, err := e.c.build(e.ctx, "u1")
			if err != nil {
				t.Fatal(err)
			}
			if b.written != tc.written {
				t.Fatalf("written = %v, want %v", b.written, tc.written)
			}
			if got, want := ats(b.entries), ats(peekOffer()); !slices.Equal(got, want) {
				t.Errorf("built entries\n got %v\nwant %v", got, want)
			}
			h := e.hgetall(e.keys.User("u1"))
			heap := e.zrange(e.keys.Heap("u1"))
			if tc.written {
				if h["hver"] != "2" || !slices.Equal(heap, ats(peekOffer())) {
					t.Fatalf("written rebuild: hash %v, heap %v", h, heap)
				}
				res, err := e.c.peek(e.ctx, "u1", "g1,g2", "", e.now, testMaxDue, "")
				if err != nil {
					t.Fatal(err)
				}
				if want := map[bool]string{true: "stale", false: "ok"}[tc.stale]; res.status != want {
					t.Fatalf("peek after the rebuild: %v, want %s", res, want)
				}
				return
			}
			if _, ok := h["hver"]; ok || h["gens"] != "" || !slices.Equal(heap, []string{at(old)}) {
				t.Fatalf("refused rebuild wrote: hash %v, heap %v", h, heap)
			}
		})
	}
}

// ---- unlockScript (unlock, rebuild) ----

func TestUnlockReleasesOnlyItsOwnToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lock := e.keys.Lock("u1")
	e.rdb.Set(e.ctx, lock, "theirs", time.Minute)
	e.c.unlock(e.ctx, "u1", "mine")
	if got := e.get(lock); got != "theirs" {
		t.Fatalf("unlock with another token: lock = %q, want theirs", got)
	}
	e.c.unlock(e.ctx, "u1", "theirs")
	if e.exists(lock) {
		t.Fatalf("unlock with the holder's token left the lock: %q", e.get(lock))
	}
	e.c.unlock(e.ctx, "u1", "theirs") // no lock: nothing to do
	if e.exists(lock) {
		t.Fatal("unlock of no lock created one")
	}
}

func TestRebuildLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.src = peekSource()
	lock := e.keys.Lock("u1")

	// Taken by another node: no read, the lock stays theirs.
	e.rdb.Set(e.ctx, lock, "theirs", time.Minute)
	b, err := e.c.rebuild(e.ctx, "u1", "0")
	if err != nil || b != nil {
		t.Fatalf("rebuild under another's lock = %v, %v; want nil, nil", b, err)
	}
	if _, s, _ := e.l.counts(); s != 0 || e.get(lock) != "theirs" {
		t.Fatalf("rebuild under another's lock: %d loads, lock %q", s, e.get(lock))
	}

	// Our lock expires during the read and another node takes it: we leave theirs.
	e.rdb.Del(e.ctx, lock)
	var held string
	e.l.onSource = func(int) {
		held = e.get(lock)
		e.rdb.Set(context.Background(), lock, "next", time.Minute)
	}
	if b, err := e.c.rebuild(e.ctx, "u1", "0"); err != nil || b == nil || !b.written {
		t.Fatalf("rebuild = %+v, %v", b, err)
	}
	if held == "" || held == "next" {
		t.Fatalf("lock during the rebuild = %q, want our token", held)
	}
	if got := e.get(lock); got != "next" {
		t.Fatalf("lock after the rebuild = %q, want the next holder's", got)
	}

	// Free lock, heap already fresh: no read, lock released.
	e.rdb.Del(e.ctx, lock)
	e.l.onSource = nil
	if b, err := e.c.rebuild(e.ctx, "u1", "0"); err != nil || b != nil {
		t.Fatalf("rebuild of a fresh heap = %+v, %v; want nil, nil", b, err)
	}
	if _, s, _ := e.l.counts(); s != 1 || e.exists(lock) {
		t.Fatalf("rebuild of a fresh heap: %d loads (want 1), lock %q", s, e.get(lock))
	}
}

// ---- applyScript (Pop, SetOpen, ClearOpen) ----

func TestSetOpenSetsHintWhateverItWas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, was := range []string{"", openNone, "L1", "L2"} {
		uid := "u-" + was
		user := e.keys.User(uid)
		e.hset(user, "ver", "1")
		if was != "" {
			e.hset(user, "open", was)
		}
		if err := e.c.SetOpen(e.ctx, uid, "L2", nil, nil); err != nil {
			t.Fatal(err)
		}
		if got := e.hgetall(user); got["open"] != "L2" || got["ver"] != "1" {
			t.Errorf("was %q: user hash after SetOpen = %v, want open L2, ver 1", was, got)
		}
		// The hash had no TTL: it gets one.
		e.wantTTL(user, testTTL)
	}
	// A TTL already set is left as it is.
	user := e.keys.User("u-ttl")
	e.hset(user, "open", "-")
	e.rdb.Expire(e.ctx, user, 100*time.Second)
	if err := e.c.SetOpen(e.ctx, "u-ttl", "L3", nil, nil); err != nil {
		t.Fatal(err)
	}
	e.wantTTL(user, 100*time.Second)
	if got := e.hgetall(user)["open"]; got != "L3" {
		t.Errorf("open = %q, want L3", got)
	}
}

func TestClearOpenOnlyIfHintUnchanged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		was  string // "" for absent
		seen schedule.OpenHint
		want string // "" for absent
	}{
		{"", schedule.OpenHint{}, openNone},
		{"", schedule.NoneOpen, ""},
		{"", schedule.OpenIs("L1"), ""},
		{openNone, schedule.NoneOpen, openNone},
		{openNone, schedule.OpenHint{}, openNone},
		{openNone, schedule.OpenIs("L1"), openNone},
		{"L1", schedule.OpenIs("L1"), openNone},
		{"L1", schedule.OpenIs("L2"), "L1"}, // a newer dispatch keeps its hint
		{"L1", schedule.NoneOpen, "L1"},
		{"L1", schedule.OpenHint{}, "L1"},
	}
	for i, tc := range cases {
		uid := "u" + strconv.Itoa(i)
		user := e.keys.User(uid)
		e.hset(user, "ver", "5")
		if tc.was != "" {
			e.hset(user, "open", tc.was)
		}
		if err := e.c.ClearOpen(e.ctx, uid, tc.seen); err != nil {
			t.Fatal(err)
		}
		got, ok := e.hgetall(user)["open"]
		if !ok {
			got = ""
		}
		if got != tc.want {
			t.Errorf("open %q, ClearOpen(%+v): open = %q, want %q", tc.was, tc.seen, got, tc.want)
		}
	}
}

func TestPopAppliesPoppedEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := t0
	win := now.Add(2 * time.Hour)
	var (
		onceDue     = once(1, now, 5)
		rotIn       = rotate(2, now, 5, 30*time.Minute, time.Time{})             // next at now+30m: inside
		rotAtWin    = rotate(3, now, 5, 2*time.Hour, time.Time{})                // next at the window's end: out
		rotPastWin  = rotate(4, now, 5, 3*time.Hour, time.Time{})                // next past the window
		rotEnded    = rotate(5, now, 5, 10*time.Minute, now.Add(5*time.Minute))  // next past its end
		rotLastIn   = rotate(6, now, 5, 10*time.Minute, now.Add(10*time.Minute)) // next exactly at its end
		onceMoved   = once(7, now, 5)                                            // heap has it at now+1m
		rotMoved    = rotate(8, now, 5, 30*time.Minute, time.Time{})             // heap has it at now+30m
		dispatch    = waiting("L3", now, 9)
		absent      = once(10, now, 5)
		untouched   = once(11, now, 5)
		onceMovedAt = onceMoved
		rotMovedAt  = rotMoved
	)
	onceMovedAt.DueAt = now.Add(time.Minute)
	rotMovedAt.DueAt = now.Add(30 * time.Minute)

	for _, open := range []string{"", "L1"} {
		uid := "u" + open
		heap := e.keys.Heap(uid)
		e.hset(e.keys.User(uid), "ver", "1", "hver", "1", "win", unix(win))
		if open != "" {
			e.hset(e.keys.User(uid), "open", open)
		}
		e.zadd(heap, onceDue, rotIn, rotAtWin, rotPastWin, rotEnded, rotLastIn, onceMovedAt, rotMovedAt, dispatch, untouched)
		popped := []schedule.Entry{onceDue, rotIn, rotAtWin, rotPastWin, rotEnded, rotLastIn, onceMoved, rotMoved, dispatch, absent}
		if err := e.c.Pop(e.ctx, uid, popped); err != nil {
			t.Fatal(err)
		}
		// Advanced members keep their member and take their next due time.
		next := func(en schedule.Entry) string { n, _ := en.Next(); return at(n) }
		wantHeap := []string{at(untouched), next(rotLastIn), at(onceMovedAt), next(rotIn), at(rotMovedAt)}
		got := e.zrange(heap)
		slices.Sort(got)
		slices.Sort(wantHeap)
		if !slices.Equal(got, wantHeap) {
			t.Errorf("open %q: heap after Pop\n got %v\nwant %v", open, got, wantHeap)
		}
		h := e.hgetall(e.keys.User(uid))
		if got, ok := h["open"]; ok != (open != "") || got != open {
			t.Errorf("Pop changed the open hint: %q, want %q", got, open)
		}
		if e.pttl(e.keys.User(uid)) >= 0 {
			t.Errorf("Pop set a TTL on the user hash: %v", e.pttl(e.keys.User(uid)))
		}
	}

	// SetOpen pops too, and a pop without a window removes a rotate entry.
	e.zadd(e.keys.Heap("u2"), rotIn, untouched)
	if err := e.c.SetOpen(e.ctx, "u2", "L4", nil, []schedule.Entry{rotIn, untouched}); err != nil {
		t.Fatal(err)
	}
	if got := e.zrange(e.keys.Heap("u2")); len(got) != 0 {
		t.Errorf("heap without a window after SetOpen's pop: %v, want empty", got)
	}
	if got := e.hgetall(e.keys.User("u2"))["open"]; got != "L4" {
		t.Errorf("open after SetOpen = %q, want L4", got)
	}
}

// ---- invalidateScript (InvalidateUser, InvalidateGroup) ----

func TestInvalidateBumpsAndSetsTTLOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	user := e.keys.User("u1")
	last := int64(0)
	for i := 1; i <= 2; i++ {
		if err := e.c.InvalidateUser(e.ctx, "u1"); err != nil {
			t.Fatal(err)
		}
		last = e.newer(e.hgetall(user)["ver"], last)
		e.wantTTL(user, testTTL)
	}
	// A user hash with a TTL keeps it; other fields are left alone.
	e.hset(user, "hver", "2", "open", "L1")
	e.rdb.Expire(e.ctx, user, 100*time.Second)
	if err := e.c.InvalidateUser(e.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	got := e.hgetall(user)
	last = e.newer(got["ver"], last)
	if got["hver"] != "2" || got["open"] != "L1" || len(got) != 3 {
		t.Fatalf("user hash = %v, want a newer ver, hver 2, open L1", got)
	}
	e.wantTTL(user, 100*time.Second)
	// One without gets one.
	e.rdb.Persist(e.ctx, user)
	if err := e.c.InvalidateUser(e.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	e.wantTTL(user, testTTL)
	last = e.newer(e.hgetall(user)["ver"], last)
	// A version far ahead (set by a server whose clock ran fast, or past 2^53) still
	// moves on, by one each time.
	e.hset(user, "ver", "9007199254740993")
	for want := int64(9007199254740994); want <= 9007199254740995; want++ {
		if err := e.c.InvalidateUser(e.ctx, "u1"); err != nil {
			t.Fatal(err)
		}
		if got := e.hgetall(user)["ver"]; got != strconv.FormatInt(want, 10) {
			t.Fatalf("ver after a bump past 2^53 = %s, want %d", got, want)
		}
	}
	// After the hash expired, the next version is still newer than any it held: a
	// reader that saw an old one cannot mistake the new for it.
	e.rdb.Del(e.ctx, user)
	if err := e.c.InvalidateUser(e.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	e.newer(e.hgetall(user)["ver"], last)

	gen := e.keys.Generation("g1", GenCopies-1)
	last = 0
	for i := 1; i <= 2; i++ {
		if err := e.c.InvalidateGroup(e.ctx, "g1"); err != nil {
			t.Fatal(err)
		}
		last = e.newer(e.get(gen), last)
		e.wantTTL(gen, testTTL)
	}
	e.rdb.Expire(e.ctx, gen, 100*time.Second)
	if err := e.c.InvalidateGroup(e.ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	last = e.newer(e.get(gen), last)
	e.wantTTL(gen, 100*time.Second)
	e.rdb.Persist(e.ctx, gen)
	if err := e.c.InvalidateGroup(e.ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	e.wantTTL(gen, testTTL)
	for i := range GenCopies {
		if !e.exists(e.keys.Generation("g1", i)) {
			t.Errorf("copy %d of the group's generation did not move", i)
		}
		if e.exists(e.keys.Generation("g2", i)) {
			t.Error("an invalidation touched another key")
		}
	}
}

// ---- loadKeysScript (loadKeys, VerifyKey), keysChangedScript (KeysChanged) ----

func TestVerifyKeyLoadsKeySet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.hashes = []string{"h1", "h2"}
	set := e.keys.ClientKeys("u1")
	if err := e.c.VerifyKey(e.ctx, "u1", "h1"); err != nil {
		t.Fatalf("VerifyKey(h1): %v", err)
	}
	if got := e.smembers(set); len(got) != 3 || !got["-"] || !got["h1"] || !got["h2"] {
		t.Fatalf("key set = %v, want -, h1, h2", got)
	}
	// KeyTTL is 1.5s: set in milliseconds, not seconds.
	if d := e.pttl(set); d <= 0 || d > testKeyTTL {
		t.Fatalf("key set TTL = %v, want at most %v", d, testKeyTTL)
	}
	if err := e.c.VerifyKey(e.ctx, "u1", "h2"); err != nil {
		t.Fatalf("VerifyKey(h2): %v", err)
	}
	if err := e.c.VerifyKey(e.ctx, "u1", "h3"); !errors.Is(err, ErrBadKey) {
		t.Fatalf("VerifyKey(h3) = %v, want ErrBadKey", err)
	}
	if _, _, k := e.l.counts(); k != 1 {
		t.Fatalf("key set loaded %d times, want once", k)
	}
	// A stale set is replaced, not merged into.
	e.rdb.Del(e.ctx, set)
	e.rdb.SAdd(e.ctx, set, "h9") // no "-": not loaded
	e.l.mu.Lock()
	e.l.hashes = []string{"h2"}
	e.l.mu.Unlock()
	if err := e.c.VerifyKey(e.ctx, "u1", "h1"); !errors.Is(err, ErrBadKey) {
		t.Fatalf("VerifyKey(h1) after revocation = %v, want ErrBadKey", err)
	}
	if got := e.smembers(set); len(got) != 2 || !got["-"] || !got["h2"] {
		t.Fatalf("key set after reload = %v, want -, h2", got)
	}
}

func TestVerifyKeyNoKeysCountsAsLoaded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.c.VerifyKey(e.ctx, "u1", "h1"); !errors.Is(err, ErrBadKey) {
		t.Fatalf("VerifyKey for a user without keys = %v, want ErrBadKey", err)
	}
	if got := e.smembers(e.keys.ClientKeys("u1")); len(got) != 1 || !got["-"] {
		t.Fatalf("key set = %v, want just the marker", got)
	}
	if err := e.c.VerifyKey(e.ctx, "u1", "h1"); !errors.Is(err, ErrBadKey) {
		t.Fatal(err)
	}
	if _, _, k := e.l.counts(); k != 1 {
		t.Fatalf("an empty key set was loaded %d times, want once", k)
	}
}

func TestLoadKeysRefusedWhenKverMoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.hashes = []string{"h1"}
	set := e.keys.ClientKeys("u1")
	e.hset(e.keys.User("u1"), "kver", "6")
	e.l.onKeys = func(n int) {
		if n == 1 {
			if err := e.c.KeysChanged(context.Background(), "u1"); err != nil {
				t.Error(err)
			}
		}
	}
	if err := e.c.loadKeys(e.ctx, "u1", false); err != nil {
		t.Fatal(err)
	}
	if e.exists(set) {
		t.Fatalf("a load overtaken by a key change wrote %v", e.smembers(set))
	}
	if err := e.c.loadKeys(e.ctx, "u1", false); err != nil {
		t.Fatal(err)
	}
	if got := e.smembers(set); len(got) != 2 || !got["h1"] {
		t.Fatalf("key set = %v, want -, h1", got)
	}

	// Keys changing under every load: VerifyKey gives up, unavailable.
	e.rdb.Del(e.ctx, set)
	e.l.onKeys = func(int) { e.c.KeysChanged(context.Background(), "u1") }
	err := e.c.VerifyKey(e.ctx, "u1", "h1")
	if taskd.ErrorCode(err) != taskd.CodeUnavailable {
		t.Fatalf("VerifyKey under constant key changes = %v, want unavailable", err)
	}
	if e.exists(set) {
		t.Fatalf("refused loads wrote %v", e.smembers(set))
	}
}

func TestKeysChangedBumpsKverAndDropsSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	user, set := e.keys.User("u1"), e.keys.ClientKeys("u1")
	e.rdb.SAdd(e.ctx, set, "-", "h1")
	if err := e.c.KeysChanged(e.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if e.exists(set) {
		t.Fatal("KeysChanged left the key set")
	}
	got := e.hgetall(user)
	if len(got) != 1 {
		t.Fatalf("user hash = %v, want kver only", got)
	}
	last := e.newer(got["kver"], 0)
	e.wantTTL(user, testTTL)
	e.hset(user, "ver", "4")
	e.rdb.Expire(e.ctx, user, 100*time.Second)
	if err := e.c.KeysChanged(e.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	got = e.hgetall(user)
	last = e.newer(got["kver"], last)
	if got["ver"] != "4" {
		t.Fatalf("user hash = %v, want ver 4 left alone", got)
	}
	e.wantTTL(user, 100*time.Second)
	// After the hash expired, kver is still newer than any it held: a key load that
	// began before the expiry cannot write a set read before a revocation.
	e.rdb.Del(e.ctx, user)
	if err := e.c.KeysChanged(e.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	e.newer(e.hgetall(user)["kver"], last)
}

// ---- the rebuild budget (Config.RebuildRate) ----

// Past its budget a node answers cold polls with ErrOverBudget (503) without reading
// MySQL; warm polls are not counted; a token later, the rebuild goes through.
func TestRebuildBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.src = peekSource()
	cfg := e.cfg
	cfg.RebuildRate, cfg.RebuildBurst = 0.5, 2 // a token every 2 s
	c := NewCache(e.rdb, e.l, e.clk, cfg)
	for _, uid := range []string{"u1", "u2"} {
		if _, err := c.Peek(e.ctx, uid, "", e.now); err != nil {
			t.Fatalf("cold peek of %s within the burst: %v", uid, err)
		}
	}
	if _, err := c.Peek(e.ctx, "u1", "", e.now); err != nil {
		t.Fatalf("warm peek: %v", err)
	}
	_, err := c.Peek(e.ctx, "u3", "", e.now)
	if !errors.Is(err, ErrOverBudget) || taskd.ErrorCode(err) != taskd.CodeUnavailable {
		t.Fatalf("cold peek past the budget: %v, want ErrOverBudget (unavailable)", err)
	}
	if _, loads, _ := e.l.counts(); loads != 2 {
		t.Fatalf("%d reads of MySQL, want 2: a poll past the budget must not read it", loads)
	}
	if e.exists(e.keys.Lock("u3")) {
		t.Error("a poll turned away left the rebuild lock behind")
	}
	// A key set to load is refused too while the budget is spent, without reading it.
	e.l.hashes = []string{"h1"}
	if _, err := c.Peek(e.ctx, "u4", "h1", e.now); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("a key set to load past the budget: %v, want ErrOverBudget", err)
	}
	if _, _, k := e.l.counts(); k != 0 {
		t.Fatalf("%d key set reads past the budget, want none", k)
	}
	// Another node has a budget of its own.
	if _, err := e.newCache().Peek(e.ctx, "u3", "", e.now); err != nil {
		t.Fatalf("cold peek on another node: %v", err)
	}
}

// A Redis that cannot be reached makes every write unavailable (503), pipelined or
// not, and marks Redis away: the peek is then served from MySQL (away.go).
func TestUnreachableRedisIsUnavailable(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	l := &fakeLoader{hashes: []string{"h1"}}
	c := NewCache(rdb, l, clock.NewFake(t0), Config{Prefix: "unreachable:"})
	c.groups.Store("u1", "g1") // a pipelined peek: the user's script and a generation
	ctx := t.Context()
	// Before a peek found Redis away, the writes try it, and fail as unavailable.
	for name, err := range map[string]error{
		"invalidate group": c.InvalidateGroup(ctx, "g1"),
		"invalidate user":  c.InvalidateUser(ctx, "u1"),
		"invalidate users": c.InvalidateUsers(ctx, []string{"u1", "u2"}),
		"set open":         c.SetOpen(ctx, "u1", "L1", nil, nil),
	} {
		if taskd.ErrorCode(err) != taskd.CodeUnavailable || errors.Is(err, errAway) {
			t.Errorf("%s, Redis not yet found away: %v, want unavailable from the round trip", name, err)
		}
	}
	if c.Away() {
		t.Fatal("writes marked Redis away: only a peek or a key check does")
	}
	if _, err := c.Peek(ctx, "u1", "h1", t0); err != nil || !c.Away() {
		t.Fatalf("peek with Redis unreachable: %v (away %v), want served from MySQL", err, c.Away())
	}
	if _, err := c.Peek(ctx, "u1", "h2", t0); !errors.Is(err, ErrBadKey) {
		t.Fatalf("peek with a key MySQL does not have: %v, want ErrBadKey", err)
	}
	if err := c.VerifyKey(ctx, "u1", "h1"); err != nil {
		t.Fatalf("verify key from MySQL: %v", err)
	}
	// Once it is, they answer at once.
	for name, err := range map[string]error{
		"invalidate group": c.InvalidateGroup(ctx, "g1"),
		"invalidate user":  c.InvalidateUser(ctx, "u1"),
		"set open":         c.SetOpen(ctx, "u1", "L1", nil, nil),
		"forget open":      c.ForgetOpen(ctx, "u1"),
	} {
		if !errors.Is(err, errAway) {
			t.Errorf("%s, Redis away: %v, want errAway", name, err)
		}
	}
}

// replyErr is an error Redis answered with, as go-redis gives it.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// A round trip cut short by its callers' deadline, or an answer Redis gave, does not
// make Redis away; a failed connection, or no answer for awayTimeout, does.
func TestWhatMakesRedisAway(t *testing.T) {
	t.Parallel()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name string
		err  error
		took time.Duration
		want bool
	}{
		{"refused", refused, time.Millisecond, true},
		{"closed", redis.ErrClosed, 0, true},
		{"eof", io.EOF, 0, true},
		{"a short timeout (a caller's deadline)", timeout, 200 * time.Millisecond, false},
		{"no answer for awayTimeout", timeout, awayTimeout, true},
		{"a context deadline, short", context.DeadlineExceeded, 10 * time.Millisecond, false},
		{"a script's error", replyErr("ERR user_script:1: boom"), 0, false},
		{"loading", replyErr("LOADING Redis is loading the dataset in memory"), 0, true},
		{"moved", replyErr("MOVED 1 127.0.0.1:7001"), 0, false},
		{"the pool exhausted by this node", errors.New("redis: connection pool timeout"), 3 * time.Second, false},
	} {
		if got := unreachable(tc.err, tc.took); got != tc.want {
			t.Errorf("%s: unreachable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// While Redis is away each poll spends a token of the rebuild budget: past it, 503.
func TestPollsWhileRedisIsAwayAreBounded(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	c := NewCache(rdb, &fakeLoader{hashes: []string{"h1"}}, clock.NewFake(t0),
		Config{Prefix: "unreachable:", RebuildRate: 0.001, RebuildBurst: 2})
	ctx := t.Context()
	for i := range 2 {
		if _, err := c.Peek(ctx, "u1", "h1", t0); err != nil {
			t.Fatalf("poll %d within the budget: %v", i, err)
		}
	}
	if _, err := c.Peek(ctx, "u1", "h1", t0); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("poll past the budget: %v, want ErrOverBudget", err)
	}
}
