package taskd

import (
	"encoding/json"
	"strconv"
	"time"
)

// DispatchState is where a dispatch record is in its life.
type DispatchState uint8

const (
	StateOpen      DispatchState = 1 // dispatched, not yet completed
	StateRetryWait DispatchState = 2 // failed, another attempt due at RetryAt (slot kept)
	StateDone      DispatchState = 3 // completed, with a result
	StateExpired   DispatchState = 4 // lease ran out; slot returned
	StateRetried   DispatchState = 5 // failed and superseded by the next attempt
	StateDead      DispatchState = 6 // the last attempt failed (result set) or expired (no result); slot kept
	StateCancelled DispatchState = 7 // its task was deleted while it was open or waiting
	StateStaged    DispatchState = 8 // a stage completed; the next (NextStage) waits until RetryAt (slot kept)
	// StateUnconfirmed: a success of a task with confirm_seconds, waiting (beside the
	// user's slot, slot kept, no result yet) for the user's next fetch until ConfirmBy;
	// confirmed it is done, past ConfirmBy a failure (ReasonUnconfirmed).
	StateUnconfirmed DispatchState = 9
)

// ReasonUnconfirmed is the reason of a success that became a failure because its user
// did not fetch again within confirm_seconds.
const ReasonUnconfirmed = "unconfirmed"

// Result is a completion's outcome.
type Result uint8

const (
	ResultSuccess Result = 1
	ResultFailure Result = 2
	// ResultFinalFailure is a failure its agent says no attempt will mend (a complete
	// with "retry": false): the occurrence is dead at once, whatever attempts are left.
	// It is what a complete says, never what a record keeps: Finish records it as
	// ResultFailure with Final set.
	ResultFinalFailure Result = 3
)

// String is the result as the API and the events name it: a final failure is a
// "failure" (events say it was final apart).
func (r Result) String() string {
	switch r {
	case ResultSuccess:
		return "success"
	case ResultFailure, ResultFinalFailure:
		return "failure"
	}
	return ""
}

// Dispatch is one dispatch record: one attempt of one occurrence by one user.
//
// An open dispatch either holds its user's one open slot (open_uid) or, when its task
// was paused, waits parked beside it (waiting_uid) so the user's other tasks flow; a
// failed attempt waiting out its backoff also waits beside it. Waiting dispatches are
// in the user's heap (schedule.Entry.LogID) and come back through Resume when due.
type Dispatch struct {
	LogID string
	UID   string
	// ActionID is a DDI controller's number for it, when the claim that made it gave
	// one (DDIAction); 0 otherwise. It is not a column of the record.
	ActionID       int64
	Occurrence     Occurrence
	Mode           Mode
	Attempt        int
	MaxAttempts    int
	BackoffSeconds int
	// RetryMultiplier and RetryMaxSeconds shape the backoff (RetryBackoff).
	RetryMultiplier float64
	RetryMaxSeconds int
	LeaseSeconds    int
	State           DispatchState
	Result          Result
	TemplateID      int64
	Params          json.RawMessage
	DispatchedAt    time.Time
	LeaseExpiresAt  *time.Time
	RetryAt         *time.Time
	FinishedAt      *time.Time
	RedoCount       int
	// Slot is the user's open slot the dispatch holds while open: 1, or for a batch
	// fetch's dispatch any of 1..the client's max_in_flight.
	Slot int
	// Resumed says the record was made from a waiting one (a retry, a next stage, an
	// admin's retry), not claimed from the user's heap. Retried says an admin sent this
	// dead record's occurrence back to its user; Cancelled that it was ended for good.
	Resumed, Retried, Cancelled bool
	// HeldFrom is, as a complete read the record, the earliest due time of an
	// until_exhausted occurrence its user holds open in another slot (nil: none): the
	// user's cursor stops there (batch fetches complete out of heap order).
	HeldFrom *time.Time
	// Checkpoint is the latest progress the agent saved (POST /v1/progress), nil for
	// none; the next dispatch of the occurrence to the same user starts with it.
	Checkpoint json.RawMessage
	// Stage is the stage this dispatch works (multi-stage tasks; "" for none) and
	// Context what the previous stage handed it. NextStage and NextContext are what a
	// staged record hands the next dispatch.
	Stage       string
	Context     json.RawMessage
	NextStage   string
	NextContext json.RawMessage
	// Executor is the task's executor, filled in on expiry; Reopened says the expiry
	// gave a slot back to an occurrence whose quota was used up, which the task's other
	// targets may have dropped from their heaps.
	Executor string
	Reopened bool
	// RolloutPhase is the rollout phase (1-based) the dispatch was claimed in, which its
	// gate counts it in; 0: its task had no rollout.
	RolloutPhase int
	// ConfirmSeconds is the task's confirm_seconds when the dispatch was claimed (0:
	// none), and ConfirmBy, on a success waiting for its confirmation, its deadline.
	ConfirmSeconds int
	ConfirmBy      *time.Time
	// Judged says its template had a result schema when it was claimed: a success is
	// checked against it at the complete. Reason says why a success counted as a
	// failure ("" for none).
	Judged bool
	Reason string
	// Final says the last attempt's failure was final as its agent said (retry false):
	// the record died with attempts left.
	Final bool
}

// LeaseExpired reports whether the dispatch is open past its lease at now.
func (d *Dispatch) LeaseExpired(now time.Time) bool {
	return d.State == StateOpen && d.LeaseExpiresAt != nil && !now.Before(*d.LeaseExpiresAt)
}

// ClaimOutcome is what an attempt to dispatch an occurrence to a user came to. What
// each does to the user's heap entry is its Step.
type ClaimOutcome uint8

const (
	Claimed       ClaimOutcome = iota + 1 // dispatched: the record is open
	Exhausted                             // the quota is used up
	AlreadyHad                            // once_per_user and the user had it
	Gone                                  // the task is no longer active or no longer has this occurrence
	UserBusy                              // the open slot is taken: the user's open dispatch is what it gets
	NotDue                                // (Resume) the retry's backoff is not over yet (a node's clock a little early)
	Holding                               // until_exhausted, and the user holds it open in another slot
	Filtered                              // not of a template the fetch asked for
	RateBound                             // the task's dispatch_rate_per_minute is used up this minute
	NotTargeted                           // the task no longer targets the user (moved to another executor, or the user left its group); the user's heap is stale
	PhaseBound                            // the rollout's current phase has given its cap (nothing is due for the user until the phase moves)
	NotInRollout                          // a snapshot rollout, and the user joined the group after its start
	OutsideWindow                         // the task has maintenance windows and none is open
)

var claimOutcomeNames = [...]string{Claimed: "claimed", Exhausted: "exhausted", AlreadyHad: "already_had",
	Gone: "gone", UserBusy: "user_busy", NotDue: "not_due", Holding: "holding", Filtered: "filtered",
	RateBound: "rate_bound", NotTargeted: "not_targeted", PhaseBound: "phase_bound", NotInRollout: "not_in_rollout",
	OutsideWindow: "outside_window"}

// String is the outcome's name in logs and metric labels: "claimed", "user_busy",
// "not_in_rollout" and so on; "" for the zero value (no outcome).
func (o ClaimOutcome) String() string {
	if int(o) < len(claimOutcomeNames) {
		return claimOutcomeNames[o]
	}
	return "ClaimOutcome(" + strconv.Itoa(int(o)) + ")"
}

// EntryStep is what a claim's outcome does to the heap entry that was claimed, within
// the fetch that claimed it.
type EntryStep uint8

const (
	// EntryTaken: handed out; the entry is popped (an until_exhausted occurrence stays
	// on offer while its quota lasts).
	EntryTaken EntryStep = iota + 1
	// EntryRetry: the slot was not free (another request of the user took it); the
	// entry may go into another slot.
	EntryRetry
	// EntryKeep: the entry stays in the heap and is not tried again in this fetch.
	EntryKeep
	// EntryPop: the entry is popped for good.
	EntryPop
)

// Step is what o does to the claimed entry: Claimed takes it; UserBusy retries it;
// Holding, NotDue, Filtered, RateBound, PhaseBound and OutsideWindow keep it; Exhausted, AlreadyHad,
// Gone, NotTargeted and NotInRollout pop it. The zero value (no outcome) has none.
func (o ClaimOutcome) Step() EntryStep {
	switch o {
	case Claimed:
		return EntryTaken
	case UserBusy:
		return EntryRetry
	case Holding, NotDue, Filtered, RateBound, PhaseBound, OutsideWindow:
		return EntryKeep
	case Exhausted, AlreadyHad, Gone, NotTargeted, NotInRollout:
		return EntryPop
	}
	return 0
}

// CompleteOutcome is what a complete came to.
type CompleteOutcome uint8

const (
	Completed      CompleteOutcome = iota + 1 // finished; the cursor moved
	RetryScheduled                            // failed with attempts left; next attempt at RetryAt
	StageDone                                 // a stage completed; the next stage comes back at RetryAt
	AlreadyDone                               // a repeated complete: nothing changed
	Stale                                     // not the caller's open dispatch (expired, unknown, someone else's)
	ExpiredNow                                // the lease had run out: expired now; the caller gets stale_lease
)

// The rules of attempts. A dispatch is one attempt of one user at one occurrence; an
// occurrence allows each user MaxAttempts attempts (at least 1). A failed attempt with
// attempts left is retried after RetryBackoff; an expired one (its lease ran out) is
// taken again when the user's heap offers it; the last one, failed or expired, is dead:
// the user's slot stays taken and its cursor moves past the occurrence.

// MaxAttemptsOf is a task's max_attempts as the rules read it: at least 1.
func MaxAttemptsOf(n int) int { return max(n, 1) }

// AttemptsLeft reports whether another attempt may follow this one.
func (d *Dispatch) AttemptsLeft() bool { return d.Attempt < d.MaxAttempts }

// CompleteBlocked says what a complete of this record by uid at now comes to before
// anything changes: ok is true when the record is uid's open dispatch within its lease
// and the complete proceeds; otherwise outcome says why not (Stale, AlreadyDone, or
// ExpiredNow when the lease has run out and the record must expire first). d may be
// nil (no such record).
func CompleteBlocked(d *Dispatch, uid string, now time.Time) (outcome CompleteOutcome, ok bool) {
	switch {
	case d == nil || d.UID != uid:
		return Stale, false
	case d.State == StateDone, d.State == StateRetryWait, d.State == StateRetried, d.State == StateStaged,
		d.State == StateUnconfirmed:
		return AlreadyDone, false
	case d.State == StateDead && d.Result == 0:
		return Stale, false // it died by expiring: the complete came too late
	case d.State == StateDead:
		return AlreadyDone, false // a repeated complete of the last, failed attempt
	case d.State == StateExpired, d.State == StateCancelled:
		return Stale, false
	case d.LeaseExpired(now):
		return ExpiredNow, false
	}
	return 0, true
}

// Finish applies a complete's result to an open record at now: a failure with
// attempts left waits for its retry (StateRetryWait, RetryAt set) and the outcome is
// RetryScheduled; otherwise the record is done (a success) or dead (a failure on the
// last attempt, or a final failure on any: Final set) and the outcome is Completed. A
// success of a record with ConfirmSeconds is unconfirmed instead, without a result
// until it is confirmed (Confirm) or its deadline, ConfirmBy, passes (Lapse); the
// outcome is Completed: the user is done with the occurrence either way (see
// ConfirmStep).
func (d *Dispatch) Finish(result Result, now time.Time) CompleteOutcome {
	d.Final = result == ResultFinalFailure
	if d.Final {
		result = ResultFailure
	}
	d.Result = result
	d.FinishedAt = &now
	if result == ResultSuccess && d.ConfirmSeconds > 0 {
		by := now.Add(time.Duration(d.ConfirmSeconds) * time.Second)
		d.State, d.Result, d.ConfirmBy = StateUnconfirmed, 0, &by
		return Completed
	}
	if result == ResultFailure && d.AttemptsLeft() && !d.Final {
		retryAt := now.Add(RetryBackoff(d.BackoffSeconds, d.RetryMultiplier, d.RetryMaxSeconds, d.Attempt))
		d.State, d.RetryAt = StateRetryWait, &retryAt
		return RetryScheduled
	}
	d.State = StateDone
	if result == ResultFailure {
		d.State = StateDead
	}
	return Completed
}

// Confirmed success. A success of a task with confirm_seconds counts only once its
// user fetches again within confirm_seconds after the complete (the device came back:
// after a reboot, after an update). Meanwhile the user is done with the occurrence, as
// after any success: its open slot is free (the agent takes other tasks), its cursor
// and exclude set moved, the quota slot (and a once_per_user hold) stays taken, and
// the occurrence is not offered to it again; the record waits beside the slot
// (waiting_uid), which puts a confirm entry at the front of the user's heap, so that
// only a fetch of a user with one looks at MySQL for it. The first fetch that began
// after the complete confirms it: the record is done, a success (for stats, gates and
// events from then on). Past ConfirmBy it lapses: a failure with ReasonUnconfirmed,
// like any failure retried after its backoff while attempts are left (the retry comes
// back through the user's heap, on the same quota slot, whatever the cursor), dead
// otherwise.

// ConfirmStep is what a fetch does to one of its user's unconfirmed successes.
type ConfirmStep uint8

const (
	ConfirmWait  ConfirmStep = iota + 1 // completed since the fetch began: a later fetch confirms it
	ConfirmNow                          // the fetch confirms it: done, a success
	ConfirmLapse                        // its deadline passed: a failure (Lapse)
)

// ConfirmStep decides what a fetch of d's user that began at began does to d, an
// unconfirmed success, at now. A fetch that began before the complete (the one that
// carried it, or a long poll already waiting) is not the user coming back.
func (d *Dispatch) ConfirmStep(began, now time.Time) ConfirmStep {
	switch {
	case d.ConfirmBy != nil && now.After(*d.ConfirmBy):
		return ConfirmLapse
	case d.FinishedAt != nil && !d.FinishedAt.Before(began):
		return ConfirmWait
	}
	return ConfirmNow
}

// Confirm makes the unconfirmed success d a success at now: done, with its result, and
// finished (its complete event's time) now.
func (d *Dispatch) Confirm(now time.Time) {
	d.State, d.Result, d.FinishedAt = StateDone, ResultSuccess, &now
}

// Lapse makes the unconfirmed success d, whose deadline passed, a failure at now with
// ReasonUnconfirmed, as Finish makes any failure: retried after its backoff while
// attempts are left (RetryScheduled), dead otherwise (Completed).
func (d *Dispatch) Lapse(now time.Time) CompleteOutcome {
	d.Reason = ReasonUnconfirmed
	return d.Finish(ResultFailure, now)
}

// FinishStage applies a complete that hands the occurrence on to stage next, with
// context, after delay: the record is staged (a success) and waits beside the user's
// slot, keeping the quota slot, until RetryAt.
func (d *Dispatch) FinishStage(next string, context json.RawMessage, delay time.Duration, now time.Time) CompleteOutcome {
	at := now.Add(delay)
	d.Result, d.FinishedAt, d.State, d.RetryAt = ResultSuccess, &now, StateStaged, &at
	d.NextStage, d.NextContext = next, context
	return StageDone
}

// KeepsSlot reports whether the record holds one of its occurrence's quota slots:
// every record does but an expired one (its lease ran out with attempts left, and the
// slot went back) and a retried one (its next attempt holds the slot now).
func (d *Dispatch) KeepsSlot() bool {
	return d.State != StateExpired && d.State != StateRetried
}

// ExpiryState is the state an open record takes when its lease runs out: expired
// (taken again later) with attempts left, dead on the last attempt.
func (d *Dispatch) ExpiryState() DispatchState {
	if d.AttemptsLeft() {
		return StateExpired
	}
	return StateDead
}
