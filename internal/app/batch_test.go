package app_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Batch fetch (seed 004's hold-N): fetch with max hands out up to min(max, free slots)
// tasks, each its own dispatch; max_in_flight (PUT /v1/admin/clients/{uid}) bounds the
// slots; template_ids restricts the fetch.

type batchReply struct {
	Task      *task      `json:"task"`
	Tasks     []*task    `json:"tasks"`
	NextDueAt *time.Time `json:"next_due_at"`
}

// batch fetches up to max tasks as the key's owner through instance i (body fields
// beyond max in extra); it fails the test on anything but 200.
func (e *env) batch(i int, key string, max int, extra map[string]any) batchReply {
	e.t.Helper()
	body := map[string]any{"max": max}
	for k, v := range extra {
		body[k] = v
	}
	code, out := e.do(i, "POST", "/v1/fetch", key, body)
	if code != 200 {
		e.t.Errorf("batch fetch: %d %v", code, out)
		return batchReply{}
	}
	if _, ok := out["tasks"].([]any); !ok {
		e.t.Errorf("batch fetch: no tasks list in %v", out)
	}
	var r batchReply
	b, _ := json.Marshal(out)
	json.Unmarshal(b, &r)
	if len(r.Tasks) > 0 && (r.Task == nil || r.Task.LogID != r.Tasks[0].LogID) {
		e.t.Errorf("batch fetch: task %+v is not the first of tasks", r.Task)
	}
	return r
}

// setMaxInFlight sets uid's max_in_flight through the admin API.
func (e *env) setMaxInFlight(uid string, n int) map[string]any {
	e.t.Helper()
	return e.admin("PUT", "/v1/admin/clients/"+uid, map[string]any{"max_in_flight": n})
}

func taskIDs(ts []*task) string {
	var ids []string
	for _, t := range ts {
		id := t.TaskID
		if t.Redo {
			id += "(redo)"
		}
		ids = append(ids, id)
	}
	return strings.Join(ids, " ")
}

// The slots: max_in_flight 1 by default (a batch gets one task), more once an admin
// sets it; distinct tasks in heap order; all slots held: the held ones again (redo); a
// completed one frees its slot; a fetch without max keeps to slot 1.
func TestBatchFetchSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	var ids []string
	for i := range 6 {
		ids = append(ids, e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Duration(i-10) * time.Minute))}))
	}
	k := e.key("1")
	if c := e.admin("GET", "/v1/admin/clients/1", nil); c["max_in_flight"] != 1.0 || c["updated_at"] != nil || c["open"] != 0.0 {
		t.Fatalf("client before any setting: %v", c)
	}
	r := e.batch(0, k, 10, nil)
	if got := taskIDs(r.Tasks); got != ids[0] {
		t.Fatalf("max_in_flight 1: %s, want %s", got, ids[0])
	}
	if c := e.setMaxInFlight("1", 3); c["max_in_flight"] != 3.0 || c["updated_at"] == nil || c["open"] != 1.0 {
		t.Fatalf("client after the setting: %v", c)
	}
	r = e.batch(0, k, 10, nil)
	if got := taskIDs(r.Tasks); got != ids[1]+" "+ids[2] {
		t.Fatalf("two free slots: %s, want %s %s", got, ids[1], ids[2])
	}
	seen := map[string]bool{}
	for _, d := range r.Tasks {
		if d.Attempt != 1 || seen[d.LogID] {
			t.Fatalf("batch task %+v", d)
		}
		seen[d.LogID] = true
	}
	// Every slot held: the held ones, again.
	r = e.batch(0, k, 10, nil)
	if got := taskIDs(r.Tasks); got != ids[0]+"(redo) "+ids[1]+"(redo) "+ids[2]+"(redo)" {
		t.Fatalf("no free slot: %s", got)
	}
	if r.NextDueAt == nil {
		t.Fatalf("no free slot: next_due_at null with due tasks left")
	}
	// A fetch without max keeps to slot 1: the slot-1 task again.
	if d := e.fetch(0, k).Task; d == nil || d.TaskID != ids[0] || !d.Redo {
		t.Fatalf("single fetch: %+v, want %s again", d, ids[0])
	}
	e.mustComplete(k, r.Tasks[1].LogID) // out of order: the slot-2 task
	r = e.batch(0, k, 10, nil)
	if got := taskIDs(r.Tasks); got != ids[3] {
		t.Fatalf("one free slot: %s, want %s", got, ids[3])
	}
	// max bounds the batch below the free slots.
	e.mustComplete(k, r.Tasks[0].LogID)
	e.mustComplete(k, e.fetch(0, k).Task.LogID) // slot 1 (ids[0])
	r = e.batch(0, k, 1, nil)
	if got := taskIDs(r.Tasks); got != ids[4] {
		t.Fatalf("max 1 with two free slots: %s, want %s", got, ids[4])
	}
	if c := e.admin("GET", "/v1/admin/clients/1", nil); c["open"] != 2.0 {
		t.Fatalf("client: %v, want 2 open", c)
	}
	entries := e.admin("GET", "/v1/admin/audit", nil)["entries"].([]any)
	found := false
	for _, a := range entries {
		a := a.(map[string]any)
		if a["action"] == "client.update" && a["target"] == "user:1" {
			found = fmt.Sprint(a["before"], a["after"]) == "map[max_in_flight:1] map[max_in_flight:3]"
		}
	}
	if !found {
		t.Fatalf("no client.update audit entry 1 -> 3 in %v", entries)
	}
	e.checkClaims()
}

// Bad input is refused, naming the field, and changes nothing.
func TestBatchFetchInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	k := e.key("1")
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"max": 0}, "max"},
		{map[string]any{"max": 101}, "max"},
		{map[string]any{"max": "3"}, "max"},
		{map[string]any{"max": 2, "template_ids": []any{}}, "template_ids"},
		{map[string]any{"max": 2, "template_ids": []any{0}}, "template_ids[0]"},
		{map[string]any{"max": 2, "template_ids": "1"}, "template_ids"},
	} {
		code, out := e.do(0, "POST", "/v1/fetch", k, c.body)
		if code != 400 || !strings.Contains(fmt.Sprint(out), c.want) {
			t.Errorf("fetch %v: %d %v, want 400 naming %s", c.body, code, out, c.want)
		}
	}
	for _, body := range []any{map[string]any{}, map[string]any{"max_in_flight": 0}, map[string]any{"max_in_flight": 101},
		map[string]any{"max_in_flight": 2.5}, map[string]any{"max_in_flight": 2, "extra": 1}} {
		e.expect("PUT", "/v1/admin/clients/1", body, 400, "invalid_argument")
	}
	e.expect("PUT", "/v1/admin/clients/uid_1", map[string]any{"max_in_flight": 2}, 400, "invalid_argument")
	if n := e.count("SELECT COUNT(*) FROM dispatch"); n != 0 {
		t.Fatalf("%d dispatches after refused fetches", n)
	}
	if n := e.count("SELECT COUNT(*) FROM client_setting"); n != 0 {
		t.Fatalf("%d client settings after refused puts", n)
	}
}

// template_ids: only tasks of those templates; the others stay for a fetch that takes
// them.
func TestBatchFetchTemplateIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	t1, t2 := e.template(), e.template()
	var of1, of2 []string
	for i := range 3 {
		start := ts(t0.Add(time.Duration(2*i-10) * time.Minute))
		of1 = append(of1, e.task("once", map[string]any{"executor": "uid_1", "start_time": start, "template_id": t1}))
		start = ts(t0.Add(time.Duration(2*i-9) * time.Minute))
		of2 = append(of2, e.task("once", map[string]any{"executor": "uid_1", "start_time": start, "template_id": t2}))
	}
	k := e.key("1")
	e.setMaxInFlight("1", 10)
	r := e.batch(0, k, 10, map[string]any{"template_ids": []int64{t2}})
	if got := taskIDs(r.Tasks); got != strings.Join(of2, " ") {
		t.Fatalf("template %d only: %s, want %s", t2, got, strings.Join(of2, " "))
	}
	if r.NextDueAt != nil {
		// The other template's due tasks are not this fetch's: a long poll must not
		// wake for them.
		t.Fatalf("next_due_at %v, want null (nothing else scheduled)", r.NextDueAt)
	}
	r = e.batch(0, k, 10, map[string]any{"template_ids": []int64{t1, 999}})
	if got := taskIDs(r.Tasks); got != strings.Join(of1, " ") {
		t.Fatalf("then template %d: %s, want %s", t1, got, strings.Join(of1, " "))
	}
	for _, d := range r.Tasks {
		e.mustComplete(k, d.LogID)
	}
	// Completed out of heap order (the cursor passed the open template-2 tasks): they
	// stay open, and nothing new is due: they come back (redo), only of the templates
	// asked for.
	if r := e.batch(0, k, 10, map[string]any{"template_ids": []int64{t1}}); len(r.Tasks) != 0 {
		t.Fatalf("template %d with nothing of it due or held: %s, want none", t1, taskIDs(r.Tasks))
	}
	if r := e.batch(0, k, 10, nil); taskIDs(r.Tasks) != strings.Join(of2, "(redo) ")+"(redo)" {
		t.Fatalf("the rest: %s, want the template-%d tasks again", taskIDs(r.Tasks), t2)
	}
	if c := e.admin("GET", "/v1/admin/clients/1", nil); c["open"] != 3.0 {
		t.Fatalf("client: %v, want the 3 template-%d tasks open", c, t2)
	}
}

// An until_exhausted occurrence goes into one slot at a time: a batch does not hand
// the same occurrence out twice while it is open.
func TestBatchFetchUntilExhaustedOnceAtATime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ue := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-2 * time.Minute)), "mode": "until_exhausted",
		"dispatch_times": 10})
	other := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	k := e.key("1")
	e.setMaxInFlight("1", 5)
	r := e.batch(0, k, 5, nil)
	if got := taskIDs(r.Tasks); got != ue+" "+other {
		t.Fatalf("batch: %s, want %s %s", got, ue, other)
	}
	if r := e.batch(0, k, 5, nil); taskIDs(r.Tasks) != ue+"(redo) "+other+"(redo)" {
		t.Fatalf("second batch while both are open: %s, want both again (nothing new)", taskIDs(r.Tasks))
	}
	e.mustComplete(k, r.Tasks[0].LogID)
	if r := e.batch(0, k, 5, nil); taskIDs(r.Tasks) != ue {
		t.Fatalf("after completing it: %s, want %s again", taskIDs(r.Tasks), ue)
	}
}

// A complete carried in a batch fetch is applied first.
func TestBatchFetchCarriesAComplete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	a := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-2 * time.Minute))})
	b := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	k := e.key("1")
	first := e.batch(0, k, 5, nil)
	if taskIDs(first.Tasks) != a {
		t.Fatalf("first batch: %s", taskIDs(first.Tasks))
	}
	r := e.batch(0, k, 5, map[string]any{"complete": map[string]any{"log_id": first.Tasks[0].LogID, "result": "success"}})
	if taskIDs(r.Tasks) != b {
		t.Fatalf("batch after the carried complete: %s, want %s", taskIDs(r.Tasks), b)
	}
	code, out := e.do(0, "POST", "/v1/fetch", k, map[string]any{"max": 5,
		"complete": map[string]any{"log_id": first.Tasks[0].LogID, "result": "success"}})
	if code != 200 {
		t.Fatalf("repeated carried complete: %d %v", code, out)
	}
}

// 1,000 concurrent batch fetchers (500 users, each fetching through both instances at
// once) never exceed any quota or any client's max_in_flight, and every task handed out
// is one open dispatch handed to one fetcher.
func TestBatchFetchUnderConcurrencyAcrossTwoInstances(t *testing.T) {
	const users, mif = 500, 3
	e := newEnv(t, 2)
	uids, keys := e.groupOf("g", users)
	quotas := []int{1, 6, 250, 999, -1}
	for i, q := range quotas {
		e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(time.Duration(i-10) * time.Minute)), "dispatch_times": q})
	}
	e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-time.Minute)), "dispatch_times": 100,
		"mode": "until_exhausted"})
	var rows []string
	var args []any
	for _, u := range uids {
		rows = append(rows, "(?, ?, ?)")
		args = append(args, u, mif, t0)
	}
	if _, err := e.store.DB().Exec("INSERT INTO client_setting (uid, max_in_flight, updated_at) VALUES "+strings.Join(rows, ", "), args...); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	handed := map[string]int{} // log id -> times handed out as new
	perUser := map[string]int{}
	for i, k := range keys {
		for inst := range 2 {
			wg.Go(func() {
				r := e.batch(inst, k, 10, nil)
				mu.Lock()
				defer mu.Unlock()
				for _, d := range r.Tasks {
					if !d.Redo {
						handed[d.LogID]++
						perUser[uids[i]]++
					}
				}
			})
		}
	}
	wg.Wait()
	for id, n := range handed {
		if n != 1 {
			t.Errorf("dispatch %s handed out %d times", id, n)
		}
	}
	for u, n := range perUser {
		if n > mif {
			t.Errorf("user %s got %d tasks, max_in_flight %d", u, n, mif)
		}
	}
	// Two racing fetchers of a user fill its slots between them, neither giving up on
	// a slot the other did not take: a user with a free slot holds every task that has
	// quota left.
	holds := map[string]map[int]bool{}
	open, err := e.store.DB().Query("SELECT uid, task_id FROM dispatch WHERE state = 1")
	if err != nil {
		t.Fatal(err)
	}
	for open.Next() {
		var u string
		var id int
		open.Scan(&u, &id)
		if holds[u] == nil {
			holds[u] = map[int]bool{}
		}
		holds[u][id] = true
	}
	open.Close()
	left := map[int]bool{}
	for i, q := range append(quotas, 100) {
		n := e.count("SELECT COALESCE(SUM(claimed), 0) FROM occurrence_claim WHERE task_id = ?", i+1)
		left[i+1] = q < 0 || n < q
	}
	for _, u := range uids {
		if len(holds[u]) >= mif {
			continue
		}
		for id, more := range left {
			if more && !holds[u][id] {
				t.Errorf("user %s has %d of %d slots taken, and task %d has quota left", u, len(holds[u]), mif, id)
			}
		}
	}
	if n := e.count("SELECT COUNT(*) FROM (SELECT open_uid FROM dispatch WHERE open_uid IS NOT NULL GROUP BY open_uid HAVING COUNT(*) > ?) x", mif); n != 0 {
		t.Errorf("%d users hold more than %d open dispatches", n, mif)
	}
	if n := e.count("SELECT COUNT(*) FROM dispatch WHERE state = 1"); n != len(handed) {
		t.Errorf("%d open dispatches, %d handed out", n, len(handed))
	}
	// The first three come first for every user, so their quotas are used up exactly;
	// after them a user's slots may be full.
	for i, q := range quotas {
		n := e.count("SELECT COUNT(*) FROM dispatch WHERE task_kind = 1 AND task_id = ?", i+1)
		t.Logf("once:%d quota %d: %d dispatched", i+1, q, n)
		if (i < 3 && n != q) || (q >= 0 && n > q) {
			t.Errorf("once:%d: %d dispatches, quota %d", i+1, n, q)
		}
	}
	if n := e.count("SELECT COUNT(*) FROM (SELECT uid FROM dispatch WHERE task_id = 6 GROUP BY uid HAVING COUNT(*) > 1) x"); n != 0 {
		t.Errorf("the until_exhausted occurrence went to one user twice at once")
	}
	e.checkClaims()
}

// Several slots, completed out of heap order: an until_exhausted occurrence the user
// held open while it completed a later task stays on offer after its own completion,
// also after a heap rebuild (the cursor did not pass it).
func TestBatchOutOfOrderKeepsUntilExhaustedOnOffer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ue := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-10 * time.Minute)), "mode": "until_exhausted",
		"dispatch_times": 10})
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-5 * time.Minute))})
	k := e.key("1")
	e.setMaxInFlight("1", 2)
	r := e.batch(0, k, 2, nil)
	if len(r.Tasks) != 2 || r.Tasks[0].TaskID != ue {
		t.Fatalf("batch: %s", taskIDs(r.Tasks))
	}
	e.mustComplete(k, r.Tasks[1].LogID) // the later one first
	e.mustComplete(k, r.Tasks[0].LogID)
	flushPrefix(e)
	if r := e.batch(0, k, 2, nil); taskIDs(r.Tasks) != ue {
		t.Fatalf("after the rebuild: %q, want %s again (quota left)", taskIDs(r.Tasks), ue)
	}
}

// An until_exhausted dispatch that expires with attempts left leaves the user's heap
// with both the occurrence and the waiting expired record: a batch with free slots
// takes the occurrence once, never twice at the same time.
func TestBatchUntilExhaustedNeverOpenTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-10 * time.Minute)), "mode": "until_exhausted",
		"dispatch_times": 30, "lease_seconds": 60, "max_attempts": 5})
	k := e.key("1")
	e.setMaxInFlight("1", 3)
	for i := range 8 {
		if r := e.batch(0, k, 3, nil); len(r.Tasks) == 0 {
			t.Fatalf("round %d: nothing", i)
		}
		e.clock.Advance(61 * time.Second)
		r := e.batch(0, k, 3, nil)
		if n := e.count("SELECT COUNT(*) FROM dispatch WHERE uid = '1' AND state = 1"); n > 1 || len(r.Tasks) > 1 {
			t.Fatalf("round %d: %s, %d open: the occurrence open twice for one user", i, taskIDs(r.Tasks), n)
		}
		for _, d := range r.Tasks {
			e.mustComplete(k, d.LogID)
		}
	}
}

// A client that lost a batch reply holds dispatches it does not know of: once no new
// work is due, its batch fetches hand them back (redo) though slots are free.
func TestBatchHandsBackHeldDispatchesWhenNothingNewIsDue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	for i := range 4 {
		e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Duration(i-10) * time.Minute))})
	}
	k := e.key("1")
	e.setMaxInFlight("1", 3)
	r := e.batch(0, k, 3, nil)
	lost := r.Tasks[0].LogID + " " + r.Tasks[1].LogID
	e.mustComplete(k, r.Tasks[2].LogID)
	r = e.batch(0, k, 3, nil) // the fourth task: new work first
	if len(r.Tasks) != 1 || r.Tasks[0].Redo {
		t.Fatalf("with new work due: %s", taskIDs(r.Tasks))
	}
	e.mustComplete(k, r.Tasks[0].LogID)
	r = e.batch(0, k, 3, nil)
	got := ""
	for _, d := range r.Tasks {
		if !d.Redo {
			t.Fatalf("a new task with nothing due: %+v", d)
		}
		got += " " + d.LogID
	}
	if got != " "+lost {
		t.Fatalf("nothing new due: %q, want the held %q again", got, lost)
	}
}

// A fetch for one template walks past many due tasks of another without a claim each,
// and finds the one it asks for; a long poll for it does not spin.
func TestBatchTemplateIDsPastManyOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tx, ty := e.template(), e.template()
	for i := range 40 {
		e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Duration(i-50) * time.Minute)), "template_id": tx})
	}
	want := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "template_id": ty})
	k := e.key("1")
	var claims atomic.Int64
	e.store.ObserveBatches(func(kind string, size int, err error) {
		if kind == "claim" {
			claims.Add(int64(size))
		}
	})
	r := e.batch(0, k, 1, map[string]any{"template_ids": []int64{ty}})
	if taskIDs(r.Tasks) != want {
		t.Fatalf("filtered fetch: %q, want %s", taskIDs(r.Tasks), want)
	}
	e.mustComplete(k, r.Tasks[0].LogID)
	before := claims.Load()
	start := time.Now()
	r = e.batch(0, k, 1, map[string]any{"template_ids": []int64{ty}, "wait_ms": 1000})
	if len(r.Tasks) != 0 || r.NextDueAt != nil || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("long poll with nothing of template %d: %s, next %v, after %v", ty, taskIDs(r.Tasks), r.NextDueAt, time.Since(start))
	}
	if n := claims.Load() - before; n != 0 {
		t.Errorf("a long poll for template %d made %d claims of other templates' tasks", ty, n)
	}
}

// A single fetch (slot 1) while a batch holds an until_exhausted occurrence in slot 2:
// the held one is not what it waits for, so a long poll does not spin on it.
func TestSingleFetchBesideABatchHeldOccurrence(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	first := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-20 * time.Minute))})
	ue := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-10 * time.Minute)), "mode": "until_exhausted",
		"dispatch_times": 10})
	k := e.key("1")
	e.setMaxInFlight("1", 2)
	r := e.batch(0, k, 2, nil)
	if taskIDs(r.Tasks) != first+" "+ue {
		t.Fatalf("batch: %s", taskIDs(r.Tasks))
	}
	e.mustComplete(k, r.Tasks[0].LogID) // slot 1 free; the occurrence held in slot 2
	single := e.fetch(0, k)
	if single.Task != nil || single.NextDueAt != nil {
		t.Fatalf("single fetch: %+v next %v, want nothing and no next due time", single.Task, single.NextDueAt)
	}
}
