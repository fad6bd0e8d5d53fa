package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

var batchAt = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

// batchFixture is a store with a template, and a way to make once tasks due at batchAt.
type batchFixture struct {
	t   *testing.T
	st  *store.Store
	tpl int64
}

func newBatchFixture(t *testing.T, st *store.Store) *batchFixture {
	tpl, err := st.CreateTemplate(context.Background(), "test", taskd.Template{Name: "t", Schema: []byte(`{}`)}, batchAt)
	if err != nil {
		t.Fatal(err)
	}
	joinGroupG(t, st)
	return &batchFixture{t: t, st: st, tpl: tpl.ID}
}

// joinGroupG makes the uids the claim tests use (a to z, 0 to 199) members of group g,
// whose tasks they claim: a claim of a group's task is refused to a non-member.
func joinGroupG(t *testing.T, st *store.Store) {
	t.Helper()
	var uids []string
	for c := 'a'; c <= 'z'; c++ {
		uids = append(uids, string(c))
	}
	for i := range 200 {
		uids = append(uids, fmt.Sprint(i))
	}
	if _, err := st.AddMembers(context.Background(), "test", "g", uids, batchAt); err != nil {
		t.Fatal(err)
	}
}

// task makes an active once task for the group g, due at batchAt, changed by edit.
func (f *batchFixture) task(quota int, mode taskd.Mode, edit func(*taskd.Task)) taskd.Occurrence {
	f.t.Helper()
	task := taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: "gid_g", StartTime: batchAt,
		TemplateID: f.tpl, Params: []byte(`{"n":1}`), DispatchTimes: quota, Mode: mode, Priority: 5,
		Status: taskd.StatusActive}
	if edit != nil {
		edit(&task)
	}
	created, err := f.st.CreateTask(context.Background(), "test", task, batchAt)
	if err != nil {
		f.t.Fatal(err)
	}
	return taskd.Occurrence{Task: created.Key, DueAt: batchAt}
}

// claimed reads an occurrence's claim counter and its dispatch records.
func (f *batchFixture) claimed(occ taskd.Occurrence) (counter, records int) {
	f.t.Helper()
	db := f.st.DB()
	k := occ.Task
	if err := db.QueryRow(`SELECT COALESCE(SUM(claimed), 0) FROM occurrence_claim WHERE task_kind = ? AND task_id = ? AND due_at = ?`,
		k.Kind, k.ID, occ.DueAt).Scan(&counter); err != nil {
		f.t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT COUNT(*) FROM dispatch WHERE task_kind = ? AND task_id = ? AND due_at = ?`,
		k.Kind, k.ID, occ.DueAt).Scan(&records); err != nil {
		f.t.Fatal(err)
	}
	return counter, records
}

func (f *batchFixture) claims(cs ...store.BatchClaim) []store.BatchResult[taskd.ClaimOutcome] {
	f.t.Helper()
	res, err := f.st.ClaimBatch(context.Background(), cs)
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

func claimOf(uid string, occ taskd.Occurrence) store.BatchClaim {
	return store.BatchClaim{UID: uid, Occ: occ, Now: batchAt}
}

// A batch of claims comes out as if its claims had run one after another in its order:
// slots go first come first served, a user's second claim finds the user busy, a user
// whose open slot is taken outside the batch is busy without costing anyone a slot, and
// a user who holds the occurrence already, from before or from earlier in the batch, has
// had it. (internal/claimtest's scenarios cover every rule, in batches of one and many.)
func TestClaimBatchDecidesInOrder(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	f := newBatchFixture(t, st)
	one := f.task(1, taskd.ModeOncePerUser, nil)
	two := f.task(2, taskd.ModeUntilExhausted, nil)
	unlimited := f.task(taskd.Unlimited, taskd.ModeOncePerUser, nil)
	paused := f.task(1, taskd.ModeOncePerUser, func(t *taskd.Task) { t.Status = taskd.StatusPaused })
	notDue := taskd.Occurrence{Task: two.Task, DueAt: batchAt.Add(time.Minute)}

	type want struct {
		outcome taskd.ClaimOutcome
		alone   bool
	}
	check := func(step string, got []store.BatchResult[taskd.ClaimOutcome], wants ...want) {
		t.Helper()
		for i, w := range wants {
			g := got[i]
			if g.Alone != w.alone || g.Outcome != w.outcome || (g.Outcome == taskd.Claimed) != (g.D != nil) {
				t.Errorf("%s, claim %d: outcome %v alone %v record %v; want %v alone %v", step, i, g.Outcome, g.Alone, g.D != nil, w.outcome, w.alone)
			}
		}
	}
	claimed, exhausted, busy, gone, had := want{outcome: taskd.Claimed}, want{outcome: taskd.Exhausted},
		want{outcome: taskd.UserBusy}, want{outcome: taskd.Gone}, want{outcome: taskd.AlreadyHad}

	check("first come first served", f.claims(claimOf("1", one), claimOf("2", one)), claimed, exhausted)
	check("a user's second claim", f.claims(claimOf("3", unlimited), claimOf("3", two)), claimed, busy)
	check("paused, not an occurrence", f.claims(claimOf("4", paused), claimOf("4", notDue), claimOf("4", two)), gone, gone, claimed)
	check("held already, twice in a batch", f.claims(claimOf("2", unlimited), claimOf("5", unlimited), claimOf("5", unlimited), claimOf("1", one)),
		claimed, claimed, had, had)
	// 1 holds an open dispatch from the first batch: the batch finds it at the insert
	// and gives the slot of "two" to the next in line.
	check("busy outside the batch", f.claims(claimOf("1", two), claimOf("6", two), claimOf("7", two)), busy, claimed, exhausted)
	check("the quota of two", f.claims(claimOf("8", two)), exhausted)
	// A user's second claim meets the counter before the open slot, as alone: full is
	// exhausted (and dropped from the user's heap), not busy.
	check("exhausted before busy", f.claims(claimOf("9", unlimited), claimOf("9", one)), claimed, exhausted)

	for _, c := range []struct {
		name string
		occ  taskd.Occurrence
		want int
	}{{"one", one, 1}, {"two", two, 2}, {"unlimited", unlimited, 4}, {"paused", paused, 0}} {
		if counter, records := f.claimed(c.occ); counter != c.want || records != c.want {
			t.Errorf("%s: counter %d, records %d; want %d", c.name, counter, records, c.want)
		}
	}
	// Holds are kept for the users who got a slot and only for them.
	var holds int
	if err := st.DB().QueryRow("SELECT COUNT(*) FROM occurrence_user").Scan(&holds); err != nil {
		t.Fatal(err)
	}
	if holds != 5 { // 1 of one; 3, 2, 5 and 9 of unlimited
		t.Errorf("%d once_per_user holds, want 5", holds)
	}
}

// A batch of completes: each decided on its own record, a repeat of a log id left to
// run after the first, someone else's log id stale and not shown, a lease run out left
// to the single path (it expires first).
func TestCompleteBatch(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	f := newBatchFixture(t, st)
	ctx := context.Background()
	retry := f.task(taskd.Unlimited, taskd.ModeOncePerUser, func(t *taskd.Task) { t.Own.MaxAttempts = new(2) })
	leased := f.task(taskd.Unlimited, taskd.ModeOncePerUser, func(t *taskd.Task) { t.Own.LeaseSeconds = new(1) })
	res := f.claims(claimOf("1", retry), claimOf("2", retry), claimOf("3", retry), claimOf("4", leased), claimOf("5", retry))
	logs := map[string]string{}
	for i, r := range res {
		if r.Outcome != taskd.Claimed {
			t.Fatalf("claim %d: %v", i, r.Outcome)
		}
		logs[r.D.UID] = r.D.LogID
	}
	later := batchAt.Add(2 * time.Second)
	done := func(uid, logID string, r taskd.Result, detail string) store.BatchComplete {
		c := store.BatchComplete{UID: uid, LogID: logID, Result: r, Now: later}
		if detail != "" {
			c.Detail = []byte(detail)
		}
		return c
	}
	got, err := st.CompleteBatch(ctx, []store.BatchComplete{
		done("1", logs["1"], taskd.ResultSuccess, ""),
		done("2", logs["2"], taskd.ResultFailure, ""),
		done("3", logs["5"], taskd.ResultSuccess, ""),
		done("1", logs["1"], taskd.ResultSuccess, ""),
		done("3", logs["3"], taskd.ResultSuccess, `{"ok":true}`),
		done("4", logs["4"], taskd.ResultSuccess, ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []struct {
		outcome taskd.CompleteOutcome
		alone   bool
	}{{taskd.Completed, false}, {taskd.RetryScheduled, false}, {taskd.Stale, false}, {0, true}, {taskd.Completed, false}, {0, true}} {
		if got[i].Outcome != w.outcome || got[i].Alone != w.alone {
			t.Errorf("complete %d: %v alone %v; want %v alone %v", i, got[i].Outcome, got[i].Alone, w.outcome, w.alone)
		}
	}
	if got[2].D != nil {
		t.Errorf("someone else's record shown to 3: %+v", got[2].D)
	}
	type row struct {
		state           taskd.DispatchState
		open, waiting   *string
		retry, finished *time.Time
		detail          *string
	}
	read := func(logID string) row {
		var r row
		if err := st.DB().QueryRow("SELECT state, open_uid, waiting_uid, retry_at, finished_at, detail FROM dispatch WHERE log_id = ?", logID).
			Scan(&r.state, &r.open, &r.waiting, &r.retry, &r.finished, &r.detail); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := read(logs["1"]); r.state != taskd.StateDone || r.open != nil || r.waiting != nil || r.finished == nil || !r.finished.Equal(later) {
		t.Errorf("1's record: %+v", r)
	}
	if r := read(logs["2"]); r.state != taskd.StateRetryWait || r.open != nil || r.waiting == nil || *r.waiting != "2" || r.retry == nil {
		t.Errorf("2's record (retry): %+v", r)
	}
	if r := read(logs["3"]); r.state != taskd.StateDone || r.detail == nil || *r.detail != `{"ok":true}` {
		t.Errorf("3's record: %+v", r)
	}
	if r := read(logs["4"]); r.state != taskd.StateOpen || r.open == nil {
		t.Errorf("4's record (left alone, unchanged): %+v", r)
	}
	if r := read(logs["5"]); r.state != taskd.StateOpen || r.open == nil {
		t.Errorf("5's record (completed by 3: unchanged): %+v", r)
	}
	cursors := map[string]time.Time{}
	rows, err := st.DB().Query("SELECT uid, cursor_at FROM user_state")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var uid string
		var at time.Time
		if err := rows.Scan(&uid, &at); err != nil {
			t.Fatal(err)
		}
		cursors[uid] = at
	}
	if len(cursors) != 2 || !cursors["1"].Equal(batchAt) || !cursors["3"].Equal(batchAt) {
		t.Errorf("cursors %v: want 1 and 3 at %v (a retry does not move it)", cursors, batchAt)
	}
}

// Through the lanes, under concurrency: claims and completes of many users share
// transactions (batches of more than one form), no batch falls back, and the claim
// invariants hold: no quota over-dispatched, the counter equals the records, nobody
// twice once_per_user, at most one open dispatch per user.
func TestGroupCommitUnderConcurrency(t *testing.T) {
	t.Parallel()
	st, err := store.Open(context.Background(), testenv.MySQLDSN(t), store.OpenOptions{MaxConns: 8, Batch: 16, Lanes: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	biggest := map[string]int{}
	var fallbacks []error
	st.ObserveBatches(func(kind string, size int, err error) {
		mu.Lock()
		defer mu.Unlock()
		biggest[kind] = max(biggest[kind], size)
		if err != nil {
			fallbacks = append(fallbacks, err)
		}
	})
	f := newBatchFixture(t, st)
	occs := []taskd.Occurrence{
		f.task(5, taskd.ModeOncePerUser, nil),
		f.task(7, taskd.ModeUntilExhausted, nil),
		f.task(taskd.Unlimited, taskd.ModeOncePerUser, nil),
		f.task(taskd.Unlimited, taskd.ModeUntilExhausted, nil),
	}
	ctx := context.Background()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for u := range 60 {
		uid := fmt.Sprint(u)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for round := range 3 {
				for _, occ := range occs {
					outcome, d, err := st.Claim(ctx, uid, occ, batchAt, taskd.Single)
					if err != nil {
						t.Error(err)
						return
					}
					if outcome != taskd.Claimed {
						continue
					}
					if round == 2 && u%3 == 0 {
						return // leaves one open
					}
					if o, _, err := st.Complete(ctx, uid, d.LogID, taskd.ResultSuccess, nil, batchAt); err != nil || o != taskd.Completed {
						t.Errorf("complete: %v %v", o, err)
						return
					}
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(fallbacks) > 0 {
		t.Fatalf("%d batches fell back, first: %v", len(fallbacks), fallbacks[0])
	}
	if biggest["claim"] < 2 || biggest["complete"] < 2 {
		t.Errorf("largest batches %v: no claims or completes shared a transaction", biggest)
	}
	for i, occ := range occs {
		counter, records := f.claimed(occ)
		quota := []int{5, 7, -1, -1}[i]
		if counter != records || (quota >= 0 && records > quota) {
			t.Errorf("occurrence %d (quota %d): counter %d, records %d", i, quota, counter, records)
		}
	}
	var twice, opens int
	if err := st.DB().QueryRow(`SELECT COUNT(*) FROM (SELECT uid FROM dispatch WHERE mode = ? GROUP BY task_kind, task_id, due_at, uid HAVING COUNT(*) > 1) x`,
		taskd.ModeOncePerUser).Scan(&twice); err != nil {
		t.Fatal(err)
	}
	if twice != 0 {
		t.Errorf("%d once_per_user occurrences dispatched twice to one user", twice)
	}
	if err := st.DB().QueryRow(`SELECT COUNT(*) FROM dispatch WHERE state = ?`, taskd.StateOpen).Scan(&opens); err != nil {
		t.Fatal(err)
	}
	if opens != 20 { // users 0, 3, ..., 57 each left one open
		t.Errorf("%d open dispatches, want 20", opens)
	}
}

// With a batch of 1 there is no group commit: every claim and complete runs in a
// transaction of its own, and the rules hold the same.
func TestGroupCommitOff(t *testing.T) {
	t.Parallel()
	st, err := store.Open(context.Background(), testenv.MySQLDSN(t), store.OpenOptions{MaxConns: 8, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	batches := 0
	st.ObserveBatches(func(string, int, error) { batches++ })
	f := newBatchFixture(t, st)
	occ := f.task(3, taskd.ModeOncePerUser, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	for u := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcome, d, err := st.Claim(ctx, fmt.Sprint(u), occ, batchAt, taskd.Single)
			if err != nil {
				t.Error(err)
				return
			}
			if outcome == taskd.Claimed {
				if o, _, err := st.Complete(ctx, d.UID, d.LogID, taskd.ResultSuccess, nil, batchAt); err != nil || o != taskd.Completed {
					t.Errorf("complete: %v %v", o, err)
				}
			}
		}()
	}
	wg.Wait()
	if counter, records := f.claimed(occ); counter != 3 || records != 3 {
		t.Fatalf("quota 3, ten users: counter %d, records %d", counter, records)
	}
	if claims, completes := st.Queued(); batches != 0 || claims != 0 || completes != 0 {
		t.Fatalf("group commit off, yet %d batches observed (queued %d, %d)", batches, claims, completes)
	}
}

// A claim is made only by a user the task targets: the user of a user's task, a member
// of a group's task (as MySQL has the membership now, whatever a cache offered). The
// batch and a lone claim decide alike.
func TestClaimRefusesUsersTheTaskDoesNotTarget(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	f := newBatchFixture(t, st)
	group := f.task(10, taskd.ModeOncePerUser, nil)
	user := f.task(10, taskd.ModeOncePerUser, func(t *taskd.Task) { t.Executor = "uid_a" })
	res := f.claims(claimOf("outsider", group), claimOf("b", group), claimOf("b", user), claimOf("a", user))
	want := []taskd.ClaimOutcome{taskd.NotTargeted, taskd.Claimed, taskd.NotTargeted, taskd.Claimed}
	for i, r := range res {
		if r.Outcome != want[i] {
			t.Errorf("batch claim %d: outcome %d, want %d", i, r.Outcome, want[i])
		}
	}
	for _, c := range []store.BatchClaim{claimOf("outsider", group), claimOf("c", user)} {
		if outcome, _, err := st.Claim(context.Background(), c.UID, c.Occ, batchAt, taskd.Single); err != nil || outcome != taskd.NotTargeted {
			t.Errorf("a lone claim by %s: %d %v, want not targeted", c.UID, outcome, err)
		}
	}
	if counter, records := f.claimed(group); counter != 1 || records != 1 {
		t.Errorf("the group's occurrence: %d claimed, %d records; want the member's one", counter, records)
	}
}

// Ids compare as their columns do, without regard to case: a member spelled "Alice"
// is the member "alice", and a group's task for gid_G is its members' in group g. (A
// comparison that heeded case refused such claims on every fetch, while the heap,
// built in SQL, offered them again; and an add of "Alice" beside "alice" was a
// duplicate-key error no retry could clear.)
func TestIdsCompareWithoutCase(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	f := newBatchFixture(t, st)
	ctx := context.Background()
	added, err := st.AddMembers(ctx, "test", "g", []string{"Alice", "bob", "Bob", "a"}, batchAt)
	if err != nil || fmt.Sprint(added) != "[Alice bob]" {
		t.Fatalf("add Alice, bob, Bob and the member a: %v %v, want [Alice bob]", added, err)
	}
	// Everyone but alice, bob and a leave; nobody is added.
	if _, err := st.ReplaceMembers(ctx, "test", "g", []string{"ALICE", "BOB", "A"}, batchAt); err != nil {
		t.Fatal(err)
	}
	members, _ := st.Members(ctx, "g")
	if fmt.Sprint(members) != "[a Alice bob]" {
		t.Fatalf("members after replacing with ALICE, BOB, A: %v", members)
	}
	group := f.task(10, taskd.ModeOncePerUser, func(t *taskd.Task) { t.Executor = "gid_G" })
	user := f.task(10, taskd.ModeOncePerUser, func(t *taskd.Task) { t.Executor = "uid_Bob" })
	for _, c := range []store.BatchClaim{claimOf("alice", group), claimOf("BOB", user)} {
		if outcome, _, err := st.Claim(ctx, c.UID, c.Occ, batchAt, taskd.Single); err != nil || outcome != taskd.Claimed {
			t.Errorf("claim by %s: %d %v, want claimed", c.UID, outcome, err)
		}
	}
}
