package queue

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/repeat"
)

// The heap-change feed. An admin change invalidates the heaps it concerns after its
// MySQL commit; an invalidation lost on the way (the admin process died between its
// commit and Redis, or a Redis primary acknowledged it and lost it in a failover) would
// leave them stale until their window renews (Config.Refresh). So each such change also
// notes in MySQL, in its own transaction, what it invalidates (a user, or a group) and
// its time, and every node reads the changes of the last HeapChangeWindow each second and
// applies again each invalidation that is missing: a lost one reaches the users' polls
// within about two seconds, and Refresh need only be a backstop.
//
// An invalidation is missing when nothing in Redis happened after the change: the
// versions are Redis's time in µs (nextVersion), so a user whose version, or whose
// current heap's build (hat), is at or past the change's time plus HeapChangeSkew is
// left alone, and so is a group whose generation copy is. The skew margin bounds the
// difference between the clocks of the nodes and Redis plus a change's time from being
// noted to its commit; a change is told only once it is that old, so the telling itself
// is past the margin and the other nodes leave it alone. What the margin costs: a heap
// built (or a generation bumped by the change's own invalidation) within it counts as
// older than the change, and is rebuilt once more.
const (
	// HeapChangeStep is how often a node reads the heap changes.
	HeapChangeStep = time.Second
	// HeapChangeWindow is how far before its last read a node reads again: a change
	// noted with its writer's clock is seen when it commits, so one committed later
	// than this after it was noted (counting the nodes' skew) could be missed. Each
	// change is told a second time as it leaves the window, which covers a Redis
	// failover that lost the first telling (or the change's own invalidation).
	HeapChangeWindow = 30 * time.Second
	// HeapChangeSkew is the margin for the skew between the nodes' clocks and Redis's
	// (and a change's time to commit): see above.
	HeapChangeSkew = time.Second
	heapChangePage = 500
)

// HeapChanges reads the heap changes noted in MySQL.
type HeapChanges interface {
	// HeapChanges returns the changes noted after (at, id), in that order, at most
	// limit of them.
	HeapChanges(ctx context.Context, at time.Time, id int64, limit int) ([]taskd.HeapChange, error)
}

// HeapFeed is one node's progress through the heap changes.
type HeapFeed struct {
	cache   *Cache
	changes HeapChanges
	log     *slog.Logger
	// read is the clock's time of the last read that told the cache of everything it
	// found; the next read starts HeapChangeWindow before it.
	read time.Time
	// told holds the changes read since then and told once, by id.
	told map[int64]taskd.HeapChange
}

// NewHeapFeed starts a feed of changes at the cache's clock.
func (c *Cache) NewHeapFeed(changes HeapChanges, log *slog.Logger) *HeapFeed {
	return &HeapFeed{cache: c, changes: changes, log: log.With("component", "heap_feed"),
		read: c.clock.Now(), told: map[int64]taskd.HeapChange{}}
}

// Run tells the cache of the heap changes of every node, each HeapChangeStep, until
// ctx is done.
func (f *HeapFeed) Run(ctx context.Context) {
	repeat.Every(ctx, HeapChangeStep, f.log, "heap changes", f.Step)
}

// Step reads the changes noted since HeapChangeWindow before the last complete read and
// tells the cache of each one at least HeapChangeSkew old not told yet; the younger
// ones wait for a later step. On an error it stops: the next step reads from the same
// point again.
func (f *HeapFeed) Step(ctx context.Context) error {
	// At MySQL's precision, so that a change as old as the window is read by the same
	// step that forgets it, not once more by the next.
	now := f.cache.clock.Now().Truncate(time.Microsecond)
	ripe := now.Add(-HeapChangeSkew)
	at, id := f.read.Add(-HeapChangeWindow), int64(0)
	for {
		page, err := f.changes.HeapChanges(ctx, at, id, heapChangePage)
		if err != nil {
			return err
		}
		var tell []taskd.HeapChange
		young := false
		for _, c := range page {
			if c.At.After(ripe) {
				young = true
				break
			}
			if _, done := f.told[c.ID]; !done {
				tell = append(tell, c)
			}
		}
		if err := f.cache.heapsChangedAt(ctx, tell); err != nil {
			return err
		}
		for _, c := range tell {
			f.told[c.ID] = c
		}
		if young || len(page) < heapChangePage {
			break
		}
		last := page[len(page)-1]
		at, id = last.At, last.ID
	}
	f.read = now
	// What the next read will not see again is told once more, then forgotten.
	floor := now.Add(-HeapChangeWindow)
	var again []taskd.HeapChange
	for id, c := range f.told {
		if c.At.Before(floor) {
			again = append(again, c)
			delete(f.told, id)
		}
	}
	_ = f.cache.heapsChangedAt(ctx, again) // the second telling is a precaution
	return nil
}

// heapsChangedAt applies the invalidation of each change that Redis misses, in one
// round trip per usersPerRoundTrip changes (heapChanged, generationChanged). A target
// that is not an executor is skipped.
func (c *Cache) heapsChangedAt(ctx context.Context, changes []taskd.HeapChange) error {
	for len(changes) > 0 {
		n := min(len(changes), usersPerRoundTrip)
		chunk := changes[:n]
		changes = changes[n:]
		err := c.roundTrip(ctx, func(p redis.Pipeliner) {
			for _, ch := range chunk {
				e, err := taskd.ParseExecutor(ch.Target)
				if err != nil {
					continue
				}
				after := ch.At.Add(HeapChangeSkew).UnixMicro()
				if e.Group {
					c.generationChanged(ctx, p, e.ID, after)
				} else {
					c.heapChanged(ctx, p, e.ID, after)
				}
			}
		}, heapChangedScript, generationChangedScript)
		if err != nil {
			return unavailable("heap changes", err)
		}
	}
	return nil
}

// heapChangedScript makes the user's heap stale after a change made before ARGV[1]
// (its time plus the skew margin), unless the heap was built from MySQL at or past that
// time (hat), or, for a heap already stale, the user's version moved at or past it (a
// rebuild reads MySQL after its version). A valid heap is judged by its build alone: a
// waiting dispatch put into it (PutWaiting) moves the version with the heap, not what
// the heap read (see HeapChangeSkew). Either way the open-dispatch hint becomes
// unknown (the next fetch asks MySQL): a rebuild does not renew it, and a change the
// dispatch path noted because Redis refused it (Redis away) may be a hint it could not
// set or clear.
//
//	KEYS[1] -> user hash
//	ARGV[1] -> the change's time plus the margin, µs
//	ARGV[2] -> the user hash's TTL, s (set if it has none)
//	Returns -> integer: 1 made stale, 0 left alone; heapsChangedAt does not read it
var heapChangedScript = redis.NewScript(nextVersion + `
redis.call('HDEL', KEYS[1], 'open', 'openc')
local h = redis.call('HMGET', KEYS[1], 'ver', 'hver', 'hat')
local ver = h[1] or '0'
local after = tonumber(ARGV[1])
if h[2] == ver then
  if (tonumber(h[3] or '0') or 0) >= after then return 0 end
elseif (tonumber(ver) or 0) >= after then
  return 0
end
local v = next_version(ver)
if v then redis.call('HSET', KEYS[1], 'ver', v) else redis.call('HINCRBY', KEYS[1], 'ver', 1) end
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 1
`)

// heapChanged queues on p heapChangedScript for uid, for a change made before after
// (µs). heapsChangedAt's round trip loads the script on NOSCRIPT.
func (c *Cache) heapChanged(ctx context.Context, p redis.Pipeliner, uid string, after int64) {
	heapChangedScript.EvalSha(ctx, p, []string{c.keys.User(uid)}, after, c.ttl())
}

// generationChangedScript moves a copy of a group's generation after a change made
// before ARGV[1], unless it moved at or after that time already.
//
//	KEYS[1] -> the copy of the generation
//	ARGV[1] -> the change's time plus the margin, µs
//	ARGV[2] -> the copy's TTL, s (set if it has none)
//	Returns -> integer: 1 moved, 0 left alone; heapsChangedAt does not read it
var generationChangedScript = redis.NewScript(nextVersion + `
local cur = redis.call('GET', KEYS[1])
if (tonumber(cur or '0') or 0) >= tonumber(ARGV[1]) then return 0 end
local v = next_version(cur)
if v then redis.call('SET', KEYS[1], v, 'KEEPTTL') else redis.call('INCR', KEYS[1]) end
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 1
`)

// generationChanged queues on p generationChangedScript for every copy of gid's
// generation, for a change made before after (µs).
func (c *Cache) generationChanged(ctx context.Context, p redis.Pipeliner, gid string, after int64) {
	for i := range GenCopies {
		generationChangedScript.EvalSha(ctx, p, []string{c.keys.Generation(gid, i)}, after, c.ttl())
	}
}
