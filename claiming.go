package taskd

import (
	"encoding/json"
	"strings"
	"time"
)

// The rules of a claim, in one place. A claim dispatches an occurrence to a user if the
// task is active and has the occurrence, targets the user, is of a template the fetch
// takes, the user may take it (attempts left, not holding it, not barred), the quota
// has a slot, the task's dispatch rate this minute has room, and the user's open slot
// is free. The store reads what these rules need, locked, in the claim's transaction,
// asks DecideClaims, and writes what it decided; a batch of claims is decided in order
// as if its claims had run one after another, and a claim alone is a batch of one.

// ClaimTask is what a claim reads of a task and its template, in the claim's
// transaction (so that a concurrent edit, a pause or a lower quota, is respected).
type ClaimTask struct {
	Executor   Executor
	Status     Status
	Start      time.Time
	Space      time.Duration // rotate only
	Cron       *Cron         // rotate only, instead of Space
	End        *time.Time    // rotate only; nil: none
	Quota      int           // dispatch_times: Unlimited, or the slots of each occurrence
	Mode       Mode
	TemplateID int64
	Params     json.RawMessage
	Settings   Effective
	Stages     []string // the template's; nil: none
	Windows    Windows  // the task's maintenance windows, else its template's; empty: any time
	// Rollout is the task's rollout as its claims see it; nil: none.
	Rollout *ClaimRollout
	// Judged says its template has a result schema.
	Judged bool
	// DDI says its template is a DDI deployment's: only a take for a DDI controller
	// (Take.DDI) takes it, and such a take takes nothing else.
	DDI bool
}

// ClaimRollout is a rollout as a claim sees it: the current phase (1-based, what the
// dispatch record carries), its cap on each occurrence's claims (-1: none), and whether
// only the members at its start may claim (snapshot targeting).
type ClaimRollout struct {
	Phase    int
	Cap      int
	Snapshot bool
}

// ClaimView is the rollout r, at st, as the claims of a task of quota see it: the
// current phase (1-based), its cap, and whether only the members at its start may
// claim (snapshot targeting, until the rollout completes). A ramped claim rate bounds
// settings' dispatch rate, when lower.
func (r Rollout) ClaimView(st RolloutStatus, quota int, settings *Effective) *ClaimRollout {
	if rate := r.Rate(st); rate > 0 && (settings.DispatchRatePerMinute == 0 || rate < settings.DispatchRatePerMinute) {
		settings.DispatchRatePerMinute = rate
	}
	return &ClaimRollout{Phase: st.PhaseNumber(), Cap: r.Cap(st, quota),
		Snapshot: r.Targeting == TargetingSnapshot && st.State != RolloutCompleted}
}

// Counted reports whether a claim of the task reads its occurrence's counter: its
// quota is limited, or a rollout caps it.
func (t *ClaimTask) Counted() bool {
	return t.Limited() || t.Rollout != nil && t.Rollout.Cap >= 0
}

// Offers reports whether the task is active and has occ.
func (t *ClaimTask) Offers(occ Occurrence) bool {
	return t != nil && t.Status == StatusActive && t.hasOccurrence(occ)
}

func (t *ClaimTask) hasOccurrence(occ Occurrence) bool {
	if occ.Task.Kind == KindOnce {
		return t.Start.Equal(occ.DueAt)
	}
	r := Rotation{Start: t.Start, Space: t.Space, Cron: t.Cron}
	if t.End != nil {
		r.End = *t.End
	}
	return r.Has(occ.DueAt)
}

// Limited reports whether the task's quota bounds its occurrences' claims (a claim of
// an unlimited task need not read its counter).
func (t *ClaimTask) Limited() bool { return t.Quota != Unlimited }

// firstStage is the stage a new dispatch of the task starts at ("" for none).
func (t *ClaimTask) firstStage() string {
	if len(t.Stages) == 0 {
		return ""
	}
	return t.Stages[0]
}

// NewDispatch is the open record of a granted claim c at now, into its open slot, with
// the task's current params, lease and retry settings. A re-take after an expiry
// (c.Prior.Attempts > 0) is the next attempt; the caller adds what the expired one
// handed on (TakeUp).
func (c *Claim) NewDispatch(logID string, now time.Time) *Dispatch {
	t := c.Task
	return &Dispatch{
		LogID:           logID,
		UID:             c.UID,
		Occurrence:      c.Occurrence,
		Mode:            t.Mode,
		Attempt:         c.Prior.Attempts + 1,
		MaxAttempts:     MaxAttemptsOf(t.Settings.MaxAttempts),
		BackoffSeconds:  t.Settings.RetryBackoffSeconds,
		RetryMultiplier: t.Settings.RetryMultiplier,
		RetryMaxSeconds: t.Settings.RetryMaxSeconds,
		LeaseSeconds:    t.Settings.LeaseSeconds,
		State:           StateOpen,
		Stage:           t.firstStage(),
		TemplateID:      t.TemplateID,
		Params:          t.Params,
		DispatchedAt:    now,
		Slot:            c.Take.OpenSlot(),
		RolloutPhase:    t.rolloutPhase(),
		ConfirmSeconds:  t.Settings.ConfirmSeconds,
		Judged:          t.Judged,
	}
}

// rolloutPhase is the phase a dispatch claimed now is counted in (0: no rollout).
func (t *ClaimTask) rolloutPhase() int {
	if t.Rollout == nil {
		return 0
	}
	return t.Rollout.Phase
}

// TakeUp gives a re-take d what the user's expired attempt left: its checkpoint, and
// the stage it was at with that stage's context.
func (d *Dispatch) TakeUp(expired *Dispatch) {
	d.Checkpoint = expired.Checkpoint
	if expired.Stage != "" {
		d.Stage, d.Context = expired.Stage, expired.Context
	}
}

// Prior is what a user did before at an occurrence, as a claim reads it.
type Prior struct {
	// Attempts is how many attempts the user used at it: expired attempts that left
	// some (0 after a completion, or never taken).
	Attempts int
	// Holding says the user holds the occurrence open, in another of its slots
	// (until_exhausted).
	Holding bool
	// Barred says the user may not take it now: it holds it or finished it for good
	// (once_per_user), an attempt waits for its retry or next stage, an admin
	// cancelled it, or its last attempt died.
	Barred bool
}

// HoldPrior is the prior of a once_per_user claim from the user's hold row: none
// (found false), held (a claim holds it or finished it), or released by an expiry
// after attempts (a re-take).
func HoldPrior(found, released bool, attempts int) Prior {
	switch {
	case !found:
		return Prior{}
	case !released:
		return Prior{Barred: true}
	}
	return Prior{Attempts: attempts}
}

// RecordsPrior is the prior of an until_exhausted claim from the user's records of the
// occurrence: whether one is open, whether one waits (a retry, the next stage, an
// admin's retry) or was cancelled, and the newest one's state and attempt (found
// false: there is none).
func RecordsPrior(open, waits bool, found bool, latest DispatchState, latestAttempt int) Prior {
	switch {
	case open:
		return Prior{Holding: true}
	case waits, found && latest == StateDead:
		return Prior{Barred: true}
	case found && latest == StateExpired:
		return Prior{Attempts: latestAttempt}
	}
	return Prior{}
}

// MayTake reports whether a user with prior may take an occurrence of a task that
// allows maxAttempts attempts.
func (p Prior) MayTake(maxAttempts int) bool {
	return !p.Holding && !p.Barred && p.Attempts < MaxAttemptsOf(maxAttempts)
}

// Claim is one claim as DecideClaims sees it: who asks for which occurrence into which
// slot, and what the claim's transaction read of it.
type Claim struct {
	UID        string
	Occurrence Occurrence
	Take       Take
	// At is when the claim is made: a task with windows is claimed only while one is
	// open.
	At time.Time
	// Task is the task, nil when it is gone; Targeted says it targets UID now (its
	// executor, or a group UID is a member of).
	Task     *ClaimTask
	Targeted bool
	// InSnapshot says UID was a member of the group when the task's snapshot rollout
	// started.
	InSnapshot bool
	// Prior is what UID did before at the occurrence.
	Prior Prior
}

// Target says whether the claim's task targets its user, from what the claim's
// transaction read: member says the user is a member of the task's group now, atStart
// that it was one when the task's snapshot rollout started. A task for one user
// targets that user alone (ids compare without case, as MySQL's columns do).
func (c *Claim) Target(member, atStart bool) {
	if c.Task.Executor.Group {
		c.Targeted, c.InSnapshot = member, atStart
		return
	}
	c.Targeted = strings.EqualFold(c.Task.Executor.ID, c.UID)
}

// Refusal is what a claim comes to before the user's history and the shared counters
// are read: Gone, NotTargeted, NotInRollout, Filtered, OutsideWindow, or 0 when those
// decide. The
// store reads holds, records and counters only for the claims it leaves open.
func (c *Claim) Refusal() ClaimOutcome {
	switch {
	case !c.Task.Offers(c.Occurrence):
		return Gone
	case !c.Targeted:
		return NotTargeted
	case c.Task.Rollout != nil && c.Task.Rollout.Snapshot && !c.InSnapshot:
		return NotInRollout
	case !c.Take.Allows(c.Task.TemplateID) || c.Take.DDI != c.Task.DDI:
		return Filtered
	case !c.Task.Windows.Open(c.At):
		return OutsideWindow
	}
	return 0
}

// UserSlot is one of a user's open slots.
type UserSlot struct {
	UID  string
	Slot int
}

// ClaimCounts is the shared state a batch of claims is decided against, read locked:
// the claim counters of the limited occurrences (absent: none claimed), the claims
// each rate-bound task counts this minute (RateUsed), and the open slots known taken.
type ClaimCounts struct {
	Claimed map[Occurrence]int
	Rate    map[TaskKey]int
	Busy    map[UserSlot]bool
}

// DecideClaims decides claims in order, as if each ran after the ones before it had
// committed: a grant takes a quota slot, a count of the task's rate and the user's open
// slot, and the user holds the occurrence for the claims after it. counts is not
// changed. In the order of the checks: the refusal (Gone, NotTargeted, Filtered), the
// user's history (Holding, AlreadyHad), the quota (Exhausted), the rollout's phase
// (PhaseBound), the rate (RateBound), the open slot (UserBusy).
func DecideClaims(claims []Claim, counts ClaimCounts) []ClaimOutcome {
	out := make([]ClaimOutcome, len(claims))
	var added map[Occurrence]int
	var rated map[TaskKey]int
	var taken map[UserSlot]bool
	var holds map[Holder]bool
	for i := range claims {
		c := &claims[i]
		if out[i] = c.Refusal(); out[i] != 0 {
			continue
		}
		t := c.Task
		uid := strings.ToLower(c.UID) // ids compare without case, as MySQL's columns do
		slot := UserSlot{uid, c.Take.OpenSlot()}
		prior := c.Prior
		if holds[c.Holder()] { // granted before in this batch
			prior = Prior{Holding: t.Mode == ModeUntilExhausted, Barred: t.Mode != ModeUntilExhausted}
		}
		switch {
		case prior.Holding:
			out[i] = Holding
		case !prior.MayTake(t.Settings.MaxAttempts):
			out[i] = AlreadyHad
		case t.Quota == 0, t.Limited() && counts.Claimed[c.Occurrence]+added[c.Occurrence] >= t.Quota:
			out[i] = Exhausted
		case t.Rollout != nil && t.Rollout.Cap >= 0 && counts.Claimed[c.Occurrence]+added[c.Occurrence] >= t.Rollout.Cap:
			out[i] = PhaseBound
		case t.Settings.DispatchRatePerMinute > 0 && counts.Rate[c.Occurrence.Task]+rated[c.Occurrence.Task] >= t.Settings.DispatchRatePerMinute:
			out[i] = RateBound
		case counts.Busy[slot] || taken[slot]:
			out[i] = UserBusy
		default:
			out[i] = Claimed
			added = count(added, c.Occurrence)
			rated = count(rated, c.Occurrence.Task)
			taken = set(taken, slot)
			holds = set(holds, c.Holder())
		}
	}
	return out
}

// Holder is a user's claim of an occurrence, the key of a once_per_user hold: the uid
// in lower case (ids compare without case, as MySQL's columns do).
type Holder struct {
	Occurrence Occurrence
	UID        string
}

// Holder is c's key as the holder of its occurrence.
func (c *Claim) Holder() Holder { return Holder{c.Occurrence, strings.ToLower(c.UID)} }

func count[K comparable](m map[K]int, k K) map[K]int {
	if m == nil {
		m = map[K]int{}
	}
	m[k]++
	return m
}

func set[K comparable](m map[K]bool, k K) map[K]bool {
	if m == nil {
		m = map[K]bool{}
	}
	m[k] = true
	return m
}

// RateWindow is the minute a claim at now counts in, for dispatch_rate_per_minute.
func RateWindow(now time.Time) time.Time { return now.UTC().Truncate(time.Minute) }

// RateUsed is how many claims a task's rate row, counting n in the minute at, holds
// for a claim at now: n when the row's minute is now's or later (a claim whose now is a
// little older counts in the later minute: the window never goes back), none when it
// is an earlier minute's.
func RateUsed(at time.Time, n int, now time.Time) int {
	if at.Before(RateWindow(now)) {
		return 0
	}
	return n
}

// ResumeStep is what taking up a user's waiting dispatch comes to.
type ResumeStep uint8

const (
	ResumeNone          ResumeStep = iota + 1 // nothing to take up now: the task is paused, or the record no longer waits
	ResumeUnpark                              // the task is deleted: the expired or dead record stops waiting
	ResumeCancel                              // the task is deleted: the record is cancelled
	ResumeFiltered                            // of a template the fetch does not take: it waits on
	ResumeReclaim                             // an expired attempt: the occurrence is claimed again, as the user's next attempt
	ResumeNotDue                              // the retry's backoff (or the next stage's delay) is not over: it waits on
	ResumeNext                                // the next attempt (a retry, the next stage, an admin's retry): a new record
	ResumeRedo                                // an open dispatch parked beside the slot: handed out again
	ResumeOutsideWindow                       // the next attempt is due, but the task's windows are closed: it waits on
)

// DecideResume decides the take-up of prev, a dispatch waiting beside uid's slot,
// against its task t (nil: gone) at now, for a fetch that takes take.
func DecideResume(prev *Dispatch, t *ClaimTask, take Take, now time.Time) ResumeStep {
	deleted := t == nil || t.Status == StatusDeleted
	switch {
	case deleted && (prev.State == StateExpired || prev.State == StateDead):
		return ResumeUnpark
	case deleted:
		return ResumeCancel
	case t.Status != StatusActive:
		return ResumeNone // paused: it waits for the task's resume (which rebuilds the heap)
	case !take.Allows(t.TemplateID) || take.DDI != t.DDI:
		return ResumeFiltered
	}
	switch prev.State {
	case StateExpired:
		return ResumeReclaim
	case StateRetryWait, StateStaged, StateDead:
		if prev.RetryAt != nil && now.Before(*prev.RetryAt) {
			return ResumeNotDue
		}
		if !t.Windows.Open(now) {
			return ResumeOutsideWindow // a next attempt is claimed inside a window, as a first one is
		}
		return ResumeNext
	case StateOpen:
		if prev.LeaseExpired(now) {
			return ResumeNone // the sweep expires it, and the expiry re-offers it
		}
		return ResumeRedo
	}
	return ResumeNone
}

// Superseded is the state a waiting record takes when its next attempt starts: a
// failed attempt is retried; a completed stage, or a dead attempt an admin retried,
// stays as it is.
func (d *Dispatch) Superseded() DispatchState {
	if d.State == StateRetryWait {
		return StateRetried
	}
	return d.State
}

// NextAttempt is the record that follows the waiting record d (ResumeNext) at now,
// into take's open slot, with task t's settings as they are now (an edit of the task or
// its template reaches the retry and the next stage): a retry is the next attempt, the
// next stage and an admin's retry of a dead attempt start counting afresh.
func (d *Dispatch) NextAttempt(logID string, t *ClaimTask, take Take, now time.Time) *Dispatch {
	next := *d
	next.LogID = logID
	next.Attempt = d.Attempt + 1
	switch d.State {
	case StateStaged:
		next.Attempt, next.Stage, next.Context = 1, d.NextStage, d.NextContext
	case StateDead:
		next.Attempt = 1
	}
	next.Resumed, next.Retried, next.Cancelled = true, false, false
	next.NextStage, next.NextContext = "", nil
	next.State, next.Result, next.Final = StateOpen, 0, false
	next.Params, next.TemplateID = t.Params, t.TemplateID
	next.LeaseSeconds = t.Settings.LeaseSeconds
	next.DispatchedAt = now
	next.LeaseExpiresAt, next.RetryAt, next.FinishedAt = nil, nil, nil
	next.RedoCount = 0
	next.Slot = take.OpenSlot()
	next.MaxAttempts = MaxAttemptsOf(t.Settings.MaxAttempts)
	next.BackoffSeconds, next.RetryMultiplier = t.Settings.RetryBackoffSeconds, t.Settings.RetryMultiplier
	next.RetryMaxSeconds = t.Settings.RetryMaxSeconds
	next.ConfirmSeconds, next.ConfirmBy = t.Settings.ConfirmSeconds, nil
	return &next
}
