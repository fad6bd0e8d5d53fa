package dispatch

import (
	"context"
	"encoding/json"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// Store is what the dispatch service needs from the database of record (MySQL,
// internal/store): the claim, the dispatch records' life, and lease expiry. Every fact
// that must not be lost goes through it.
type Store interface {
	// Claim dispatches occurrence occ to uid at now, into the open slot take names, if
	// the rules allow (the task is active and has it and is of a template take allows,
	// the user has attempts left, the quota a slot).
	Claim(ctx context.Context, uid string, occ taskd.Occurrence, now time.Time, take taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error)
	// Resume takes up a waiting dispatch of uid (a retry, a parked or expired
	// attempt) into the open slot take names; redo says it is handed out again rather
	// than claimed anew.
	Resume(ctx context.Context, uid, logID string, now time.Time, take taskd.Take) (outcome taskd.ClaimOutcome, d *taskd.Dispatch, redo bool, err error)
	// OpenDispatch returns the dispatch holding uid's open slot 1, or nil.
	OpenDispatch(ctx context.Context, uid string) (*taskd.Dispatch, error)
	// OpenSlots returns uid's max_in_flight and the slots its open dispatches hold.
	OpenSlots(ctx context.Context, uid string) (int, []taskd.OpenSlot, error)
	// TaskTemplates returns the template of each of keys that exists.
	TaskTemplates(ctx context.Context, keys []taskd.TaskKey) (map[taskd.TaskKey]int64, error)
	// GetDispatch returns the dispatch with logID (taskd.ErrNotFound for none).
	GetDispatch(ctx context.Context, logID string) (*taskd.Dispatch, error)
	// Redo records that d is handed out again; false when it is no longer open.
	Redo(ctx context.Context, d *taskd.Dispatch, now time.Time) (bool, error)
	// Expire expires logID if its lease has run out; nil when there was nothing to do.
	Expire(ctx context.Context, logID string, now time.Time) (*taskd.Dispatch, error)
	// ExpiredLeases lists up to limit open dispatches past their lease, of the users
	// whose hash modulo of is one of parts (of 0: of every user).
	ExpiredLeases(ctx context.Context, now time.Time, limit, of int, parts []int) ([]string, error)
	// ConfirmSuccesses settles uid's unconfirmed successes for a fetch of uid that
	// began at began: confirmed if completed before it, a failure past their deadline;
	// it returns those it settled and the log ids of those that wait.
	ConfirmSuccesses(ctx context.Context, uid string, began, now time.Time) ([]*taskd.Dispatch, []string, error)
	// LapsedConfirms lists up to limit unconfirmed successes past their deadline, of
	// the users whose hash modulo of is one of parts (of 0: of every user).
	LapsedConfirms(ctx context.Context, now time.Time, limit, of int, parts []int) ([]string, error)
	// Lapse makes the unconfirmed success logID a failure if its deadline passed; nil
	// when there was nothing to do.
	Lapse(ctx context.Context, logID string, now time.Time) (*taskd.Dispatch, error)
	// Progress saves a checkpoint of uid's open dispatch logID (nil keeps the last) and,
	// with extend, pushes its lease out; it returns the lease's end.
	Progress(ctx context.Context, uid, logID string, checkpoint json.RawMessage, extend bool, now time.Time) (*time.Time, error)
	// CompleteStage completes the stage of uid's dispatch logID and hands the
	// occurrence on to stage next, with context, after delay.
	CompleteStage(ctx context.Context, uid, logID string, detail json.RawMessage, next string, context json.RawMessage,
		delay time.Duration, now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error)
	// Complete finishes uid's dispatch logID with result.
	Complete(ctx context.Context, uid, logID string, result taskd.Result, detail json.RawMessage, now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error)
	// RecordMissed records runs of occurrences users will never get because of their
	// tasks' misfire policies, with their events.
	RecordMissed(ctx context.Context, runs []taskd.Missed, now time.Time) error
	// NoteHeapChanges notes that the heaps of targets (executors) went stale at now,
	// for every node's heap-change feed to apply.
	NoteHeapChanges(ctx context.Context, now time.Time, targets ...string) error
	// WaitingOf is uid's dispatch logID as uid's heap offers it while it waits; ok is
	// false when it does not wait, or its heap would not offer it.
	WaitingOf(ctx context.Context, uid, logID string) (w schedule.WaitingDispatch, ok bool, err error)
	// SyncAgentGroups stores uid's report agent and makes uid a member of exactly the
	// dynamic groups whose rule it matches (matches says), noting a change for the
	// heap-change feed; it reports whether a membership changed.
	SyncAgentGroups(ctx context.Context, uid string, agent taskd.AgentInfo,
		matches func(taskd.DynamicGroup, taskd.AgentInfo) bool, now time.Time) (bool, error)

	// TemplateDDI reports whether template id is a DDI template (it never changes).
	TemplateDDI(ctx context.Context, id int64) (bool, error)
	// OpenAction returns uid's latest DDI action its controller has not closed, or nil.
	OpenAction(ctx context.Context, uid string) (*taskd.DDIAction, error)
	// Action returns DDI action id (taskd.ErrNotFound for none).
	Action(ctx context.Context, id int64) (*taskd.DDIAction, error)
	// NumberAction gives dispatch logID of uid its DDI action id, once.
	NumberAction(ctx context.Context, uid, logID string, now time.Time) (int64, error)
	// CompleteAction is Complete of the dispatch of DDI action id, closing the action
	// in the same transaction when it finishes the record.
	CompleteAction(ctx context.Context, uid, logID string, id int64, result taskd.Result, detail json.RawMessage, now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error)
	// CloseAction closes DDI action id; it reports whether this call closed it.
	CloseAction(ctx context.Context, id int64, now time.Time) (bool, error)
}

// Cache is what the dispatch service needs from the cache (Redis, package queue): each
// user's heap and open-dispatch hint, and the client key check. It is a hint: MySQL
// corrects it.
type Cache interface {
	// PeekN checks keyHash (unless empty) and returns uid's heap as due at now, with up
	// to n due entries.
	PeekN(ctx context.Context, uid, keyHash string, now time.Time, n int) (schedule.View, error)
	// Pop removes popped entries, leaving the open-dispatch hint.
	Pop(ctx context.Context, uid string, popped []schedule.Entry) error
	// SetOpen records logID as uid's open dispatch, with kept, a copy of what a fetch
	// hands out for it (nil: none), and removes popped entries.
	SetOpen(ctx context.Context, uid, logID string, kept []byte, popped []schedule.Entry) error
	// PeekCompleting is PeekN before a complete of uid's dispatch logID: its round trip
	// also drops the copy kept with uid's hint if it is of logID, and keeps any copy of
	// logID from being written again (dropped false: that could not be done).
	PeekCompleting(ctx context.Context, uid, keyHash, logID string, now time.Time, n int) (v schedule.View, dropped bool, err error)
	// VerifyCompleting is VerifyKey before a complete of uid's dispatch logID, with
	// PeekCompleting's drop.
	VerifyCompleting(ctx context.Context, uid, keyHash, logID string) (dropped bool, err error)
	// OpenCopy returns the copy SetOpen kept of uid's open dispatch logID (nil: none,
	// or the hint names another).
	OpenCopy(ctx context.Context, uid, logID string) ([]byte, error)
	// ClearOpen sets the hint to none if it still says seen.
	ClearOpen(ctx context.Context, uid string, seen schedule.OpenHint) error
	// ForgetOpen makes the hint unknown: the next fetch asks MySQL.
	ForgetOpen(ctx context.Context, uid string) error
	// InvalidateUser and InvalidateGroup make heaps stale after a change in MySQL.
	InvalidateUser(ctx context.Context, uid string) error
	InvalidateGroup(ctx context.Context, gid string) error
	// PutWaiting puts a waiting dispatch's entry into uid's heap, or makes the heap
	// stale when it cannot (put false).
	PutWaiting(ctx context.Context, uid string, e schedule.Entry) (put bool, err error)
	// VerifyKey reports whether keyHash is one of uid's valid client keys.
	VerifyKey(ctx context.Context, uid, keyHash string) error
	// Away reports whether Redis is away (the cache serves from MySQL what it can).
	Away() bool
	// CountPoll counts a request of uid that is not a fetch against uid's poll limit on
	// this node (rate_limited past it).
	CountPoll(uid string, now time.Time) error
}
