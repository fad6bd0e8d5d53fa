package queue

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// InvalidateUser makes uid's heap stale: its next fetch rebuilds it. Call it after the
// MySQL change commits (a user task edit, a membership change, an expiry).
func (c *Cache) InvalidateUser(ctx context.Context, uid string) error {
	return c.bump(ctx, c.keys.User(uid), "ver", "invalidate user")
}

// InvalidateGroup makes the heap of every member of gid stale (seed: del task_info_{GID}).
func (c *Cache) InvalidateGroup(ctx context.Context, gid string) error {
	return c.bump(ctx, c.keys.Generation(gid), "", "invalidate group")
}

// invalidateScript bumps a version counter (a user hash field, or a group generation
// key) and makes sure the key expires some day: a user who never fetches again must not
// leave it behind forever. A generation outlives every heap built from it (the TTL is
// the heaps' own), so expiring it cannot revive a stale heap.
//
// KEYS: the key. ARGV: the hash field ("" for a plain counter), ttl seconds.
var invalidateScript = redis.NewScript(`
if ARGV[1] ~= '' then redis.call('HINCRBY', KEYS[1], ARGV[1], 1) else redis.call('INCR', KEYS[1]) end
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 1
`)

// bump increments a version: the hash field of key, or key itself when field is "".
func (c *Cache) bump(ctx context.Context, key, field, op string) error {
	if err := invalidateScript.Run(ctx, c.rdb, []string{key}, field, c.ttl()).Err(); err != nil {
		return unavailable(op, err)
	}
	return nil
}
