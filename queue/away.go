package queue

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sort"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// Redis away. Redis is a cache of what MySQL holds, so a poll can be answered without
// it: when a round trip finds Redis unreachable, this node marks it away and serves
// polls from MySQL (peekMySQL): the client key checked against MySQL's key set (a
// revoked key never passes), the user's offer read as a rebuild reads it, the open
// dispatch left for the caller to ask MySQL. Each such poll spends a token of the
// rebuild budget (Config.RebuildRate), so that a fleet that lost its cache does not
// overrun MySQL: a poll beyond it answers 503 with Retry-After, as a rebuild beyond it
// does. The cache's writes answer errAway at once meanwhile, instead of after a
// timeout each.
//
// Unreachable means the connection failed (refused, reset, closed), or Redis did not
// answer for awayTimeout: a round trip cut short by its callers' own deadline says
// nothing about Redis. While Redis is away a goroutine pings it each awayProbe, and
// the first answer ends the mode. What the dispatch path could not tell Redis meanwhile
// (a hint it could not set or drop, an invalidation) it notes in MySQL for the
// heap-change feed, which applies it, open hint included, once Redis answers: the
// caches of the users concerned are then rebuilt as after a flush.
const (
	awayProbe   = time.Second
	awayTimeout = time.Second
)

// errAway is what the cache's writes answer while Redis is away.
var errAway = taskd.Unavailable("redis", errors.New("redis was unreachable a moment ago; this node tries it again every second"))

// Away reports whether this node believes Redis away (its polls are served from MySQL).
func (c *Cache) Away() bool { return c.away.Load() }

// markAway notes that a round trip begun at began failed with err, unless the
// request's own end (ctx) is what ended it or err does not say Redis is unreachable;
// it reports whether Redis is now marked away (and starts the probe if it was not).
func (c *Cache) markAway(ctx context.Context, err error, began time.Time) bool {
	if ctx.Err() != nil || !unreachable(err, time.Since(began)) {
		return false
	}
	if c.away.CompareAndSwap(false, true) {
		if c.cfg.Log != nil {
			c.cfg.Log.Warn("redis is unreachable: this node serves fetches from MySQL until it answers", "err", err)
		}
		go c.probe()
	}
	return true
}

// probe pings Redis each awayProbe until it answers (and ends the away mode) or the
// client is closed. On a Redis Cluster every primary must answer: a poll of any user
// may need any of them.
func (c *Cache) probe() {
	t := time.NewTicker(awayProbe)
	defer t.Stop()
	for range t.C {
		ctx, cancel := context.WithTimeout(context.Background(), awayTimeout)
		err := c.ping(ctx)
		cancel()
		if err == nil || errors.Is(err, redis.ErrClosed) {
			c.away.Store(false)
			if err == nil && c.cfg.Log != nil {
				c.cfg.Log.Info("redis answers again: fetches are served from the cache")
			}
			return
		}
	}
}

// ping pings Redis: every primary of a cluster, the one server otherwise.
func (c *Cache) ping(ctx context.Context) error {
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, shard *redis.Client) error {
			return shard.Ping(ctx).Err()
		})
	}
	return c.rdb.Ping(ctx).Err()
}

// unreachable reports whether err, from a round trip that lasted took, says Redis could
// not be reached: a connection that failed, a Redis that says it cannot serve
// (LOADING, MASTERDOWN, CLUSTERDOWN), or no answer for awayTimeout. An answer Redis
// gave (a script's error, a cluster redirection), a pool exhausted by this node's own
// load, or a deadline that cut a round trip short are not.
func unreachable(err error, took time.Duration) bool {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return took >= awayTimeout
	case errors.As(err, &ne), errors.Is(err, redis.ErrClosed), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return true
	}
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN"} {
			if redis.HasErrorPrefix(err, p) {
				return true
			}
		}
	}
	return false
}

// peekMySQL is PeekN while Redis is away: the key checked and the offer read from
// MySQL, the open dispatch unknown (the caller asks MySQL), the poll counted on this
// node. It spends a token of the rebuild budget (ErrOverBudget without one) before
// anything else, so that every MySQL read of the mode is bounded, a wrong key's too.
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
