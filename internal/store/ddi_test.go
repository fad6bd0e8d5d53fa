package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/testenv"
)

// DDI actions: a claim of a DDI take numbers its dispatch in its transaction, each
// number once; a complete of the action closes it in its own; a fetch's claim of a DDI
// deployment is refused, and numbers nothing.
func TestDDIActionsAreNumberedByTheClaimAndClosedByTheComplete(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	joinGroupG(t, st)
	tpl, err := st.CreateTemplate(ctx, "test", taskd.Template{Name: "fw", Schema: []byte(taskd.DDISchema), DDI: true}, now)
	if err != nil {
		t.Fatal(err)
	}
	task, err := st.CreateTask(ctx, "test", taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: "gid_g",
		StartTime: now, TemplateID: tpl.ID, Params: []byte(`{"chunks":[]}`), DispatchTimes: 10, Mode: taskd.ModeOncePerUser,
		Priority: 5, Status: taskd.StatusActive}, now)
	if err != nil {
		t.Fatal(err)
	}
	occ := taskd.Occurrence{Task: task.Key, DueAt: now}
	if outcome, _, err := st.Claim(ctx, "a", occ, now, taskd.Single); err != nil || outcome != taskd.Filtered {
		t.Fatalf("a fetch's claim of a deployment: %v %v, want Filtered", outcome, err)
	}
	ddi := taskd.Take{Slot: 1, DDI: true}
	var mu sync.Mutex
	ids := map[int64]string{}
	var wg sync.WaitGroup
	for _, uid := range []string{"a", "b", "c", "d", "e", "f"} {
		wg.Go(func() {
			outcome, d, err := st.Claim(ctx, uid, occ, now, ddi)
			if err != nil || outcome != taskd.Claimed || d.ActionID <= 0 {
				t.Errorf("claim of %s: %v %v %+v", uid, outcome, err, d)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if other, dup := ids[d.ActionID]; dup {
				t.Errorf("action %d given to %s and %s", d.ActionID, other, uid)
			}
			ids[d.ActionID] = d.LogID
		})
	}
	wg.Wait()
	var n int
	if err := st.DB().QueryRow("SELECT COUNT(*) FROM ddi_action WHERE closed_at IS NULL").Scan(&n); err != nil || n != 6 {
		t.Fatalf("open actions: %d (%v), want 6", n, err)
	}
	for id, logID := range ids {
		a, err := st.Action(ctx, id)
		if err != nil || a.Dispatch.LogID != logID || a.Closed {
			t.Fatalf("action %d: %+v %v", id, a, err)
		}
		uid := a.UID
		if outcome, _, err := st.CompleteAction(ctx, uid, logID, id, taskd.ResultSuccess, nil, now.Add(time.Second)); err != nil || outcome != taskd.Completed {
			t.Fatalf("complete of action %d: %v %v", id, outcome, err)
		}
		if a, _ := st.Action(ctx, id); !a.Closed {
			t.Fatalf("action %d after its complete: open", id)
		}
		if open, err := st.OpenAction(ctx, uid); err != nil || open != nil {
			t.Fatalf("open action of %s after its complete: %+v %v", uid, open, err)
		}
	}
}
