package queue

import "github.com/redis/go-redis/v9"

// Heap metadata lives in the user hash: hver is the user version the heap was built
// from, groups the comma-joined sorted group ids, gens their generations in the same
// order, win the Unix time the heap's window ends. open is "-" when the user has no open
// dispatch, its log id when it has one; absent, it is unknown (ask MySQL).

// peekScript checks the client key, the heap's validity and returns the open dispatch
// hint and the entries due now plus the next one: a warm fetch in one round trip.
//
// KEYS: user hash, heap, client key set, then the generation keys of the groups the
// caller believes the user is in. ARGV: now, horizon (the heap must cover up to it),
// max entries, the caller's groups, the key hash ("" to skip the check), the catch-up
// floor (an entry older than it makes the heap stale: the cursor never lags more).
// Returns {status, open, groups, ver, due (member, score, ...), next (member, score)}
// with status one of ok, cold, stale, groups, badkey, nokeys.
var peekScript = redis.NewScript(`
-- An occurrence older than the catch-up floor makes the heap stale; a waiting dispatch
-- of the user (member <p>|d|<log_id>) does not: it stays until taken, however old.
local function stale_below(heap, floor)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', heap, '-inf', '(' .. floor, 'LIMIT', 0, 32)) do
    if string.sub(m, 3, 3) ~= 'd' then return true end
  end
  return false
end
if ARGV[5] ~= '' and redis.call('SISMEMBER', KEYS[3], ARGV[5]) == 0 then
  if redis.call('EXISTS', KEYS[3]) == 1 then return {'badkey'} end
  return {'nokeys'}
end
local h = redis.call('HMGET', KEYS[1], 'ver', 'hver', 'groups', 'gens', 'win', 'open')
local ver = h[1] or '0'
local open = h[6] or ''
local status = 'ok'
if not h[2] then
  status = 'cold'
elseif ver ~= h[2] or tonumber(h[5]) < tonumber(ARGV[2]) then
  status = 'stale'
elseif stale_below(KEYS[2], ARGV[6]) then
  status = 'stale'
elseif h[3] ~= ARGV[4] then
  status = 'groups'
else
  local i = 3
  for g in string.gmatch(h[4], '[^,]+') do
    i = i + 1
    if (redis.call('GET', KEYS[i]) or '0') ~= g then status = 'stale' break end
  end
end
if status ~= 'ok' then return {status, open, h[3] or '', ver} end
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
local nxt = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
return {status, open, h[3], ver, due, nxt}
`)

// rebuildScript replaces the heap only if the user version and every group generation
// are still those the rebuild read before it read MySQL: a slow rebuild never
// overwrites a newer invalidation.
//
// KEYS: user hash, heap, generation keys in group order. ARGV: ver, groups, gens, win,
// ttl seconds, then score, member pairs.
var rebuildScript = redis.NewScript(`
if (redis.call('HGET', KEYS[1], 'ver') or '0') ~= ARGV[1] then return 0 end
local i = 2
for g in string.gmatch(ARGV[3], '[^,]+') do
  i = i + 1
  if (redis.call('GET', KEYS[i]) or '0') ~= g then return 0 end
end
redis.call('DEL', KEYS[2])
local n = #ARGV
local j = 6
while j <= n do
  local last = math.min(j + 999, n)
  redis.call('ZADD', KEYS[2], unpack(ARGV, j, last))
  j = last + 1
end
redis.call('HSET', KEYS[1], 'hver', ARGV[1], 'groups', ARGV[2], 'gens', ARGV[3], 'win', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
if n >= 6 then redis.call('EXPIRE', KEYS[2], ARGV[5]) end
return 1
`)

// applyScript records what a fetch or complete did: it sets the open dispatch hint and
// pops heap entries. A pop only acts on the member if it is still at the popped due
// time (so a concurrent rebuild's newer content wins); a rotate member moves to its
// next occurrence if that falls inside the window.
//
// KEYS: user hash, heap. ARGV: open ("" leaves it), ttl seconds, expect ("*" sets open
// whatever it was; otherwise only if open is still expect, "" meaning absent: clearing
// the hint must not wipe out a newer dispatch's), then member, due, next triples with
// next 0 for none.
var applyScript = redis.NewScript(`
if ARGV[1] ~= '' and (ARGV[3] == '*' or (redis.call('HGET', KEYS[1], 'open') or '') == ARGV[3]) then
  redis.call('HSET', KEYS[1], 'open', ARGV[1])
  if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
end
local win = tonumber(redis.call('HGET', KEYS[1], 'win') or '0')
for i = 4, #ARGV, 3 do
  local m, due, nxt = ARGV[i], tonumber(ARGV[i+1]), tonumber(ARGV[i+2])
  local cur = redis.call('ZSCORE', KEYS[2], m)
  if cur and tonumber(cur) == due then
    if nxt > 0 and nxt < win then redis.call('ZADD', KEYS[2], nxt, m) else redis.call('ZREM', KEYS[2], m) end
  end
end
return 1
`)

// loadKeysScript installs the user's client key hashes read from MySQL, unless a key
// was created or revoked since the read began (kver moved). "-" marks the set as loaded
// even when the user has no key. The set lives only as long as it may be trusted: a
// revocation that could not reach Redis is honoured when it expires.
//
// KEYS: user hash, key set. ARGV: kver, ttl milliseconds, hashes...
var loadKeysScript = redis.NewScript(`
if (redis.call('HGET', KEYS[1], 'kver') or '0') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
redis.call('SADD', KEYS[2], '-', unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
`)

// keysChangedScript invalidates the user's cached key set after a key was created or
// revoked in MySQL. KEYS: user hash, key set. ARGV: ttl seconds.
var keysChangedScript = redis.NewScript(`
redis.call('HINCRBY', KEYS[1], 'kver', 1)
if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
redis.call('DEL', KEYS[2])
return 1
`)

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

// unlockScript releases the rebuild lock only if it is still ours.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)
