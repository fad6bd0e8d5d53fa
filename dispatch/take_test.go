package dispatch_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/schedule"
)

// The take loop's rare branches, on function-field fakes: what MySQL and Redis would
// take a race to produce, a fake answers at once.

// at is mid-minute, so that a rate's minute end is ahead.
var at = time.Date(2026, 11, 26, 12, 0, 30, 0, time.UTC)

func fakeService(st *fakeStore, c *fakeCache) *dispatch.Service {
	return dispatch.NewService(st, c, clock.NewFake(at), slog.New(slog.DiscardHandler), dispatch.Config{RequestTimeout: time.Minute})
}

func entry(id int64) schedule.Entry {
	return schedule.Entry{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: id}, DueAt: at.Add(-time.Minute), Priority: 5}
}

// peeking answers every peek with the due entries given (and no open dispatch).
func peeking(due ...schedule.Entry) func(context.Context, string, string, time.Time, int) (schedule.View, error) {
	return func(context.Context, string, string, time.Time, int) (schedule.View, error) {
		return schedule.View{Open: schedule.NoneOpen, Due: due}, nil
	}
}

func open(uid string, occ taskd.Occurrence, logID string) *taskd.Dispatch {
	return &taskd.Dispatch{LogID: logID, UID: uid, Occurrence: occ, Attempt: 1, State: taskd.StateOpen, Mode: taskd.ModeOncePerUser}
}

// A task whose rate is used up this minute: no task, the entry stays, the fetch comes
// back at the minute's end; the next fetch within the second costs no claim.
func TestTakeRateBound(t *testing.T) {
	var claims atomic.Int32
	st := &fakeStore{ClaimFn: func(context.Context, string, taskd.Occurrence, time.Time, taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
		claims.Add(1)
		return taskd.RateBound, nil, nil
	}}
	e := entry(1)
	c := &fakeCache{PeekFn: peeking(e)}
	svc := fakeService(st, c)
	for range 2 {
		res, err := svc.Fetch(t.Context(), "u", "key", 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Task != nil || res.NextDueAt == nil || !res.NextDueAt.Equal(at.Truncate(time.Minute).Add(time.Minute)) {
			t.Fatalf("task %v, next due %v; want none, at the minute's end", res.Task, res.NextDueAt)
		}
	}
	if n := claims.Load(); n != 1 {
		t.Errorf("%d claims; want 1 (the second fetch within the second asks no one)", n)
	}
	if c.wasPopped(e) {
		t.Error("a rate-bound entry was popped")
	}
}

// A claim that finds slot 1 taken (another request of the user dispatched first) hands
// out what holds it, as a redo.
func TestTakeBusySlotHandsOutItsHolder(t *testing.T) {
	e := entry(1)
	holder := open("u", taskd.Occurrence{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: 9}, DueAt: at}, "L9")
	st := &fakeStore{
		ClaimFn: func(context.Context, string, taskd.Occurrence, time.Time, taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
			return taskd.UserBusy, nil, nil
		},
		OpenDispatchFn: func(context.Context, string) (*taskd.Dispatch, error) { return holder, nil },
		RedoFn:         func(context.Context, *taskd.Dispatch, time.Time) (bool, error) { return true, nil },
	}
	c := &fakeCache{PeekFn: peeking(e)}
	res, err := fakeService(st, c).Fetch(t.Context(), "u", "key", 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Task == nil || res.Task.LogID != "L9" || !res.Task.Redo {
		t.Fatalf("got %+v; want L9 again", res.Task)
	}
	if c.wasPopped(e) {
		t.Error("the entry refused for a busy slot was popped")
	}
	if !c.called("SetOpen L9") {
		t.Errorf("the hint was not set to the holder: %v", c.calls)
	}
}

// The slot's holder finished between the claim and the look at it: the fetch looks at
// the heap again and claims.
func TestTakeBusySlotFreedMeanwhile(t *testing.T) {
	e := entry(1)
	var claims atomic.Int32
	st := &fakeStore{
		ClaimFn: func(_ context.Context, uid string, occ taskd.Occurrence, _ time.Time, _ taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
			if claims.Add(1) == 1 {
				return taskd.UserBusy, nil, nil
			}
			return taskd.Claimed, open(uid, occ, "L1"), nil
		},
		OpenDispatchFn: func(context.Context, string) (*taskd.Dispatch, error) { return nil, nil },
	}
	c := &fakeCache{PeekFn: peeking(e)}
	res, err := fakeService(st, c).Fetch(t.Context(), "u", "key", 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Task == nil || res.Task.LogID != "L1" || res.Task.Redo {
		t.Fatalf("got %+v; want L1, claimed", res.Task)
	}
	if !c.wasPopped(e) || !c.called("SetOpen L1") {
		t.Errorf("the claimed entry's cache writes: %v", c.calls)
	}
}

// An occurrence the user holds open in another slot stays, and the next entry is
// taken into slot 1.
func TestTakeHoldingTriesTheNext(t *testing.T) {
	held, next := entry(1), entry(2)
	st := &fakeStore{ClaimFn: func(_ context.Context, uid string, occ taskd.Occurrence, _ time.Time, tk taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
		if tk.OpenSlot() != 1 {
			t.Errorf("a fetch without max claimed into slot %d", tk.OpenSlot())
		}
		if occ.Task.ID == 1 {
			return taskd.Holding, nil, nil
		}
		return taskd.Claimed, open(uid, occ, "L2"), nil
	}}
	c := &fakeCache{PeekFn: peeking(held, next)}
	res, err := fakeService(st, c).Fetch(t.Context(), "u", "key", 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Task == nil || res.Task.LogID != "L2" {
		t.Fatalf("got %+v; want L2", res.Task)
	}
	if c.wasPopped(held) {
		t.Error("the held entry was popped")
	}
}

// A task that no longer targets the user: the entry goes and the user's heap is made
// stale (rebuilt without the group's other tasks).
func TestTakeNotTargeted(t *testing.T) {
	e := entry(1)
	st := &fakeStore{ClaimFn: func(context.Context, string, taskd.Occurrence, time.Time, taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
		return taskd.NotTargeted, nil, nil
	}}
	c := &fakeCache{PeekFn: peeking(e)}
	res, err := fakeService(st, c).Fetch(t.Context(), "u", "key", 0)
	if err != nil || res.Task != nil {
		t.Fatalf("got %+v, %v; want nothing", res.Task, err)
	}
	if !c.wasPopped(e) || !c.called("InvalidateUser") {
		t.Errorf("cache writes %v; want the entry popped and the user invalidated", c.calls)
	}
}

// An invalidation Redis refuses is noted in MySQL for the heap-change feed, which
// applies it once Redis answers; one Redis took is not noted.
func TestTakeNotTargetedNotesARefusedInvalidation(t *testing.T) {
	for _, refused := range []bool{false, true} {
		var noted []string
		st := &fakeStore{
			ClaimFn: func(context.Context, string, taskd.Occurrence, time.Time, taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
				return taskd.NotTargeted, nil, nil
			},
			NoteFn: func(ctx context.Context, now time.Time, targets ...string) error {
				if _, bounded := ctx.Deadline(); !bounded {
					t.Error("the note's context has no deadline")
				}
				if !now.Equal(at) {
					t.Errorf("noted at %v, want the service's now %v", now, at)
				}
				noted = append(noted, targets...)
				return nil
			},
		}
		c := &fakeCache{PeekFn: peeking(entry(1))}
		if refused {
			c.InvalidateErr = errors.New("redis: connection refused")
		}
		if _, err := fakeService(st, c).Fetch(t.Context(), "u", "key", 0); err != nil {
			t.Fatal(err)
		}
		if want := map[bool][]string{true: {"uid_u"}}[refused]; !slices.Equal(noted, want) {
			t.Errorf("invalidation refused %v: noted %v, want %v", refused, noted, want)
		}
	}
}

// A retry a little early by this node's clock stays, and is not what the fetch says
// to come back for.
func TestTakeNotDueStays(t *testing.T) {
	retry := schedule.Entry{LogID: "R1", DueAt: at.Add(-time.Second)}
	later := entry(2)
	later.DueAt = at.Add(time.Hour)
	st := &fakeStore{ResumeFn: func(context.Context, string, string, time.Time, taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, bool, error) {
		return taskd.NotDue, nil, false, nil
	}}
	c := &fakeCache{PeekFn: func(context.Context, string, string, time.Time, int) (schedule.View, error) {
		return schedule.View{Open: schedule.NoneOpen, Due: []schedule.Entry{retry}, Next: &later}, nil
	}}
	res, err := fakeService(st, c).Fetch(t.Context(), "u", "key", 0)
	if err != nil || res.Task != nil {
		t.Fatalf("got %+v, %v; want nothing", res.Task, err)
	}
	if c.wasPopped(retry) {
		t.Error("the early retry was popped")
	}
	if res.NextDueAt == nil || !res.NextDueAt.Equal(later.DueAt) {
		t.Errorf("next due %v; want the next entry's %v", res.NextDueAt, later.DueAt)
	}
}

// A claim that fails: the error is the fetch's, and the open-dispatch hint is made
// unknown (the claim's batch may still commit).
func TestTakeFailedClaimForgetsTheHint(t *testing.T) {
	boom := errors.New("mysql went away")
	st := &fakeStore{ClaimFn: func(context.Context, string, taskd.Occurrence, time.Time, taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
		return 0, nil, boom
	}}
	c := &fakeCache{PeekFn: peeking(entry(1))}
	if _, err := fakeService(st, c).Fetch(t.Context(), "u", "key", 0); !errors.Is(err, boom) {
		t.Fatalf("err %v; want the claim's", err)
	}
	if !c.called("ForgetOpen") {
		t.Errorf("cache writes %v; want ForgetOpen", c.calls)
	}
}

// A batch whose second claim fails hands out the first (it is dispatched, and the
// client must know of it), and makes the hint unknown.
func TestBatchHandsOutWhatWasClaimedBeforeAFailure(t *testing.T) {
	boom := errors.New("mysql went away")
	st := &fakeStore{
		OpenSlotsFn: func(context.Context, string) (int, []taskd.OpenSlot, error) { return 2, nil, nil },
		ClaimFn: func(_ context.Context, uid string, occ taskd.Occurrence, _ time.Time, tk taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
			if occ.Task.ID == 2 {
				return 0, nil, boom
			}
			d := open(uid, occ, "L1")
			d.Slot = tk.OpenSlot()
			return taskd.Claimed, d, nil
		},
	}
	c := &fakeCache{PeekFn: peeking(entry(1), entry(2))}
	res, err := fakeService(st, c).FetchBatch(t.Context(), "u", "key", dispatch.Batch{Max: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tasks) != 1 || res.Tasks[0].LogID != "L1" || res.Task != res.Tasks[0] {
		t.Fatalf("got %+v; want L1 alone", res.Tasks)
	}
	if !c.called("ForgetOpen") {
		t.Errorf("cache writes %v; want ForgetOpen", c.calls)
	}
}
