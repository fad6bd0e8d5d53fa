package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
)

// noKeysTTL bounds how long the answer that a uid has no key stays in Redis.
const noKeysTTL = time.Minute

// VerifyKey reports whether keyHash is one of uid's valid client keys, loading the key
// set from MySQL when Redis does not have it.
func (c *Cache) VerifyKey(ctx context.Context, uid, keyHash string) error {
	return c.verifyKey(ctx, uid, keyHash)
}

// VerifyCompleting is VerifyKey for a complete of uid's dispatch logID: once the key is
// found valid, the same round trip drops the copy kept with uid's hint if it is of
// logID, and leaves logID's tombstone (kept.go). dropped is false when that could not be
// done (Redis away, or refusing writes: the key is then checked by a read, or in
// MySQL): the caller makes the hint unknown after its complete instead.
func (c *Cache) VerifyCompleting(ctx context.Context, uid, keyHash, logID string) (dropped bool, err error) {
	if c.Away() {
		return false, c.verifyKeyMySQL(ctx, uid, keyHash)
	}
	began := time.Now()
	m, err := dropCopyScript.Run(ctx, c.rdb, []string{c.keys.User(uid), c.keys.ClientKeys(uid)}, logID, keyHash, c.ttl()).Int64Slice()
	switch {
	case err == nil && len(m) == 2 && m[0] == 1:
		return true, nil
	case err == nil && len(m) == 2 && m[1] == 1:
		return false, ErrBadKey
	case err != nil && c.markAway(ctx, err, began):
		return false, c.verifyKeyMySQL(ctx, uid, keyHash)
	}
	// The key set is not loaded, or Redis refused the script (a write): the check
	// as VerifyKey makes it, and then the drop without the check.
	if err := c.VerifyKey(ctx, uid, keyHash); err != nil {
		return false, err
	}
	m, err = dropCopyScript.Run(ctx, c.rdb, []string{c.keys.User(uid), c.keys.ClientKeys(uid)}, logID, "", c.ttl()).Int64Slice()
	return err == nil && len(m) == 2 && m[0] == 1, nil
}

func (c *Cache) verifyKey(ctx context.Context, uid, keyHash string) error {
	if c.Away() {
		return c.verifyKeyMySQL(ctx, uid, keyHash)
	}
	for attempt := 0; attempt < 5; attempt++ {
		began := time.Now()
		member, err := c.rdb.SMIsMember(ctx, c.keys.ClientKeys(uid), keyHash, "-").Result()
		if err != nil {
			if c.markAway(ctx, err, began) {
				return c.verifyKeyMySQL(ctx, uid, keyHash)
			}
			return unavailable("verify key", err)
		}
		if member[0] {
			return nil
		}
		if member[1] {
			return ErrBadKey
		}
		if err := c.loadKeys(ctx, uid, false); err != nil {
			return err
		}
	}
	return taskd.Errorf(taskd.CodeUnavailable, "client keys of user %s did not settle", uid)
}

// loadKeysScript installs the user's client key hashes read from MySQL, unless a key
// was created or revoked since the read began (kver moved). "-" marks the set as loaded
// even when the user has no key. A change of the keys drops the set (KeysChanged, told
// by the change's request and by every node's reading of the changes), so the set may
// live long: its TTL is a backstop, and keeps Redis clear of idle users.
//
// The user hash's kat notes when the keys the set holds last changed (µs, from MySQL:
// the same clock as the changes the feed reads), so that the feed leaves a set loaded
// after a change alone (KeysChangedAt).
//
//	KEYS[1] -> user hash
//	KEYS[2] -> key set
//	ARGV[1] -> kver, the key version read before MySQL
//	ARGV[2] -> the key set's TTL, ms
//	ARGV[3] -> kat, µs
//	ARGV[4] -> the user hash's TTL, s (set if it has none)
//	ARGV[5..] -> the key hashes
//	Returns -> integer: 1 installed, 0 refused (kver moved); loadKeys does not read it
var loadKeysScript = redis.NewScript(`
if (redis.call('HGET', KEYS[1], 'kver') or '0') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
redis.call('SADD', KEYS[2], '-', unpack(ARGV, 5))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[1], 'kat', ARGV[3])
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], ARGV[4]) end
return 1
`)

// loadKeys installs uid's key hashes from the Loader in Redis. It takes nothing from
// the rebuild budget (a key set is one indexed read, made again only after a change of
// the keys or KeyTTL), but with bounded, for a user whose heap needs a rebuild too, it is
// refused while the budget is spent: after Redis lost its data, a poll turned away
// costs MySQL nothing.
func (c *Cache) loadKeys(ctx context.Context, uid string, bounded bool) error {
	if bounded && c.budget != nil && c.budget.Tokens() < 1 {
		c.cfg.Metrics.OverBudget()
		return ErrOverBudget
	}
	kver, err := c.rdb.HGet(ctx, c.keys.User(uid), "kver").Result()
	if errors.Is(err, redis.Nil) {
		kver = "0"
	} else if err != nil {
		return unavailable("load keys", err)
	}
	hashes, changed, err := c.loader.ClientKeyHashes(ctx, uid)
	if err != nil {
		return fmt.Errorf("load keys of %s: %w", uid, err)
	}
	ttl := c.cfg.KeyTTL
	if len(hashes) == 0 {
		// A uid without keys is most often a probe: its answer is kept briefly, so that
		// made-up uids cannot fill Redis for long.
		ttl = min(ttl, noKeysTTL)
	}
	var kat int64
	if !changed.IsZero() {
		kat = changed.UnixMicro()
	}
	args := make([]any, 0, 4+len(hashes))
	args = append(args, kver, ttl.Milliseconds(), kat, c.ttl())
	for _, h := range hashes {
		args = append(args, h)
	}
	err = loadKeysScript.Run(ctx, c.rdb, []string{c.keys.User(uid), c.keys.ClientKeys(uid)}, args...).Err()
	if err != nil {
		return unavailable("load keys", err)
	}
	return nil
}

// keysChangedScript invalidates the user's cached key set after a key was created or
// revoked in MySQL.
//
//	KEYS[1] -> user hash
//	KEYS[2] -> key set
//	ARGV[1] -> the user hash's TTL, s (set if it has none)
//	Returns -> integer: 1; KeysChanged does not read it
var keysChangedScript = redis.NewScript(nextVersion + `
local v = next_version(redis.call('HGET', KEYS[1], 'kver'))
if v then redis.call('HSET', KEYS[1], 'kver', v) else redis.call('HINCRBY', KEYS[1], 'kver', 1) end
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
redis.call('DEL', KEYS[2])
return 1
`)

// KeysChanged drops uid's cached key set; call it after creating or revoking a key in
// MySQL, so that a revoked key stops working at once.
func (c *Cache) KeysChanged(ctx context.Context, uid string) error {
	if c.Away() {
		return errAway
	}
	err := keysChangedScript.Run(ctx, c.rdb, []string{c.keys.User(uid), c.keys.ClientKeys(uid)}, c.ttl()).Err()
	if err != nil {
		return unavailable("keys changed", err)
	}
	return nil
}

// keysChangedAtScript is keysChangedScript for a change the feed read, made at
// ARGV[1]: a set loaded after it (kat at or past it) holds it already and stays.
//
//	KEYS[1] -> user hash
//	KEYS[2] -> key set
//	ARGV[1] -> the change's time, µs
//	ARGV[2] -> the user hash's TTL, s (set if it has none)
//	Returns -> integer: 1 dropped, 0 left alone; KeysChangedAt does not read it
var keysChangedAtScript = redis.NewScript(nextVersion + `
if tonumber(redis.call('HGET', KEYS[1], 'kat') or '0') >= tonumber(ARGV[1]) and redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local v = next_version(redis.call('HGET', KEYS[1], 'kver'))
if v then redis.call('HSET', KEYS[1], 'kver', v) else redis.call('HINCRBY', KEYS[1], 'kver', 1) end
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
redis.call('DEL', KEYS[2])
return 1
`)

// KeysChangedAt drops uid's cached key set unless it was loaded after a change of
// uid's keys made at at (the time MySQL noted): the key-change feed's telling, which
// leaves alone the sets polls loaded since.
func (c *Cache) KeysChangedAt(ctx context.Context, uid string, at time.Time) error {
	err := keysChangedAtScript.Run(ctx, c.rdb, []string{c.keys.User(uid), c.keys.ClientKeys(uid)}, at.UnixMicro(), c.ttl()).Err()
	if err != nil {
		return unavailable("keys changed", err)
	}
	return nil
}
