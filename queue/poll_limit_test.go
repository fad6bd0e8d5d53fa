package queue

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

// pollRefused peeks as uid with keyHash through c and reports whether the poll limit
// refused it, with the Retry-After; any other error fails t.
func pollRefused(t *testing.T, e *env, c *Cache, uid, keyHash string) (time.Duration, bool) {
	t.Helper()
	_, err := c.Peek(e.ctx, uid, keyHash, e.clk.Now())
	var te *taskd.Error
	switch {
	case err == nil:
		return 0, false
	case errors.As(err, &te) && te.Code == taskd.CodeRateLimited:
		return te.RetryAfter, true
	}
	t.Fatalf("peek: %v", err)
	return 0, false
}

// The poll limit: a burst, then the rate, per node (each node counts in its own
// memory: a user polling two nodes may make twice as many polls); a poll with a bad
// key is refused as such and costs the user nothing; a cold heap's rebuild does not
// count twice; a peek without a key (a request's second look) is not counted.
func TestPollLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.src = peekSource()
	e.l.hashes = []string{"h1"}
	cfg := e.cfg
	cfg.PollRate, cfg.PollBurst = 10, 3 // one every 100 ms, three at once
	a, b := NewCache(e.rdb, e.l, e.clk, cfg), NewCache(e.rdb, e.l, e.clk, cfg)
	// The first poll finds the heap cold (a rebuild, a second peek): one poll all the same.
	for i := range 3 {
		if _, lim := pollRefused(t, e, a, "u1", "h1"); lim {
			t.Fatalf("poll %d of the burst on node a refused", i+1)
		}
	}
	if _, _, k := e.l.counts(); k != 1 {
		t.Fatalf("client keys loaded %d times", k)
	}
	if _, err := a.Peek(e.ctx, "u1", "hX", e.clk.Now()); !errors.Is(err, ErrBadKey) {
		t.Fatalf("a bad key past the burst: %v, want ErrBadKey", err)
	}
	wait, lim := pollRefused(t, e, a, "u1", "h1")
	if !lim || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("the fourth poll on node a: limited %v, retry after %v; want refused, at most 100 ms", lim, wait)
	}
	// Node b counts apart: the same user has a burst of its own there.
	for i := range 3 {
		if _, lim := pollRefused(t, e, b, "u1", "h1"); lim {
			t.Fatalf("poll %d of the burst on node b refused (node a's count reached it)", i+1)
		}
	}
	if _, lim := pollRefused(t, e, b, "u1", "h1"); !lim {
		t.Fatal("the fourth poll on node b was let through")
	}
	e.clk.Advance(wait)
	if _, lim := pollRefused(t, e, a, "u1", "h1"); lim {
		t.Fatalf("refused after waiting the Retry-After")
	}
	if _, lim := pollRefused(t, e, a, "u1", "h1"); !lim {
		t.Fatalf("a second poll 0 ms later was let through")
	}
	if _, err := a.Peek(e.ctx, "u1", "", e.clk.Now()); err != nil {
		t.Fatalf("a keyless peek: %v", err)
	}
	if _, err := a.Peek(e.ctx, "u2", "h1", e.clk.Now()); err != nil {
		t.Fatalf("another user: %v", err)
	}
	// Nothing of the limit is in Redis.
	keys, err := e.rdb.Keys(e.ctx, e.keys.User("u1")+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		switch k {
		case e.keys.User("u1"), e.keys.Heap("u1"), e.keys.ClientKeys("u1"):
		default:
			t.Errorf("key %s in Redis after polls: only the user's hash, heap and key set belong there", k)
		}
	}
}

// Over two nodes a user reaches twice the rate: at 10 a second with a burst of 1, a
// second of polls every 10 ms, half to each node, lets about 20 through.
func TestPollLimitIsPerNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.src = peekSource()
	e.l.hashes = []string{"h1"}
	cfg := e.cfg
	cfg.PollRate, cfg.PollBurst = 10, 1
	nodes := []*Cache{NewCache(e.rdb, e.l, e.clk, cfg), NewCache(e.rdb, e.l, e.clk, cfg)}
	allowed := make([]int, 2)
	for i := range 100 {
		if _, lim := pollRefused(t, e, nodes[i%2], "u1", "h1"); !lim {
			allowed[i%2]++
		}
		e.clk.Advance(10 * time.Millisecond)
	}
	for i, n := range allowed {
		if n < 9 || n > 11 {
			t.Errorf("node %d let %d polls through in a second at 10/s", i, n)
		}
	}
}

// The interval is kept exactly: a rate of 600 a second lets 600 polls through a second
// of polls every millisecond.
func TestPollLimitHighRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.src = peekSource()
	e.l.hashes = []string{"h1"}
	cfg := e.cfg
	cfg.PollRate, cfg.PollBurst = 600, 5
	c := NewCache(e.rdb, e.l, e.clk, cfg)
	allowed := 0
	for range 1000 {
		if _, err := c.Peek(e.ctx, "u1", "h1", e.clk.Now()); err == nil {
			allowed++
		}
		e.clk.Advance(time.Millisecond)
	}
	if allowed < 598 || allowed > 606 { // 600 a second plus the burst
		t.Fatalf("%d polls let through in a second at 600/s", allowed)
	}
}

// The node forgets users that stopped polling: once a user's bucket is full again
// (burst / rate, 2 s at the defaults), it holds nothing for them.
func TestPollLimitForgetsIdleUsers(t *testing.T) {
	t.Parallel()
	cfg := Config{PollRate: 50, PollBurst: 100}
	c := NewCache(nil, nil, nil, cfg)
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	const users = 100_000
	for i := range users {
		if err := c.CountPoll("u"+strconv.Itoa(i), now); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.PollLimitUsers(); got != users {
		t.Fatalf("%d users held, want %d", got, users)
	}
	// Two seconds on, the next polls (of a few other users) sweep the buckets, now full.
	later := now.Add(2*time.Second + time.Millisecond)
	for i := range 1000 {
		c.CountPoll("v"+strconv.Itoa(i), later)
	}
	if got := c.PollLimitUsers(); got != 1000 {
		t.Fatalf("after the first users went idle: %d users held, want the 1000 new ones", got)
	}
	if err := c.CountPoll("u1", later); err != nil {
		t.Fatalf("a user back after idling: %v", err)
	}
}
