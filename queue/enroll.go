package queue

import (
	"context"
	"math"
	"strconv"
	"time"
)

// Enroll is the deployment's enrollment limiter: the theoretical arrival time of the
// next enrollment (GCRA), in microseconds, shared by every node. Its hash tag is its
// own; no script takes it with another key.
func (k Keys) Enroll() string { return k.Prefix + "{enroll}:limit" }

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
