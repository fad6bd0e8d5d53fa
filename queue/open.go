package queue

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/schedule"
)

// The user hash's open field: absent (unknown), "-" (none) or the open log id.
const openNone = "-"

// openHint reads the user hash's open field.
func openHint(open string) schedule.OpenHint {
	switch open {
	case "":
		return schedule.OpenHint{}
	case openNone:
		return schedule.NoneOpen
	}
	return schedule.OpenIs(open)
}

// openField is the user hash's open field that says h ("" for unknown: absent).
func openField(h schedule.OpenHint) string {
	switch h.State {
	case schedule.OpenNone:
		return openNone
	case schedule.OpenSome:
		return h.LogID
	}
	return ""
}

// Pop removes the entries a fetch popped (dispatched or dropped; a rotate entry
// advances to its next occurrence), in one round trip, and leaves the open-dispatch
// hint as it is.
func (c *Cache) Pop(ctx context.Context, uid string, popped []schedule.Entry) error {
	if len(popped) == 0 {
		return nil
	}
	return c.apply(ctx, uid, applyKeepOpen, applyAlways, nil, popped)
}

// SetOpen records that logID is uid's open dispatch, whatever the hint said, with
// kept, a copy of what a fetch hands out for it (nil: none kept), and pops the entries the fetch
// popped, in one round trip. The copy is what OpenCopy returns while MySQL is away.
func (c *Cache) SetOpen(ctx context.Context, uid, logID string, kept []byte, popped []schedule.Entry) error {
	return c.apply(ctx, uid, logID, applyAlways, kept, popped)
}

// OpenCopy returns the copy SetOpen kept of uid's open dispatch logID, or nil when the
// hint names another dispatch or no copy was kept. It is read only when MySQL cannot
// say what is open: the copy is as the dispatch was handed out.
func (c *Cache) OpenCopy(ctx context.Context, uid, logID string) ([]byte, error) {
	if c.Away() {
		return nil, errAway
	}
	h, err := c.rdb.HMGet(ctx, c.keys.User(uid), "open", "openc").Result()
	if err != nil {
		return nil, unavailable("open copy", err)
	}
	open, _ := h[0].(string)
	kept, _ := h[1].(string)
	if open != logID || kept == "" {
		return nil, nil
	}
	return []byte(kept), nil
}

// ClearOpen sets uid's open-dispatch hint to none, but only if it still says seen (the
// hint the caller saw): a dispatch made meanwhile keeps its hint.
func (c *Cache) ClearOpen(ctx context.Context, uid string, seen schedule.OpenHint) error {
	return c.apply(ctx, uid, openNone, openField(seen), nil, nil)
}

// ForgetOpen drops uid's open-dispatch hint, and its copy: unknown, the next fetch asks
// MySQL. For when a dispatch's outcome is not known (a claim that failed may still
// commit).
func (c *Cache) ForgetOpen(ctx context.Context, uid string) error {
	if c.Away() {
		return errAway
	}
	if err := c.rdb.HDel(ctx, c.keys.User(uid), "open", "openc").Err(); err != nil {
		return unavailable("forget open", err)
	}
	return nil
}

// applyScript's sentinels, used by Pop, SetOpen and ClearOpen only.
const (
	applyKeepOpen = ""  // ARGV[1]: leave the open field as it is
	applyAlways   = "*" // ARGV[3]: write the open field whatever it says
)

// applyScript records what a fetch or complete did: it sets the open dispatch hint and
// pops heap entries. A pop only acts on the member if it is still at the popped due
// time (so a concurrent rebuild's newer content wins); a rotate member moves to its
// next occurrence if that falls inside the window.
//
// It runs in apply alone, which Pop, SetOpen and ClearOpen call.
//
//	KEYS[1] -> user hash
//	KEYS[2] -> heap
//	ARGV[1] -> open, the hint to set ("" leaves it: applyKeepOpen)
//	ARGV[2] -> the user hash's TTL, s
//	ARGV[3] -> expect: "*" (applyAlways) sets open whatever it was; otherwise only if
//	           open is still expect, "" meaning absent (clearing the hint must not wipe
//	           out a newer dispatch's)
//	ARGV[4] -> the open dispatch's copy, kept with the hint ("": none; a hint set to
//	           none or to a dispatch without a copy drops the one kept, and so does
//	           a hint set to the dispatch a complete left as its tombstone, openx:
//	           kept.go)
//	ARGV[5..] -> member, due (Unix s), next (Unix s, 0 for none) triples: the popped
//	           entries
//	Returns -> integer: 1; apply does not read it
var applyScript = redis.NewScript(`
if ARGV[1] ~= '' and (ARGV[3] == '*' or (redis.call('HGET', KEYS[1], 'open') or '') == ARGV[3]) then
  redis.call('HSET', KEYS[1], 'open', ARGV[1])
  if ARGV[4] ~= '' and redis.call('HGET', KEYS[1], 'openx') ~= ARGV[1] then
    redis.call('HSET', KEYS[1], 'openc', ARGV[4])
  else
    redis.call('HDEL', KEYS[1], 'openc')
  end
  if redis.call('TTL', KEYS[1]) == -1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
end
local win = tonumber(redis.call('HGET', KEYS[1], 'win') or '0')
for i = 5, #ARGV, 3 do
  local m, due, nxt = ARGV[i], tonumber(ARGV[i+1]), tonumber(ARGV[i+2])
  local cur = redis.call('ZSCORE', KEYS[2], m)
  if cur and tonumber(cur) == due then
    if nxt > 0 and nxt < win then redis.call('ZADD', KEYS[2], nxt, m) else redis.call('ZREM', KEYS[2], m) end
  end
end
return 1
`)

// apply runs applyScript for uid: sets the open hint to open (if the hint says expect)
// with kept, and pops popped.
func (c *Cache) apply(ctx context.Context, uid, open, expect string, kept []byte, popped []schedule.Entry) error {
	if c.Away() {
		return errAway
	}
	args := make([]any, 0, 4+3*len(popped))
	args = append(args, open, c.ttl(), expect, kept)
	for _, e := range popped {
		next := int64(0)
		if n, ok := e.Next(); ok {
			next = n.DueAt.Unix()
		}
		args = append(args, Member(e), e.DueAt.Unix(), next)
	}
	err := applyScript.Run(ctx, c.rdb, []string{c.keys.User(uid), c.keys.Heap(uid)}, args...).Err()
	if err != nil {
		return unavailable("apply", err)
	}
	return nil
}
