package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/claimtest"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// The claim scenarios through the store, against MySQL: each scenario's claims in
// batches of one (one transaction each) and as one batch must come to what the
// decision alone gives (the taskd package runs them through it).
func TestClaimScenarios(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	tpl := map[string]int64{}
	for _, name := range []string{"a", "b"} {
		created, err := st.CreateTemplate(context.Background(), "test", taskd.Template{Name: name, Schema: []byte(`{}`)}, claimtest.At)
		if err != nil {
			t.Fatal(err)
		}
		tpl[name] = created.ID
	}
	var runs atomic.Int64
	claimtest.Run(t, func(t *testing.T, sc claimtest.Scenario) claimtest.Claimer {
		return newStoreClaimer(t, st, tpl, fmt.Sprintf("s%d-", runs.Add(1)), sc)
	})
}

// storeClaimer plays a scenario against the store, every user id prefixed (so that
// runs share no user's slots).
type storeClaimer struct {
	st     *store.Store
	tpl    map[string]int64
	prefix string
	occ    map[string]taskd.Occurrence
}

func newStoreClaimer(t *testing.T, st *store.Store, tpl map[string]int64, prefix string, sc claimtest.Scenario) *storeClaimer {
	ctx, at := context.Background(), claimtest.At
	c := &storeClaimer{st: st, tpl: tpl, prefix: prefix, occ: map[string]taskd.Occurrence{}}
	var members []string
	addMember := func(uid string) {
		if !slices.Contains(sc.Strangers, uid) && !slices.Contains(sc.Latecomers, uid) && !slices.Contains(members, prefix+uid) {
			members = append(members, prefix+uid)
		}
	}
	for _, b := range sc.Before {
		addMember(b.UID)
	}
	for _, cl := range sc.Claims {
		addMember(cl.UID)
	}
	gid := prefix + "g"
	if _, err := st.AddMembers(ctx, "test", gid, members, at); err != nil {
		t.Fatal(err)
	}
	for _, task := range sc.Tasks {
		lease, attempts, rate := claimtest.LeaseSeconds, max(task.MaxAttempts, 1), task.Rate
		def := taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: taskd.GroupExecutor(gid), StartTime: at,
			TemplateID: tpl[task.TemplateName()], Params: []byte(`{}`), DispatchTimes: task.Quota, Mode: task.TaskMode(),
			Priority: 5, Status: taskd.StatusActive, Rollout: task.Rollout(),
			Own: taskd.Settings{LeaseSeconds: &lease, MaxAttempts: &attempts}}
		if rate > 0 {
			def.Own.DispatchRatePerMinute = &rate
		}
		if task.ForUser != "" {
			def.Executor = taskd.UserExecutor(prefix + task.ForUser)
		}
		if task.Paused {
			def.Status = taskd.StatusPaused
		}
		created, err := st.CreateTask(ctx, "test", def, at)
		if err != nil {
			t.Fatal(err)
		}
		c.occ[task.Name] = taskd.Occurrence{Task: created.Key, DueAt: at}
	}
	if len(sc.Latecomers) > 0 {
		var uids []string
		for _, l := range sc.Latecomers {
			uids = append(uids, prefix+l)
		}
		if _, err := st.AddMembers(ctx, "test", gid, uids, at); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *storeClaimer) Before(t *testing.T, b claimtest.Before) {
	ctx, at, uid := context.Background(), claimtest.At, c.prefix+b.UID
	outcome, d, err := c.st.Claim(ctx, uid, c.occ[b.Task], at, taskd.Single)
	if err != nil || outcome != taskd.Claimed {
		t.Fatalf("before: %s's claim of %s: %v, %v", b.UID, b.Task, outcome, err)
	}
	switch b.What {
	case claimtest.Finished:
		if outcome, _, err := c.st.Complete(ctx, uid, d.LogID, taskd.ResultSuccess, nil, at); err != nil || outcome != taskd.Completed {
			t.Fatalf("before: %s's complete of %s: %v, %v", b.UID, b.Task, outcome, err)
		}
	case claimtest.Expired:
		if expired, err := c.st.Expire(ctx, d.LogID, at.Add(2*claimtest.LeaseSeconds*time.Second)); err != nil || expired == nil {
			t.Fatalf("before: expiry of %s's %s: %v, %v", b.UID, b.Task, expired, err)
		}
	}
}

func (c *storeClaimer) Claim(t *testing.T, claims []claimtest.Claim) []claimtest.Got {
	batch := make([]store.BatchClaim, len(claims))
	for i, cl := range claims {
		var ids []int64
		for _, name := range cl.Templates {
			ids = append(ids, c.tpl[name])
		}
		batch[i] = store.BatchClaim{UID: c.prefix + cl.UID, Occ: c.occ[cl.Task], Now: claimtest.At, Take: taskd.Take{Slot: cl.Slot, Templates: ids}}
	}
	res, err := c.st.ClaimBatch(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]claimtest.Got, len(res))
	for i, r := range res {
		got[i].Outcome = r.Outcome
		if (r.Outcome == taskd.Claimed) != (r.D != nil) {
			t.Errorf("claim %d: %v with record %v", i, r.Outcome, r.D != nil)
		}
		if r.D != nil {
			got[i].Attempt = r.D.Attempt
		}
	}
	return got
}

// Check says the counters hold the slots the records keep (taskd.Dispatch.KeepsSlot).
func (c *storeClaimer) Check(t *testing.T) {
	var keeping []string
	for s := taskd.StateOpen; s <= taskd.StateStaged; s++ {
		if (&taskd.Dispatch{State: s}).KeepsSlot() {
			keeping = append(keeping, fmt.Sprint(int(s)))
		}
	}
	db := c.st.DB()
	for name, o := range c.occ {
		var counter, holders int
		if err := db.QueryRow(`SELECT COALESCE(SUM(claimed), 0) FROM occurrence_claim WHERE task_kind = ? AND task_id = ? AND due_at = ?`,
			o.Task.Kind, o.Task.ID, o.DueAt).Scan(&counter); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(`SELECT COUNT(*) FROM dispatch WHERE task_kind = ? AND task_id = ? AND due_at = ? AND state IN (`+
			strings.Join(keeping, ", ")+`)`, o.Task.Kind, o.Task.ID, o.DueAt).Scan(&holders); err != nil {
			t.Fatal(err)
		}
		if counter != holders {
			t.Errorf("task %s: counter %d, records keeping a slot %d", name, counter, holders)
		}
	}
}
