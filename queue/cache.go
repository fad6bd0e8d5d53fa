package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/keyrate"
	"github.com/taskpull/taskd/internal/metrics"
	"github.com/taskpull/taskd/schedule"
)

// Loader reads from the system of record (MySQL) what the cache is built from.
type Loader interface {
	// UserGroups returns the ids of the groups uid belongs to.
	UserGroups(ctx context.Context, uid string) ([]string, error)
	// LoadSource returns uid's cursor and exclude set and the active tasks targeted at
	// uid or its groups that can have an occurrence in [from, until).
	LoadSource(ctx context.Context, uid string, groups []string, from, until time.Time) (schedule.Source, error)
	// ClientKeyHashes returns the hashes of uid's valid client keys, and when they
	// last changed (zero: not known).
	ClientKeyHashes(ctx context.Context, uid string) (hashes []string, changed time.Time, err error)
}

// Config tunes the cache.
type Config struct {
	Prefix string // Redis key prefix
	// CatchUp bounds how far behind now a user's offer may start.
	CatchUp time.Duration
	// Horizon is how far ahead a heap must reach to be valid (seed: CACHE_TIME, a day).
	Horizon time.Duration
	// Refresh is how long a heap stays valid: it is built to reach now+Horizon+Refresh.
	// It bounds how long a lost invalidation the heap-change feed does not apply again
	// leaves a heap stale (default 6 hours).
	Refresh time.Duration
	// MaxDue is how many due entries one peek returns.
	MaxDue int
	// MaxHeap is how many entries a user's cached heap holds at most, nearest due
	// first: up to 128, Redis keeps a sorted set in its compact encoding (listpack,
	// zset-max-listpack-entries), several times smaller than a larger one.
	MaxHeap int
	// LockTTL bounds how long one node may hold a user's rebuild lock.
	LockTTL time.Duration
	// TTL is how long an idle user's heap stays in Redis.
	TTL time.Duration
	// KeyTTL is how long a user's key set stays in Redis before it is read from MySQL
	// again, if no change of the keys dropped it sooner (the answer that a user has no
	// key stays a minute at most).
	KeyTTL time.Duration
	// RebuildRate and RebuildBurst bound this node's heap rebuilds (MySQL reads), a
	// token bucket: so many a second, so many at once. A poll that needs a rebuild
	// beyond it answers 503 unavailable with a jittered Retry-After, so that a Redis
	// that lost its data does not send every poll to MySQL at once. Zero: no bound.
	RebuildRate  float64
	RebuildBurst int
	// PollRate and PollBurst bound each user's polls (fetches, each round of a long poll,
	// progress reports) on this node (a token bucket per user in its memory, counted once
	// the poll's key is found valid): so many a second, so many at once. A poll beyond it
	// answers 429 rate_limited with Retry-After. Zero: no bound.
	PollRate  float64
	PollBurst int
	// Metrics records lookups and rebuilds; nil records nothing.
	Metrics *metrics.Metrics
	// Log says when Redis goes away and comes back (away.go); nil says nothing.
	Log *slog.Logger
}

func (c *Config) setDefaults() {
	if c.CatchUp <= 0 {
		c.CatchUp = time.Hour
	}
	if c.Horizon <= 0 {
		c.Horizon = 24 * time.Hour
	}
	if c.Refresh <= 0 {
		c.Refresh = 6 * time.Hour
	}
	if c.MaxDue <= 0 {
		c.MaxDue = 8
	}
	if c.MaxHeap <= 0 {
		c.MaxHeap = 128
	}
	if c.LockTTL <= 0 {
		c.LockTTL = 3 * time.Second
	}
	if c.TTL <= 0 {
		c.TTL = 48 * time.Hour
	}
	if c.KeyTTL <= 0 {
		c.KeyTTL = 24 * time.Hour
	}
	if c.RebuildBurst <= 0 {
		c.RebuildBurst = max(1, int(c.RebuildRate))
	}
	if c.PollBurst <= 0 {
		c.PollBurst = max(1, int(c.PollRate))
	}
}

// Cache is the Redis side of the per-user heaps, open-dispatch hints and client keys.
type Cache struct {
	rdb    redis.UniversalClient
	keys   Keys
	loader Loader
	clock  clock.Clock
	cfg    Config
	flight singleflight.Group
	budget *rate.Limiter // nil: rebuilds are not bounded
	// groups remembers each user's groups (groups.go).
	groups userGroups
	// peeks sends the peeks of concurrent polls in shared round trips.
	peeks peekPipeline
	// polls is the poll limit (limit.go); nil: none.
	polls *keyrate.Limiter
	// times is the latest second's peek arguments (peekTimes).
	times atomic.Pointer[peekTimes]
	// plainPeek is set once Redis answered that it does not know EVALSHA_RO (before
	// 7.0): the peek is sent as a plain EVALSHA from then on.
	plainPeek atomic.Bool
	// away is set while Redis is unreachable (away.go).
	away atomic.Bool
}

// NewCache returns a cache over rdb that rebuilds from loader.
func NewCache(rdb redis.UniversalClient, loader Loader, clk clock.Clock, cfg Config) *Cache {
	cfg.setDefaults()
	c := &Cache{rdb: rdb, keys: Keys{Prefix: cfg.Prefix}, loader: loader, clock: clk, cfg: cfg}
	c.peeks = peekPipeline{flights: peekFlights, send: c.sendPeeks}
	c.polls = newPollLimit(cfg)
	if cfg.RebuildRate > 0 {
		c.budget = rate.NewLimiter(rate.Limit(cfg.RebuildRate), cfg.RebuildBurst)
	}
	return c
}

// Keys returns the key builder (tests read the keys it names).
func (c *Cache) Keys() Keys { return c.keys }

// ErrOverBudget turns a poll away when the node has spent its rebuild budget
// (Config.RebuildRate): the reply is 503 with a jittered Retry-After.
var ErrOverBudget = taskd.Errorf(taskd.CodeUnavailable,
	"this node is rebuilding its caches from MySQL at its bounded rate (DISPATCH_REBUILD_RATE); try again shortly")

// ErrBadKey means the client key is not one of the user's valid keys.
var ErrBadKey = taskd.Errorf(taskd.CodeUnauthenticated, "invalid or revoked client key")

func (c *Cache) ttl() int64 { return int64(c.cfg.TTL / time.Second) }

// floor is the catch-up floor at now, in Unix seconds: the same instant a rebuild at now
// starts a new user's offer from.
func (c *Cache) floor(now time.Time) int64 {
	return now.Add(-c.cfg.CatchUp).Truncate(time.Second).Unix()
}

// unavailable gives a Redis error its kind, with op as context: a Redis that cannot be
// reached, is loading, read-only (a failover), out of memory or busy is unavailable
// (503, retry later); any other error reply is a bug (internal, logged, not shown).
func unavailable(op string, err error) error {
	wrapped := fmt.Errorf("%s: %w", op, err)
	var te *taskd.Error
	switch {
	case errors.As(err, &te):
		return err
	case redisUnreachable(err):
		return taskd.Unavailable("redis", wrapped)
	}
	return &taskd.Error{Code: taskd.CodeInternal, Message: "internal error", Err: wrapped}
}

// busyReplies are the Redis error replies that mean "not now", not "wrong".
var busyReplies = []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN",
	"BUSY", "NOREPLICAS", "OOM", "MOVED", "ASK"}

func redisUnreachable(err error) bool {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &ne) {
		return true
	}
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range busyReplies {
			if redis.HasErrorPrefix(err, p) {
				return true
			}
		}
		return false
	}
	// Anything else the client itself says (pool timeout, connection errors) is about
	// reaching Redis.
	return strings.Contains(err.Error(), "pool timeout") || strings.Contains(err.Error(), "connection")
}

func randomToken() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// roundTrip sends fill's commands in one pipeline (on a cluster, one round trip to each
// node concerned, in parallel) and returns the first error but a nil reply. A script a
// Redis does not know (NOSCRIPT: after a restart or a failover, or on a new node) is
// loaded on every node, and the whole round trip is sent once more.
func (c *Cache) roundTrip(ctx context.Context, fill func(redis.Pipeliner), scripts ...*redis.Script) error {
	for attempt := 0; ; attempt++ {
		cmds, failed := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { fill(p); return nil })
		var err error
		if !errors.Is(failed, redis.Nil) {
			// Set when the round trip itself failed, whose commands may carry no error
			// of their own (a Redis that cannot be reached).
			err = failed
		}
		noScript := false
		for _, cmd := range cmds {
			e := cmd.Err()
			if e == nil || errors.Is(e, redis.Nil) {
				continue
			}
			if redis.HasErrorPrefix(e, "NOSCRIPT") {
				noScript = true
			}
			if err == nil {
				err = e
			}
		}
		if !noScript || attempt > 0 {
			return err
		}
		for _, s := range scripts {
			if err := s.Load(ctx, c.rdb).Err(); err != nil {
				return err
			}
		}
	}
}

// readGenerations queues, on p, the reads of the copies of the groups' generations
// that uid reads.
func (c *Cache) readGenerations(ctx context.Context, p redis.Pipeliner, uid string, gids []string) []*redis.StringCmd {
	cmds := make([]*redis.StringCmd, len(gids))
	for i, g := range gids {
		cmds[i] = p.Get(ctx, c.keys.GenerationOf(g, uid))
	}
	return cmds
}
