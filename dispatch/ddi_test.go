package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/schedule"
)

// DDI polls on function-field fakes: what each asks of MySQL (a fake store method left
// unset fails the call that reaches it).

// A DDI poll whose hint says nothing is open asks MySQL nothing, and passes by the
// entries of fetch agents' tasks: no claim, and they do not shorten its sleep.
func TestDDIPollWithNothingOpenReadsNoMySQL(t *testing.T) {
	c := &fakeCache{PeekFn: peeking(entry(1))}
	svc := fakeService(&fakeStore{}, c)
	poll, err := svc.PollDDI(t.Context(), "dev", dispatch.Credential{UID: "dev", Hash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if poll.Action != nil || poll.Sleep != 5*time.Minute {
		t.Fatalf("poll: %+v, want no action and the longest sleep", poll)
	}
}

// A poll that finds nothing open where the hint did not know says so in the hint, so
// that the next polls ask MySQL nothing.
func TestDDIPollLearnsNothingIsOpen(t *testing.T) {
	st := &fakeStore{OpenDispatchFn: func(context.Context, string) (*taskd.Dispatch, error) { return nil, nil }}
	st.OpenActionFn = func(context.Context, string) (*taskd.DDIAction, error) { return nil, nil }
	c := &fakeCache{PeekFn: func(context.Context, string, string, time.Time, int) (schedule.View, error) {
		return schedule.View{Open: schedule.OpenHint{State: schedule.OpenUnknown}}, nil
	}}
	if _, err := fakeService(st, c).PollDDI(t.Context(), "dev", dispatch.Credential{UID: "dev", Hash: "h"}); err != nil {
		t.Fatal(err)
	}
	if !c.called("ClearOpen") {
		t.Fatalf("cache calls %v: the hint was not set to none", c.calls)
	}
}

// A fetch passes by a DDI deployment's entry (no claim), and a DDI poll takes it, as
// a DDI take.
func TestDDIEntriesAreTheControllers(t *testing.T) {
	dep := entry(2)
	dep.DDI = true
	var took taskd.Take
	st := &fakeStore{ClaimFn: func(_ context.Context, uid string, occ taskd.Occurrence, now time.Time, tk taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
		took = tk
		d := open(uid, occ, "L1")
		return taskd.Claimed, d, nil
	}}
	st.NumberActionFn = func(context.Context, string, string, time.Time) (int64, error) { return 7, nil }
	c := &fakeCache{PeekFn: peeking(dep)}
	svc := fakeService(st, c)
	res, err := svc.Fetch(t.Context(), "dev", "h", 0)
	if err != nil || res.Task != nil || took.DDI {
		t.Fatalf("fetch: %+v, %v (take %+v), want nothing and no claim", res.Task, err, took)
	}
	poll, err := svc.PollDDI(t.Context(), "dev", dispatch.Credential{UID: "dev", Hash: "h"})
	if err != nil || poll.Action == nil || poll.Action.ID != 7 || !took.DDI {
		t.Fatalf("poll: %+v, %v (take %+v), want action 7 by a DDI take", poll, err, took)
	}
}

// A closing feedback whose complete MySQL did not record leaves the action the
// controller's (its feedback is welcome again); one whose dispatch ended meanwhile
// closes it, and answers gone.
func TestDDIClosingFeedbackClosesOnlyWhatEnded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		complete error
		code     taskd.Code
		closed   bool
	}{
		{"MySQL away", taskd.Unavailable("mysql", errors.New("down")), taskd.CodeUnavailable, false},
		{"ended meanwhile", taskd.Errorf(taskd.CodeStaleLease, "not open"), taskd.CodeGone, true},
	} {
		closed := false
		st := &fakeStore{
			ActionFn: func(context.Context, int64) (*taskd.DDIAction, error) {
				return &taskd.DDIAction{ID: 3, UID: "dev", Dispatch: open("dev", taskd.Occurrence{}, "L1")}, nil
			},
			CompleteFn: func(context.Context, string, string, taskd.Result, json.RawMessage, time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
				return 0, nil, tc.complete
			},
			CloseActionFn: func(context.Context, int64, time.Time) (bool, error) { closed = true; return true, nil },
		}
		err := fakeService(st, &fakeCache{}).FeedbackDDI(t.Context(), "dev", dispatch.Credential{UID: "dev", Hash: "h"}, 3,
			dispatch.DDIFeedback{Execution: "closed", Finished: "success"})
		if taskd.ErrorCode(err) != tc.code || closed != tc.closed {
			t.Errorf("%s: %v, closed %v; want %s, closed %v", tc.name, err, closed, tc.code, tc.closed)
		}
	}
}
