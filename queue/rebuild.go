package queue

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/schedule"
)

// Heap metadata lives in the user hash: hver is the user version the heap was built
// from, groups the comma-joined sorted group ids, gens their generations in the same
// order, win the Unix time the heap's window ends, cut "1" when the heap holds only the
// first entries of the offer (at most MaxHeap; then win is the due time of the first
// one left out, and exp the time the heap is stale at, as a whole one would be). open is "-" when the user has no open dispatch, its log id when it has one;
// absent, it is unknown (ask MySQL).
//
// A cut heap is the offer's first entries in heap order, and stays so: a pop removes
// from the front, and a rotate entry moves to its next occurrence only if it falls
// before win. So the entries due that a peek returns are the offer's, and so is the
// next one when the heap holds any entry not yet due; a cut heap is stale once it is
// empty (the peek script), and a fresh rebuild takes the next ones.

// rebuildTimeout bounds one shared rebuild. It is longer than the lock's TTL on
// purpose: under load the MySQL reads may queue for a pool connection, and a rebuild
// that outlives its lock is only a wasted read (another node may rebuild too; the
// compare-on-version write keeps the heap right).
const rebuildTimeout = 30 * time.Second

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
		if c.overBudget() {
			return (*built)(nil), ErrOverBudget
		}
		token := randomToken()
		ok, err := c.rdb.SetNX(ctx, c.keys.Lock(uid), token, c.cfg.LockTTL).Result()
		if err != nil {
			return (*built)(nil), unavailable("rebuild lock", err)
		}
		if !ok {
			return (*built)(nil), sleep(ctx, 5*time.Millisecond)
		}
		defer c.unlock(context.WithoutCancel(ctx), uid, token)
		// A caller that saw the heap cold just before another rebuild finished gets
		// here after that rebuild released the lock: look again before reading MySQL.
		if fresh, err := c.fresh(ctx, uid); err != nil || fresh {
			return (*built)(nil), err
		}
		if c.budget != nil && !c.budget.Allow() {
			c.cfg.Metrics.OverBudget()
			return (*built)(nil), ErrOverBudget
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

// overBudget reports (and counts) that the rebuild budget is spent: checked before
// the rebuild lock is taken, so that a poll turned away costs Redis little; the token
// itself is taken once the heap is found to need the rebuild.
func (c *Cache) overBudget() bool {
	if c.budget == nil || c.budget.Tokens() >= 1 {
		return false
	}
	c.cfg.Metrics.OverBudget()
	return true
}

// fresh reports whether uid's heap is valid now (the peek script's verdict).
func (c *Cache) fresh(ctx context.Context, uid string) (bool, error) {
	groups, _ := c.groups.Load(uid)
	res, err := c.peek(ctx, uid, groups, "", c.clock.Now(), 0, "")
	if err != nil {
		return false, err
	}
	return res.status == "ok", nil
}

// Rebuild reads uid's offer from MySQL and writes it to Redis, unless an invalidation
// happened meanwhile (then the write is skipped and the next peek rebuilds again). The
// versions are read before MySQL, so a write that passes the version check was built
// from data at least as new as the versions it names.
func (c *Cache) Rebuild(ctx context.Context, uid string) error {
	_, err := c.build(ctx, uid)
	return err
}

// build reads uid's offer from MySQL and writes it to Redis as uid's heap: the
// versions first (readVersion, keepGenerations), then MySQL, then the heap (writeHeap),
// which Redis refuses if the user's version moved meanwhile.
func (c *Cache) build(ctx context.Context, uid string) (*built, error) {
	started := time.Now()
	ver, hat, err := c.readVersion(ctx, uid)
	if err != nil {
		return nil, unavailable("rebuild", err)
	}
	gids, err := c.loader.UserGroups(ctx, uid)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", uid, err)
	}
	sort.Strings(gids)
	gens, err := c.keepGenerations(ctx, uid, gids)
	if err != nil {
		return nil, unavailable("rebuild", err)
	}
	now := c.clock.Now()
	entries, until, err := c.offerOf(ctx, uid, gids, now)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", uid, err)
	}

	groups := strings.Join(gids, ",")
	w := heapWrite{ver: ver, hat: hat, groups: groups, gens: strings.Join(gens, ","), entries: entries,
		win: until.Unix(), cut: "0", exp: now.Add(c.cfg.Refresh).Unix()}
	if len(entries) > c.cfg.MaxHeap {
		w.entries, w.win, w.cut = cutOffer(entries, c.cfg.MaxHeap)
	}
	written, err := c.writeHeap(ctx, uid, w)
	if err != nil {
		return nil, unavailable("rebuild", err)
	}
	c.groups.Store(uid, groups)
	c.cfg.Metrics.Rebuilt(time.Since(started))
	return &built{entries: entries, written: written}, nil
}

// versionScript reads the user's version and Redis's time, on the user's node.
//
//	KEYS[1] -> user hash
//	Returns -> array of two strings (readVersion): the version ("0" when none), Redis's
//	           time in µs
var versionScript = redis.NewScript(`
local t = redis.call('TIME')
return {redis.call('HGET', KEYS[1], 'ver') or '0', string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))}
`)

// readVersion reads uid's version and Redis's time (µs, the heap's hat), before a
// rebuild reads MySQL.
func (c *Cache) readVersion(ctx context.Context, uid string) (ver, hat string, err error) {
	r, err := arrayReply("version", versionScript.Run(ctx, c.rdb, []string{c.keys.User(uid)}))
	if err != nil {
		return "", "", err
	}
	ver, hat = r.str(0), r.str(1)
	if r.len() != 2 {
		r.fail(r.len(), "two fields", nil)
	}
	return ver, hat, r.err
}

// generationScript reads a group generation's copy and keeps it alive at least as long
// as the heap about to record it (a minute more): a counter that expired first could
// start again from a value this heap recorded and make it look fresh after a change.
//
//	KEYS[1] -> the copy of the generation
//	ARGV[1] -> the seconds it must live at least
//	Returns -> string: the generation; nil when the copy is missing (keepGenerations)
var generationScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and redis.call('TTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return v
`)

// keepGenerations reads the generations of gids (sorted) that uid's heap records ("0"
// for a missing one), keeping each alive past the heap, in one round trip (on a
// cluster, one per node concerned): they live on other slots than the user's.
func (c *Cache) keepGenerations(ctx context.Context, uid string, gids []string) ([]string, error) {
	gens := make([]string, len(gids))
	if len(gids) == 0 {
		return gens, nil
	}
	cmds := make([]*redis.Cmd, len(gids))
	err := c.roundTrip(ctx, func(p redis.Pipeliner) {
		for i, g := range gids {
			cmds[i] = generationScript.EvalSha(ctx, p, []string{c.keys.GenerationOf(g, uid)}, c.ttl()+60)
		}
	}, generationScript)
	if err != nil {
		return nil, err
	}
	for i, cmd := range cmds {
		s, ok, err := textReply("generation", cmd)
		if err != nil {
			return nil, err
		}
		gens[i] = "0"
		if ok {
			gens[i] = s
		}
	}
	return gens, nil
}

// heapWrite is what a rebuild writes (rebuildScript): the heap and its metadata.
type heapWrite struct {
	ver     string // the user version read before MySQL: the write's condition
	hat     string // Redis's time (µs) when it was read
	groups  string // the user's group ids, sorted, comma-joined
	gens    string // their generations, in the same order, comma-joined
	win     int64  // Unix time the heap's window ends
	cut     string // "1": the heap holds only the offer's first entries; else "0"
	exp     int64  // Unix time a cut heap is stale at
	entries []schedule.Entry
}

// rebuildScript replaces the heap only if the user version is still the one the rebuild
// read before it read MySQL: a slow rebuild never overwrites a newer invalidation of the
// user. The group generations it records were also read before MySQL; they live on
// other slots, so they are not checked here: a heap written with a generation that has
// moved since is found stale by the next peek, which compares them.
//
// The heap notes hat, Redis's time (µs) when the rebuild read the version, before it
// read MySQL: the heap-change feed leaves a heap built after a change alone
// (HeapChangedAt).
//
//	KEYS[1] -> user hash
//	KEYS[2] -> heap
//	ARGV[1] -> ver, the version read before MySQL
//	ARGV[2] -> groups, comma-joined
//	ARGV[3] -> gens, comma-joined
//	ARGV[4] -> win, Unix s
//	ARGV[5] -> the keys' TTL, s
//	ARGV[6] -> cut, "1" or "0"
//	ARGV[7] -> exp, Unix s
//	ARGV[8] -> hat, µs
//	ARGV[9..] -> score, member pairs: the heap
//	Returns -> integer: 1 written, 0 refused (the version moved)
var rebuildScript = redis.NewScript(`
if (redis.call('HGET', KEYS[1], 'ver') or '0') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
local n = #ARGV
local j = 9
while j <= n do
  local last = math.min(j + 999, n)
  redis.call('ZADD', KEYS[2], unpack(ARGV, j, last))
  j = last + 1
end
redis.call('HSET', KEYS[1], 'hver', ARGV[1], 'groups', ARGV[2], 'gens', ARGV[3], 'win', ARGV[4], 'cut', ARGV[6], 'exp', ARGV[7], 'hat', ARGV[8])
redis.call('EXPIRE', KEYS[1], ARGV[5])
if n >= 9 then redis.call('EXPIRE', KEYS[2], ARGV[5]) end
return 1
`)

// writeHeap writes w as uid's heap, unless uid's version moved past w.ver; it reports
// whether it wrote.
func (c *Cache) writeHeap(ctx context.Context, uid string, w heapWrite) (bool, error) {
	args := make([]any, 0, 8+2*len(w.entries))
	args = append(args, w.ver, w.groups, w.gens, w.win, c.ttl(), w.cut, w.exp, w.hat)
	for _, e := range w.entries {
		args = append(args, e.DueAt.Unix(), Member(e))
	}
	written, err := intReply("rebuild", rebuildScript.Run(ctx, c.rdb, []string{c.keys.User(uid), c.keys.Heap(uid)}, args...))
	return written == 1, err
}

// cutOffer is the first entries of entries (in heap order, more than max of them) that a cut
// heap holds, and its window's end: the due time of the first entry left out. The
// entries due in the window's last second are left out too (unless that leaves none),
// so that a rotate entry moving to that second, which a cut heap drops, cannot come
// after entries it precedes.
func cutOffer(entries []schedule.Entry, max int) (cached []schedule.Entry, win int64, flag string) {
	win = entries[max].DueAt.Unix()
	n := max
	for n > 0 && entries[n-1].DueAt.Unix() == win {
		n--
	}
	if n == 0 {
		n = max
	}
	return entries[:n], win, "1"
}

// unlockScript releases the rebuild lock only if it is still ours.
//
//	KEYS[1] -> the user's rebuild lock
//	ARGV[1] -> the token this rebuild took it with
//	Returns -> integer: 1 released, 0 not ours (or gone); unlock does not read it
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// unlock releases uid's rebuild lock if token still holds it.
func (c *Cache) unlock(ctx context.Context, uid, token string) {
	unlockScript.Run(ctx, c.rdb, []string{c.keys.Lock(uid)}, token)
}
