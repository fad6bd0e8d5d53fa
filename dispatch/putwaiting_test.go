package dispatch_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// A failure with a retry puts the waiting dispatch into the user's heap as a rebuild
// would offer it: its log id, its retry time rounded up to the second, its task's
// priority and windows. Where the cache cannot put it, its script made the heap stale;
// where the store does not find it waiting, the heap is invalidated.
func TestFailurePutsItsRetryIntoTheHeap(t *testing.T) {
	retryAt := at.Add(30*time.Second + 400*time.Millisecond)
	for _, tc := range []struct {
		name      string
		waiting   bool
		put       bool
		wantCalls []string
	}{
		{"put", true, true, []string{"DropCopy", "ClearOpen", "PutWaiting"}},
		{"heap stale", true, false, []string{"DropCopy", "ClearOpen", "PutWaiting"}}, // the script made it stale
		{"not waiting", false, false, []string{"DropCopy", "ClearOpen", "InvalidateUser"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &fakeStore{
				CompleteFn: func(context.Context, string, string, taskd.Result, json.RawMessage, time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
					d := open("u1", taskd.Occurrence{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: 7}}, "L1")
					d.State, d.RetryAt = taskd.StateRetryWait, &retryAt
					return taskd.RetryScheduled, d, nil
				},
				WaitingOfFn: func(_ context.Context, uid, logID string) (schedule.WaitingDispatch, bool, error) {
					return schedule.WaitingDispatch{LogID: logID, At: retryAt, Priority: 8, Windows: "w1"}, tc.waiting, nil
				},
			}
			var got schedule.Entry
			c := &fakeCache{PutWaitingFn: func(uid string, e schedule.Entry) (bool, error) { got = e; return tc.put, nil }}
			if err := fakeService(st, c).Complete(t.Context(), "u1", "h", "L1", taskd.ResultFailure, nil); err != nil {
				t.Fatal(err)
			}
			var calls []string
			for _, call := range c.calls {
				if call != "Pop" {
					calls = append(calls, call)
				}
			}
			if !slices.Equal(calls, tc.wantCalls) {
				t.Errorf("cache calls %v, want %v", calls, tc.wantCalls)
			}
			want := schedule.Entry{LogID: "L1", DueAt: at.Add(31 * time.Second), Priority: 8, Windows: "w1"}
			if tc.waiting && got != want {
				t.Errorf("entry put %+v, want %+v", got, want)
			}
		})
	}
}
