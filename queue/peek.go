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

// peekLua is the peek script, a poll's one look at the user's slot: it checks the
// client key, judges the heap and returns what is due. It writes nothing (the poll
// limit is counted in the node's memory, limit.go). The generations of the user's
// groups live on other slots: the round trip that runs it (sendPeeks) reads them too,
// and decodePeek compares them with the ones the heap names. Cache.peek makes its
// arguments; sendPeeks, below, runs it.
//
//	KEYS[1] -> user hash
//	KEYS[2] -> heap
//	KEYS[3] -> client key set
//	ARGV[1] -> now, Unix s
//	ARGV[2] -> the horizon, Unix s: the heap must cover up to it
//	ARGV[3] -> the most due entries to return
//	ARGV[4] -> the key hash ("" skips the check)
//	ARGV[5] -> the catch-up floor, Unix s: an entry older than it makes the heap
//	           stale (the cursor never lags more)
//	ARGV[6] -> the groups the caller believes the heap was built for, comma-joined
//	Returns -> one string, its fields joined by newlines (no field holds one:
//	           statuses, numbers, ids, heap members), read by decodePeek:
//	           badkey; nokeys, heap status; status, open, groups, ver with status
//	           cold, stale, or groups (the heap was built for other groups than the
//	           caller's); or ok, open, ver, gens, cut, next member, next score, then
//	           member, score of each due entry, with next "" for none, and cut the
//	           window's end of a cut heap holding no entry not yet due (the next due
//	           time is then the first entry left out's), else "". One string is one
//	           allocation for the client to read, where an array of strings is two
//	           per field.
const peekLua = `
-- An occurrence older than the catch-up floor makes the heap stale; a waiting dispatch
-- of the user (member <p>|d|<log_id>, or a confirm entry <p>|c|<log_id>) does not: it
-- stays until taken, however old; nor does a once task with windows (<p>|o|<id>|w=...):
-- it waits for one to open.
local function stale_below(heap, floor)
  local offset = 0
  while true do
    local page = redis.call('ZRANGEBYSCORE', heap, '-inf', '(' .. floor, 'LIMIT', offset, 32)
    for _, m in ipairs(page) do
      local k = string.sub(m, 3, 3)
      if k == 'r' or (k == 'o' and not string.find(m, '|w=', 1, true)) then return true end
    end
    if #page < 32 then return false end
    offset = offset + 32
  end
end
local function packed(t) return table.concat(t, '\n') end
local nokeys = false
if ARGV[4] ~= '' and redis.call('SISMEMBER', KEYS[3], ARGV[4]) == 0 then
  if redis.call('EXISTS', KEYS[3]) == 1 then return 'badkey' end
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
if nokeys then
  if status == 'ok' and stale_below(KEYS[2], ARGV[5]) then status = 'stale' end
  return packed({'nokeys', status})
end
if status ~= 'ok' then return packed({status, open, h[3] or '', ver}) end
if h[3] ~= ARGV[6] then return packed({'groups', open, h[3] or '', ver}) end
-- The first entry alone says most polls' answer: if it is not due, nothing is, and it
-- is the next. Only a heap whose first entry is older than the floor is looked at
-- further for staleness.
local now = tonumber(ARGV[1])
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if #first > 0 and tonumber(first[2]) < tonumber(ARGV[5]) and stale_below(KEYS[2], ARGV[5]) then
  return packed({'stale', open, h[3] or '', ver})
end
local reply = {'ok', open, ver, h[4] or '', '', '', ''}
if #first > 0 and tonumber(first[2]) > now then
  reply[6], reply[7] = first[1], first[2]
elseif #first > 0 then
  local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
  for i = 1, #due do reply[7 + i] = due[i] end
  local nxt = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #nxt == 2 then reply[6], reply[7] = nxt[1], nxt[2] end
end
if h[7] == '1' and reply[6] == '' then reply[5] = h[5] end
return packed(reply)
`

// peekScriptRO and peekScript are peekLua, run read-only where Redis can (7.0 and
// later): flagged no-writes and sent as EVALSHA_RO (peekScriptRO). Redis then refuses
// it any write, and runs it even while it refuses writes (over its memory limit,
// after a disk error), when a poll's answer is still good. A Redis without EVALSHA_RO
// runs the same text without the flag (peekScript): see sendPeeks.
var (
	peekScriptRO = redis.NewScript("#!lua flags=no-writes\n" + peekLua)
	peekScript   = redis.NewScript(peekLua)
)

// sendPeeks is the pipeline's round trip: every call's script and generation reads in
// one pipeline (on a cluster, one per node concerned, in parallel). The script goes as
// EVALSHA_RO; a Redis that does not know that command (before 7.0) makes this cache
// send the plain script from then on. A call whose script Redis does not know
// (NOSCRIPT: after a restart or a failover, or on a new node) is sent once more after
// the script is loaded on every node; only the calls concerned are sent again.
func (c *Cache) sendPeeks(calls []*peekCall) {
	ctx, cancel := tripContext(calls)
	defer cancel()
	pending := calls
	// At most: EVALSHA_RO unknown, EVALSHA NOSCRIPT, EVALSHA after the load.
	for attempt := 0; attempt < 3; attempt++ {
		plain := c.plainPeek.Load()
		cmds, failed := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, call := range pending {
				if plain {
					call.script = peekScript.EvalSha(ctx, p, call.keys, call.args...)
				} else {
					call.script = peekScriptRO.EvalShaRO(ctx, p, call.keys, call.args...)
				}
				call.genCmds = call.cmdsBuf[:0]
				for _, k := range call.gens {
					call.genCmds = append(call.genCmds, p.Get(ctx, k))
				}
				if call.dropLog != "" {
					// Its NOSCRIPT is not sent again: peek loads the script for the
					// next one, and this one's complete forgets the hint instead.
					call.dropCmd = dropCopyScript.EvalSha(ctx, p, []string{call.keys[0], call.keys[2]}, call.dropLog, call.args[3], c.ttl())
				}
			}
			return nil
		})
		// A round trip that failed as a whole (no connection) leaves its commands
		// without an error of their own.
		if failed != nil && !errors.Is(failed, redis.Nil) {
			for _, cmd := range cmds {
				if e := cmd.Err(); e != nil && !errors.Is(e, redis.Nil) {
					failed = nil
					break
				}
			}
		} else {
			failed = nil
		}
		var again []*peekCall
		load := false
		for _, call := range pending {
			call.err = call.firstErr(failed)
			switch {
			case call.err == nil:
			case redis.HasErrorPrefix(call.err, "NOSCRIPT"):
				again, load = append(again, call), true
			case !plain && unknownCommand(call.err):
				c.plainPeek.Store(true)
				again = append(again, call)
			}
		}
		if len(again) == 0 {
			return
		}
		if load {
			script := peekScriptRO
			if plain {
				script = peekScript
			}
			if err := script.Load(ctx, c.rdb).Err(); err != nil {
				for _, call := range again {
					call.err = err
				}
				return
			}
		}
		pending = again
	}
}

// unknownCommand reports whether err is Redis's answer to a command it does not know.
func unknownCommand(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(strings.ToLower(err.Error()), "unknown command")
}

// firstErr is the first error of the call's commands (a missing key is none), or
// failed, the round trip's own, when they have none.
func (call *peekCall) firstErr(failed error) error {
	if e := call.script.Err(); e != nil && !errors.Is(e, redis.Nil) {
		return e
	}
	for _, g := range call.genCmds {
		if e := g.Err(); e != nil && !errors.Is(e, redis.Nil) {
			return e
		}
	}
	return failed
}

// peekReply is peekScript's answer, decoded, with the generations checked.
type peekReply struct {
	status string // ok, badkey, nokeys, cold, stale or groups
	heap   string // nokeys: the heap's status (ok, cold or stale)
	open   string // the open dispatch hint (ok, cold, stale, groups)
	groups string // cold, stale, groups: the groups the heap was built for
	ver    string // cold, stale, groups: the user's version
	view   schedule.View
	// dropped: the round trip dropped the copy kept with the hint (dropLog).
	dropped bool
}

// decodePeek reads peekScript's reply res to a caller that believes the user is in
// groups, gens being the generations read beside it. An ok heap whose generations
// have moved since it was built is stale.
func decodePeek(res string, groups string, gens []*redis.StringCmd) (peekReply, error) {
	rest, more := res, true
	count := 0
	field := func() string {
		var f string
		if more {
			f, rest, more = strings.Cut(rest, "\n")
			count++
		}
		return f
	}
	r := peekReply{status: field()}
	switch r.status {
	case "badkey":
	case "nokeys":
		r.heap = field()
	case "cold", "stale", "groups":
		r.open, r.groups, r.ver = field(), field(), field()
	case "ok":
		var gens0, cut, next, nextScore string
		r.open, r.ver, gens0, cut, next, nextScore = field(), field(), field(), field(), field(), field()
		if count < 7 {
			return peekReply{}, &replyError{script: "peek", pos: count, want: "7 fields or more with status ok"}
		}
		if !sameGenerations(gens0, gens) {
			return peekReply{status: "stale", open: r.open, groups: groups, ver: r.ver}, nil
		}
		r.view.Open = openHint(r.open)
		if more {
			r.view.Due = make([]schedule.Entry, 0, (strings.Count(rest, "\n")+1)/2)
		}
		for more {
			member, score := field(), field()
			if count%2 == 0 {
				return peekReply{}, &replyError{script: "peek", pos: count, want: "a score after each due member"}
			}
			e, err := parseScored(member, score)
			if err != nil {
				return peekReply{}, err
			}
			r.view.Due = append(r.view.Due, e)
		}
		if next != "" {
			e, err := parseScored(next, nextScore)
			if err != nil {
				return peekReply{}, err
			}
			r.view.Next = &e
		} else if cut != "" {
			// A cut heap holds nothing not yet due: the next due time is the first
			// entry left out's (an entry with no task: a time only).
			win, err := strconv.ParseInt(cut, 10, 64)
			if err != nil {
				return peekReply{}, fmt.Errorf("heap window %q: %w", cut, err)
			}
			r.view.Next = &schedule.Entry{DueAt: time.Unix(win, 0)}
		}
	default:
		return peekReply{}, &replyError{script: "peek", pos: 0, want: "a status", got: r.status}
	}
	return r, nil
}

// peek runs peekScript for uid and, in the same round trip, reads the generations of
// the groups the caller believes uid is in (groups, comma-joined), at now. The round
// trip is shared with the peeks of other users waiting at the same moment (pipeline.go).
func (c *Cache) peek(ctx context.Context, uid, groups, keyHash string, now time.Time, maxDue int, dropLog string) (peekReply, error) {
	call := newPeekCall(ctx)
	call.dropLog = dropLog
	defer call.release() // what decodePeek returns keeps nothing of it
	user, heap, clientKeys := c.keys.PeekKeys(uid)
	call.keysBuf = [3]string{user, heap, clientKeys}
	call.keys = call.keysBuf[:]
	times := c.peekTimes(now)
	call.argsBuf = [6]any{times.now, times.horizon, maxDue, keyHash, times.floor, groups}
	call.args = call.argsBuf[:]
	if groups != "" {
		call.gens = call.gensBuf[:0]
		for rest, more := groups, true; more; {
			var g string
			g, rest, more = strings.Cut(rest, ",")
			call.gens = append(call.gens, c.keys.GenerationOf(g, uid))
		}
	}
	if err := c.peeks.do(call); err != nil {
		return peekReply{}, unavailable("peek", err)
	}
	res, ok, err := textReply("peek", call.script)
	if err == nil && !ok {
		err = &replyError{script: "peek", pos: -1, want: "a string", got: nil}
	}
	if err != nil {
		return peekReply{}, unavailable("peek", err)
	}
	r, err := decodePeek(res, groups, call.genCmds)
	if call.dropCmd != nil {
		m, derr := call.dropCmd.Int64Slice()
		r.dropped = derr == nil && len(m) == 2 && m[0] == 1
		if derr != nil && redis.HasErrorPrefix(derr, "NOSCRIPT") {
			dropCopyScript.Load(ctx, c.rdb) // best effort: the next complete's drop
		}
	}
	return r, err
}

// peekTimes are a peek's arguments that depend on the time alone (now, the horizon and
// the catch-up floor, in Unix seconds), as the script takes them: made once a second,
// not per poll.
type peekTimes struct {
	sec                 int64
	now, horizon, floor any
}

// peekTimes returns the peek's time arguments at now.
func (c *Cache) peekTimes(now time.Time) *peekTimes {
	sec := now.Unix()
	if t := c.times.Load(); t != nil && t.sec == sec {
		return t
	}
	t := &peekTimes{sec: sec, now: sec, horizon: now.Add(c.cfg.Horizon).Unix(), floor: c.floor(now)}
	if c.cfg.Horizon%time.Second == 0 && c.cfg.CatchUp%time.Second == 0 {
		// Whole seconds: every instant of the second gives the same arguments.
		c.times.Store(t)
	}
	return t
}

// Peek checks keyHash (unless empty), counts the poll against the user's poll limit
// once the key is found valid, and returns the user's open dispatch hint and the
// entries due at now, rebuilding the heap from MySQL first if it is cold or stale. A
// warm peek is one Redis round trip, a read.
func (c *Cache) Peek(ctx context.Context, uid, keyHash string, now time.Time) (schedule.View, error) {
	return c.PeekN(ctx, uid, keyHash, now, c.cfg.MaxDue)
}

// PeekN is Peek returning up to maxDue due entries (a batch fetch's).
func (c *Cache) PeekN(ctx context.Context, uid, keyHash string, now time.Time, maxDue int) (schedule.View, error) {
	v, _, err := c.peekN(ctx, uid, keyHash, now, maxDue, "")
	return v, err
}

// PeekCompleting is PeekN for a request that completes uid's dispatch logID next: the
// same round trip drops the copy kept with uid's hint if it is of logID, and leaves
// logID's tombstone (kept.go), once the key is found valid. dropped is false when that
// could not be done (Redis away, or refusing writes, or no key checked): the caller
// makes the hint unknown after its complete instead.
func (c *Cache) PeekCompleting(ctx context.Context, uid, keyHash, logID string, now time.Time, maxDue int) (v schedule.View, dropped bool, err error) {
	return c.peekN(ctx, uid, keyHash, now, maxDue, logID)
}

func (c *Cache) peekN(ctx context.Context, uid, keyHash string, now time.Time, maxDue int, dropLog string) (schedule.View, bool, error) {
	if c.Away() {
		v, err := c.peekMySQL(ctx, uid, keyHash, now, maxDue)
		return v, false, err
	}
	dropped := false
	groups, _ := c.groups.Load(uid)
	refused := 0
	var b *built // the last rebuild's
	// Another node's rebuild of the user holds the lock (for up to LockTTL, longer on a
	// loaded machine): a peek waits for it in 5 ms steps as long as its request
	// allows (without a deadline, LockTTL), not just its 50 attempts.
	settle, ok := ctx.Deadline()
	if !ok {
		settle = time.Now().Add(c.cfg.LockTTL)
	}
	for attempt := 0; ; attempt++ {
		if attempt >= 50 && time.Now().After(settle) {
			return schedule.View{}, dropped, taskd.Errorf(taskd.CodeUnavailable, "heap of user %s did not settle", uid)
		}
		began := time.Now()
		res, err := c.peek(ctx, uid, groups, keyHash, now, maxDue, dropLog)
		if err != nil {
			if c.markAway(ctx, err, began) {
				v, err := c.peekMySQL(ctx, uid, keyHash, now, maxDue)
				return v, false, err
			}
			return schedule.View{}, false, err
		}
		if dropLog != "" && (keyHash == "" || res.status != "nokeys") {
			// The first round trip that checked the key drops; a peek that found no
			// key set loads it and looks again, dropping then.
			dropped, dropLog = res.dropped, ""
		}
		if keyHash != "" && res.status != "badkey" && res.status != "nokeys" {
			// The key is valid: the poll counts, once, before anything is rebuilt (a
			// refusal reads nothing from MySQL), and the looks that follow do not
			// check the key again.
			if err := c.CountPoll(uid, now); err != nil {
				return schedule.View{}, dropped, err
			}
			keyHash = ""
		}
		switch res.status {
		case "ok":
			c.cfg.Metrics.HeapLookup(true)
			return res.view, dropped, nil
		case "badkey":
			return schedule.View{}, dropped, ErrBadKey
		case "nokeys":
			// Only a user whose heap needs a rebuild too is turned away when the
			// rebuild budget is spent: a warm user's key set goes after a change of its keys.
			if err := c.loadKeys(ctx, uid, res.heap != "ok"); err != nil {
				return schedule.View{}, dropped, err
			}
		case "groups":
			groups = res.groups
			c.groups.Store(uid, groups)
		case "cold", "stale":
			c.cfg.Metrics.HeapLookup(false)
			// Invalidations keep landing between a rebuild's reads and its write (the
			// write refused), or just after it (what it wrote is stale already: a
			// group generation moved). The offer a rebuild read from MySQL is no older
			// than this request: after a few refusals, serve it without caching it.
			if b != nil && b.written {
				if refused++; refused >= maxRefusals {
					return b.view(res.open, now, maxDue), dropped, nil
				}
			}
			prev := b
			b, err = c.rebuild(ctx, uid, res.ver)
			if errors.Is(err, ErrOverBudget) && prev != nil {
				// An offer read from MySQL during this request is in hand.
				return prev.view(res.open, now, maxDue), dropped, nil
			}
			if err != nil {
				return schedule.View{}, dropped, err
			}
			if b != nil && !b.written {
				if refused++; refused >= maxRefusals {
					return b.view(res.open, now, maxDue), dropped, nil
				}
			}
			if g, ok := c.groups.Load(uid); ok {
				groups = g
			}
		default:
			return schedule.View{}, dropped, fmt.Errorf("peek: unexpected status %q", res.status)
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

func parseScored(member, score string) (schedule.Entry, error) {
	s, err := strconv.ParseInt(score, 10, 64)
	if err != nil {
		return schedule.Entry{}, fmt.Errorf("heap score %q: %w", score, err)
	}
	return ParseMember(member, s)
}

// sameGenerations reports whether the generations the reads found (a missing one is
// "0") are joined, the comma-joined ones the heap was built with.
func sameGenerations(joined string, cmds []*redis.StringCmd) bool {
	for i, cmd := range cmds {
		var g string
		g, joined, _ = strings.Cut(joined, ",")
		if i == len(cmds)-1 && joined != "" {
			return false // the heap names more
		}
		v, err := cmd.Result()
		if err != nil {
			v = "0"
		}
		if g != v {
			return false
		}
	}
	return len(cmds) > 0 || joined == ""
}
