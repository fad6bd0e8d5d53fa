package clientkey_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/clientkey"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/queue"
)

// switchable is the real cache, whose KeysChanged can be made to fail as when Redis is
// away.
type switchable struct {
	clientkey.Cache
	down atomic.Bool
}

func (c *switchable) KeysChanged(ctx context.Context, uid string) error {
	if c.down.Load() {
		return errors.New("redis down")
	}
	return c.Cache.KeysChanged(ctx, uid)
}

func (c *switchable) KeysChangedAt(ctx context.Context, uid string, at time.Time) error {
	if c.down.Load() {
		return errors.New("redis down")
	}
	return c.Cache.KeysChangedAt(ctx, uid, at)
}

type feedEnv struct {
	svc   *clientkey.Service
	st    *store.Store
	cache *switchable
	keys  queue.Keys
	rdb   redis.UniversalClient
	clk   *clock.Fake
}

// newFeedEnv is a service whose key sets are cached for a day (the default), so that
// only a telling drops them.
func newFeedEnv(t *testing.T) *feedEnv {
	t.Helper()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	qc := queue.NewCache(rdb, st, clk, queue.Config{Prefix: prefix})
	cache := &switchable{Cache: qc}
	svc := clientkey.New(st, cache, clk, slog.New(slog.NewTextHandler(io.Discard, nil)), clientkey.Config{})
	return &feedEnv{svc: svc, st: st, cache: cache, keys: qc.Keys(), rdb: rdb, clk: clk}
}

func (e *feedEnv) works(t *testing.T, key string) bool {
	t.Helper()
	_, err := e.svc.Verify(context.Background(), key)
	if err != nil && taskd.ErrorCode(err) != taskd.CodeUnauthenticated {
		t.Fatalf("verify: %v", err)
	}
	return err == nil
}

// A revocation committed by a node that died before telling the cache reaches it
// through the feed: the key stops working at the next step, not when its cached set
// expires a day later.
func TestKeyChangeOfADeadNodeReachesTheCache(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	ctx := context.Background()
	feed := e.svc.NewFeed()
	key, err := e.svc.Issue(ctx, "admin", "42")
	if err != nil {
		t.Fatal(err)
	}
	if !e.works(t, key) {
		t.Fatal("a fresh key does not work")
	}
	// The revocation's own request never reaches the cache.
	if _, err := e.st.RevokeClientKeys(ctx, "admin", "42", e.clk.Now()); err != nil {
		t.Fatal(err)
	}
	if !e.works(t, key) {
		t.Fatal("the cached set was dropped without a telling: this test proves nothing")
	}
	e.clk.Advance(time.Second)
	if err := feed.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if e.works(t, key) {
		t.Fatal("the revoked key still works after the feed's step")
	}
}

// While Redis cannot be told, the feed keeps the changes it could not tell, however
// long that lasts, and tells them once it can.
func TestKeyChangeWaitsForTheCache(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	ctx := context.Background()
	feed := e.svc.NewFeed()
	key, err := e.svc.Issue(ctx, "admin", "42")
	if err != nil {
		t.Fatal(err)
	}
	e.works(t, key)
	e.cache.down.Store(true)
	if _, err := e.svc.Revoke(ctx, "admin", "42"); taskd.ErrorCode(err) != taskd.CodeUnavailable {
		t.Fatalf("revoke while the cache is away: %v", err)
	}
	for range 10 { // five minutes of failed steps: far past the window
		e.clk.Advance(30 * time.Second)
		if err := feed.Step(ctx); err == nil {
			t.Fatal("a step told the cache while it was away")
		}
	}
	if !e.works(t, key) {
		t.Fatal("the cached set went without a telling: this test proves nothing")
	}
	e.cache.down.Store(false)
	e.clk.Advance(time.Second)
	if err := feed.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if e.works(t, key) {
		t.Fatal("the revoked key still works once the cache is back")
	}
}

// Each change is told a second time as it leaves the window: a Redis failover that lost
// the first telling (the replica had not received it) does not leave a revoked key
// working.
func TestKeyChangeIsToldAgain(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	ctx := context.Background()
	feed := e.svc.NewFeed()
	key, err := e.svc.Issue(ctx, "admin", "42")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Revoke(ctx, "admin", "42"); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Second)
	if err := feed.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if e.works(t, key) {
		t.Fatal("a revoked key works")
	}
	// A promoted replica without the tellings: the key set as it was before, loaded
	// before the revocation.
	set := e.keys.ClientKeys("42")
	if err := e.rdb.SAdd(ctx, set, "-", clientkey.Hash(key)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.HSet(ctx, e.keys.User("42"), "kat", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if !e.works(t, key) {
		t.Fatal("the planted set is not used: this test proves nothing")
	}
	for range 40 {
		e.clk.Advance(time.Second)
		if err := feed.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if e.works(t, key) {
		t.Fatal("the revoked key works again after a failover lost its telling")
	}
}

// A key set with keys stays cached for KeyTTL (a day by default); the answer that a uid
// has none stays a minute at most, so that made-up uids cannot fill Redis for a day.
func TestKeySetLifetimes(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	ctx := context.Background()
	key, err := e.svc.Issue(ctx, "admin", "known")
	if err != nil {
		t.Fatal(err)
	}
	e.works(t, key)
	e.works(t, "nobody."+"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
	if ttl := e.rdb.PTTL(ctx, e.keys.ClientKeys("known")).Val(); ttl < 23*time.Hour {
		t.Errorf("a key set with keys lives %s, want a day", ttl)
	}
	if ttl := e.rdb.PTTL(ctx, e.keys.ClientKeys("nobody")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("an unknown uid's answer lives %s, want at most a minute", ttl)
	}
}

// The feed leaves alone a key set loaded after the change it tells of: after many keys
// are issued at once, their users' sets are not dropped and read again from MySQL
// (two tellings per node would make each one read twice more).
func TestKeyChangeLeavesSetsLoadedSince(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	ctx := context.Background()
	feed := e.svc.NewFeed()
	key, err := e.svc.Issue(ctx, "admin", "42")
	if err != nil {
		t.Fatal(err)
	}
	if !e.works(t, key) { // loads the set, with the issue in it
		t.Fatal("a fresh key does not work")
	}
	set := e.keys.ClientKeys("42")
	for range 40 { // the first telling, and the second as it leaves the window
		e.clk.Advance(time.Second)
		if err := feed.Step(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.rdb.Exists(ctx, set).Val(); n != 1 {
			t.Fatal("the feed dropped a key set loaded after the change it told of")
		}
	}
	if !e.works(t, key) {
		t.Fatal("the key stopped working")
	}
}
