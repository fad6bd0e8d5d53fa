package queue

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
)

// The per-user poll limit (Config.PollRate, PollBurst): every fetch, every round of a
// long poll and every progress report of a user counts against one GCRA limiter in
// Redis, shared by all nodes. Fetches count inside the peek script, in the round trip
// they make anyway; a progress report counts through pollScript.

// gcra is the limiter as a Lua function, for the scripts that count a poll. It moves
// the limiter key's theoretical arrival time (µs) on by interval and returns nil, or,
// when that would put it more than burst intervals ahead of now, changes nothing and
// returns the µs to wait (as a string). An interval of 0 is no limit.
const gcra = `
local function gcra(key, interval, burst, now)
  if interval <= 0 then return nil end
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), now) + interval
  -- '%.0f': a number's default string form keeps 14 digits, and µs since 1970 have 16.
  if tat - now > burst * interval then return string.format('%.0f', tat - now - burst * interval) end
  -- It expires a second after a whole burst is free again (the margin keeps a node's
  -- clock, which now comes from, and Redis's, which expires it, from disagreeing).
  redis.call('SET', key, string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
  return nil
end
`

// pollScript counts one poll against the user's limit.
//
// KEYS: poll limiter. ARGV: emission interval in µs (0: no limit), burst, now in µs.
// Returns "" or the µs to wait.
var pollScript = redis.NewScript(gcra + `
return gcra(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])) or ''
`)

// CountPoll counts a request of uid other than a fetch (a progress report) against
// uid's poll limit: rate_limited with Retry-After when uid is past it.
func (c *Cache) CountPoll(ctx context.Context, uid string, now time.Time) error {
	interval, burst := c.pollLimit()
	if interval == 0 {
		return nil
	}
	wait, err := pollScript.Run(ctx, c.rdb, []string{c.keys.Poll(uid)}, interval, burst, now.UnixMicro()).Text()
	if err != nil {
		return unavailable("count poll", err)
	}
	if wait != "" {
		return c.limited(uid, wait)
	}
	return nil
}

// limited is the error of a poll of uid refused by the limit, to be tried again after
// wait µs (as the scripts answer it).
func (c *Cache) limited(uid, wait string) error {
	us, _ := strconv.ParseInt(wait, 10, 64)
	c.cfg.Metrics.RateLimited("poll")
	err := taskd.Errorf(taskd.CodeRateLimited, "user %s polls faster than %g a second (burst %d); try again later",
		uid, c.cfg.PollRate, c.cfg.PollBurst)
	err.RetryAfter = time.Duration(us) * time.Microsecond
	return err
}

// CountEnrollment counts one enrollment at now against the deployment's enrollment
// limit, rate a second over all nodes with burst at once, and returns 0, or how long
// to wait when the limit is reached (the enrollment is then not counted). A rate of 0
// is no limit. The limiter is the poll limit's (pollScript), on a key of its own.
func (c *Cache) CountEnrollment(ctx context.Context, rate float64, burst int, now time.Time) (time.Duration, error) {
	if rate <= 0 {
		return 0, nil
	}
	interval := max(1, int64(math.Round(1e6/rate)))
	wait, err := pollScript.Run(ctx, c.rdb, []string{c.keys.Enroll()}, interval, max(1, burst), now.UnixMicro()).Text()
	if err != nil {
		return 0, unavailable("count enrollment", err)
	}
	if wait == "" {
		return 0, nil
	}
	c.cfg.Metrics.RateLimited("enroll")
	us, _ := strconv.ParseInt(wait, 10, 64)
	return time.Duration(us) * time.Microsecond, nil
}
