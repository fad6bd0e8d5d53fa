package queue

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
)

// InvalidateUser makes uid's heap stale: its next fetch rebuilds it. Call it after the
// MySQL change commits (a user task edit, a membership change, an expiry).
func (c *Cache) InvalidateUser(ctx context.Context, uid string) error {
	if c.Away() {
		return errAway
	}
	return c.bump(ctx, c.keys.User(uid), "ver", "invalidate user")
}

// usersPerRoundTrip bounds the invalidations one pipelined round trip carries.
const usersPerRoundTrip = 1000

// nextVersion is the Lua function every version bump uses: it returns a value
// greater than the current one and than any the key held before it expired, or nil
// when the current one is at or past the clock, and then the caller adds one with
// HINCRBY or INCRBY (exact 64-bit integers; a Lua number is exact only to 2^53). A
// counter that counted up from 1 again after an expiry could repeat a value a reader
// saw before, and make its stale read look current; Redis's clock, in microseconds,
// does not repeat (short of the server's clock going back).
const nextVersion = `
local function next_version(cur)
  local t = redis.call('TIME')
  local v = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if v <= (tonumber(cur or '0') or 0) then return nil end
  return string.format('%d', v)
end
`

// invalidateScript bumps a version (a user hash field, or a group generation key) and
// makes sure the key expires some day: a user who never fetches again must not leave
// it behind forever. A rebuild keeps the generations it recorded alive past its heap.
// A user's version ("ver") also drops the copy of the open dispatch kept with the hint
// (SetOpen): whatever changed the user's heap may have ended that dispatch, and the
// copy is handed out only while MySQL cannot say.
//
// Three methods run it, adjacent below: bump (InvalidateUser), InvalidateUsers and
// InvalidateGroup.
//
//	KEYS[1] -> the key: a user hash, or a copy of a group's generation
//	ARGV[1] -> the hash field ("" for a plain key)
//	ARGV[2] -> the key's TTL, s (set if it has none)
//	Returns -> integer: 1; its callers do not read it
var invalidateScript = redis.NewScript(nextVersion + `
if ARGV[1] == 'ver' then redis.call('HDEL', KEYS[1], 'openc') end
if ARGV[1] ~= '' then
  local v = next_version(redis.call('HGET', KEYS[1], ARGV[1]))
  if v then redis.call('HSET', KEYS[1], ARGV[1], v) else redis.call('HINCRBY', KEYS[1], ARGV[1], 1) end
else
  local v = next_version(redis.call('GET', KEYS[1]))
  if v then redis.call('SET', KEYS[1], v, 'KEEPTTL') else redis.call('INCR', KEYS[1]) end
end
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 1
`)

// bump moves a version on: the hash field of key, or key itself when field is "".
func (c *Cache) bump(ctx context.Context, key, field, op string) error {
	if err := invalidateScript.Run(ctx, c.rdb, []string{key}, field, c.ttl()).Err(); err != nil {
		return unavailable(op, err)
	}
	return nil
}

// InvalidateUsers makes each of uids' heaps stale, as InvalidateUser does, a thousand
// users to a round trip (on a cluster, the client splits each among the nodes): a
// membership change of 30,000 users is 30 round trips, not 30,000.
func (c *Cache) InvalidateUsers(ctx context.Context, uids []string) error {
	if c.Away() {
		return errAway
	}
	for chunk := range slices.Chunk(uids, usersPerRoundTrip) {
		err := c.roundTrip(ctx, func(p redis.Pipeliner) {
			for _, u := range chunk {
				invalidateScript.EvalSha(ctx, p, []string{c.keys.User(u)}, "ver", c.ttl())
			}
		}, invalidateScript)
		if err != nil {
			return unavailable("invalidate users", err)
		}
	}
	return nil
}

// InvalidateGroup makes the heap of every member of gid stale (seed: del task_info_{GID}):
// it moves every copy of the group's generation, in one round trip per Redis node, and
// returns only when all have moved.
func (c *Cache) InvalidateGroup(ctx context.Context, gid string) error {
	if c.Away() {
		return errAway
	}
	err := c.roundTrip(ctx, func(p redis.Pipeliner) {
		for i := range GenCopies {
			invalidateScript.EvalSha(ctx, p, []string{c.keys.Generation(gid, i)}, "", c.ttl())
		}
	}, invalidateScript)
	if err != nil {
		return unavailable("invalidate group", err)
	}
	return nil
}
