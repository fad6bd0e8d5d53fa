package dispatch_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// While MySQL is away, a fetch whose hint names an open dispatch hands out the copy
// the cache kept of it, as a redo; but not once MySQL has said, in the same fetch,
// that the dispatch is no longer open (it answered, then went away), and not a copy
// whose lease ran out.
func TestRedoFromTheKeptCopy(t *testing.T) {
	occ := taskd.Occurrence{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: 7}, DueAt: at.Add(-time.Hour)}
	lease := at.Add(time.Minute)
	kept, _ := json.Marshal(map[string]any{"log_id": "L1", "task_id": "once:7", "lease_expires_at": lease})
	expired, _ := json.Marshal(map[string]any{"log_id": "L1", "task_id": "once:7", "lease_expires_at": at.Add(-time.Second)})
	away := taskd.Unavailable("mysql", context.DeadlineExceeded)
	hinted := func(context.Context, string, string, time.Time, int) (schedule.View, error) {
		return schedule.View{Open: schedule.OpenIs("L1")}, nil
	}
	for _, tc := range []struct {
		name     string
		kept     []byte
		answered bool // MySQL answers the first read (L1 open, its redo finds it finished)
		wantRedo bool
	}{
		{"MySQL away from the start", kept, false, true},
		{"MySQL answered first", kept, true, false},
		{"the copy's lease ran out", expired, false, false},
		{"no copy", nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			st := &fakeStore{
				OpenDispatchFn: func(context.Context, string) (*taskd.Dispatch, error) {
					reads++
					if tc.answered && reads == 1 {
						d := open("u1", occ, "L1")
						d.LeaseExpiresAt = &lease
						return d, nil
					}
					return nil, away
				},
				RedoFn: func(context.Context, *taskd.Dispatch, time.Time) (bool, error) { return false, nil },
			}
			c := &fakeCache{PeekFn: hinted, Kept: tc.kept}
			res, err := fakeService(st, c).Fetch(t.Context(), "u1", "h", 0)
			if tc.wantRedo {
				if err != nil || res.Task == nil || res.Task.LogID != "L1" || !res.Task.Redo {
					t.Fatalf("fetch: %+v %v, want the redo of L1 from its copy", res.Task, err)
				}
				return
			}
			if taskd.ErrorCode(err) != taskd.CodeUnavailable {
				t.Fatalf("fetch: %+v %v, want unavailable", res.Task, err)
			}
		})
	}
}

// A complete drops the copy before it reaches MySQL: a copy must not outlive the
// dispatch it was made of, whatever happens after the commit.
func TestACompleteDropsTheCopyFirst(t *testing.T) {
	occ := taskd.Occurrence{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: 7}}
	c := &fakeCache{}
	dropped := false
	st := &fakeStore{CompleteFn: func(context.Context, string, string, taskd.Result, json.RawMessage, time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
		dropped = c.called("DropCopy")
		d := open("u1", occ, "L1")
		d.State, d.Result = taskd.StateDone, taskd.ResultSuccess
		return taskd.Completed, d, nil
	}}
	if err := fakeService(st, c).Complete(t.Context(), "u1", "h", "L1", taskd.ResultSuccess, nil); err != nil {
		t.Fatal(err)
	}
	if !dropped {
		t.Fatalf("the store's complete ran before the copy was dropped: cache calls %v", c.calls)
	}
}

// A complete that committed, whose invalidation Redis could not take (it is away), does
// not answer 503 when the invalidation is noted for the heap-change feed: the note does
// its work once Redis answers. When the note fails too, the complete says so.
func TestACompleteWithRedisAwayIsNotRefusedForItsInvalidation(t *testing.T) {
	occ := taskd.Occurrence{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: 7}}
	for _, noteFails := range []bool{false, true} {
		st := &fakeStore{
			CompleteFn: func(context.Context, string, string, taskd.Result, json.RawMessage, time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
				d := open("u1", occ, "L1")
				d.State, d.Result = taskd.StateUnconfirmed, taskd.ResultSuccess // its user's heap is invalidated
				return taskd.Completed, d, nil
			},
			NoteFn: func(context.Context, time.Time, ...string) error {
				if noteFails {
					return taskd.Unavailable("mysql", context.DeadlineExceeded)
				}
				return nil
			},
		}
		c := &fakeCache{InvalidateErr: taskd.Unavailable("redis", context.DeadlineExceeded)}
		err := fakeService(st, c).Complete(t.Context(), "u1", "h", "L1", taskd.ResultSuccess, nil)
		if noteFails != (err != nil) {
			t.Errorf("note fails %v: complete answered %v", noteFails, err)
		}
	}
}

// With Redis away, a complete whose key check could not drop the copy forgets the hint
// once, noted once for the heap-change feed: not cleared, then forgotten again.
func TestACompleteWithRedisAwayNotesItsUserOnce(t *testing.T) {
	occ := taskd.Occurrence{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: 7}}
	notes := 0
	st := &fakeStore{
		CompleteFn: func(context.Context, string, string, taskd.Result, json.RawMessage, time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
			d := open("u1", occ, "L1")
			d.State, d.Result = taskd.StateDone, taskd.ResultSuccess
			return taskd.Completed, d, nil
		},
		NoteFn: func(context.Context, time.Time, ...string) error { notes++; return nil },
	}
	away := taskd.Unavailable("redis", context.DeadlineExceeded)
	c := &fakeCache{NotDropped: true, HintErr: away}
	if err := fakeService(st, c).Complete(t.Context(), "u1", "h", "L1", taskd.ResultSuccess, nil); err != nil {
		t.Fatal(err)
	}
	if notes != 1 || c.called("ClearOpen") {
		t.Fatalf("%d heap-change notes (want 1), cache calls %v (want no ClearOpen)", notes, c.calls)
	}
}
