package queue

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/keyrate"
)

// The per-user poll limit (Config.PollRate, PollBurst): every fetch, every round of a
// long poll and every progress report of a user counts against one token bucket per
// user in this node's memory (package keyrate), once its key has been found valid. A
// user whose polls reach N nodes may make N times as many: the limit protects each
// node's work and MySQL from one key polling as fast as it can send, and counting it in
// Redis made a poll's one script a write (most of its Redis time).

// newPollLimit is the limiter of cfg's poll limit, or nil for none.
func newPollLimit(cfg Config) *keyrate.Limiter {
	if cfg.PollRate <= 0 {
		return nil
	}
	return keyrate.New(cfg.PollRate, cfg.PollBurst)
}

// CountPoll counts a poll of uid at now against uid's poll limit on this node:
// rate_limited with Retry-After when uid is past it (the poll is then not counted). A
// fetch's peek counts itself once the key is checked; other requests that count (a
// progress report) call it after their own key check.
func (c *Cache) CountPoll(uid string, now time.Time) error {
	if c.polls == nil {
		return nil
	}
	if wait, ok := c.polls.Allow(uid, now); !ok {
		return c.limited(uid, wait)
	}
	return nil
}

// PollLimitUsers is how many users hold a bucket of the poll limit on this node: those
// that polled within the time a bucket takes to fill (burst / rate).
func (c *Cache) PollLimitUsers() int {
	if c.polls == nil {
		return 0
	}
	return c.polls.Len()
}

// limited is the error of a poll of uid refused by the limit, to be tried again after
// wait.
func (c *Cache) limited(uid string, wait time.Duration) error {
	c.cfg.Metrics.RateLimited("poll")
	err := taskd.Errorf(taskd.CodeRateLimited, "user %s polls faster than %g a second (burst %d) on this server; try again later",
		uid, c.cfg.PollRate, c.cfg.PollBurst)
	err.RetryAfter = wait
	return err
}

// gcraScript counts one event against a limit shared by every node (GCRA: the key holds
// the theoretical arrival time of the next event, µs; an event that would move it more
// than burst intervals ahead of now is refused, and changes nothing). The key expires a
// second after a whole burst is free again (the margin keeps a node's clock, which now
// comes from, and Redis's, which expires it, from disagreeing).
//
//	KEYS[1] -> the limiter (Keys.Enroll)
//	ARGV[1] -> the emission interval, µs
//	ARGV[2] -> burst
//	ARGV[3] -> now, Unix µs
//	Returns -> string: "" counted, or the µs to wait (decimal; the event is not counted)
var gcraScript = redis.NewScript(`
local interval, burst, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now) + interval
-- '%.0f': a number's default string form keeps 14 digits, and µs since 1970 have 16.
if tat - now > burst * interval then return string.format('%.0f', tat - now - burst * interval) end
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
return ''
`)

// CountEnrollment counts one enrollment at now against the deployment's enrollment
// limit, rate a second over all nodes with burst at once, and returns 0, or how long
// to wait when the limit is reached (the enrollment is then not counted). A rate of 0
// is no limit. Unlike the poll limit it lives in Redis: it bounds the deployment.
func (c *Cache) CountEnrollment(ctx context.Context, rate float64, burst int, now time.Time) (time.Duration, error) {
	if rate <= 0 {
		return 0, nil
	}
	interval := max(1, int64(math.Round(1e6/rate)))
	wait, ok, err := textReply("gcra", gcraScript.Run(ctx, c.rdb, []string{c.keys.Enroll()}, interval, max(1, burst), now.UnixMicro()))
	if err == nil && !ok {
		err = &replyError{script: "gcra", pos: -1, want: "a string", got: nil}
	}
	if err != nil {
		return 0, unavailable("count enrollment", err)
	}
	if wait == "" {
		return 0, nil
	}
	us, err := strconv.ParseInt(wait, 10, 64)
	if err != nil {
		return 0, unavailable("count enrollment", &replyError{script: "gcra", pos: -1, want: `"" or the µs to wait`, got: wait})
	}
	c.cfg.Metrics.RateLimited("enroll")
	return time.Duration(us) * time.Microsecond, nil
}
