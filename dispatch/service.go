package dispatch

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/deadline"
	"github.com/taskpull/taskd/internal/metrics"
	"github.com/taskpull/taskd/internal/targeting"
	"github.com/taskpull/taskd/schedule"
)

// Config tunes the service.
type Config struct {
	// MaxWait caps a fetch's long poll (wait_ms).
	MaxWait time.Duration
	// PollStep is how often a long poll looks again when nothing tells it earlier.
	PollStep time.Duration
	// RequestTimeout bounds each round of a fetch's MySQL and Redis work (a long poll's
	// waiting is apart from it).
	RequestTimeout time.Duration
	// Metrics records fetches, dispatches, completions and expiries; nil records nothing.
	Metrics *metrics.Metrics
	// DDISleep is the longest a DDI controller is told to sleep between polls.
	DDISleep time.Duration
	// DDIGateway is the uid whose client keys are DDI gateway tokens (any controller).
	// "": none.
	DDIGateway string
}

// Service is fetch, complete and lease expiry.
type Service struct {
	store Store
	cache Cache
	clock clock.Clock
	log   *slog.Logger
	cfg   Config
	// rateBound remembers, per task, that a claim found its dispatch_rate_per_minute
	// used up: for a second (or to the minute's end, if sooner) this node refuses its
	// claims without asking MySQL, so users waiting on it cost one claim a second, and
	// an edit that lifts the bound reaches them within the second.
	rateBound sync.Map // taskd.TaskKey -> time.Time
	// campaigns hands out campaign items when no task is due; nil: none.
	campaigns Campaigns
	// fleet records the polls answered; nil: none.
	fleet Fleet
	// rules are the dynamic groups' rules, parsed once (Report).
	rules targeting.Rules
	// ddiTemplates remembers which templates are DDI templates (templateDDI).
	ddiTemplates sync.Map // int64 -> bool
	// results is told of the dispatches that finish; nil: nobody.
	results Results
}

// NewService wires the service.
func NewService(st Store, cache Cache, clk clock.Clock, log *slog.Logger, cfg Config) *Service {
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 30 * time.Second
	}
	if cfg.PollStep <= 0 {
		cfg.PollStep = time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.DDISleep <= 0 {
		cfg.DDISleep = 5 * time.Minute
	}
	return &Service{store: st, cache: cache, clock: clk, log: log.With("component", "dispatch"), cfg: cfg}
}

// now is the time of a request, at the precision MySQL keeps (microseconds), so that a
// reply shows the same instant a later read of the record does.
func (s *Service) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// Assignment is a task handed to an agent.
type Assignment struct {
	LogID          string          `json:"log_id"`
	TaskID         string          `json:"task_id"`
	Kind           string          `json:"kind"`
	DueAt          time.Time       `json:"due_at"`
	TemplateID     int64           `json:"template_id"`
	Params         json.RawMessage `json:"params"`
	Redo           bool            `json:"redo"`
	Attempt        int             `json:"attempt"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	// Checkpoint is the latest progress saved for this occurrence by this user, when a
	// dispatch of it before this one saved any.
	Checkpoint json.RawMessage `json:"checkpoint,omitempty"`
	// Stage is the stage of a multi-stage task this dispatch works, and Context what
	// the previous stage's complete handed it.
	Stage   string          `json:"stage,omitempty"`
	Context json.RawMessage `json:"context,omitempty"`
	// CampaignID and Item name a campaign item (task_id campaign:<id>): its index, or
	// its uid.
	CampaignID *int64 `json:"campaign_id,omitempty"`
	Item       any    `json:"item,omitempty"`
	// ActionID is the DDI action id the claim gave it (a DDI take's), and
	// confirmSeconds its confirm_seconds; not sent.
	ActionID       int64 `json:"-"`
	confirmSeconds int
}

// FetchResult is a fetch's answer: a task or none, and when the next one is due.
type FetchResult struct {
	Task *Assignment `json:"task"`
	// Tasks is a batch fetch's tasks, in heap order (Task is the first); nil for a
	// fetch without max.
	Tasks     []*Assignment `json:"tasks,omitempty"`
	NextDueAt *time.Time    `json:"next_due_at"`
}

func assignment(d *taskd.Dispatch, redo bool) *Assignment {
	return &Assignment{
		LogID:          d.LogID,
		TaskID:         d.Occurrence.Task.String(),
		Kind:           d.Occurrence.Task.Kind.String(),
		DueAt:          d.Occurrence.DueAt,
		TemplateID:     d.TemplateID,
		Params:         d.Params,
		Redo:           redo,
		Attempt:        d.Attempt,
		LeaseExpiresAt: d.LeaseExpiresAt,
		Checkpoint:     d.Checkpoint,
		Stage:          d.Stage,
		Context:        d.Context,
		ActionID:       d.ActionID,
		confirmSeconds: d.ConfirmSeconds,
	}
}

// singlePeek is how many due entries a fetch without max peeks at: enough for one
// task with some refused.
const singlePeek = 8

// maxRounds bounds how many heap peeks one fetch makes while every due occurrence it
// sees turns out to be taken.
const maxRounds = 32

// Fetch returns the task due for uid now, or none and when to come back. keyHash is
// checked against uid's valid client keys in the same Redis round trip as the heap
// peek. With wait > 0 it long-polls until a task is due or wait (capped) runs out.
func (s *Service) Fetch(ctx context.Context, uid, keyHash string, wait time.Duration) (FetchResult, error) {
	if keyHash == "" {
		return FetchResult{}, taskd.Errorf(taskd.CodeUnauthenticated, "missing client key")
	}
	return s.counted(s.longPoll(ctx, uid, keyHash, wait, nil, s.confirming()))
}

// counted records a fetch's outcome in the metrics.
func (s *Service) counted(res FetchResult, err error) (FetchResult, error) {
	switch {
	case err != nil:
	case res.Task == nil:
		s.cfg.Metrics.Fetch("empty")
	case res.Task.Redo:
		s.cfg.Metrics.Fetch("redo")
	default:
		s.cfg.Metrics.Fetch("task")
	}
	return res, err
}

// peeked is a fetch's first round prepared by CompleteAndFetch: the view peeked before
// the complete, and, if the hint in Redis still names it, the log id it completed.
// Without a view (stale, only checked), the first round peeks afresh without the key:
// this request's own peek checked it and counted the poll.
type peeked struct {
	view      schedule.View
	completed string
	stale     bool
}

// longPoll fetches in rounds until a task is due or wait runs out; first, if not nil,
// is the first round's view. cf is the request's part in confirming its user's
// successes, for every round.
func (s *Service) longPoll(ctx context.Context, uid, keyHash string, wait time.Duration, first *peeked, cf *confirming) (FetchResult, error) {
	return s.poll(ctx, wait, func(round context.Context) (FetchResult, error) {
		if first == nil {
			return s.fetch(round, uid, keyHash, cf)
		}
		if first.stale {
			first = nil
			return s.fetch(round, uid, "", cf)
		}
		res, err := s.fetchFrom(round, uid, first.view, s.now(), cf)
		if err == nil && res.Task == nil && first.completed != "" {
			// Nothing was dispatched, so nothing overwrote the completed dispatch's
			// hint.
			s.clearOpen(round, uid, schedule.OpenIs(first.completed))
		}
		first = nil
		return res, err
	})
}

// poll runs a fetch's rounds, each bounded by the request bound, until one hands out a
// task or wait (capped) runs out; between rounds it sleeps until the next due time
// the last round saw, or a poll step. A round's bound starts its timer only if the
// round waits on it (a warm empty poll's peek reads its deadline only: internal/deadline).
func (s *Service) poll(ctx context.Context, wait time.Duration, fetch func(round context.Context) (FetchResult, error)) (FetchResult, error) {
	if wait <= 0 {
		// One round (most polls): no wait to bound.
		round := deadline.New(ctx, s.cfg.RequestTimeout)
		defer round.Cancel()
		return fetch(round)
	}
	wait = min(wait, s.cfg.MaxWait)
	until := s.clock.Now().Add(wait)
	// The wait is also bounded in real time, so that a long poll ends even when the
	// injected clock stands still (as a test's fake clock does).
	realUntil := time.Now().Add(wait)
	for {
		round := deadline.New(ctx, s.cfg.RequestTimeout)
		res, err := fetch(round)
		round.Cancel()
		if err != nil || res.Task != nil {
			return res, err
		}
		now := s.clock.Now()
		if !now.Before(until) || !time.Now().Before(realUntil) {
			return res, nil
		}
		pause := min(until.Sub(now), s.cfg.PollStep)
		if res.NextDueAt != nil && res.NextDueAt.Sub(now) < pause {
			pause = max(res.NextDueAt.Sub(now), 10*time.Millisecond)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, nil
		case <-t.C:
		}
		// Every round's peek checks the client key again (in the same script, at no
		// cost), so a key revoked during a long poll stops it.
	}
}

func (s *Service) fetch(ctx context.Context, uid, keyHash string, cf *confirming) (FetchResult, error) {
	now := s.now()
	view, err := s.cache.PeekN(ctx, uid, keyHash, now, singlePeek)
	if err != nil {
		return FetchResult{}, err
	}
	return s.fetchFrom(ctx, uid, view, now, cf)
}

// fetchFrom is a fetch's work after its peek gave view: the user's successes waiting
// for a fetch confirmed, if the view shows any (confirm); then the user's open
// dispatch, if any (the cached hint only says whether to look; MySQL says what is
// open); else the take loop into slot 1. A slot found taken there means another request
// of the user dispatched first: that one is handed out, or, if it is finished already,
// the heap is looked at again.
func (s *Service) fetchFrom(ctx context.Context, uid string, view schedule.View, now time.Time, cf *confirming) (FetchResult, error) {
	view, err := s.confirm(ctx, uid, view, cf, now, singlePeek)
	if err != nil {
		return FetchResult{}, err
	}
	if view.Open.State != schedule.OpenNone {
		res, done, err := s.resumeOpen(ctx, uid, view.Open, now, view)
		if err != nil || done {
			return res, err
		}
		// A resume may have changed the heap (an expiry). While Redis is away the view
		// was read from MySQL by this very request: it is not read again.
		if !s.cache.Away() {
			if view, err = s.cache.PeekN(ctx, uid, "", now, singlePeek); err != nil {
				return FetchResult{}, err
			}
		}
	}
	var out taking
	for try := 0; ; try++ {
		if out, err = s.takeInto(ctx, uid, view, singlePeek, []int{1}, taskd.Single, now); err != nil {
			return FetchResult{}, err
		}
		if len(out.tasks) > 0 {
			return FetchResult{Task: out.tasks[0], NextDueAt: out.next}, nil
		}
		if !out.busy && !out.holding {
			break
		}
		// Holding: the user holds an occurrence open, in slot 1 (handed out here) or
		// in another slot a batch fetch gave it.
		res, done, err := s.resumeOpen(ctx, uid, schedule.NoneOpen, now, view)
		if err != nil || done {
			return res, err
		}
		if !out.busy || try == 2 {
			break
		}
		// The slot's holder finished meanwhile: look again.
		if view, err = s.cache.PeekN(ctx, uid, "", now, singlePeek); err != nil {
			return FetchResult{}, err
		}
	}
	res, err := s.withItems(ctx, uid, FetchResult{NextDueAt: out.next}, 1, 1, taskd.Single, now)
	res.Tasks = nil // a fetch without max answers with task alone
	return res, err
}

// staysOnOffer reports whether the heap entry e, just dispatched as d, stays in the
// heap: an until_exhausted occurrence is offered to its user again after each
// completion while its quota lasts, which is what a rebuild after the completion would
// give. Left in place, it needs no rebuild; meanwhile the open-dispatch hint hands out
// d, so the entry is not taken twice. A waiting dispatch's entry (a retry) goes.
func staysOnOffer(e schedule.Entry, d *taskd.Dispatch) bool {
	return e.LogID == "" && d.Mode == taskd.ModeUntilExhausted
}

// notTargeted makes uid's heap stale when a claim found that a task it offers no
// longer targets uid (uid left the task's group, and the invalidation that should have
// said so has not reached Redis): the next look rebuilds it from MySQL, without the
// group's other tasks, instead of refusing them one claim at a time.
func (s *Service) notTargeted(ctx context.Context, uid string, outcome taskd.ClaimOutcome) {
	if outcome != taskd.NotTargeted {
		return
	}
	if err := s.invalidateUser(ctx, uid); err != nil {
		s.log.WarnContext(ctx, "a claim found a task that no longer targets its user; the user's heap stays until the heap-change feed reaches Redis",
			"component", "dispatch", "uid", uid, "err", err)
	}
}

// nextDue is when the user's next entry after taken is due, as far as its heap (a day
// ahead at least) knows: the first of the entries after it, the first not yet due, and
// taken's own next occurrence (a rotate task). nil when nothing more is scheduled.
func nextDue(taken *schedule.Entry, rest []schedule.Entry, next *schedule.Entry) *time.Time {
	var at *time.Time
	consider := func(t time.Time) {
		if at == nil || t.Before(*at) {
			at = &t
		}
	}
	if len(rest) > 0 {
		consider(rest[0].DueAt)
	}
	if next != nil {
		consider(next.DueAt)
	}
	if taken != nil {
		if n, ok := taken.Next(); ok {
			consider(n.DueAt)
		}
	}
	return at
}

// resumeOpen handles uid's open dispatch: an open one is handed out again (redo), and
// one past its lease expires. done is false when nothing is open (any more) and the
// heap is next. seen is the open-dispatch hint the caller saw: the hint is cleared only
// if it still says that. view is the caller's peek, for next_due_at.
func (s *Service) resumeOpen(ctx context.Context, uid string, seen schedule.OpenHint, now time.Time, view schedule.View) (FetchResult, bool, error) {
	for attempt := 0; attempt < 3; attempt++ {
		d, err := s.store.OpenDispatch(ctx, uid)
		if err != nil {
			// Only before MySQL said anything of the dispatch: once it has (finished,
			// expired), the copy is of what it no longer holds open.
			if attempt == 0 {
				if a := s.fromCopy(ctx, uid, seen, now, err); a != nil {
					return FetchResult{Task: a, NextDueAt: nextDue(nil, view.Due, view.Next)}, true, nil
				}
			}
			return FetchResult{}, false, err
		}
		switch {
		case d == nil:
			s.clearOpen(ctx, uid, seen)
			return FetchResult{}, false, nil
		case d.LeaseExpired(now):
			if err := s.expired(ctx, d.LogID, now); err != nil {
				return FetchResult{}, false, err
			}
		default:
			if ddi, err := s.templateDDI(ctx, d.TemplateID); err != nil || ddi {
				// A DDI controller's deployment holds the slot: nothing for a fetch
				// until it ends, at its lease's end at the latest (the due entries wait
				// for the slot: not a time to come back).
				return FetchResult{NextDueAt: d.LeaseExpiresAt}, true, err
			}
			redone, err := s.store.Redo(ctx, d, now)
			if err != nil {
				return FetchResult{}, false, err
			}
			if !redone {
				continue // completed, expired or parked meanwhile: look again
			}
			a := assignment(d, true)
			s.setOpen(ctx, uid, d.LogID, keptCopy([]*Assignment{a}, d.LogID), nil)
			return FetchResult{Task: a, NextDueAt: nextDue(nil, view.Due, view.Next)}, true, nil
		}
	}
	return FetchResult{}, false, taskd.Errorf(taskd.CodeUnavailable, "open dispatch of user %s is changing; try again", uid)
}

// expired expires one dispatch past its lease and lets the user's heap offer the
// occurrence again (its slot went back to the pool).
func (s *Service) expired(ctx context.Context, logID string, now time.Time) error {
	d, err := s.store.Expire(ctx, logID, now)
	if err != nil || d == nil {
		return err
	}
	s.log.InfoContext(ctx, "lease expired", "uid", d.UID, "log_id", d.LogID, "task_id", d.Occurrence.Task.String())
	s.cfg.Metrics.Expired(d.Occurrence.Task.Kind.String())
	return s.afterExpire(ctx, d)
}

// afterExpire puts the expired occurrence back on offer: to its user, and, when the
// expiry reopened an exhausted occurrence, to everyone the task targets (members who
// dropped it as exhausted must see the returned slot). An expiry that leaves slots
// as they were for the others costs them nothing: their heaps still hold it. The
// waiters for the task's results are told.
func (s *Service) afterExpire(ctx context.Context, d *taskd.Dispatch) error {
	s.finished(d)
	s.clearOpen(ctx, d.UID, schedule.OpenIs(d.LogID))
	if err := s.invalidateUser(ctx, d.UID); err != nil {
		return err
	}
	if e, err := taskd.ParseExecutor(d.Executor); err == nil && e.Group && d.Reopened {
		return s.invalidate(ctx, taskd.GroupExecutor(e.ID), func() error { return s.cache.InvalidateGroup(ctx, e.ID) })
	}
	return nil
}

// putWaiting puts uid's dispatch logID, which a complete made wait (a retry, a next
// stage), into uid's heap as a rebuild would offer it (schedule.Offer), so that the
// complete costs the user no rebuild from MySQL: one read of the dispatch instead of
// the four of a rebuild. Where that cannot be (the heap is stale or its window ends
// before, the read fails, the heap would not offer it), the heap is made stale.
//
// Between the read and the put, another fetch may have taken the dispatch (it was due
// at once, and a rebuild elsewhere offered it): the entry put back then costs that
// user's next fetch one resume answered Gone, which removes it.
func (s *Service) putWaiting(ctx context.Context, uid, logID string) error {
	w, ok, err := s.store.WaitingOf(ctx, uid, logID)
	if err == nil && ok {
		at := w.At.Truncate(time.Second)
		if at.Before(w.At) {
			at = at.Add(time.Second) // never before it is due
		}
		e := schedule.Entry{LogID: w.LogID, DueAt: at, Priority: w.Priority, Windows: w.Windows, Confirm: w.Confirm}
		put, err := s.cache.PutWaiting(ctx, uid, e)
		if err == nil {
			s.cfg.Metrics.HeapPut(put)
			return nil
		}
		// Redis refused: the invalidation below notes the change for the feed.
	}
	s.cfg.Metrics.HeapPut(false)
	return s.invalidateUser(ctx, uid)
}

// invalidateUser makes uid's heap stale after a change MySQL committed (invalidate).
func (s *Service) invalidateUser(ctx context.Context, uid string) error {
	return s.invalidate(ctx, taskd.UserExecutor(uid), func() error { return s.cache.InvalidateUser(ctx, uid) })
}

// invalidate runs the cache's invalidation of target's heaps; when Redis refuses it,
// it notes the change in MySQL, so that every node's heap-change feed applies it once
// Redis answers again (without the note, the heaps would stay until
// DISPATCH_HEAP_REFRESH). A Redis that answered unavailable (unreachable, or not
// taking writes now: read-only, out of memory, loading) is then no error of the
// request's: the note does the invalidation's work, within a second or two of Redis
// answering again, and a complete that committed must not answer 503 for it while
// Redis is away. Any other refusal, or a note that failed too, is returned.
func (s *Service) invalidate(ctx context.Context, target string, invalidate func() error) error {
	err := invalidate()
	if err == nil {
		return nil
	}
	// On a context of its own, bounded as a request is: the caller's may be what ended
	// the invalidation.
	note, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RequestTimeout)
	defer cancel()
	nerr := s.store.NoteHeapChanges(note, s.now(), target)
	if nerr != nil {
		s.log.WarnContext(ctx, "an invalidation Redis refused could not be noted for the heap-change feed either; the heaps stay until their refresh",
			"component", "dispatch", "target", target, "err", nerr)
		return err
	}
	if taskd.ErrorCode(err) == taskd.CodeUnavailable {
		return nil
	}
	return err
}

// pop, setOpen and clearOpen write a fetch's or complete's outcome to the cache. They
// are best effort: the cache is a hint, and a stale hint is corrected by MySQL on the
// next fetch (a claim that fails, an open dispatch found by its unique key).

// pop drops the popped entries from uid's heap.
func (s *Service) pop(ctx context.Context, uid string, popped []schedule.Entry) {
	if err := s.cache.Pop(ctx, uid, popped); err != nil {
		s.cacheRefused(ctx, "cache pop failed", uid, err)
	}
}

// setOpen records logID as uid's open dispatch and drops the popped entries. If that
// fails (the dispatch is committed), the hint is made unknown, so that the next fetch
// asks MySQL rather than trust a hint saying none.
func (s *Service) setOpen(ctx context.Context, uid, logID string, kept []byte, popped []schedule.Entry) {
	if err := s.cache.SetOpen(ctx, uid, logID, kept, popped); err != nil {
		s.cacheRefused(ctx, "cache set-open failed", uid, err)
		s.forgetOpen(ctx, uid)
	}
}

// cacheRefused logs a cache write that failed: at debug level when Redis was
// unreachable (the cache says so once, as it goes away; every fetch that changes
// something then fails a write), as a warning otherwise.
func (s *Service) cacheRefused(ctx context.Context, msg, uid string, err error) {
	level := slog.LevelWarn
	if taskd.ErrorCode(err) == taskd.CodeUnavailable {
		level = slog.LevelDebug
	}
	s.log.Log(ctx, level, msg, "uid", uid, "err", err)
}

// forgetOpen makes uid's open-dispatch hint unknown when the cache cannot know what is
// open: after a claim that failed (its batch may still commit: a caller that gives up
// does not stop the others' batch) and after a hint write that failed. A hint saying
// none would hide such a dispatch from the next fetches. When Redis refuses this too
// (it is away), the change is noted in MySQL, and every node's heap-change feed makes
// the hint unknown and the heap stale once Redis answers (queue's heapChangedScript).
// It runs on a context of its own: the request's may be what ended.
func (s *Service) forgetOpen(ctx context.Context, uid string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RequestTimeout)
	defer cancel()
	err := s.cache.ForgetOpen(ctx, uid)
	if err == nil {
		return
	}
	s.cacheRefused(ctx, "cache forget-open failed", uid, err)
	if nerr := s.store.NoteHeapChanges(ctx, s.now(), taskd.UserExecutor(uid)); nerr != nil {
		s.log.WarnContext(ctx, "a dispatch Redis could not be told of could not be noted for the heap-change feed either; its user's next fetches may not see it until it expires",
			"uid", uid, "err", nerr)
	}
}

// clearOpen sets uid's open-dispatch hint to none if it still says seen, on a context
// of its own (a client that leaves after its complete must not leave the hint behind).
// When that fails, the hint is made unknown (forgetOpen, noted in MySQL if Redis
// refuses that too): a hint naming a finished dispatch costs the next fetch one read
// of MySQL, but while MySQL is away it would be handed out again from its copy.
func (s *Service) clearOpen(ctx context.Context, uid string, seen schedule.OpenHint) {
	bounded, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RequestTimeout)
	defer cancel()
	if err := s.cache.ClearOpen(bounded, uid, seen); err != nil {
		s.cacheRefused(ctx, "cache clear failed", uid, err)
		if seen.State == schedule.OpenSome {
			s.forgetOpen(ctx, uid)
		}
	}
}

// Complete finishes uid's open dispatch logID. Anything but the caller's open dispatch
// is a stale_lease conflict; a repeated complete of the same log id answers as the
// first did and changes nothing.
func (s *Service) Complete(ctx context.Context, uid, keyHash, logID string, result taskd.Result, detail json.RawMessage) error {
	if taskd.IsCampaignLog(logID) {
		if err := s.cache.VerifyKey(ctx, uid, keyHash); err != nil {
			return err
		}
		return s.completeItem(ctx, uid, logID, result, detail)
	}
	// The check drops the copy of the dispatch before the complete (kept.go). Where
	// it could not, the hint is forgotten after the complete instead of cleared.
	dropped, err := s.cache.VerifyCompleting(ctx, uid, keyHash, logID)
	if err != nil {
		return err
	}
	_, _, err = s.complete(ctx, uid, logID, result, detail, dropped)
	s.notDropped(ctx, uid, dropped)
	return err
}

// CompleteAndFetch is POST /v1/fetch carrying a complete: it completes uid's logID
// (bounded by the request bound, as a complete on its own is) and then fetches. The
// fetch's peek comes first and checks the key for both; after the complete's commit
// the fetch goes on from that view, reading the completed dispatch's hint as none, and
// writes the hint once, with its own outcome: two Redis round trips where a complete
// and a fetch make four, and nothing written to Redis before the commit. The view is
// used only when it still holds: a complete that changed the user's heap (a retry to
// wait for), a hint naming another dispatch, or an entry that came due during the
// complete send the fetch to a fresh peek; and only a complete this request committed
// lets it read the hint naming it as none (a repeat, AlreadyDone, committed nothing:
// another dispatch may be open since, and MySQL is asked).
func (s *Service) CompleteAndFetch(ctx context.Context, uid, keyHash, logID string, result taskd.Result, detail json.RawMessage, wait time.Duration) (FetchResult, error) {
	if keyHash == "" {
		return FetchResult{}, taskd.Errorf(taskd.CodeUnauthenticated, "missing client key")
	}
	// The request began before its complete: its fetch does not confirm that complete's
	// success (the agent has not come back yet), only earlier ones.
	cf := s.confirming()
	bounded, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	var view schedule.View
	var err error
	dropped := true // a campaign item has no copy to drop
	if taskd.IsCampaignLog(logID) {
		view, err = s.cache.PeekN(bounded, uid, keyHash, s.now(), singlePeek)
	} else {
		view, dropped, err = s.cache.PeekCompleting(bounded, uid, keyHash, logID, s.now(), singlePeek)
	}
	if err != nil {
		return FetchResult{}, err
	}
	if taskd.IsCampaignLog(logID) {
		// A campaign item's complete leaves the user's heap and open dispatch as they
		// were: the fetch goes on from the view.
		if err := s.completeItem(bounded, uid, logID, result, detail); err != nil {
			return FetchResult{}, err
		}
		first := &peeked{view: view}
		if view.Next != nil && !view.Next.DueAt.After(s.now()) {
			first = &peeked{stale: true} // a task came due meanwhile
		}
		return s.counted(s.longPoll(ctx, uid, keyHash, wait, first, cf))
	}
	outcome, invalidated, err := s.complete(bounded, uid, logID, result, detail, false)
	s.notDropped(ctx, uid, dropped)
	if err != nil {
		return FetchResult{}, err
	}
	hintIsCompleted := view.Open == schedule.OpenIs(logID)
	dueMeanwhile := view.Next != nil && !view.Next.DueAt.After(s.now())
	if invalidated || dueMeanwhile || (view.Open.State == schedule.OpenSome && !hintIsCompleted) {
		if outcome != taskd.AlreadyDone && dropped { // else forgotten already
			s.clearOpen(bounded, uid, schedule.OpenIs(logID))
		}
		return s.counted(s.longPoll(ctx, uid, keyHash, wait, &peeked{stale: true}, cf))
	}
	first := &peeked{view: view}
	if hintIsCompleted && outcome == taskd.Completed {
		// Committed by this request: the completed dispatch is not open any more. An
		// unknown hint stays unknown (the fetch asks MySQL), and none stays none.
		first.view.Open = schedule.NoneOpen
		if dropped { // else forgotten already: nothing to clear
			first.completed = logID
		}
	}
	return s.counted(s.longPoll(ctx, uid, keyHash, wait, first, cf))
}

// complete records uid's complete of logID in MySQL and brings the cache up to date:
// the open-dispatch hint is cleared (with clearHint) and the heap invalidated when the
// outcome changed it (invalidated).
func (s *Service) complete(ctx context.Context, uid, logID string, result taskd.Result, detail json.RawMessage, clearHint bool) (outcome taskd.CompleteOutcome, invalidated bool, err error) {
	return s.finish(ctx, uid, logID, clearHint, func(now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
		return s.store.Complete(ctx, uid, logID, result, detail, now)
	})
}

// StageMove is a complete that hands a multi-stage task on to its next stage.
type StageMove struct {
	Next    string
	Context json.RawMessage
	Delay   time.Duration
}

// CompleteStage completes the stage of uid's open dispatch logID (a success) and hands
// the occurrence on to move.Next: it comes back to uid at that stage, with the
// context, after the delay. Refusals as Complete's; a stage the template does not list
// is invalid_argument.
func (s *Service) CompleteStage(ctx context.Context, uid, keyHash, logID string, detail json.RawMessage, move StageMove) error {
	if taskd.IsCampaignLog(logID) {
		if err := s.cache.VerifyKey(ctx, uid, keyHash); err != nil {
			return err
		}
		return taskd.Errorf(taskd.CodeInvalid, "next_stage: a campaign item has no stages")
	}
	dropped, err := s.cache.VerifyCompleting(ctx, uid, keyHash, logID)
	if err != nil {
		return err
	}
	// As Complete: the hint is cleared, or forgotten where the copy was not dropped.
	_, _, err = s.finish(ctx, uid, logID, dropped, func(now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
		return s.store.CompleteStage(ctx, uid, logID, detail, move.Next, move.Context, move.Delay, now)
	})
	s.notDropped(ctx, uid, dropped)
	return err
}

// finish runs a complete (record) at now and brings the cache up to date: the
// open-dispatch hint is cleared (with clearHint) and the heap invalidated when the
// outcome changed it (invalidated).
func (s *Service) finish(ctx context.Context, uid, logID string, clearHint bool,
	record func(now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error)) (outcome taskd.CompleteOutcome, invalidated bool, err error) {
	now := s.now()
	outcome, d, err := record(now)
	if err != nil {
		return 0, false, err
	}
	clear := func() {
		if clearHint {
			s.clearOpen(ctx, uid, schedule.OpenIs(logID))
		}
	}
	if outcome == taskd.Completed || outcome == taskd.RetryScheduled || outcome == taskd.StageDone {
		s.finished(d)
		result := d.Result.String()
		if d.State == taskd.StateUnconfirmed {
			result = taskd.DispatchStateName(d.State)
		}
		s.cfg.Metrics.Completed(d.Occurrence.Task.Kind.String(), result)
	}
	switch outcome {
	case taskd.Completed:
		clear()
		if d.State == taskd.StateUnconfirmed {
			// The success waits beside the slot for the user's next fetch: the
			// rebuild puts its confirm entry at the front of the user's heap, on
			// every node's next peek.
			return outcome, true, s.invalidateUser(ctx, uid)
		}
		if d.Mode == taskd.ModeUntilExhausted && d.State == taskd.StateDone && (d.Attempt > 1 || d.Stage != "" || d.Resumed) {
			// The occurrence stays on offer to this user while quota lasts. A first
			// attempt's heap entry stayed in place (staysOnOffer); a later attempt came
			// from a waiting dispatch's entry (so did any stage but a first, and the
			// attempt after an admin's retry), and the rebuild from the new cursor puts
			// the occurrence back.
			return outcome, true, s.invalidateUser(ctx, uid)
		}
		return outcome, false, nil
	case taskd.RetryScheduled, taskd.StageDone:
		// The failed attempt (or the next stage) left the open slot and waits in the
		// user's heap, due at its retry time: put there, or by the rebuild.
		clear()
		return outcome, true, s.putWaiting(ctx, uid, logID)
	case taskd.AlreadyDone:
		if d != nil && (d.State == taskd.StateRetryWait || d.State == taskd.StateStaged || d.State == taskd.StateUnconfirmed) {
			// A repeat of a complete whose cache update failed: make sure the retry is
			// in the heap.
			return outcome, true, s.invalidateUser(ctx, uid)
		}
		return outcome, false, nil
	case taskd.ExpiredNow:
		s.cfg.Metrics.Expired(d.Occurrence.Task.Kind.String())
		if err := s.afterExpire(ctx, d); err != nil {
			return outcome, false, err
		}
		return outcome, false, taskd.Errorf(taskd.CodeStaleLease, "log_id %s: the lease expired", logID)
	}
	return outcome, false, taskd.Errorf(taskd.CodeStaleLease, "log_id %s is not your open dispatch", logID)
}

// MaxCheckpoint bounds a checkpoint's encoded size.
const MaxCheckpoint = 16 << 10

// Progress saves checkpoint for uid's open dispatch logID and, with extend, pushes its
// lease out by the lease length. It returns the lease's end (nil: no lease). Anything
// but one of the caller's open dispatches within its lease is a stale_lease conflict.
func (s *Service) Progress(ctx context.Context, uid, keyHash, logID string, checkpoint json.RawMessage, extend bool) (*time.Time, error) {
	if err := s.cache.VerifyKey(ctx, uid, keyHash); err != nil {
		return nil, err
	}
	// Each report is a MySQL write: it counts against the user's poll limit, as a
	// fetch does, so that one key cannot write as fast as it can send.
	if err := s.cache.CountPoll(uid, s.now()); err != nil {
		return nil, err
	}
	if taskd.IsCampaignLog(logID) {
		if s.campaigns == nil {
			return nil, taskd.Errorf(taskd.CodeStaleLease, "log_id %s is not your open dispatch", logID)
		}
		return s.campaigns.Progress(ctx, uid, logID, checkpoint, extend, s.now())
	}
	return s.store.Progress(ctx, uid, logID, checkpoint, extend, s.now())
}

// ParseResult parses "success" or "failure".
func ParseResult(s string) (taskd.Result, error) {
	switch s {
	case "success":
		return taskd.ResultSuccess, nil
	case "failure":
		return taskd.ResultFailure, nil
	}
	return 0, taskd.Errorf(taskd.CodeInvalid, "result: must be success or failure, got %q", s)
}
