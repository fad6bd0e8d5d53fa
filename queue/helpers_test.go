package queue

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/schedule"
)

// fakeLoader is a Loader over fixed data that counts its calls. Its hooks run inside
// the read, after the data was taken: where a real invalidation could land between a
// rebuild's (or key load's) read and its write.
type fakeLoader struct {
	mu     sync.Mutex
	groups []string
	src    schedule.Source
	hashes []string

	groupCalls, sourceCalls, keyCalls int
	from, until                       time.Time // of the last LoadSource
	gotGroups                         []string  // of the last LoadSource

	onSource func(n int) // n: the LoadSource call count, 1-based
	onKeys   func(n int) // n: the ClientKeyHashes call count, 1-based
}

func (l *fakeLoader) UserGroups(ctx context.Context, uid string) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.groupCalls++
	return append([]string(nil), l.groups...), nil
}

func (l *fakeLoader) LoadSource(ctx context.Context, uid string, groups []string, from, until time.Time) (schedule.Source, error) {
	l.mu.Lock()
	l.sourceCalls++
	n := l.sourceCalls
	l.from, l.until = from, until
	l.gotGroups = append([]string(nil), groups...)
	src := l.src
	hook := l.onSource
	l.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	return src, nil
}

func (l *fakeLoader) ClientKeyHashes(ctx context.Context, uid string) ([]string, time.Time, error) {
	l.mu.Lock()
	l.keyCalls++
	n := l.keyCalls
	hashes := append([]string(nil), l.hashes...)
	hook := l.onKeys
	l.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	return hashes, time.Time{}, nil
}

func (l *fakeLoader) counts() (groups, source, keys int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.groupCalls, l.sourceCalls, l.keyCalls
}

// The configuration every test cache uses; the tests compute windows, floors and
// TTLs from it.
const (
	testCatchUp = time.Hour
	testHorizon = 24 * time.Hour
	testRefresh = time.Hour
	testMaxDue  = 3
	testTTL     = 48 * time.Hour
	testKeyTTL  = 1500 * time.Millisecond // not whole seconds: a seconds/ms mix-up shows
)

type env struct {
	t     *testing.T
	ctx   context.Context
	rdb   redis.UniversalClient
	c     *Cache
	clk   *clock.Fake
	l     *fakeLoader
	now   time.Time
	keys  Keys
	cfg   Config
	redis string // prefix
}

// newEnv returns a cache over the test's own Redis prefix, a fake loader and a fake
// clock set to t0.
func newEnv(t *testing.T) *env {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	l := &fakeLoader{}
	clk := clock.NewFake(t0)
	cfg := Config{
		Prefix:  prefix,
		CatchUp: testCatchUp,
		Horizon: testHorizon,
		Refresh: testRefresh,
		MaxDue:  testMaxDue,
		LockTTL: 3 * time.Second,
		TTL:     testTTL,
		KeyTTL:  testKeyTTL,
	}
	c := NewCache(rdb, l, clk, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return &env{t: t, ctx: ctx, rdb: rdb, c: c, clk: clk, l: l, now: t0, keys: c.Keys(), cfg: cfg, redis: prefix}
}

// newCache is a second cache (another node) over the same Redis prefix and loader.
func (e *env) newCache() *Cache { return NewCache(e.rdb, e.l, e.clk, e.cfg) }

func (e *env) floor() time.Time { return e.now.Add(-testCatchUp).Truncate(time.Second) }

// hgetall reads a hash.
func (e *env) hgetall(key string) map[string]string {
	e.t.Helper()
	m, err := e.rdb.HGetAll(e.ctx, key).Result()
	if err != nil {
		e.t.Fatalf("HGETALL %s: %v", key, err)
	}
	return m
}

// hset writes hash fields.
func (e *env) hset(key string, kv ...any) {
	e.t.Helper()
	if err := e.rdb.HSet(e.ctx, key, kv...).Err(); err != nil {
		e.t.Fatalf("HSET %s: %v", key, err)
	}
}

// zrange reads a sorted set as "member@score" in its order.
func (e *env) zrange(key string) []string {
	e.t.Helper()
	zs, err := e.rdb.ZRangeWithScores(e.ctx, key, 0, -1).Result()
	if err != nil {
		e.t.Fatalf("ZRANGE %s: %v", key, err)
	}
	out := make([]string, 0, len(zs))
	for _, z := range zs {
		out = append(out, z.Member.(string)+"@"+strconv.FormatInt(int64(z.Score), 10))
	}
	return out
}

// zadd writes entries to a heap at their due times.
func (e *env) zadd(key string, es ...schedule.Entry) {
	e.t.Helper()
	for _, en := range es {
		if err := e.rdb.ZAdd(e.ctx, key, redis.Z{Score: float64(en.DueAt.Unix()), Member: Member(en)}).Err(); err != nil {
			e.t.Fatalf("ZADD %s: %v", key, err)
		}
	}
}

// zscore is the member's score and whether it is in the set.
func (e *env) zscore(key, member string) (int64, bool) {
	e.t.Helper()
	s, err := e.rdb.ZScore(e.ctx, key, member).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false
	}
	if err != nil {
		e.t.Fatalf("ZSCORE %s: %v", key, err)
	}
	return int64(s), true
}

func (e *env) smembers(key string) map[string]bool {
	e.t.Helper()
	ms, err := e.rdb.SMembers(e.ctx, key).Result()
	if err != nil {
		e.t.Fatalf("SMEMBERS %s: %v", key, err)
	}
	out := make(map[string]bool, len(ms))
	for _, m := range ms {
		out[m] = true
	}
	return out
}

func (e *env) exists(key string) bool {
	e.t.Helper()
	n, err := e.rdb.Exists(e.ctx, key).Result()
	if err != nil {
		e.t.Fatalf("EXISTS %s: %v", key, err)
	}
	return n == 1
}

// pttl is the key's remaining time to live; negative when it has none or no key.
func (e *env) pttl(key string) time.Duration {
	e.t.Helper()
	d, err := e.rdb.PTTL(e.ctx, key).Result()
	if err != nil {
		e.t.Fatalf("PTTL %s: %v", key, err)
	}
	return d
}

// wantTTL checks that key expires within (want-slack, want].
func (e *env) wantTTL(key string, want time.Duration) {
	e.t.Helper()
	got := e.pttl(key)
	if got > want || got < want-5*time.Second {
		e.t.Errorf("TTL of %s = %v, want about %v", key, got, want)
	}
}

// get reads a string key; "" for none.
func (e *env) get(key string) string {
	e.t.Helper()
	v, err := e.rdb.Get(e.ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		e.t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// at is the entry as the heap stores it: "member@score".
func at(en schedule.Entry) string {
	return Member(en) + "@" + strconv.FormatInt(en.DueAt.Unix(), 10)
}

func ats(es []schedule.Entry) []string {
	out := make([]string, 0, len(es))
	for _, en := range es {
		out = append(out, at(en))
	}
	return out
}

func rotate(id int64, due time.Time, prio int, space time.Duration, end time.Time) schedule.Entry {
	return schedule.Entry{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: id}, DueAt: due, Priority: prio, Space: space, End: end}
}

func waiting(logID string, due time.Time, prio int) schedule.Entry {
	return schedule.Entry{LogID: logID, DueAt: due, Priority: prio}
}

func unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// newer parses a version and fails unless it is greater than than; it returns it.
func (e *env) newer(version string, than int64) int64 {
	e.t.Helper()
	v, err := strconv.ParseInt(version, 10, 64)
	if err != nil || v <= than {
		e.t.Fatalf("version %q, want an integer greater than %d", version, than)
	}
	return v
}

// otherCopy is a copy of gid's generation that uid does not read.
func otherCopy(gid, uid string) int {
	for i := range GenCopies {
		if (Keys{}).Generation(gid, i) != (Keys{}).GenerationOf(gid, uid) {
			return i
		}
	}
	panic("one copy only")
}
