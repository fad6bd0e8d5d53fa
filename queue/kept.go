package queue

import (
	"github.com/redis/go-redis/v9"
)

// The copy of the open dispatch kept with the hint (SetOpen) is handed out while MySQL
// is away (package dispatch, kept.go), so it must not outlive its dispatch. A complete
// drops it before it reaches MySQL, in its key check (VerifyCompleting) or in its
// peek's round trip (PeekCompleting), with dropCopyScript, which also leaves the log id
// being completed as a tombstone ("openx"): a hint and copy of that dispatch written
// after the drop (a redo on another node that read MySQL before the complete
// committed, and told Redis after) keep the hint but not the copy (applyScript).

// dropCopyScript checks the key, and for a valid one drops the copy if the hint names the
// dispatch being completed, and leaves its log id as the tombstone.
//
//	KEYS[1] -> user hash
//	KEYS[2] -> client key set
//	ARGV[1] -> the log id being completed
//	ARGV[2] -> the key hash ("": checked already)
//	ARGV[3] -> the user hash's TTL, s (set if it has none)
//	Returns -> {key valid, key set loaded}, as SMISMEMBER of the key and "-"
var dropCopyScript = redis.NewScript(`
local m = {1, 1}
if ARGV[2] ~= '' then m = redis.call('SMISMEMBER', KEYS[2], ARGV[2], '-') end
if m[1] == 1 then
  if redis.call('HGET', KEYS[1], 'open') == ARGV[1] then redis.call('HDEL', KEYS[1], 'openc') end
  redis.call('HSET', KEYS[1], 'openx', ARGV[1])
  if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
end
return m
`)
