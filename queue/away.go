package queue

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// Redis away. Redis is a cache of what MySQL holds, so a poll can be answered without
// it: when a peek finds Redis unreachable, this node marks it away and serves polls
// from MySQL (peekMySQL): the client key checked against MySQL's key set (a revoked key
// never passes), the user's offer read as a rebuild reads it, the open dispatch left
// for the caller to ask MySQL. Each such poll spends a token of the rebuild budget
// (Config.RebuildRate), so that a fleet that lost its cache does not overrun MySQL: a
// poll beyond it answers 503 with Retry-After, as a rebuild beyond it does. The
// cache's writes answer errAway at once meanwhile, instead of after a timeout each.
//
// Once every awayProbe one poll tries Redis again (the others keep to MySQL until it
// answers); the first that finds it back ends the mode. What the dispatch path could
// not tell Redis meanwhile (a hint, a popped entry, an invalidation) it notes in MySQL
// for the heap-change feed, which applies it, open hint included, once Redis answers:
// the caches are then rebuilt as after a flush, for the users whose state changed.
const awayProbe = time.Second

// errAway is what the cache's writes answer while Redis is away.
var errAway = taskd.Unavailable("redis", errors.New("redis was unreachable a moment ago; this node tries it again every second"))

// Away reports whether this node believes Redis away (its polls are served from MySQL).
func (c *Cache) Away() bool { return c.away.Load() != 0 }

// markAway notes that a round trip found Redis unreachable (err), unless the request's
// own end (ctx) is what ended it; it reports whether Redis is now marked away.
func (c *Cache) markAway(ctx context.Context, err error) bool {
	if ctx.Err() != nil || !unreachable(err) {
		return false
	}
	if c.away.CompareAndSwap(0, time.Now().Add(awayProbe).UnixNano()) && c.cfg.Log != nil {
		c.cfg.Log.Warn("redis is unreachable: this node serves fetches from MySQL until it answers", "err", err)
	}
	return true
}

// markBack ends the away mode after a round trip that Redis answered.
func (c *Cache) markBack() {
	if c.away.Load() != 0 && c.away.Swap(0) != 0 && c.cfg.Log != nil {
		c.cfg.Log.Info("redis answers again: fetches are served from the cache")
	}
}

// skipRedis reports whether a poll should not try Redis: it is away and this is not
// the poll that probes it (one each awayProbe).
func (c *Cache) skipRedis() bool {
	at := c.away.Load()
	if at == 0 {
		return false
	}
	now := time.Now().UnixNano()
	if now < at {
		return true
	}
	return !c.away.CompareAndSwap(at, now+int64(awayProbe))
}

// unreachable reports whether err says Redis could not be reached (as opposed to an
// answer Redis gave: a script's error, a missing key, a cluster redirection).
func unreachable(err error) bool {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrClosed),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &ne):
		return true
	}
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN"} {
			if redis.HasErrorPrefix(err, p) {
				return true
			}
		}
		return false
	}
	return strings.Contains(err.Error(), "pool timeout") || strings.Contains(err.Error(), "connection")
}

// peekMySQL is PeekN while Redis is away: the key checked and the offer read from
// MySQL, the open dispatch unknown (the caller asks MySQL), the poll counted on this
// node. It spends a token of the rebuild budget (ErrOverBudget without one).
func (c *Cache) peekMySQL(ctx context.Context, uid, keyHash string, now time.Time, maxDue int) (schedule.View, error) {
	if c.budget != nil && !c.budget.Allow() {
		c.cfg.Metrics.OverBudget()
		return schedule.View{}, ErrOverBudget
	}
	if keyHash != "" {
		hashes, _, err := c.loader.ClientKeyHashes(ctx, uid)
		if err != nil {
			return schedule.View{}, err
		}
		if !slices.Contains(hashes, keyHash) {
			return schedule.View{}, ErrBadKey
		}
		if err := c.CountPoll(uid, now); err != nil {
			return schedule.View{}, err
		}
	}
	entries, err := c.readOffer(ctx, uid, now)
	if err != nil {
		return schedule.View{}, err
	}
	c.cfg.Metrics.Degraded("redis")
	b := built{entries: entries}
	return b.view("", now, maxDue), nil
}

// readOffer reads uid's offer from MySQL as a rebuild does: its groups, then the
// entries (offerOf).
func (c *Cache) readOffer(ctx context.Context, uid string, now time.Time) ([]schedule.Entry, error) {
	gids, err := c.loader.UserGroups(ctx, uid)
	if err != nil {
		return nil, err
	}
	sort.Strings(gids)
	entries, _, err := c.offerOf(ctx, uid, gids, now)
	return entries, err
}

// offerOf reads from MySQL the offer of uid, a member of gids, at now: the entries
// from now-CatchUp to the window's end (until), in heap order.
func (c *Cache) offerOf(ctx context.Context, uid string, gids []string, now time.Time) ([]schedule.Entry, time.Time, error) {
	until := now.Add(c.cfg.Horizon + c.cfg.Refresh).Truncate(time.Second)
	floor := now.Add(-c.cfg.CatchUp).Truncate(time.Second)
	src, err := c.loader.LoadSource(ctx, uid, gids, floor, until)
	if err != nil {
		return nil, until, err
	}
	src.CatchUp = c.cfg.CatchUp
	entries := schedule.Offer(src, schedule.EffectiveCursor(src.Cursor, now, c.cfg.CatchUp), until)
	sort.Slice(entries, func(i, j int) bool { return schedule.Less(entries[i], entries[j]) })
	return entries, until, nil
}

// verifyKeyMySQL is VerifyKey while Redis is away: against the key set in MySQL.
func (c *Cache) verifyKeyMySQL(ctx context.Context, uid, keyHash string) error {
	hashes, _, err := c.loader.ClientKeyHashes(ctx, uid)
	if err != nil {
		return err
	}
	if !slices.Contains(hashes, keyHash) {
		return ErrBadKey
	}
	c.cfg.Metrics.Degraded("redis")
	return nil
}
