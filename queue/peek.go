package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// peekScript checks the client key, the heap's validity and returns the open dispatch
// hint and the entries due now plus the next one. It touches the user's slot only: the
// generations of the user's groups live on other slots, and peek reads them in the same
// round trip and compares them with the ones the heap names.
//
// KEYS: user hash, heap, client key set, poll limiter. ARGV: now, horizon (the heap must
// cover up to it), max entries, the key hash ("" to skip the check), the catch-up floor
// (an entry older than it makes the heap stale: the cursor never lags more), the poll
// limit's emission interval in µs (0: no limit), its burst, now in µs. A poll with a
// valid key is counted against the limit (GCRA: each poll moves the key's theoretical
// arrival time on by the interval; a poll that would move it more than a burst ahead of
// now is refused, and changes nothing). Returns {"badkey"}; {"limited", µs to wait};
// {"nokeys", heap status}; {status, open, groups, ver} with status cold or stale; or
// {"ok", open, groups, ver, due (member, score, ...), next (member, score), gens, cut},
// where cut is the window's end of a cut heap holding no entry not yet due (the next
// due time is then the first entry left out's), else "".
var peekScript = redis.NewScript(gcra + `
-- An occurrence older than the catch-up floor makes the heap stale; a waiting dispatch
-- of the user (member <p>|d|<log_id>) does not: it stays until taken, however old.
local function stale_below(heap, floor)
  local offset = 0
  while true do
    local page = redis.call('ZRANGEBYSCORE', heap, '-inf', '(' .. floor, 'LIMIT', offset, 32)
    for _, m in ipairs(page) do
      if string.sub(m, 3, 3) ~= 'd' then return true end
    end
    if #page < 32 then return false end
    offset = offset + 32
  end
end
local nokeys = false
if ARGV[4] ~= '' and redis.call('SISMEMBER', KEYS[3], ARGV[4]) == 0 then
  if redis.call('EXISTS', KEYS[3]) == 1 then return {'badkey'} end
  nokeys = true
end
local h = redis.call('HMGET', KEYS[1], 'ver', 'hver', 'groups', 'gens', 'win', 'open', 'cut', 'exp')
local ver = h[1] or '0'
local open = h[6] or ''
local status = 'ok'
if not h[2] then
  status = 'cold'
elseif ver ~= h[2] then
  status = 'stale'
elseif h[7] == '1' then
  -- A cut heap (the offer's first entries) is good until it is empty, or as old as a
  -- whole one may get.
  if tonumber(h[8] or '0') < tonumber(ARGV[1]) or redis.call('EXISTS', KEYS[2]) == 0 then status = 'stale' end
elseif tonumber(h[5]) < tonumber(ARGV[2]) then
  status = 'stale'
end
if status == 'ok' and stale_below(KEYS[2], ARGV[5]) then status = 'stale' end
if nokeys then return {'nokeys', status} end
if ARGV[4] ~= '' then
  local wait = gcra(KEYS[4], tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]))
  if wait then return {'limited', wait} end
end
if status ~= 'ok' then return {status, open, h[3] or '', ver} end
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
local nxt = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local cut = ''
if h[7] == '1' and #nxt == 0 then cut = h[5] end
return {status, open, h[3], ver, due, nxt, h[4], cut}
`)

// peek runs peekScript for uid and, in the same round trip, reads the generations of
// the groups the caller believes uid is in (groups, comma-joined), at now. It answers
// as the script does, with two more statuses: "groups" when the heap was built for
// other groups than the caller believed (ask again with the heap's), and "stale" when a
// generation the heap names has moved.
func (c *Cache) peek(ctx context.Context, uid, groups, keyHash string, now time.Time, maxDue int) ([]any, error) {
	keys := []string{c.keys.User(uid), c.keys.Heap(uid), c.keys.ClientKeys(uid), c.keys.Poll(uid)}
	interval, burst := c.pollLimit()
	args := []any{now.Unix(), now.Add(c.cfg.Horizon).Unix(), maxDue, keyHash, c.floor(now), interval, burst, now.UnixMicro()}
	gids := splitGroups(groups)
	var script *redis.Cmd
	var gens []*redis.StringCmd
	err := c.roundTrip(ctx, func(p redis.Pipeliner) {
		script = peekScript.EvalSha(ctx, p, keys, args...)
		gens = c.readGenerations(ctx, p, uid, gids)
	}, peekScript)
	if err != nil {
		return nil, unavailable("peek", err)
	}
	res, err := script.Slice()
	if err != nil {
		return nil, unavailable("peek", err)
	}
	if res[0] != "ok" {
		return res, nil
	}
	if res[2] != groups {
		return []any{"groups", res[1], res[2], res[3]}, nil
	}
	if res[6] != joinGenerations(gens) {
		return []any{"stale", res[1], res[2], res[3]}, nil
	}
	return append(res[:6:6], res[7]), nil
}

// Peek checks keyHash (unless empty) and returns the user's open dispatch hint and the
// entries due at now, rebuilding the heap from MySQL first if it is cold or stale. A
// warm peek is one Redis round trip.
func (c *Cache) Peek(ctx context.Context, uid, keyHash string, now time.Time) (schedule.View, error) {
	return c.PeekN(ctx, uid, keyHash, now, c.cfg.MaxDue)
}

// PeekN is Peek returning up to maxDue due entries (a batch fetch's).
func (c *Cache) PeekN(ctx context.Context, uid, keyHash string, now time.Time, maxDue int) (schedule.View, error) {
	var groups string
	if g, ok := c.groups.Load(uid); ok {
		groups = g.(string)
	}
	refused := 0
	var b *built // the last rebuild's
	// Another node's rebuild of the user holds the lock (for up to LockTTL, longer on a
	// loaded machine): a peek waits for it in 5 ms steps as long as its request
	// allows (without a deadline, LockTTL), not just its 50 attempts.
	settle := time.Now().Add(c.cfg.LockTTL)
	if d, ok := ctx.Deadline(); ok {
		settle = d
	}
	for attempt := 0; ; attempt++ {
		if attempt >= 50 && time.Now().After(settle) {
			return schedule.View{}, taskd.Errorf(taskd.CodeUnavailable, "heap of user %s did not settle", uid)
		}
		res, err := c.peek(ctx, uid, groups, keyHash, now, maxDue)
		if err != nil {
			return schedule.View{}, err
		}
		switch status := res[0].(string); status {
		case "ok":
			c.cfg.Metrics.HeapLookup(true)
			return parseView(res)
		case "badkey":
			return schedule.View{}, ErrBadKey
		case "limited":
			return schedule.View{}, c.limited(uid, res[1].(string))
		case "nokeys":
			// Only a user whose heap needs a rebuild too is turned away when the
			// rebuild budget is spent: a warm user's key set expires every KeyTTL.
			if err := c.loadKeys(ctx, uid, res[1] != "ok"); err != nil {
				return schedule.View{}, err
			}
		case "groups":
			groups = res[2].(string)
			c.groups.Store(uid, groups)
			keyHash = "" // checked, and the poll counted: not again
		case "cold", "stale":
			c.cfg.Metrics.HeapLookup(false)
			keyHash = "" // checked, and the poll counted: not again
			// Invalidations keep landing between a rebuild's reads and its write (the
			// write refused), or just after it (what it wrote is stale already: a
			// group generation moved). The offer a rebuild read from MySQL is no older
			// than this request: after a few refusals, serve it without caching it.
			if b != nil && b.written {
				if refused++; refused >= maxRefusals {
					return b.view(res[1].(string), now, maxDue), nil
				}
			}
			prev := b
			b, err = c.rebuild(ctx, uid, res[3].(string))
			if errors.Is(err, ErrOverBudget) && prev != nil {
				// An offer read from MySQL during this request is in hand.
				return prev.view(res[1].(string), now, maxDue), nil
			}
			if err != nil {
				return schedule.View{}, err
			}
			if b != nil && !b.written {
				if refused++; refused >= maxRefusals {
					return b.view(res[1].(string), now, maxDue), nil
				}
			}
			if g, ok := c.groups.Load(uid); ok {
				groups = g.(string)
			}
		default:
			return schedule.View{}, fmt.Errorf("peek: unexpected status %q", status)
		}
	}
}

// maxRefusals is how many of its rebuilds' writes a peek lets newer invalidations
// refuse before it serves the offer it read without caching it.
const maxRefusals = 3

// built is what a rebuild read, and whether it reached Redis.
type built struct {
	entries []schedule.Entry // in heap order
	written bool
}

// view is the peek answer a refused rebuild's offer gives at now.
func (b *built) view(open string, now time.Time, maxDue int) schedule.View {
	var v schedule.View
	v.Open = openHint(open)
	for i, e := range b.entries {
		if e.DueAt.After(now) {
			next := b.entries[i]
			v.Next = &next
			break
		}
		if len(v.Due) < maxDue {
			v.Due = append(v.Due, e)
		}
	}
	return v
}

func parseView(res []any) (schedule.View, error) {
	var v schedule.View
	v.Open = openHint(res[1].(string))
	due := res[4].([]any)
	for i := 0; i+1 < len(due); i += 2 {
		e, err := parseScored(due[i], due[i+1])
		if err != nil {
			return schedule.View{}, err
		}
		v.Due = append(v.Due, e)
	}
	if next := res[5].([]any); len(next) == 2 {
		e, err := parseScored(next[0], next[1])
		if err != nil {
			return schedule.View{}, err
		}
		v.Next = &e
	} else if cut := res[6].(string); cut != "" {
		// A cut heap holds nothing not yet due: the next due time is the first entry
		// left out's (an entry with no task: a time only).
		win, err := strconv.ParseInt(cut, 10, 64)
		if err != nil {
			return schedule.View{}, fmt.Errorf("heap window %q: %w", cut, err)
		}
		v.Next = &schedule.Entry{DueAt: time.Unix(win, 0)}
	}
	return v, nil
}

func parseScored(member, score any) (schedule.Entry, error) {
	s, err := strconv.ParseInt(score.(string), 10, 64)
	if err != nil {
		return schedule.Entry{}, fmt.Errorf("heap score %v: %w", score, err)
	}
	return ParseMember(member.(string), s)
}

func splitGroups(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
