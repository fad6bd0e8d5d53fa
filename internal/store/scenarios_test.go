package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/claimtest"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// The claim scenarios through the store: each scenario's claims in batches of one (one
// transaction each, one after another) and as one batch, against MySQL, must come to
// what the decision alone gives (the taskd package runs them through it).
func TestClaimScenarios(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	ctx := context.Background()
	tpl := map[string]int64{}
	for _, name := range []string{"a", "b"} {
		created, err := st.CreateTemplate(ctx, "test", taskd.Template{Name: name, Schema: []byte(`{}`)}, claimtest.At)
		if err != nil {
			t.Fatal(err)
		}
		tpl[name] = created.ID
	}
	for n, sc := range claimtest.Scenarios {
		for _, batch := range []string{"one", "many"} {
			t.Run(fmt.Sprintf("%s/batches of %s", sc.Name, batch), func(t *testing.T) {
				runScenario(t, st, tpl, fmt.Sprintf("s%d%s-", n, batch), sc, batch == "many")
			})
		}
	}
}

// runScenario plays sc against st: its tasks, its history, then its claims, with
// every user id prefixed (so that runs share no user's slots).
func runScenario(t *testing.T, st *store.Store, tpl map[string]int64, prefix string, sc claimtest.Scenario, together bool) {
	ctx := context.Background()
	at := claimtest.At
	var members []string
	strangers := map[string]bool{}
	for _, s := range sc.Strangers {
		strangers[s] = true
	}
	late := map[string]bool{}
	for _, l := range sc.Latecomers {
		late[l] = true
	}
	addMember := func(uid string) {
		if !strangers[uid] && !late[uid] && !slices.Contains(members, prefix+uid) {
			members = append(members, prefix+uid)
		}
	}
	for _, b := range sc.Before {
		addMember(b.UID)
	}
	for _, c := range sc.Claims {
		addMember(c.UID)
	}
	gid := prefix + "g"
	if _, err := st.AddMembers(ctx, "test", gid, members, at); err != nil {
		t.Fatal(err)
	}
	occ := map[string]taskd.Occurrence{}
	for _, task := range sc.Tasks {
		lease, attempts, rate := claimtest.LeaseSeconds, max(task.MaxAttempts, 1), task.Rate
		def := taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: "gid_" + gid, StartTime: at,
			TemplateID: tpl[task.TemplateName()], Params: []byte(`{}`), DispatchTimes: task.Quota, Mode: task.Mode,
			Priority: 5, Status: taskd.StatusActive,
			Own: taskd.Settings{LeaseSeconds: &lease, MaxAttempts: &attempts}}
		if rate > 0 {
			def.Own.DispatchRatePerMinute = &rate
		}
		if def.Mode == 0 {
			def.Mode = taskd.ModeOncePerUser
		}
		if task.ForUser != "" {
			def.Executor = "uid_" + prefix + task.ForUser
		}
		if task.PhaseCap != nil {
			r := taskd.Rollout{Phases: []taskd.Phase{{Count: task.PhaseCap}, {Percent: new(100.0)}}, Advance: taskd.AdvanceManual}
			if task.Snapshot {
				r.Targeting = taskd.TargetingSnapshot
			}
			r = r.WithDefaults()
			def.Rollout = &r
		}
		if task.Paused {
			def.Status = taskd.StatusPaused
		}
		created, err := st.CreateTask(ctx, "test", def, at)
		if err != nil {
			t.Fatal(err)
		}
		occ[task.Name] = taskd.Occurrence{Task: created.Key, DueAt: at}
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
	for _, b := range sc.Before {
		uid := prefix + b.UID
		outcome, d, err := st.Claim(ctx, uid, occ[b.Task], at, taskd.Single)
		if err != nil || outcome != taskd.Claimed {
			t.Fatalf("before: %s's claim of %s: %v, %v", b.UID, b.Task, outcome, err)
		}
		switch b.What {
		case claimtest.Finished:
			if outcome, _, err := st.Complete(ctx, uid, d.LogID, taskd.ResultSuccess, nil, at); err != nil || outcome != taskd.Completed {
				t.Fatalf("before: %s's complete of %s: %v, %v", b.UID, b.Task, outcome, err)
			}
		case claimtest.Expired:
			if expired, err := st.Expire(ctx, d.LogID, at.Add(2*claimtest.LeaseSeconds*time.Second)); err != nil || expired == nil {
				t.Fatalf("before: expiry of %s's %s: %v, %v", b.UID, b.Task, expired, err)
			}
		}
	}
	claims := make([]store.BatchClaim, len(sc.Claims))
	for i, c := range sc.Claims {
		var ids []int64
		for _, name := range c.Templates {
			ids = append(ids, tpl[name])
		}
		claims[i] = store.BatchClaim{UID: prefix + c.UID, Occ: occ[c.Task], Now: at, Take: taskd.Take{Slot: c.Slot, Templates: ids}}
	}
	var got []store.BatchResult[taskd.ClaimOutcome]
	if together {
		res, err := st.ClaimBatch(ctx, claims)
		if err != nil {
			t.Fatal(err)
		}
		got = res
	} else {
		for _, c := range claims {
			res, err := st.ClaimBatch(ctx, []store.BatchClaim{c})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, res[0])
		}
	}
	for i, c := range sc.Claims {
		g := got[i]
		if g.Outcome != c.Want || (g.Outcome == taskd.Claimed) != (g.D != nil) {
			t.Errorf("claim %d (%s of %s, slot %d): %v (record %v), want %v", i, c.UID, c.Task, c.Slot, g.Outcome, g.D != nil, c.Want)
			continue
		}
		if g.D != nil && g.D.Attempt != max(c.Attempt, 1) {
			t.Errorf("claim %d: attempt %d, want %d", i, g.D.Attempt, max(c.Attempt, 1))
		}
	}
	// The counters hold the slots held: granted claims plus what the history kept.
	for name, o := range occ {
		var counter, holders int
		db := st.DB()
		if err := db.QueryRow(`SELECT COALESCE(SUM(claimed), 0) FROM occurrence_claim WHERE task_kind = ? AND task_id = ? AND due_at = ?`,
			o.Task.Kind, o.Task.ID, o.DueAt).Scan(&counter); err != nil {
			t.Fatal(err)
		}
		// A slot is held by a record that is open, done, or dead (expired with attempts
		// left, it went back).
		if err := db.QueryRow(`SELECT COUNT(*) FROM dispatch WHERE task_kind = ? AND task_id = ? AND due_at = ? AND state IN (?, ?, ?)`,
			o.Task.Kind, o.Task.ID, o.DueAt, taskd.StateOpen, taskd.StateDone, taskd.StateDead).Scan(&holders); err != nil {
			t.Fatal(err)
		}
		if counter != holders {
			t.Errorf("task %s: counter %d, records holding a slot %d", name, counter, holders)
		}
	}
}
