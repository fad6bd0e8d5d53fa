// Package campaign runs campaigns (seed 000): it hands their items to the executor's
// agents through fetch, takes their completes and checkpoints, and keeps MySQL's copy of
// each campaign's window in step with the live one in Redis (package queue).
package campaign

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/queue"
)

// Store is what the engine needs from MySQL (internal/store).
type Store interface {
	GetCampaign(ctx context.Context, id int64) (taskd.Campaign, error)
	ListCampaigns(ctx context.Context, states []taskd.CampaignState, before int64, limit int) ([]taskd.Campaign, error)
	CampaignUIDs(ctx context.Context, id, from, to int64) (map[int64]string, error)
	MoveCampaign(ctx context.Context, actor string, id int64, move taskd.CampaignMove, live *taskd.CampaignProgress, ifMatch taskd.IfMatch, now time.Time) (taskd.Campaign, error)
	SyncCampaign(ctx context.Context, id int64, p taskd.CampaignProgress, now time.Time) (taskd.Campaign, error)
	Members(ctx context.Context, gid string) ([]string, error)
	AppendOutbox(ctx context.Context, evs ...taskd.Event) error
}

// Config tunes the engine.
type Config struct {
	// Node names this process in the runner leases.
	Node string
	// SyncInterval is how often a node syncs the windows of the campaigns it runs to
	// MySQL (and ends stopping ones with nothing in flight).
	SyncInterval time.Duration
	// LeaseTTL is how long a runner lease lasts unrenewed; it is renewed at a third of
	// it, so a dead node's campaigns move to the others within LeaseTTL.
	LeaseTTL time.Duration
	// PerNode caps how many campaigns one node runs: it runs its share (the active
	// campaigns divided by the live nodes, rounded up) up to this cap.
	PerNode int
	// Refresh is how old this node's list of running campaigns (and their groups'
	// members) may get before a fetch reloads it.
	Refresh time.Duration
	// Nodes counts the live nodes (the membership); nil counts one.
	Nodes func(ctx context.Context) (int, error)
}

// Engine runs campaigns on this node.
type Engine struct {
	store Store
	win   *queue.Campaigns
	clock clock.Clock
	log   *slog.Logger
	cfg   Config

	flight singleflight.Group

	mu       sync.Mutex
	running  []*running // the running campaigns, as of loadedAt
	loadedAt time.Time
	chunks   map[chunkKey]map[int64]string // uid-list items, a chunk at a time

	// runners are the campaigns this node runs, "campaign:<id>", under leases in Redis.
	runners *queue.Shares
}

// running is a running campaign as the fetch path sees it.
type running struct {
	c       taskd.Campaign
	members map[string]bool // a group executor's members; nil for a user executor
}

type chunkKey struct{ campaign, chunk int64 }

// maxRunning bounds the campaigns one node reads as running (and runs).
const maxRunning = 10_000

// chunkSize is how many uids of a uid-list campaign one read brings.
const chunkSize = 1000

// New returns an engine over st and the windows win.
func New(st Store, win *queue.Campaigns, clk clock.Clock, log *slog.Logger, cfg Config) *Engine {
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = time.Second
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.PerNode <= 0 {
		cfg.PerNode = 100
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Second
	}
	return &Engine{store: st, win: win, clock: clk, log: log.With("component", "campaign"), cfg: cfg,
		chunks: map[chunkKey]map[int64]string{}, runners: win.Shares(cfg.Node, cfg.LeaseTTL)}
}

func (e *Engine) now() time.Time { return e.clock.Now().UTC().Truncate(time.Microsecond) }

// tag is the tag of a handout's log id: only the server (which has the campaign's
// salt) can make it, so a log id names a handout to that user.
func tag(c *taskd.Campaign, uid string, item int64, attempt int) string {
	m := hmac.New(sha256.New, []byte(c.Salt))
	m.Write([]byte(uid + "|" + strconv.FormatInt(item, 10) + "|" + strconv.Itoa(attempt)))
	return hex.EncodeToString(m.Sum(nil)[:6])
}

// Take hands uid up to n items of the running campaigns it works whose template tk
// allows (in campaign order);
// uid holds at most limit items of one campaign at once, and at its limit gets those
// again (redo). With none, next is how soon one may be (nil: not known).
func (e *Engine) Take(ctx context.Context, uid string, n, limit int, tk taskd.Take, now time.Time) ([]taskd.CampaignItem, *time.Time, error) {
	list, err := e.runningFor(ctx, uid)
	if err != nil || len(list) == 0 {
		return nil, nil, err
	}
	var out []taskd.CampaignItem
	var next *time.Time
	for _, c := range list {
		if !tk.Allows(c.TemplateID) {
			continue
		}
		if open, ok := c.Windows.OpenAt(now); !open.Equal(now) {
			// Outside its windows: nothing of it now, and the fetch comes back at the
			// next opening if nothing else is sooner.
			if ok && (next == nil || open.Before(*next)) {
				next = &open
			}
			continue
		}
		var res queue.TakeResult
		err := e.restoring(ctx, c.ID, func() (err error) {
			res, err = e.win.Take(ctx, c.ID, uid, n-len(out), limit, now)
			return err
		})
		if err != nil {
			return e.partial(ctx, out, err)
		}
		if res.Wait > 0 && (next == nil || now.Add(res.Wait).Before(*next)) {
			next = new(now.Add(res.Wait))
		}
		for _, h := range res.Items {
			item, err := e.itemValue(ctx, c, h.Item)
			if err != nil {
				return e.partial(ctx, out, err)
			}
			out = append(out, taskd.CampaignItem{
				Log:  taskd.CampaignLog{Campaign: c.ID, Item: h.Item, Attempt: h.Attempt, UIDTag: tag(c, uid, h.Item, h.Attempt)},
				Item: item, Campaign: c, Redo: h.Redo, LeaseUntil: h.LeaseUntil, Checkpoint: h.Checkpoint})
		}
		if len(out) >= n {
			break
		}
	}
	if len(out) > 0 {
		next = nil
	}
	return out, next, nil
}

// partial is a take's outcome when it failed part-way: the items already taken are
// handed out (a fetch that failed would leave them leased to the user, unknown to it),
// and the error only when there are none.
func (e *Engine) partial(ctx context.Context, out []taskd.CampaignItem, err error) ([]taskd.CampaignItem, *time.Time, error) {
	if len(out) == 0 {
		return nil, nil, err
	}
	e.log.WarnContext(ctx, "campaign take failed part-way; handing out what it took", "items", len(out), "err", err)
	return out, nil, nil
}

// itemValue is what an item's handout shows: its index, or its uid.
func (e *Engine) itemValue(ctx context.Context, c *taskd.Campaign, idx int64) (any, error) {
	if c.Items != taskd.ItemsUIDs {
		return idx, nil
	}
	key := chunkKey{c.ID, idx / chunkSize}
	e.mu.Lock()
	chunk, ok := e.chunks[key]
	e.mu.Unlock()
	if !ok {
		v, err, _ := e.flight.Do("chunk:"+strconv.FormatInt(c.ID, 10)+":"+strconv.FormatInt(key.chunk, 10), func() (any, error) {
			return e.store.CampaignUIDs(ctx, c.ID, key.chunk*chunkSize, (key.chunk+1)*chunkSize)
		})
		if err != nil {
			return nil, err
		}
		chunk = v.(map[int64]string)
		e.mu.Lock()
		if len(e.chunks) >= 256 {
			clear(e.chunks)
		}
		e.chunks[key] = chunk
		e.mu.Unlock()
	}
	uid, ok := chunk[idx]
	if !ok {
		return nil, taskd.Errorf(taskd.CodeInternal, "campaign %d: item %d has no uid", c.ID, idx)
	}
	return uid, nil
}

// runningFor returns the running campaigns uid works, from a list at most Refresh old.
func (e *Engine) runningFor(ctx context.Context, uid string) ([]*taskd.Campaign, error) {
	e.mu.Lock()
	list, fresh := e.running, e.clock.Now().Sub(e.loadedAt) < e.cfg.Refresh
	e.mu.Unlock()
	if !fresh {
		v, err, _ := e.flight.Do("running", func() (any, error) { return e.load(ctx) })
		if err != nil {
			if list == nil {
				if taskd.ErrorCode(err) == taskd.CodeUnavailable {
					// MySQL is away and this node never read the list: no campaign
					// items until it can, and the fetch answers what else it has
					// (an empty poll is still an answer).
					e.log.DebugContext(ctx, "campaign list not read; no items for now", "err", err)
					return nil, nil
				}
				return nil, err
			}
			e.log.WarnContext(ctx, "campaign list reload failed; using the last", "err", err)
		} else {
			list = v.([]*running)
		}
	}
	var out []*taskd.Campaign
	for _, r := range list {
		if r.members != nil && r.members[uid] || r.members == nil && r.c.Executor == taskd.UserExecutor(uid) {
			out = append(out, &r.c)
		}
	}
	return out, nil
}

// load reads the running campaigns and their groups' members.
func (e *Engine) load(ctx context.Context) ([]*running, error) {
	cs, err := e.store.ListCampaigns(ctx, []taskd.CampaignState{taskd.CampaignRunning}, 0, maxRunning)
	if err != nil {
		return nil, err
	}
	list := make([]*running, 0, len(cs))
	groups := map[string]map[string]bool{}
	for i := len(cs) - 1; i >= 0; i-- { // oldest first
		r := &running{c: cs[i]}
		if ex, err := taskd.ParseExecutor(r.c.Executor); err == nil && ex.Group {
			if groups[ex.ID] == nil {
				uids, err := e.store.Members(ctx, ex.ID)
				if err != nil {
					return nil, err
				}
				groups[ex.ID] = make(map[string]bool, len(uids))
				for _, u := range uids {
					groups[ex.ID][u] = true
				}
			}
			r.members = groups[ex.ID]
		}
		list = append(list, r)
	}
	e.mu.Lock()
	e.running, e.loadedAt = list, e.clock.Now()
	e.mu.Unlock()
	return list, nil
}

// forget makes the next fetch reload the running campaigns (after a move here).
func (e *Engine) forget() {
	e.mu.Lock()
	e.loadedAt = time.Time{}
	e.mu.Unlock()
}

// restoring runs script, a call on campaign id's window; when Redis has lost the
// window, it restores it and runs script again.
func (e *Engine) restoring(ctx context.Context, id int64, script func() error) error {
	err := script()
	if errors.Is(err, queue.ErrCampaignMissing) {
		if err = e.restore(ctx, id); err == nil {
			err = script()
		}
	}
	return err
}

// restore takes campaign id from MySQL to Redis after Redis lost its window.
func (e *Engine) restore(ctx context.Context, id int64) error {
	_, err, _ := e.flight.Do("restore:"+strconv.FormatInt(id, 10), func() (any, error) {
		c, err := e.store.GetCampaign(ctx, id)
		if err != nil {
			return nil, err
		}
		e.log.WarnContext(ctx, "campaign window missing in redis: restored from mysql", "campaign", id, "offset", c.Offset)
		return nil, e.win.Apply(ctx, c)
	})
	return err
}

// handout checks that log names a handout of a campaign to uid.
func (e *Engine) handout(ctx context.Context, uid, logID string) (taskd.CampaignLog, taskd.Campaign, error) {
	l, ok := taskd.ParseCampaignLog(logID)
	stale := taskd.Errorf(taskd.CodeStaleLease, "log_id %s is not your open dispatch", logID)
	if !ok {
		return l, taskd.Campaign{}, stale
	}
	c, err := e.campaign(ctx, l.Campaign)
	if taskd.ErrorCode(err) == taskd.CodeNotFound {
		return l, c, stale
	}
	if err != nil {
		return l, c, err
	}
	if !hmac.Equal([]byte(tag(&c, uid, l.Item, l.Attempt)), []byte(l.UIDTag)) {
		return l, c, stale
	}
	return l, c, nil
}

// campaign returns campaign id from the running list, or MySQL.
func (e *Engine) campaign(ctx context.Context, id int64) (taskd.Campaign, error) {
	e.mu.Lock()
	for _, r := range e.running {
		if r.c.ID == id {
			e.mu.Unlock()
			return r.c, nil
		}
	}
	e.mu.Unlock()
	return e.store.GetCampaign(ctx, id)
}

// Complete records uid's complete of the campaign item logID names. A success is
// taken from any of the item's handouts to uid, and counts once; a failure only from
// the one that holds the item now, and its detail goes to the campaign's failure log.
// A final failure (taskd.ResultFinalFailure) fails the item for good at once.
// Anything else is a stale_lease conflict.
func (e *Engine) Complete(ctx context.Context, uid, logID string, result taskd.Result, detail json.RawMessage, now time.Time) error {
	l, _, err := e.handout(ctx, uid, logID)
	if err != nil {
		return err
	}
	var out queue.CompleteOutcome
	err = e.restoring(ctx, l.Campaign, func() (err error) {
		out, err = e.win.Complete(ctx, l.Campaign, l.Item, l.Attempt, uid, result, detail, now)
		return err
	})
	if err != nil {
		return err
	}
	if out == queue.ItemStale {
		return taskd.Errorf(taskd.CodeStaleLease, "log_id %s: the item is not yours any more (its lease ran out and it was handed out again)", logID)
	}
	return nil
}

// Progress saves a checkpoint for the campaign item logID names and, with extend,
// pushes its lease out; it returns the lease's end.
func (e *Engine) Progress(ctx context.Context, uid, logID string, checkpoint json.RawMessage, extend bool, now time.Time) (*time.Time, error) {
	l, _, err := e.handout(ctx, uid, logID)
	if err != nil {
		return nil, err
	}
	var lease time.Time
	var ok bool
	err = e.restoring(ctx, l.Campaign, func() (err error) {
		lease, ok, err = e.win.Progress(ctx, l.Campaign, l.Item, l.Attempt, uid, checkpoint, extend, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, taskd.Errorf(taskd.CodeStaleLease, "log_id %s is not your open dispatch", logID)
	}
	return &lease, nil
}

// Live returns c with its window's numbers and state as Redis has them now, when Redis
// has its window at c's epoch.
func (e *Engine) Live(ctx context.Context, c taskd.Campaign) (taskd.Campaign, error) {
	if c.State == taskd.CampaignCreated {
		return c, nil
	}
	p, err := e.win.Sync(ctx, c.ID, e.now())
	if err != nil || p == nil || p.Epoch != c.Epoch {
		return c, err
	}
	c.Offset, c.Done, c.Failed, c.InFlight = p.Offset, p.Done, p.Failed, p.InFlight
	switch {
	case p.State == taskd.CampaignFinished:
		c.State, c.Reason = p.State, ""
	case p.State == taskd.CampaignPaused && c.State == taskd.CampaignRunning:
		c.State, c.Reason = p.State, p.Reason
	}
	return c, nil
}

// Failures returns campaign c's latest failures, newest first (at most
// queue.FailureLogSize), and how many its error budget counts now (0 without one).
func (e *Engine) Failures(ctx context.Context, c taskd.Campaign) ([]taskd.CampaignFailure, int64, error) {
	var per time.Duration
	if c.ErrorBudget != nil {
		per = time.Duration(c.ErrorBudget.PerSeconds) * time.Second
	}
	log, recent, err := e.win.Failures(ctx, c.ID, per, e.now())
	if err != nil {
		return nil, 0, err
	}
	out := make([]taskd.CampaignFailure, len(log))
	for i, f := range log {
		out[i] = taskd.CampaignFailure{Item: f.Item, Attempt: f.Attempt, UID: f.UID, Cause: f.Cause, Final: f.Final, Detail: f.Detail, At: f.At}
	}
	return out, recent, nil
}

// Move makes an admin's move of campaign id and takes it to Redis. Should Redis fail
// after MySQL committed, the campaign's runner takes it there within a sync interval.
func (e *Engine) Move(ctx context.Context, actor string, id int64, move taskd.CampaignMove, ifMatch taskd.IfMatch) (taskd.Campaign, error) {
	live, err := e.win.Sync(ctx, id, e.now())
	if err != nil {
		// The move is made in MySQL all the same (at a new epoch), and the runner takes
		// it to Redis.
		e.log.WarnContext(ctx, "campaign move: redis window unreadable; moving from mysql's state", "campaign", id, "err", err)
		live = nil
	}
	c, err := e.store.MoveCampaign(ctx, actor, id, move, live, ifMatch, e.now())
	if err != nil {
		return c, err
	}
	e.forget()
	if err := e.win.Apply(ctx, c); err != nil {
		e.log.WarnContext(ctx, "campaign move committed but not yet in redis; its runner takes it there", "campaign", id, "err", err)
	}
	return e.Live(ctx, c)
}
