package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// Function-field fakes of the service's Store and Cache, for the take loop's rare
// branches (a claim refused for the rate, a slot found taken, a claim that fails): a
// test sets the fields it needs; a method whose field is unset fails the call with an
// error naming it, so a test never passes on a path it did not mean to take.

type fakeStore struct {
	ClaimFn         func(ctx context.Context, uid string, occ taskd.Occurrence, now time.Time, take taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error)
	ResumeFn        func(ctx context.Context, uid, logID string, now time.Time, take taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, bool, error)
	OpenDispatchFn  func(ctx context.Context, uid string) (*taskd.Dispatch, error)
	OpenSlotsFn     func(ctx context.Context, uid string) (int, []taskd.OpenSlot, error)
	TaskTemplatesFn func(ctx context.Context, keys []taskd.TaskKey) (map[taskd.TaskKey]int64, error)
	GetDispatchFn   func(ctx context.Context, logID string) (*taskd.Dispatch, error)
	RedoFn          func(ctx context.Context, d *taskd.Dispatch, now time.Time) (bool, error)
	ExpireFn        func(ctx context.Context, logID string, now time.Time) (*taskd.Dispatch, error)
	NoteFn          func(ctx context.Context, now time.Time, targets ...string) error
	SyncFn          func(ctx context.Context, uid string, agent taskd.AgentInfo, matches func(taskd.DynamicGroup, taskd.AgentInfo) bool, now time.Time) (bool, error)
	ConfirmFn       func(ctx context.Context, uid string, began, now time.Time) ([]*taskd.Dispatch, []string, error)
	OpenActionFn    func(ctx context.Context, uid string) (*taskd.DDIAction, error)
	NumberActionFn  func(ctx context.Context, uid, logID string, now time.Time) (int64, error)
	ActionFn        func(ctx context.Context, id int64) (*taskd.DDIAction, error)
	CloseActionFn   func(ctx context.Context, id int64, now time.Time) (bool, error)
	CompleteFn      func(ctx context.Context, uid, logID string, result taskd.Result, detail json.RawMessage, now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error)
	WaitingOfFn     func(ctx context.Context, uid, logID string) (schedule.WaitingDispatch, bool, error)
}

// CompleteAction is CompleteFn's (the action's close is the store's part).
func (f *fakeStore) CompleteAction(ctx context.Context, uid, logID string, _ int64, result taskd.Result, detail json.RawMessage, now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
	return f.Complete(ctx, uid, logID, result, detail, now)
}

func (f *fakeStore) ConfirmSuccesses(ctx context.Context, uid string, began, now time.Time) ([]*taskd.Dispatch, []string, error) {
	if f.ConfirmFn == nil {
		return nil, nil, unset("ConfirmSuccesses")
	}
	return f.ConfirmFn(ctx, uid, began, now)
}

func (f *fakeStore) TemplateDDI(context.Context, int64) (bool, error) { return false, nil }
func (f *fakeStore) OpenAction(ctx context.Context, uid string) (*taskd.DDIAction, error) {
	if f.OpenActionFn == nil {
		return nil, unset("OpenAction")
	}
	return f.OpenActionFn(ctx, uid)
}
func (f *fakeStore) Action(ctx context.Context, id int64) (*taskd.DDIAction, error) {
	if f.ActionFn == nil {
		return nil, unset("Action")
	}
	return f.ActionFn(ctx, id)
}
func (f *fakeStore) NumberAction(ctx context.Context, uid, logID string, now time.Time) (int64, error) {
	if f.NumberActionFn == nil {
		return 0, unset("NumberAction")
	}
	return f.NumberActionFn(ctx, uid, logID, now)
}
func (f *fakeStore) CloseAction(ctx context.Context, id int64, now time.Time) (bool, error) {
	if f.CloseActionFn == nil {
		return false, unset("CloseAction")
	}
	return f.CloseActionFn(ctx, id, now)
}

func (f *fakeStore) LapsedConfirms(context.Context, time.Time, int, int, []int) ([]string, error) {
	return nil, unset("LapsedConfirms")
}

func (f *fakeStore) Lapse(context.Context, string, time.Time) (*taskd.Dispatch, error) {
	return nil, unset("Lapse")
}

func (f *fakeStore) SyncAgentGroups(ctx context.Context, uid string, agent taskd.AgentInfo,
	matches func(taskd.DynamicGroup, taskd.AgentInfo) bool, now time.Time) (bool, error) {
	if f.SyncFn == nil {
		return false, unset("SyncAgentGroups")
	}
	return f.SyncFn(ctx, uid, agent, matches, now)
}

func (f *fakeStore) NoteHeapChanges(ctx context.Context, now time.Time, targets ...string) error {
	if f.NoteFn == nil {
		return unset("NoteHeapChanges")
	}
	return f.NoteFn(ctx, now, targets...)
}

func (f *fakeStore) WaitingOf(ctx context.Context, uid, logID string) (schedule.WaitingDispatch, bool, error) {
	if f.WaitingOfFn == nil {
		return schedule.WaitingDispatch{}, false, unset("WaitingOf")
	}
	return f.WaitingOfFn(ctx, uid, logID)
}

func unset(name string) error {
	return fmt.Errorf("fake: %s called, but the test did not set it", name)
}

func (f *fakeStore) Claim(ctx context.Context, uid string, occ taskd.Occurrence, now time.Time, take taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
	if f.ClaimFn == nil {
		return 0, nil, unset("Claim")
	}
	return f.ClaimFn(ctx, uid, occ, now, take)
}

func (f *fakeStore) Resume(ctx context.Context, uid, logID string, now time.Time, take taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, bool, error) {
	if f.ResumeFn == nil {
		return 0, nil, false, unset("Resume")
	}
	return f.ResumeFn(ctx, uid, logID, now, take)
}

func (f *fakeStore) OpenDispatch(ctx context.Context, uid string) (*taskd.Dispatch, error) {
	if f.OpenDispatchFn == nil {
		return nil, unset("OpenDispatch")
	}
	return f.OpenDispatchFn(ctx, uid)
}

func (f *fakeStore) OpenSlots(ctx context.Context, uid string) (int, []taskd.OpenSlot, error) {
	if f.OpenSlotsFn == nil {
		return 0, nil, unset("OpenSlots")
	}
	return f.OpenSlotsFn(ctx, uid)
}

func (f *fakeStore) TaskTemplates(ctx context.Context, keys []taskd.TaskKey) (map[taskd.TaskKey]int64, error) {
	if f.TaskTemplatesFn == nil {
		return nil, unset("TaskTemplates")
	}
	return f.TaskTemplatesFn(ctx, keys)
}

func (f *fakeStore) GetDispatch(ctx context.Context, logID string) (*taskd.Dispatch, error) {
	if f.GetDispatchFn == nil {
		return nil, unset("GetDispatch")
	}
	return f.GetDispatchFn(ctx, logID)
}

func (f *fakeStore) Redo(ctx context.Context, d *taskd.Dispatch, now time.Time) (bool, error) {
	if f.RedoFn == nil {
		return false, unset("Redo")
	}
	return f.RedoFn(ctx, d, now)
}

func (f *fakeStore) Expire(ctx context.Context, logID string, now time.Time) (*taskd.Dispatch, error) {
	if f.ExpireFn == nil {
		return nil, unset("Expire")
	}
	return f.ExpireFn(ctx, logID, now)
}

func (f *fakeStore) ExpiredLeases(context.Context, time.Time, int, int, []int) ([]string, error) {
	return nil, unset("ExpiredLeases")
}

func (f *fakeStore) Progress(context.Context, string, string, json.RawMessage, bool, time.Time) (*time.Time, error) {
	return nil, unset("Progress")
}

func (f *fakeStore) CompleteStage(context.Context, string, string, json.RawMessage, string, json.RawMessage, time.Duration, time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
	return 0, nil, unset("CompleteStage")
}

func (f *fakeStore) Complete(ctx context.Context, uid, logID string, result taskd.Result, detail json.RawMessage, now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
	if f.CompleteFn == nil {
		return 0, nil, unset("Complete")
	}
	return f.CompleteFn(ctx, uid, logID, result, detail, now)
}

func (f *fakeStore) RecordMissed(context.Context, []taskd.Missed, time.Time) error {
	return unset("RecordMissed")
}

// fakeCache is a Cache whose writes are recorded (calls, in order, as "Pop", "SetOpen
// <log id>", ...) and whose peeks are PeekFn's.
type fakeCache struct {
	PeekFn func(ctx context.Context, uid, keyHash string, now time.Time, n int) (schedule.View, error)
	// InvalidateErr is what the invalidations answer (nil: they succeed).
	InvalidateErr error
	// PutWaitingFn answers PutWaiting (nil: the heap made stale, put false).
	PutWaitingFn func(uid string, e schedule.Entry) (bool, error)
	// Kept is the copy OpenCopy answers for any dispatch (nil: none).
	Kept []byte
	// NotDropped: a complete's key check could not drop the copy (Redis away).
	NotDropped bool
	// HintErr is what ClearOpen and ForgetOpen answer (nil: they succeed).
	HintErr error

	mu     sync.Mutex
	calls  []string
	popped []schedule.Entry
}

func (f *fakeCache) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeCache) PeekN(ctx context.Context, uid, keyHash string, now time.Time, n int) (schedule.View, error) {
	f.record("Peek")
	if f.PeekFn == nil {
		return schedule.View{}, unset("Peek")
	}
	return f.PeekFn(ctx, uid, keyHash, now, n)
}

func (f *fakeCache) PeekCompleting(ctx context.Context, uid, keyHash, _ string, now time.Time, n int) (schedule.View, bool, error) {
	f.record("DropCopy")
	v, err := f.PeekN(ctx, uid, keyHash, now, n)
	return v, true, err
}

func (f *fakeCache) VerifyCompleting(context.Context, string, string, string) (bool, error) {
	f.record("DropCopy")
	return !f.NotDropped, nil
}

func (f *fakeCache) Pop(_ context.Context, _ string, popped []schedule.Entry) error {
	f.mu.Lock()
	f.popped = append(f.popped, popped...)
	f.mu.Unlock()
	f.record("Pop")
	return nil
}

func (f *fakeCache) SetOpen(_ context.Context, _, logID string, _ []byte, popped []schedule.Entry) error {
	f.mu.Lock()
	f.popped = append(f.popped, popped...)
	f.mu.Unlock()
	f.record("SetOpen " + logID)
	return nil
}

func (f *fakeCache) ClearOpen(context.Context, string, schedule.OpenHint) error {
	f.record("ClearOpen")
	return f.HintErr
}

func (f *fakeCache) ForgetOpen(context.Context, string) error {
	f.record("ForgetOpen")
	return f.HintErr
}

func (f *fakeCache) InvalidateUser(context.Context, string) error {
	f.record("InvalidateUser")
	return f.InvalidateErr
}

func (f *fakeCache) InvalidateGroup(context.Context, string) error {
	f.record("InvalidateGroup")
	return f.InvalidateErr
}

func (f *fakeCache) PutWaiting(_ context.Context, uid string, e schedule.Entry) (bool, error) {
	f.record("PutWaiting")
	if f.PutWaitingFn == nil {
		return false, f.InvalidateErr
	}
	return f.PutWaitingFn(uid, e)
}

func (f *fakeCache) VerifyKey(context.Context, string, string) error { return nil }

func (f *fakeCache) CountPoll(string, time.Time) error { return nil }

func (f *fakeCache) Away() bool { return false }

func (f *fakeCache) OpenCopy(context.Context, string, string) ([]byte, error) { return f.Kept, nil }

// called reports whether call was recorded.
func (f *fakeCache) called(call string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if c == call {
			return true
		}
	}
	return false
}

// wasPopped reports whether e was popped.
func (f *fakeCache) wasPopped(e schedule.Entry) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.popped {
		if p == e {
			return true
		}
	}
	return false
}
