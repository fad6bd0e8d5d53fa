package queue

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/schedule"
)

// putWaitingScript puts a waiting dispatch's entry into the user's heap, where the
// user's next rebuild would put it, instead of making the heap stale: a failure with a
// retry (or a stage handing on) then costs its user no rebuild from MySQL. It does so
// only in a heap that is valid (its version the user's) and whose window reaches the
// entry (a cut heap holds the offer's first entries, and an entry past its window's
// end could come before entries it left out); otherwise it bumps the version, as
// InvalidateUser does, and the next peek rebuilds.
//
// Either way the version moves on, past any rebuild under way: a rebuild that read
// MySQL before the waiting dispatch was committed read the version before that, and
// its write is refused (rebuildScript). A valid heap moves with it (hver), so it stays
// valid with the entry in it.
//
//	KEYS[1] -> user hash
//	KEYS[2] -> heap
//	ARGV[1] -> the entry's score: its due time, Unix s
//	ARGV[2] -> the entry's member
//	ARGV[3] -> the keys' TTL, s
//	Returns -> integer: 1 put, 0 the heap made stale instead
var putWaitingScript = redis.NewScript(nextVersion + `
local h = redis.call('HMGET', KEYS[1], 'ver', 'hver', 'win')
local ver = h[1] or '0'
local put = h[2] == ver and tonumber(ARGV[1]) < tonumber(h[3] or '0')
local v = next_version(ver)
if v then
  redis.call('HSET', KEYS[1], 'ver', v)
else
  redis.call('HINCRBY', KEYS[1], 'ver', 1)
  v = redis.call('HGET', KEYS[1], 'ver') -- as Redis writes it: a Lua number would lose digits
end
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
if not put then return 0 end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[1], 'hver', v)
if redis.call('TTL', KEYS[2]) == -1 then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
return 1
`)

// PutWaiting puts e, a waiting dispatch of uid's (a retry, a next stage), into uid's
// heap after the MySQL change that made it wait committed, or makes the heap stale
// when it cannot (putWaitingScript); it reports which. An error is an invalidation
// that did not happen: the caller notes it for the heap-change feed, as after
// InvalidateUser.
func (c *Cache) PutWaiting(ctx context.Context, uid string, e schedule.Entry) (bool, error) {
	if c.Away() {
		return false, errAway
	}
	n, err := intReply("put waiting", putWaitingScript.Run(ctx, c.rdb, []string{c.keys.User(uid), c.keys.Heap(uid)},
		e.DueAt.Unix(), Member(e), c.ttl()))
	if err != nil {
		return false, unavailable("put waiting", err)
	}
	return n == 1, nil
}
