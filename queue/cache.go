package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
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
	// ClientKeyHashes returns the hashes of uid's valid client keys.
	ClientKeyHashes(ctx context.Context, uid string) ([]string, error)
}

// Config tunes the cache.
type Config struct {
	Prefix string // Redis key prefix
	// CatchUp bounds how far behind now a user's offer may start.
	CatchUp time.Duration
	// Horizon is how far ahead a heap must reach to be valid (seed: CACHE_TIME, a day).
	Horizon time.Duration
	// Refresh is how long a heap stays valid: it is built to reach now+Horizon+Refresh.
	Refresh time.Duration
	// MaxDue is how many due entries one peek returns.
	MaxDue int
	// LockTTL bounds how long one node may hold a user's rebuild lock.
	LockTTL time.Duration
	// TTL is how long an idle user's heap stays in Redis.
	TTL time.Duration
	// KeyTTL is how long a user's key set (or the answer that it has none) is trusted
	// before it is read from MySQL again: the bound on a revoked key working when the
	// revocation could not reach Redis.
	KeyTTL time.Duration
	// Metrics records lookups and rebuilds; nil records nothing.
	Metrics *metrics.Metrics
}

func (c *Config) setDefaults() {
	if c.CatchUp <= 0 {
		c.CatchUp = time.Hour
	}
	if c.Horizon <= 0 {
		c.Horizon = 24 * time.Hour
	}
	if c.Refresh <= 0 {
		c.Refresh = time.Hour
	}
	if c.MaxDue <= 0 {
		c.MaxDue = 8
	}
	if c.LockTTL <= 0 {
		c.LockTTL = 3 * time.Second
	}
	if c.TTL <= 0 {
		c.TTL = 48 * time.Hour
	}
	if c.KeyTTL <= 0 {
		c.KeyTTL = time.Minute
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
	// groups remembers each user's groups so that the warm peek can name the group
	// generation keys up front; a wrong guess costs one more round trip, never a wrong
	// answer (the script compares against the groups the heap was built from).
	groups sync.Map // uid -> comma-joined sorted group ids
}

// NewCache returns a cache over rdb that rebuilds from loader.
func NewCache(rdb redis.UniversalClient, loader Loader, clk clock.Clock, cfg Config) *Cache {
	cfg.setDefaults()
	return &Cache{rdb: rdb, keys: Keys{Prefix: cfg.Prefix}, loader: loader, clock: clk, cfg: cfg}
}

// Keys returns the key builder (tests and admin invalidation use it).
func (c *Cache) Keys() Keys { return c.keys }

// ErrBadKey means the client key is not one of the user's valid keys.
var ErrBadKey = taskd.Errorf(taskd.CodeUnauthenticated, "invalid or revoked client key")

// Peek checks keyHash (unless empty) and returns the user's open dispatch hint and the
// entries due at now, rebuilding the heap from MySQL first if it is cold or stale. A
// warm peek is one Redis round trip.
func (c *Cache) Peek(ctx context.Context, uid, keyHash string, now time.Time) (schedule.View, error) {
	var groups string
	if g, ok := c.groups.Load(uid); ok {
		groups = g.(string)
	}
	refused := 0
	for attempt := 0; ; attempt++ {
		if attempt == 50 {
			return schedule.View{}, taskd.Errorf(taskd.CodeUnavailable, "heap of user %s did not settle", uid)
		}
		gids := splitGroups(groups)
		keys := make([]string, 0, 3+len(gids))
		keys = append(keys, c.keys.User(uid), c.keys.Heap(uid), c.keys.ClientKeys(uid))
		for _, g := range gids {
			keys = append(keys, c.keys.Generation(g))
		}
		res, err := peekScript.Run(ctx, c.rdb, keys,
			now.Unix(), now.Add(c.cfg.Horizon).Unix(), c.cfg.MaxDue, groups, keyHash, c.floor(now)).Slice()
		if err != nil {
			return schedule.View{}, unavailable("peek", err)
		}
		switch status := res[0].(string); status {
		case "ok":
			c.cfg.Metrics.HeapLookup(true)
			return parseView(res)
		case "badkey":
			return schedule.View{}, ErrBadKey
		case "nokeys":
			if err := c.loadKeys(ctx, uid); err != nil {
				return schedule.View{}, err
			}
		case "groups":
			groups = res[2].(string)
			c.groups.Store(uid, groups)
		case "cold", "stale":
			c.cfg.Metrics.HeapLookup(false)
			b, err := c.rebuild(ctx, uid, res[3].(string))
			if err != nil {
				return schedule.View{}, err
			}
			if b != nil && !b.written {
				// Invalidations keep landing between this rebuild's reads and its
				// write. The offer it read from MySQL is no older than this request:
				// after a few refusals, serve it without caching it.
				if refused++; refused >= maxRefusals {
					return b.view(res[1].(string), now, c.cfg.MaxDue), nil
				}
			}
			if g, ok := c.groups.Load(uid); ok {
				groups = g.(string)
			}
		default:
			return schedule.View{}, fmt.Errorf("peek: unexpected status %q", status)
		}
	}
}

// rebuildTimeout bounds one shared rebuild. It is longer than the lock's TTL on
// purpose: under load the MySQL reads may queue for a pool connection, and a rebuild
// that outlives its lock is only a wasted read (another node may rebuild too; the
// compare-on-version write keeps the heap right).
const rebuildTimeout = 30 * time.Second

// maxRefusals is how many of its rebuilds' writes a peek lets newer invalidations
// refuse before it serves the offer it read without caching it.
const maxRefusals = 3

// The user hash's open field: absent (unknown), "-" (none) or the open log id.
const openNone = "-"

// openHint reads the user hash's open field.
func openHint(open string) schedule.OpenHint {
	switch open {
	case "":
		return schedule.OpenHint{}
	case openNone:
		return schedule.NoneOpen
	}
	return schedule.OpenIs(open)
}

// openField is the user hash's open field that says h ("" for unknown: absent).
func openField(h schedule.OpenHint) string {
	switch h.State {
	case schedule.OpenNone:
		return openNone
	case schedule.OpenSome:
		return h.LogID
	}
	return ""
}

// built is what a rebuild read, and whether it reached Redis.
type built struct {
	entries []schedule.Entry // in heap order
	written bool
}

// view is the peek answer a refused rebuild's offer gives at now.
func (b *built) view(open string, now time.Time, maxDue int) schedule.View {
	var v schedule.View
	v.Open = openHint(open)
	for i, e := range b.entries {
		if e.DueAt.After(now) {
			next := b.entries[i]
			v.Next = &next
			break
		}
		if len(v.Due) < maxDue {
			v.Due = append(v.Due, e)
		}
	}
	return v
}

func parseView(res []any) (schedule.View, error) {
	var v schedule.View
	v.Open = openHint(res[1].(string))
	due := res[4].([]any)
	for i := 0; i+1 < len(due); i += 2 {
		e, err := parseScored(due[i], due[i+1])
		if err != nil {
			return schedule.View{}, err
		}
		v.Due = append(v.Due, e)
	}
	if next := res[5].([]any); len(next) == 2 {
		e, err := parseScored(next[0], next[1])
		if err != nil {
			return schedule.View{}, err
		}
		v.Next = &e
	}
	return v, nil
}

func parseScored(member, score any) (schedule.Entry, error) {
	s, err := strconv.ParseInt(score.(string), 10, 64)
	if err != nil {
		return schedule.Entry{}, fmt.Errorf("heap score %v: %w", score, err)
	}
	return ParseMember(member.(string), s)
}

func splitGroups(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// rebuild rebuilds uid's heap, coalesced: one rebuild per (user, version) in this
// process (singleflight), and one across processes (a short Redis lock; a node that
// finds the lock taken waits briefly and lets its caller peek again).
//
// The caller waits for the shared rebuild only as long as its own ctx allows: a request
// past its bound answers 503 while the rebuild goes on for whoever comes next.
func (c *Cache) rebuild(ctx context.Context, uid, ver string) (*built, error) {
	ch := c.flight.DoChan(uid+"@"+ver, func() (any, error) {
		// The work is shared by every caller waiting here: it must not end with the
		// first caller's request.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rebuildTimeout)
		defer cancel()
		token := randomToken()
		ok, err := c.rdb.SetNX(ctx, c.keys.Lock(uid), token, c.cfg.LockTTL).Result()
		if err != nil {
			return (*built)(nil), unavailable("rebuild lock", err)
		}
		if !ok {
			return (*built)(nil), sleep(ctx, 5*time.Millisecond)
		}
		defer unlockScript.Run(context.WithoutCancel(ctx), c.rdb, []string{c.keys.Lock(uid)}, token)
		// A caller that saw the heap cold just before another rebuild finished gets
		// here after that rebuild released the lock: look again before reading MySQL.
		if fresh, err := c.fresh(ctx, uid); err != nil || fresh {
			return (*built)(nil), err
		}
		return c.build(ctx, uid)
	})
	select {
	case res := <-ch:
		return res.Val.(*built), res.Err
	case <-ctx.Done():
		return nil, unavailable("rebuild", ctx.Err())
	}
}

// fresh reports whether uid's heap is valid now (the peek script's verdict).
func (c *Cache) fresh(ctx context.Context, uid string) (bool, error) {
	var groups string
	if g, ok := c.groups.Load(uid); ok {
		groups = g.(string)
	}
	keys := []string{c.keys.User(uid), c.keys.Heap(uid), c.keys.ClientKeys(uid)}
	for _, g := range splitGroups(groups) {
		keys = append(keys, c.keys.Generation(g))
	}
	now := c.clock.Now()
	res, err := peekScript.Run(ctx, c.rdb, keys, now.Unix(), now.Add(c.cfg.Horizon).Unix(), 0, groups, "", c.floor(now)).Slice()
	if err != nil {
		return false, unavailable("peek", err)
	}
	return res[0] == "ok", nil
}

// Rebuild reads uid's offer from MySQL and writes it to Redis, unless an invalidation
// happened meanwhile (then the write is skipped and the next peek rebuilds again). The
// versions are read before MySQL, so a write that passes the version check was built
// from data at least as new as the versions it names.
func (c *Cache) Rebuild(ctx context.Context, uid string) error {
	_, err := c.build(ctx, uid)
	return err
}

func (c *Cache) build(ctx context.Context, uid string) (*built, error) {
	started := time.Now()
	ver, err := c.rdb.HGet(ctx, c.keys.User(uid), "ver").Result()
	if errors.Is(err, redis.Nil) {
		ver = "0"
	} else if err != nil {
		return nil, unavailable("rebuild", err)
	}
	gids, err := c.loader.UserGroups(ctx, uid)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", uid, err)
	}
	sort.Strings(gids)
	gens := make([]string, len(gids))
	genKeys := make([]string, len(gids))
	for i, g := range gids {
		genKeys[i] = c.keys.Generation(g)
	}
	if len(gids) > 0 {
		vals, err := c.rdb.MGet(ctx, genKeys...).Result()
		if err != nil {
			return nil, unavailable("rebuild", err)
		}
		for i, v := range vals {
			gens[i] = "0"
			if s, ok := v.(string); ok {
				gens[i] = s
			}
		}
	}
	now := c.clock.Now()
	until := now.Add(c.cfg.Horizon + c.cfg.Refresh).Truncate(time.Second)
	floor := now.Add(-c.cfg.CatchUp).Truncate(time.Second)
	src, err := c.loader.LoadSource(ctx, uid, gids, floor, until)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", uid, err)
	}
	entries := schedule.Offer(src, schedule.EffectiveCursor(src.Cursor, now, c.cfg.CatchUp), until)
	sort.Slice(entries, func(i, j int) bool { return schedule.Less(entries[i], entries[j]) })

	groups := strings.Join(gids, ",")
	args := make([]any, 0, 5+2*len(entries))
	args = append(args, ver, groups, strings.Join(gens, ","), until.Unix(), c.ttl())
	for _, e := range entries {
		args = append(args, e.DueAt.Unix(), Member(e))
	}
	keys := append([]string{c.keys.User(uid), c.keys.Heap(uid)}, genKeys...)
	written, err := rebuildScript.Run(ctx, c.rdb, keys, args...).Int()
	if err != nil {
		return nil, unavailable("rebuild", err)
	}
	c.groups.Store(uid, groups)
	c.cfg.Metrics.Rebuilt(time.Since(started))
	return &built{entries: entries, written: written == 1}, nil
}

// Pop removes the entries a fetch popped (dispatched or dropped; a rotate entry
// advances to its next occurrence), in one round trip, and leaves the open-dispatch
// hint as it is.
func (c *Cache) Pop(ctx context.Context, uid string, popped []schedule.Entry) error {
	if len(popped) == 0 {
		return nil
	}
	return c.apply(ctx, uid, applyKeepOpen, applyAlways, popped)
}

// SetOpen records that logID is uid's open dispatch, whatever the hint said, and pops
// the entries the fetch popped, in one round trip.
func (c *Cache) SetOpen(ctx context.Context, uid, logID string, popped []schedule.Entry) error {
	return c.apply(ctx, uid, logID, applyAlways, popped)
}

// ClearOpen sets uid's open-dispatch hint to none, but only if it still says seen (the
// hint the caller saw): a dispatch made meanwhile keeps its hint.
func (c *Cache) ClearOpen(ctx context.Context, uid string, seen schedule.OpenHint) error {
	return c.apply(ctx, uid, openNone, openField(seen), nil)
}

// applyScript's sentinels, used by Pop, SetOpen and ClearOpen only.
const (
	applyKeepOpen = ""  // ARGV[1]: leave the open field as it is
	applyAlways   = "*" // ARGV[3]: write the open field whatever it says
)

func (c *Cache) apply(ctx context.Context, uid, open, expect string, popped []schedule.Entry) error {
	args := make([]any, 0, 3+3*len(popped))
	args = append(args, open, c.ttl(), expect)
	for _, e := range popped {
		next := int64(0)
		if n, ok := e.Next(); ok {
			next = n.DueAt.Unix()
		}
		args = append(args, Member(e), e.DueAt.Unix(), next)
	}
	err := applyScript.Run(ctx, c.rdb, []string{c.keys.User(uid), c.keys.Heap(uid)}, args...).Err()
	if err != nil {
		return unavailable("apply", err)
	}
	return nil
}

// InvalidateUser makes uid's heap stale: its next fetch rebuilds it. Call it after the
// MySQL change commits (a user task edit, a membership change, an expiry).
func (c *Cache) InvalidateUser(ctx context.Context, uid string) error {
	if err := invalidateScript.Run(ctx, c.rdb, []string{c.keys.User(uid)}, "ver", c.ttl()).Err(); err != nil {
		return unavailable("invalidate user", err)
	}
	return nil
}

func (c *Cache) ttl() int64 { return int64(c.cfg.TTL / time.Second) }

// floor is the catch-up floor at now, in Unix seconds: the same instant a rebuild at now
// starts a new user's offer from.
func (c *Cache) floor(now time.Time) int64 {
	return now.Add(-c.cfg.CatchUp).Truncate(time.Second).Unix()
}

// InvalidateGroup makes the heap of every member of gid stale (seed: del task_info_{GID}).
func (c *Cache) InvalidateGroup(ctx context.Context, gid string) error {
	if err := invalidateScript.Run(ctx, c.rdb, []string{c.keys.Generation(gid)}, "", c.ttl()).Err(); err != nil {
		return unavailable("invalidate group", err)
	}
	return nil
}

// VerifyKey reports whether keyHash is one of uid's valid client keys, loading the key
// set from MySQL when Redis does not have it.
func (c *Cache) VerifyKey(ctx context.Context, uid, keyHash string) error {
	for attempt := 0; attempt < 5; attempt++ {
		member, err := c.rdb.SMIsMember(ctx, c.keys.ClientKeys(uid), keyHash, "-").Result()
		if err != nil {
			return unavailable("verify key", err)
		}
		if member[0] {
			return nil
		}
		if member[1] {
			return ErrBadKey
		}
		if err := c.loadKeys(ctx, uid); err != nil {
			return err
		}
	}
	return taskd.Errorf(taskd.CodeUnavailable, "client keys of user %s did not settle", uid)
}

func (c *Cache) loadKeys(ctx context.Context, uid string) error {
	kver, err := c.rdb.HGet(ctx, c.keys.User(uid), "kver").Result()
	if errors.Is(err, redis.Nil) {
		kver = "0"
	} else if err != nil {
		return unavailable("load keys", err)
	}
	hashes, err := c.loader.ClientKeyHashes(ctx, uid)
	if err != nil {
		return fmt.Errorf("load keys of %s: %w", uid, err)
	}
	args := make([]any, 0, 2+len(hashes))
	args = append(args, kver, c.cfg.KeyTTL.Milliseconds())
	for _, h := range hashes {
		args = append(args, h)
	}
	err = loadKeysScript.Run(ctx, c.rdb, []string{c.keys.User(uid), c.keys.ClientKeys(uid)}, args...).Err()
	if err != nil {
		return unavailable("load keys", err)
	}
	return nil
}

// KeysChanged drops uid's cached key set; call it after creating or revoking a key in
// MySQL, so that a revoked key stops working at once.
func (c *Cache) KeysChanged(ctx context.Context, uid string) error {
	err := keysChangedScript.Run(ctx, c.rdb, []string{c.keys.User(uid), c.keys.ClientKeys(uid)}, c.ttl()).Err()
	if err != nil {
		return unavailable("keys changed", err)
	}
	return nil
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
