package queue

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
)

// A campaign's live window (seed 000), under one hash tag {c:<id>} so each script
// touches one Redis Cluster slot:
//
//	{c:id}         hash: state, epoch, reason, the settings, offset (every item below
//	               it is finished), next (the first item never handed out), done,
//	               failed, tat (the rate limiter's theoretical arrival time, µs)
//	{c:id}:fin     set: the finished items at or above offset (at most the window)
//	{c:id}:lease   sorted set: the handed-out items, by lease end (ms)
//	{c:id}:att     hash: item -> "attempt|uid" (uid empty while it waits to retry)
//	{c:id}:retry   sorted set: failed items waiting out their backoff, by due time (ms)
//	{c:id}:fails   sorted set: recent failures, by time (ms), for the error budget
//	{c:id}:cp      hash: item -> the latest checkpoint saved for it
//	{c:id}:users   hash: uid -> the items the user holds ("i,j")
//	{c:id}:events  list: the items' events, while an outbox is configured, until the
//	               campaign's runner moves them to the MySQL outbox
//	{c:id}:flog    list: the latest failures (failure results with their detail, lease
//	               expiries), newest first, at most FailureLogSize: what an admin sees
//	               of them without Kafka
//
// Storage is O(window) however many items the campaign has. MySQL has the campaign's
// settings and state, and the window as last synced; when Redis lost the campaign, the
// first script to see it missing has it restored from there (at most the window since
// the last sync is handed out again).

// Campaigns runs campaign windows in Redis.
type Campaigns struct {
	rdb    redis.UniversalClient
	keys   Keys
	events bool
}

// Shares is node's share of the campaign runners, over the windows' Redis: units
// "campaign:<id>", each under the lease CampaignLock(id) (the key earlier versions
// took, so that nodes of both kinds never run one campaign at once).
func (c *Campaigns) Shares(node string, ttl time.Duration) *Shares {
	return newShares(c.rdb, func(unit string) string {
		id, _ := strconv.ParseInt(strings.TrimPrefix(unit, "campaign:"), 10, 64)
		return c.keys.CampaignLock(id)
	}, node, ttl)
}

// CampaignLock is the key of the lease a node holds while it runs campaign id's
// background work (sync to MySQL, the end of a stop).
func (k Keys) CampaignLock(id int64) string { return k.campaignHash(id) + ":runner" }

// NewCampaigns returns the campaign windows over rdb; with events, the windows record
// their items' events for the outbox (ItemEvents).
func NewCampaigns(rdb redis.UniversalClient, keys Keys, events bool) *Campaigns {
	return &Campaigns{rdb: rdb, keys: keys, events: events}
}

// ItemEvent is one event of a campaign item, as a window recorded it.
type ItemEvent struct {
	Type    taskd.EventType
	Item    int64
	Attempt int
	UID     string
	Result  string
	// Final says a final failure caused it (its complete and dead events).
	Final bool
	At    time.Time
}

// ItemEvents returns up to n of campaign id's recorded events, oldest first.
func (c *Campaigns) ItemEvents(ctx context.Context, id int64, n int) ([]ItemEvent, error) {
	raw, err := c.rdb.LRange(ctx, c.keys.campaignEvents(id), 0, int64(n)-1).Result()
	if err != nil {
		return nil, unavailable("campaign events", err)
	}
	out := make([]ItemEvent, 0, len(raw))
	for _, s := range raw {
		f := strings.Split(s, "|")
		var item int64
		var err error
		if len(f) == 6 || len(f) == 7 {
			item, err = strconv.ParseInt(f[1], 10, 64)
		}
		if len(f) < 6 || len(f) > 7 || err != nil {
			out = append(out, ItemEvent{}) // unreadable: dropped with the rest
			continue
		}
		att, _ := strconv.Atoi(f[2])
		at, _ := strconv.ParseInt(f[5], 10, 64)
		out = append(out, ItemEvent{Type: taskd.EventType(f[0]), Item: item, Attempt: att, UID: f[3], Result: f[4],
			Final: len(f) == 7 && f[6] == "1", At: time.UnixMilli(at).UTC()})
	}
	return out, nil
}

// DropEvents drops the first n of campaign id's recorded events (once they are in the
// outbox).
func (c *Campaigns) DropEvents(ctx context.Context, id int64, n int) error {
	return unavailableIf("campaign events", c.rdb.LTrim(ctx, c.keys.campaignEvents(id), int64(n), -1).Err())
}

// campaignHash is campaign id's hash, whose name is also every key's of the campaign
// stem (one hash tag, one slot).
func (k Keys) campaignHash(id int64) string {
	return k.Prefix + "{c:" + strconv.FormatInt(id, 10) + "}"
}

// Campaign is campaign id's keys, in the scripts' order.
func (k Keys) Campaign(id int64) []string {
	h := k.campaignHash(id)
	return []string{h, h + ":fin", h + ":lease", h + ":att", h + ":retry", h + ":fails", h + ":cp", h + ":users", k.campaignEvents(id), h + ":flog"}
}

// campaignEvents is the list of campaign id's recorded item events.
func (k Keys) campaignEvents(id int64) string { return k.campaignHash(id) + ":events" }

// ErrCampaignMissing says Redis has no window for the campaign: it is restored from
// MySQL (Apply) and the call made again.
var ErrCampaignMissing = errors.New("campaign window missing in redis")

// campaignLib is the campaign scripts' shared part: their keys, under short names,
// and the moves of an item. Every campaign script takes the same keys, all of one
// campaign's (Keys.Campaign, one hash tag):
//
//	KEYS[1] -> H, the window's hash ({c:id})
//	KEYS[2] -> F, the finished items at or above offset ({c:id}:fin)
//	KEYS[3] -> L, the leases, by end ms ({c:id}:lease)
//	KEYS[4] -> A, item -> "attempt|uid" ({c:id}:att)
//	KEYS[5] -> R, the items waiting out their backoff, by due ms ({c:id}:retry)
//	KEYS[6] -> E, the recent failures the error budget counts ({c:id}:fails)
//	KEYS[7] -> CP, item -> its latest checkpoint ({c:id}:cp)
//	KEYS[8] -> U, uid -> the items it holds ({c:id}:users)
//	KEYS[9] -> EV, the items' events for the outbox ({c:id}:events)
//	KEYS[10] -> FL, the latest failures, newest first ({c:id}:flog)
const campaignLib = `
local H, F, L, A, R, E, CP, U, EV, FL = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local function num(f) return tonumber(redis.call('HGET', H, f) or '0') end
-- event records an item's event (type|item|attempt|uid|result|at ms, and |1 when a
-- final failure caused it) for the outbox; the list keeps the newest million should no
-- runner drain it.
local function event(typ, idx, att, uid, result, at, final)
  if num('events') ~= 1 then return end
  local e = typ .. '|' .. idx .. '|' .. att .. '|' .. uid .. '|' .. result .. '|' .. at
  if final then e = e .. '|1' end
  if redis.call('RPUSH', EV, e) > 1000000 then
    redis.call('LTRIM', EV, -1000000, -1)
  end
end
local function held(uid)
  local v = redis.call('HGET', U, uid)
  local t = {}
  if v then for x in string.gmatch(v, '[^,]+') do t[#t + 1] = x end end
  return t
end
local function setheld(uid, t)
  if #t == 0 then redis.call('HDEL', U, uid) else redis.call('HSET', U, uid, table.concat(t, ',')) end
end
local function unhold(uid, idx)
  if uid == nil or uid == '' then return end
  local t = held(uid)
  for i = #t, 1, -1 do if t[i] == idx then table.remove(t, i) end end
  setheld(uid, t)
end
local function holder(idx)
  local v = redis.call('HGET', A, idx)
  if not v then return 0, '' end
  local a, u = string.match(v, '^(%d+)|(.*)$')
  return tonumber(a), u
end
-- finished ends the campaign once every item is, whatever its state (the last items
-- may finish while it is paused or stopping).
local function finished()
  if num('offset') >= num('total') and redis.call('HGET', H, 'state') ~= 'finished' then
    redis.call('HSET', H, 'state', 'finished', 'reason', '')
  end
end
-- finish ends item idx for good (ok: done, else failed; final: by a final failure); a
-- repeat counts nothing.
local function finish(idx, ok, now, att, uid, final)
  local off = num('offset')
  if tonumber(idx) < off or redis.call('SADD', F, idx) == 0 then return 0 end
  if not ok then event('dead', idx, att, uid, '', now, final) end
  redis.call('HINCRBY', H, ok and 'done' or 'failed', 1)
  redis.call('HDEL', A, idx)
  redis.call('HDEL', CP, idx)
  local start = off
  while redis.call('SREM', F, tostring(off)) == 1 do off = off + 1 end
  if off ~= start then redis.call('HSET', H, 'offset', off) end
  if num('next') < off then redis.call('HSET', H, 'next', off) end
  finished()
  return 1
end
-- failed is a failure (a failure result or a lease run out) of attempt att of idx,
-- held by uid: the item waits out its backoff, or, at its last attempt or when the
-- agent said the failure is final (sayfinal), fails for good. The error budget counts
-- it, and the failure log keeps it (cause, detail: the agent's, JSON or empty) among
-- the latest ones.
local function failed(idx, att, uid, now, why, cause, detail, sayfinal)
  redis.call('ZREM', L, idx)
  unhold(uid, idx)
  local final = sayfinal or att >= num('max_att')
  redis.call('LPUSH', FL, cjson.encode({item = tonumber(idx), attempt = att, uid = uid, cause = cause,
    final = final, detail = detail, at = now}))
  redis.call('LTRIM', FL, 0, 49) -- FailureLogSize - 1
  if final then
    finish(idx, false, now, att, uid, sayfinal)
  else
    redis.call('HSET', A, idx, att .. '|')
    redis.call('ZADD', R, now + num('backoff_ms'), idx)
  end
  local fper = num('fper_ms')
  if fper > 0 then
    redis.call('ZADD', E, now, idx .. ':' .. att)
    redis.call('ZREMRANGEBYSCORE', E, '-inf', now - fper)
    local n = redis.call('ZCARD', E)
    if n > num('fmax') and redis.call('HGET', H, 'state') == 'running' then
      redis.call('HSET', H, 'state', 'paused', 'reason',
        'error budget: ' .. n .. ' failures within ' .. math.floor(fper / 1000) .. ' s (the last: item ' .. idx .. ', ' .. why .. ')')
    end
  end
end
-- reap fails the leases that ran out by now (at most limit of them).
local function reap(now, limit)
  local gone = redis.call('ZRANGEBYSCORE', L, '-inf', now, 'LIMIT', 0, limit)
  for _, idx in ipairs(gone) do
    local att, uid = holder(idx)
    event('expire', idx, att, uid, '', now)
    failed(idx, att, uid, now, 'lease expired', 'lease_expired', '')
  end
end
`

// FailureLogSize is how many of a campaign's latest failures Redis keeps for admins
// (the scripts' LTRIM says it too).
const FailureLogSize = 50

// MaxFailureDetail bounds the detail a failure log entry keeps: a longer one is
// replaced by a note of its size.
const MaxFailureDetail = 2048

// campaignApply is campaignApplyScript's one argument, sent as JSON: the campaign's
// state and settings as MySQL has them, each field under the name the window's hash
// gives it. Every number is an integer well below 2^53, which the script's cjson reads
// exactly and HSET writes back in the same digits.
type campaignApply struct {
	Epoch       int64   `json:"epoch"`
	State       string  `json:"state"`
	Reason      string  `json:"reason"`
	Total       int64   `json:"total"`
	Window      int     `json:"window"`
	Interval    int64   `json:"ivl"`        // µs between two items (the rate)
	Tolerance   int64   `json:"tol"`        // µs the rate limiter lets a burst run ahead
	LeaseMS     int     `json:"lease_ms"`   // an item's lease
	MaxAttempts int     `json:"max_att"`    // attempts before an item fails for good
	BackoffMS   int     `json:"backoff_ms"` // a failed item's wait before its retry
	MaxFailures int64   `json:"fmax"`       // the error budget: failures allowed within PerMS
	PerMS       int64   `json:"fper_ms"`    // the error budget's period (0: no budget)
	Offset      int64   `json:"offset"`     // every item below it is finished
	Done        int64   `json:"done"`
	Failed      int64   `json:"failed"`
	Finished    []int64 `json:"finished"` // the finished items at or above Offset
	Events      int     `json:"events"`   // 1: record the items' events for the outbox
}

// campaignApplyScript restores a missing window from MySQL's copy, or takes a newer
// epoch's state and settings into an existing one. Its one argument is JSON with named
// fields (campaignApply), decoded once a call: Apply runs when a campaign is created,
// moved or restored, not per item.
//
//	KEYS[1..10] -> the campaign's keys (campaignLib)
//	ARGV[1] -> the campaign, JSON: campaignApply
//	Returns -> integer: 1 restored, 2 updated, 0 unchanged (Redis has that epoch or a
//	           newer one); Apply does not read it
var campaignApplyScript = redis.NewScript(campaignLib + `
local camp = cjson.decode(ARGV[1])
local epoch = camp.epoch
local settings = {'state', camp.state, 'reason', camp.reason, 'epoch', epoch, 'total', camp.total, 'window', camp.window,
  'ivl', camp.ivl, 'tol', camp.tol, 'lease_ms', camp.lease_ms, 'max_att', camp.max_att, 'backoff_ms', camp.backoff_ms,
  'fmax', camp.fmax, 'fper_ms', camp.fper_ms, 'events', camp.events}
local cur = redis.call('HGET', H, 'epoch')
if cur then
  if tonumber(cur) >= epoch then return 0 end
  local was = redis.call('HGET', H, 'state')
  redis.call('HSET', H, unpack(settings))
  if was == 'finished' then
    -- every item finished after the move read the window: it stays finished (the
    -- runner's sync takes that to MySQL)
    redis.call('HSET', H, 'state', 'finished', 'reason', '')
  elseif camp.state == 'running' and was ~= 'running' then
    redis.call('DEL', E)
  end
  finished()
  return 2
end
redis.call('DEL', F, L, A, R, E, CP, U, EV)
redis.call('HSET', H, unpack(settings))
redis.call('HSET', H, 'offset', camp.offset, 'next', camp.offset, 'done', camp.done, 'failed', camp.failed, 'tat', 0)
local fin = camp.finished
for i = 1, #fin, 1000 do
  redis.call('SADD', F, unpack(fin, i, math.min(i + 999, #fin)))
end
finished()
return 1
`)

// Apply takes c (as MySQL has it) to Redis: it restores a missing window from c's
// synced progress, or takes c's state and settings to a window at an older epoch.
func (c *Campaigns) Apply(ctx context.Context, camp taskd.Campaign) error {
	ivl := int64(math.Ceil(1e6 / camp.RatePerSecond))
	burst := max(int64(math.Ceil(camp.RatePerSecond)), 1) // one second's worth
	var fmax, fper int64
	if b := camp.ErrorBudget; b != nil {
		fmax, fper = int64(b.MaxFailures), int64(b.PerSeconds)*1000
	}
	a := campaignApply{Epoch: camp.Epoch, State: string(camp.State), Reason: camp.Reason, Total: camp.Total,
		Window: camp.Window, Interval: ivl, Tolerance: (burst - 1) * ivl, LeaseMS: camp.LeaseSeconds * 1000,
		MaxAttempts: camp.MaxAttempts, BackoffMS: camp.RetryBackoffSeconds * 1000, MaxFailures: fmax, PerMS: fper,
		Offset: camp.Offset, Done: camp.Done, Failed: camp.Failed, Finished: camp.FinishedAbove}
	if a.Finished == nil {
		a.Finished = []int64{} // [], not null: the script counts it
	}
	if c.events {
		a.Events = 1
	}
	arg, err := json.Marshal(a)
	if err != nil {
		return unavailable("campaign apply", err)
	}
	err = campaignApplyScript.Run(ctx, c.rdb, c.keys.Campaign(camp.ID), arg).Err()
	return unavailableIf("campaign apply", err)
}

// Handout is one item a take handed out.
type Handout struct {
	Item       int64
	Attempt    int
	LeaseUntil time.Time
	Redo       bool
	Checkpoint json.RawMessage
}

// TakeResult is what a take got: items, or, with none, the campaign's state (when not
// running) and how soon something may be (0: not known).
type TakeResult struct {
	State taskd.CampaignState
	Items []Handout
	Wait  time.Duration
}

// campaignTakeScript hands uid up to n items. A user at its cap gets the items it
// holds again (redo). It is the hot campaign script (one a fetch): its five arguments
// stay positional, each named in the script's first line, and no JSON is decoded.
//
//	KEYS[1..10] -> the campaign's keys (campaignLib)
//	ARGV[1] -> now, Unix ms
//	ARGV[2] -> uid
//	ARGV[3] -> n, the most items to hand out
//	ARGV[4] -> cap, how many items the user may hold at once
//	ARGV[5] -> now, Unix µs (the rate's clock)
//	Returns -> array (decodeTake): {1, wait ms, then for each item idx, attempt, lease
//	           end ms, redo (1/0), checkpoint (a string, "" for none)}, wait being, when
//	           nothing was handed out, how soon something may be (the rate, a retry or
//	           a lease coming due; 0: not known); {0, state} when the campaign is not
//	           running; {-1} when the window is missing
var campaignTakeScript = redis.NewScript(campaignLib + `
local now, uid, n, cap, nowus = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local st = redis.call('HGET', H, 'state')
if not st then return {-1} end
reap(now, 100)
finished()
st = redis.call('HGET', H, 'state')
if st ~= 'running' then return {0, st} end
local out = {1, 0}
local mine = held(uid)
if #mine >= cap then
  for i = 1, math.min(#mine, n) do
    local idx = mine[i]
    local att = holder(idx)
    out[#out + 1] = tonumber(idx); out[#out + 1] = att
    out[#out + 1] = tonumber(redis.call('ZSCORE', L, idx) or now); out[#out + 1] = 1
    out[#out + 1] = redis.call('HGET', CP, idx) or ''
  end
  return out
end
local lease, ivl, tol = num('lease_ms'), num('ivl'), num('tol')
local tat = math.max(num('tat'), nowus)
local wait = 0
for k = 1, math.min(n, cap - #mine) do
  if tat - nowus > tol then
    wait = math.ceil((tat - tol - nowus) / 1000)
    break
  end
  local idx = nil
  local due = redis.call('ZRANGEBYSCORE', R, '-inf', now, 'LIMIT', 0, 1)
  if #due > 0 then
    idx = due[1]
    redis.call('ZREM', R, idx)
  else
    local nx, total, limit = math.max(num('next'), num('offset')), num('total'), num('offset') + num('window')
    while nx < total and nx < limit and redis.call('SISMEMBER', F, tostring(nx)) == 1 do nx = nx + 1 end
    redis.call('HSET', H, 'next', nx)
    if nx < total and nx < limit then
      idx = tostring(nx)
      redis.call('HSET', H, 'next', nx + 1)
    end
  end
  if idx == nil then break end
  tat = tat + ivl
  local att = holder(idx) + 1
  redis.call('HSET', A, idx, att .. '|' .. uid)
  redis.call('ZADD', L, now + lease, idx)
  mine[#mine + 1] = idx
  out[#out + 1] = tonumber(idx); out[#out + 1] = att; out[#out + 1] = now + lease; out[#out + 1] = 0
  out[#out + 1] = redis.call('HGET', CP, idx) or ''
  event('dispatch', idx, att, uid, '', now)
end
redis.call('HSET', H, 'tat', tat)
setheld(uid, mine)
if #out == 2 and wait == 0 then
  local soon = nil
  local r = redis.call('ZRANGE', R, 0, 0, 'WITHSCORES')
  if #r > 0 then soon = tonumber(r[2]) end
  local l = redis.call('ZRANGE', L, 0, 0, 'WITHSCORES')
  if #l > 0 and (soon == nil or tonumber(l[2]) < soon) then soon = tonumber(l[2]) end
  if soon ~= nil then wait = math.max(soon - now, 1) end
end
out[2] = wait
return out
`)

// Take hands uid up to n items of campaign id; uid holds at most limit at once.
func (c *Campaigns) Take(ctx context.Context, id int64, uid string, n, limit int, now time.Time) (TakeResult, error) {
	r, err := arrayReply("campaign take", campaignTakeScript.Run(ctx, c.rdb, c.keys.Campaign(id), now.UnixMilli(), uid, n, limit, now.UnixMicro()))
	if err != nil {
		return TakeResult{}, unavailable("campaign take", err)
	}
	res, err := decodeTake(r)
	if err != nil {
		return TakeResult{}, unavailable("campaign take", err)
	}
	return res, nil
}

// decodeTake reads campaignTakeScript's reply.
func decodeTake(r *reply) (TakeResult, error) {
	status := r.int(0)
	if r.err != nil {
		return TakeResult{}, r.err
	}
	switch status {
	case -1:
		return TakeResult{}, ErrCampaignMissing
	case 0:
		st := r.str(1)
		if r.err != nil {
			return TakeResult{}, r.err
		}
		return TakeResult{State: taskd.CampaignState(st)}, nil
	case 1:
	default:
		r.fail(0, "-1, 0 or 1", status)
		return TakeResult{}, r.err
	}
	res := TakeResult{State: taskd.CampaignRunning, Wait: time.Duration(r.int(1)) * time.Millisecond}
	if (r.len()-2)%5 != 0 {
		r.fail(r.len(), "five fields to each item", nil)
	}
	for i := 2; i+4 < r.len() && r.err == nil; i += 5 {
		h := Handout{Item: r.int(i), Attempt: int(r.int(i + 1)),
			LeaseUntil: time.UnixMilli(r.int(i + 2)).UTC(), Redo: r.int(i+3) == 1}
		if cp := r.str(i + 4); cp != "" {
			h.Checkpoint = json.RawMessage(cp)
		}
		res.Items = append(res.Items, h)
	}
	if r.err != nil {
		return TakeResult{}, r.err
	}
	return res, nil
}

// CompleteOutcome is what a complete of a campaign item came to.
type CompleteOutcome int

const (
	ItemStale    CompleteOutcome = 0 // not the caller's handout: nothing changed
	ItemDone     CompleteOutcome = 1 // done, counted
	ItemRepeat   CompleteOutcome = 2 // finished before: counted once, then
	ItemFailed   CompleteOutcome = 3 // a failure: the item retries after its backoff, or failed for good
	itemsMissing CompleteOutcome = -1
)

// campaignCompleteScript records uid's complete of attempt att of item idx. A success
// is taken from any attempt (the work is done, and counts once); a failure only from
// the attempt that holds the item now.
//
//	KEYS[1..10] -> the campaign's keys (campaignLib)
//	ARGV[1] -> idx, the item
//	ARGV[2] -> att, the attempt
//	ARGV[3] -> uid
//	ARGV[4] -> 1 success, 2 failure, 3 final failure (the item fails for good at once)
//	ARGV[5] -> now, Unix ms
//	ARGV[6] -> a failure's detail: JSON, or empty
//	Returns -> integer (CompleteOutcome): 1 done, 2 already finished (a repeat: nothing
//	           counted), 3 failure recorded, 0 stale (not the caller's), -1 window
//	           missing
var campaignCompleteScript = redis.NewScript(campaignLib + `
local idx, att, uid, ok, now = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4] == '1', tonumber(ARGV[5])
if not redis.call('HGET', H, 'state') then return -1 end
local i = tonumber(idx)
if i >= num('total') then return 0 end
local catt, cuid = holder(idx)
if i < num('offset') or redis.call('SISMEMBER', F, idx) == 1 then
  -- finished before (a repeat): a lease on it, if any, is moot
  if redis.call('ZREM', L, idx) == 1 then unhold(cuid, idx) end
  redis.call('HDEL', A, idx)
  return 2
end
if i >= num('next') and catt == 0 then return 0 end
if ok then
  if att > catt then return 0 end
  redis.call('ZREM', L, idx)
  redis.call('ZREM', R, idx)
  unhold(cuid, idx)
  finish(idx, true, now)
  event('complete', idx, att, uid, 'success', now)
  return 1
end
if catt ~= att or cuid ~= uid or redis.call('ZSCORE', L, idx) == false then return 0 end
local last = ARGV[4] == '3'
event('complete', idx, att, uid, 'failure', now, last)
failed(idx, att, uid, now, 'a failure result', 'failure', ARGV[6], last)
return 3
`)

// Complete records uid's complete of attempt att of item idx of campaign id with
// result: a final failure (taskd.ResultFinalFailure) fails the item for good at once,
// whatever attempts are left. A failure's detail (nil: none) goes to the failure log,
// replaced by a note of its size when longer than MaxFailureDetail.
func (c *Campaigns) Complete(ctx context.Context, id, idx int64, att int, uid string, result taskd.Result, detail json.RawMessage, now time.Time) (CompleteOutcome, error) {
	arg := 2
	switch result {
	case taskd.ResultSuccess:
		arg = 1
		detail = nil
	case taskd.ResultFinalFailure:
		arg = 3
	}
	if len(detail) > MaxFailureDetail {
		detail = json.RawMessage(`{"truncated":true,"bytes":` + strconv.Itoa(len(detail)) + `}`)
	}
	n, err := intReply("campaign complete", campaignCompleteScript.Run(ctx, c.rdb, c.keys.Campaign(id), idx, att, uid, arg, now.UnixMilli(), string(detail)))
	if err != nil {
		return 0, unavailable("campaign complete", err)
	}
	switch o := CompleteOutcome(n); o {
	case itemsMissing:
		return 0, ErrCampaignMissing
	case ItemStale, ItemDone, ItemRepeat, ItemFailed:
		return o, nil
	}
	return 0, unavailable("campaign complete", &replyError{script: "campaign complete", pos: -1, want: "-1, 0, 1, 2 or 3", got: n})
}

// campaignProgressScript saves a checkpoint for, and with extend pushes out the lease
// of, the item uid holds at attempt att.
//
//	KEYS[1..10] -> the campaign's keys (campaignLib)
//	ARGV[1] -> idx, the item
//	ARGV[2] -> att, the attempt
//	ARGV[3] -> uid
//	ARGV[4] -> now, Unix ms
//	ARGV[5] -> extend: 1 pushes the lease out, 0 does not
//	ARGV[6] -> the checkpoint (empty keeps the last)
//	Returns -> integer: the lease end, Unix ms; 0 stale; -1 window missing
var campaignProgressScript = redis.NewScript(campaignLib + `
local idx, att, uid, now = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
if not redis.call('HGET', H, 'state') then return -1 end
local catt, cuid = holder(idx)
local lease = tonumber(redis.call('ZSCORE', L, idx) or '0')
if catt ~= att or cuid ~= uid or lease <= now then return 0 end
if ARGV[6] ~= '' then redis.call('HSET', CP, idx, ARGV[6]) end
if ARGV[5] == '1' then
  lease = now + num('lease_ms')
  redis.call('ZADD', L, lease, idx)
end
return lease
`)

// Progress saves checkpoint (nil: keep the last) for the item uid holds at attempt att
// and, with extend, pushes its lease out by the campaign's lease. ok is false when uid
// does not hold it (any more).
func (c *Campaigns) Progress(ctx context.Context, id, idx int64, att int, uid string, checkpoint json.RawMessage, extend bool, now time.Time) (lease time.Time, ok bool, err error) {
	ext := 0
	if extend {
		ext = 1
	}
	n, err := intReply("campaign progress", campaignProgressScript.Run(ctx, c.rdb, c.keys.Campaign(id), idx, att, uid, now.UnixMilli(), ext, string(checkpoint)))
	switch {
	case err != nil:
		return time.Time{}, false, unavailable("campaign progress", err)
	case n < 0:
		return time.Time{}, false, ErrCampaignMissing
	case n == 0:
		return time.Time{}, false, nil
	}
	return time.UnixMilli(n).UTC(), true, nil
}

// campaignSyncScript fails the leases that ran out (whatever the state: a stopping
// campaign ends when nothing is in flight) and returns the window.
//
//	KEYS[1..10] -> the campaign's keys (campaignLib)
//	ARGV[1] -> now, Unix ms
//	Returns -> array of strings (decodeSync): {state, reason, epoch, offset, next, done,
//	           failed, in flight, then the finished items at or above offset}; {} when
//	           the window is missing
var campaignSyncScript = redis.NewScript(campaignLib + `
if not redis.call('HGET', H, 'state') then return {} end
reap(tonumber(ARGV[1]), 1000)
local v = redis.call('HMGET', H, 'state', 'reason', 'epoch', 'offset', 'next', 'done', 'failed')
local out = {v[1], v[2] or '', v[3] or '0', v[4] or '0', v[5] or '0', v[6] or '0', v[7] or '0', tostring(redis.call('ZCARD', L))}
for _, x in ipairs(redis.call('SMEMBERS', F)) do out[#out + 1] = x end
return out
`)

// Sync fails campaign id's leases that ran out by now and returns its window; nil when
// Redis has none.
func (c *Campaigns) Sync(ctx context.Context, id int64, now time.Time) (*taskd.CampaignProgress, error) {
	r, err := arrayReply("campaign sync", campaignSyncScript.Run(ctx, c.rdb, c.keys.Campaign(id), now.UnixMilli()))
	if err != nil {
		return nil, unavailable("campaign sync", err)
	}
	p, err := decodeSync(r)
	if err != nil {
		return nil, unavailable("campaign sync", err)
	}
	return p, nil
}

// decodeSync reads campaignSyncScript's reply: nil for the empty one (no window).
func decodeSync(r *reply) (*taskd.CampaignProgress, error) {
	if r.len() == 0 {
		return nil, nil
	}
	p := &taskd.CampaignProgress{State: taskd.CampaignState(r.str(0)), Reason: r.str(1), Epoch: r.num(2), Offset: r.num(3),
		Next: r.num(4), Done: r.num(5), Failed: r.num(6), InFlight: r.num(7), Finished: []int64{}}
	for i := 8; i < r.len() && r.err == nil; i++ {
		p.Finished = append(p.Finished, r.num(i))
	}
	if r.err != nil {
		return nil, r.err
	}
	return p, nil
}

// Failure is one failure of a campaign item, as the failure log keeps it.
type Failure struct {
	Item    int64
	Attempt int
	UID     string
	// Cause is "failure" (a failure result) or "lease_expired".
	Cause string
	// Final says the item failed for good (it was its last attempt); else it retries.
	Final  bool
	Detail json.RawMessage
	At     time.Time
}

// Failures returns campaign id's latest failures (at most FailureLogSize), newest
// first, and how many failures its error budget counts now (within per, the budget's
// period; 0 without one).
func (c *Campaigns) Failures(ctx context.Context, id int64, per time.Duration, now time.Time) ([]Failure, int64, error) {
	keys := c.keys.Campaign(id)
	var log *redis.StringSliceCmd
	var recent *redis.IntCmd
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		log = p.LRange(ctx, keys[9], 0, FailureLogSize-1)
		if per > 0 {
			recent = p.ZCount(ctx, keys[5], strconv.FormatInt(now.Add(-per).UnixMilli(), 10), "+inf")
		}
		return nil
	})
	if err != nil {
		return nil, 0, unavailable("campaign failures", err)
	}
	out := make([]Failure, 0, len(log.Val()))
	for _, s := range log.Val() {
		var v struct {
			Item    int64  `json:"item"`
			Attempt int    `json:"attempt"`
			UID     string `json:"uid"`
			Cause   string `json:"cause"`
			Final   bool   `json:"final"`
			Detail  string `json:"detail"`
			At      int64  `json:"at"`
		}
		if json.Unmarshal([]byte(s), &v) != nil {
			continue // unreadable
		}
		f := Failure{Item: v.Item, Attempt: v.Attempt, UID: v.UID, Cause: v.Cause, Final: v.Final, At: time.UnixMilli(v.At).UTC()}
		if v.Detail != "" && json.Valid([]byte(v.Detail)) {
			f.Detail = json.RawMessage(v.Detail)
		}
		out = append(out, f)
	}
	var n int64
	if recent != nil {
		n = recent.Val()
	}
	return out, n, nil
}
