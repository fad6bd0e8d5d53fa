package queue

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

// The poll limit: a burst, then the rate, shared by every node (the limiter lives in
// Redis), checked in the poll's own round trip; a poll with a bad key is refused as
// such and costs the user nothing; a cold heap's rebuild does not count twice.
func TestPollLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.src = peekSource()
	e.l.hashes = []string{"h1"}
	cfg := e.cfg
	cfg.PollRate, cfg.PollBurst = 10, 3 // one every 100 ms, three at once
	a, b := NewCache(e.rdb, e.l, e.clk, cfg), NewCache(e.rdb, e.l, e.clk, cfg)
	limited := func(c *Cache) (time.Duration, bool) {
		t.Helper()
		_, err := c.Peek(e.ctx, "u1", "h1", e.clk.Now())
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
	// The first poll finds the heap cold (a rebuild, a second peek): one poll all the same.
	for i, c := range []*Cache{a, b, a} {
		if _, lim := limited(c); lim {
			t.Fatalf("poll %d of the burst refused", i+1)
		}
	}
	if _, _, k := e.l.counts(); k != 1 {
		t.Fatalf("client keys loaded %d times", k)
	}
	if _, err := b.Peek(e.ctx, "u1", "hX", e.clk.Now()); !errors.Is(err, ErrBadKey) {
		t.Fatalf("a bad key past the burst: %v, want ErrBadKey", err)
	}
	wait, lim := limited(b)
	if !lim || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("the fourth poll: limited %v, retry after %v; want refused, at most 100 ms", lim, wait)
	}
	e.clk.Advance(wait)
	if _, lim := limited(a); lim {
		t.Fatalf("refused after waiting the Retry-After")
	}
	if _, lim := limited(b); !lim {
		t.Fatalf("a second poll 0 ms later was let through")
	}
	// Other users have limits of their own; a poll without a key (the service's second
	// look within one request) is not counted.
	if _, err := a.Peek(e.ctx, "u1", "", e.clk.Now()); err != nil {
		t.Fatalf("a keyless peek: %v", err)
	}
	e.l.hashes = []string{"h1"}
	if _, err := a.Peek(e.ctx, "u2", "h1", e.clk.Now()); err != nil {
		t.Fatalf("another user: %v", err)
	}
	// The limiter key holds the exact µs (not a rounded float), and lives no longer than
	// a burst's length (300 ms here) and a second: idle users cost Redis nothing.
	if v, err := e.rdb.Get(e.ctx, e.keys.Poll("u1")).Result(); err != nil || strings.ContainsAny(v, ".e") {
		t.Fatalf("limiter key %q (%v), want whole microseconds", v, err)
	}
	if ttl, err := e.rdb.PTTL(e.ctx, e.keys.Poll("u1")).Result(); err != nil || ttl <= 0 || ttl > 1300*time.Millisecond {
		t.Fatalf("limiter key TTL %v (%v), want at most 1.3 s", ttl, err)
	}
}

// The interval is kept in microseconds: a rate of 600 a second lets 600 polls through
// a second of polls every millisecond (whole milliseconds would let 1,000 through).
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
