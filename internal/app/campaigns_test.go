package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/clientkey"
	"github.com/taskpull/taskd/queue"
)

// Campaigns (seed 000): items reach the executor's agents through fetch, at the
// campaign's rate, within its window; progress is a sliding window in Redis synced to
// MySQL.

// campaign creates a campaign over template tpl; fields override the defaults.
func (e *env) campaign(fields map[string]any) (int64, string) {
	e.t.Helper()
	body := map[string]any{"name": "c", "template_id": e.template(), "params": map[string]any{"n": 1},
		"executor": "gid_g", "items": map[string]any{"count": 10}, "rate_per_second": 1000, "lease_seconds": 60}
	for k, v := range fields {
		body[k] = v
	}
	out := e.admin("POST", "/v1/admin/campaigns", body)
	if out["state"] != "created" {
		e.t.Fatalf("new campaign: %v", out)
	}
	id := int64(out["id"].(float64))
	return id, fmt.Sprintf("/v1/admin/campaigns/%d", id)
}

// runningCampaign starts a campaign (fields as campaign's) worked by group g of one
// user, u0000, who may hold maxInFlight items at once; it returns the user's key (in a
// list, as groupOf does) and the campaign's id and path.
func (e *env) runningCampaign(maxInFlight int, fields map[string]any) ([]string, int64, string) {
	e.t.Helper()
	_, keys := e.groupOf("g", 1)
	if maxInFlight > 1 {
		e.admin("PUT", "/v1/admin/clients/u0000", map[string]any{"max_in_flight": maxInFlight})
	}
	id, path := e.campaign(fields)
	if code, out := e.move(path, "start"); code != 200 {
		e.t.Fatalf("start: %d %v", code, out)
	}
	return keys, id, path
}

// loseCampaign deletes campaign id's window from Redis, as a Redis that lost its data
// would.
func (e *env) loseCampaign(id int64) {
	e.t.Helper()
	if n, err := e.rdb.Del(e.t.Context(), queue.Keys{Prefix: e.prefix}.Campaign(id)...).Result(); err != nil || n == 0 {
		e.t.Fatalf("delete campaign %d's window: %d keys, %v", id, n, err)
	}
}

// move makes a campaign move and returns the status and reply.
func (e *env) move(path, move string) (int, map[string]any) {
	e.t.Helper()
	return e.do(0, "POST", path+"/"+move, adminToken, nil)
}

// runners runs one round of every instance's campaign runners.
func (e *env) runners() {
	e.t.Helper()
	for _, a := range e.apps {
		if err := a.Campaigns.RunOnce(e.t.Context()); err != nil {
			e.t.Fatal(err)
		}
	}
}

// items fetches up to max campaign items (a batch fetch) and returns them.
func (e *env) items(i int, key string, max int) []*task {
	e.t.Helper()
	r := e.batch(i, key, max, nil)
	for _, it := range r.Tasks {
		if it.CampaignID == nil || !strings.HasPrefix(it.TaskID, "campaign:") {
			e.t.Fatalf("not a campaign item: %+v", it)
		}
	}
	return r.Tasks
}

func num(v any) int64 { f, _ := v.(float64); return int64(f) }

func TestCampaignLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	_, keys := e.groupOf("g", 2)
	e.key("outsider")
	outsider := e.key("outsider")
	e.admin("PUT", "/v1/admin/clients/u0000", map[string]any{"max_in_flight": 100})
	id, path := e.campaign(map[string]any{"items": map[string]any{"count": 12}, "window": 8, "retry_backoff_seconds": 30})

	for _, m := range []string{"pause", "resume", "stop"} {
		if code, out := e.move(path, m); code != http.StatusConflict {
			t.Fatalf("%s a created campaign: %d %v, want 409", m, code, out)
		}
	}
	if got := e.items(0, keys[0], 10); len(got) != 0 {
		t.Fatalf("a created campaign handed out %d items", len(got))
	}
	if code, out := e.move(path, "start"); code != 200 || out["state"] != "running" {
		t.Fatalf("start: %d %v", code, out)
	}
	if code, _ := e.move(path, "start"); code != http.StatusConflict {
		t.Fatalf("start a running campaign: %d, want 409", code)
	}
	if r := e.fetch(0, outsider); r.Task != nil {
		t.Fatalf("a user outside the executor got %+v", r.Task)
	}

	got := e.items(0, keys[0], 5)
	if len(got) != 5 {
		t.Fatalf("%d items handed out, want 5", len(got))
	}
	for i, it := range got {
		if num(it.Item) != int64(i) || it.Attempt != 1 || *it.CampaignID != id || it.TaskID != fmt.Sprintf("campaign:%d", id) {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	// Item 0 fails; 1..4 are done: the window moves past the failed item, which
	// waits out its backoff on its own.
	if code, out := e.complete(0, keys[0], got[0].LogID, "failure"); code != 200 {
		t.Fatalf("fail item 0: %d %v", code, out)
	}
	for _, it := range got[1:] {
		e.mustComplete(keys[0], it.LogID)
	}
	// A second complete of a done item counts once.
	e.mustComplete(keys[0], got[1].LogID)
	c := e.admin("GET", path, nil)
	if num(c["offset"]) != 0 || num(c["done"]) != 4 || num(c["in_flight"]) != 0 {
		t.Fatalf("after 4 done and 1 failure: %v", c)
	}
	next := e.items(0, keys[0], 10)
	if len(next) != 3 || num(next[0].Item) != 5 {
		t.Fatalf("with item 0 waiting to retry, the window (8 from offset 0) holds 5..7: got %d %+v", len(next), next)
	}
	if more := e.items(0, keys[1], 1); len(more) != 0 {
		t.Fatalf("past the window: %+v", more[0])
	}
	e.clock.Advance(31 * time.Second)
	retry := e.items(0, keys[1], 1)
	if len(retry) != 1 || num(retry[0].Item) != 0 || retry[0].Attempt != 2 {
		t.Fatalf("the retry of item 0: %+v", retry)
	}
	// The failure of an attempt that does not hold the item is stale.
	if code, _ := e.complete(0, keys[0], got[0].LogID, "failure"); code != http.StatusConflict {
		t.Fatalf("failure of an old attempt: %d, want 409", code)
	}
	// Someone else's log id is stale, too.
	if code, _ := e.complete(0, keys[1], next[0].LogID, "success"); code != http.StatusConflict {
		t.Fatalf("complete of another user's item: %d, want 409", code)
	}
	e.mustComplete(keys[1], retry[0].LogID)
	if c := e.admin("GET", path, nil); num(c["offset"]) != 5 || num(c["done"]) != 5 {
		t.Fatalf("item 0 done: %v", c)
	}

	// Stop with items in flight: stopping, until they are done.
	if code, out := e.move(path, "stop"); code != 200 || out["state"] != "stopping" {
		t.Fatalf("stop: %d %v", code, out)
	}
	if got := e.items(0, keys[1], 1); len(got) != 0 {
		t.Fatalf("a stopping campaign handed out %+v", got[0])
	}
	e.runners()
	if c := e.admin("GET", path, nil); c["state"] != "stopping" {
		t.Fatalf("stopping with 3 in flight: %v", c["state"])
	}
	for _, it := range next {
		e.mustComplete(keys[0], it.LogID)
	}
	e.runners()
	if c := e.admin("GET", path, nil); c["state"] != "stopped" || num(c["offset"]) != 8 {
		t.Fatalf("stopped: %v", c)
	}
	if code, out := e.move(path, "start"); code != 200 || out["state"] != "running" {
		t.Fatalf("start again: %d %v", code, out)
	}
	rest := e.items(0, keys[0], 10)
	if len(rest) != 4 || num(rest[0].Item) != 8 {
		t.Fatalf("after the restart: %d items, first %+v", len(rest), rest)
	}
	for _, it := range rest {
		e.mustComplete(keys[0], it.LogID)
	}
	c = e.admin("GET", path, nil)
	if c["state"] != "finished" || num(c["done"]) != 12 || num(c["failed"]) != 0 || num(c["offset"]) != 12 {
		t.Fatalf("finished: %v", c)
	}
	e.runners()
	if n := e.count("SELECT COUNT(*) FROM campaign WHERE id = ? AND state = 'finished' AND done = 12", id); n != 1 {
		t.Fatal("the finish did not reach MySQL")
	}
	if code, _ := e.move(path, "start"); code != http.StatusConflict {
		t.Fatalf("start a finished campaign: %d, want 409", code)
	}
	if n := e.count("SELECT COUNT(*) FROM audit_log WHERE target = ? AND action IN ('campaign.start', 'campaign.stop', 'campaign.stopped', 'campaign.finished')", fmt.Sprintf("campaign:%d", id)); n != 5 {
		t.Fatalf("%d audited moves, want 5 (start, stop, stopped, start, finished)", n)
	}
}

// An item whose lease runs out goes to the next user as its next attempt; the late
// success of the first still counts, once; its last attempt failing fails it for good.
func TestCampaignLeasesAndAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	_, keys := e.groupOf("g", 3)
	_, path := e.campaign(map[string]any{"items": map[string]any{"count": 2}, "lease_seconds": 10, "max_attempts": 2,
		"retry_backoff_seconds": 0})
	e.move(path, "start")
	first := e.fetch(0, keys[0]).Task
	if again := e.fetch(0, keys[0]).Task; again == nil || !again.Redo || again.LogID != first.LogID {
		t.Fatalf("the user's held item comes back as redo: %+v", again)
	}
	e.clock.Advance(11 * time.Second)
	second := e.fetch(0, keys[1]).Task
	if second == nil || num(second.Item) != num(first.Item) || second.Attempt != 2 {
		t.Fatalf("after the lease ran out: %+v, want item %v attempt 2", second, first.Item)
	}
	e.mustComplete(keys[0], first.LogID) // late, but the work is done
	e.mustComplete(keys[1], second.LogID)
	c := e.admin("GET", path, nil)
	if num(c["done"]) != 1 || num(c["offset"]) != 1 {
		t.Fatalf("one item done twice: %v", c)
	}
	// Item 1 fails on both its attempts: failed for good, and the campaign finishes.
	for i := range 2 {
		it := e.fetch(0, keys[2]).Task
		if it == nil || num(it.Item) != 1 || it.Attempt != i+1 {
			t.Fatalf("attempt %d: %+v", i+1, it)
		}
		if code, out := e.complete(0, keys[2], it.LogID, "failure"); code != 200 {
			t.Fatalf("fail: %d %v", code, out)
		}
	}
	c = e.admin("GET", path, nil)
	if c["state"] != "finished" || num(c["done"]) != 1 || num(c["failed"]) != 1 {
		t.Fatalf("after the last attempt failed: %v", c)
	}
}

// More than max_failures failures within per_seconds pause the campaign, with the
// reason; an admin resumes it.
func TestCampaignErrorBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	keys, _, path := e.runningCampaign(1, map[string]any{"items": map[string]any{"count": 100},
		"error_budget": map[string]any{"max_failures": 2, "per_seconds": 60}})
	for i := range 3 {
		it := e.fetch(0, keys[0]).Task
		if it == nil {
			t.Fatalf("failure %d: no item", i+1)
		}
		e.complete(0, keys[0], it.LogID, "failure")
	}
	c := e.admin("GET", path, nil)
	if c["state"] != "paused" || !strings.Contains(c["reason"].(string), "error budget: 3 failures within 60 s") {
		t.Fatalf("after 3 failures: %v", c)
	}
	if it := e.fetch(0, keys[0]).Task; it != nil {
		t.Fatalf("a paused campaign handed out %+v", it)
	}
	if code, _ := e.move(path, "pause"); code != http.StatusConflict {
		t.Fatalf("pause a paused campaign: %d, want 409", code)
	}
	if code, out := e.move(path, "resume"); code != 200 || out["state"] != "running" || out["reason"] != "" {
		t.Fatalf("resume: %d %v", code, out)
	}
	if it := e.fetch(0, keys[0]).Task; it == nil {
		t.Fatal("nothing after the resume")
	}
	e.runners()
	if n := e.count("SELECT COUNT(*) FROM audit_log WHERE action = 'campaign.paused'"); n != 1 {
		t.Fatalf("the budget's pause audited %d times, want once", n)
	}
}

// Items are handed out at rate_per_second over every instance: a second's worth at
// once (the bucket), then the rate.
func TestCampaignRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	_, keys := e.groupOf("g", 30)
	_, path := e.campaign(map[string]any{"items": map[string]any{"count": 1000}, "rate_per_second": 10})
	e.move(path, "start")
	take := func() int {
		var n int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, k := range keys {
			wg.Go(func() {
				code, out := e.do(i%2, "POST", "/v1/fetch", k, nil)
				if code != 200 {
					t.Errorf("fetch: %d %v", code, out)
					return
				}
				if it, _ := out["task"].(map[string]any); it != nil {
					mu.Lock()
					n++
					mu.Unlock()
					e.complete(0, k, it["log_id"].(string), "success")
				} else if out["next_due_at"] == nil {
					t.Errorf("a rate-bound fetch is not told when to come back: %v", out)
				}
			})
		}
		wg.Wait()
		return n
	}
	if n := take(); n != 10 {
		t.Fatalf("at once: %d items, want the bucket, 10", n)
	}
	e.clock.Advance(500 * time.Millisecond)
	if n := take(); n != 5 {
		t.Fatalf("half a second later: %d items, want 5", n)
	}
}

// Uids come inline, or uploaded as NDJSON or CSV before the start; the items carry
// them. A bad line adds nothing.
func TestCampaignUploads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	_, keys := e.groupOf("g", 1)
	e.admin("PUT", "/v1/admin/clients/u0000", map[string]any{"max_in_flight": 100})
	_, path := e.campaign(map[string]any{"items": map[string]any{"uids": []string{"a", "b"}}})
	upload := func(ctype, body string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", e.urls[0]+path+"/items", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("Content-Type", ctype)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, out
	}
	if code, out := upload("application/x-ndjson", "\"c\"\n{\"uid\": \"d\"}\n\n"); code != 200 || num(out["total"]) != 4 {
		t.Fatalf("ndjson: %d %v", code, out)
	}
	if code, out := upload("text/csv", "\ufeffUID\ne\nf\n"); code != 200 || num(out["total"]) != 6 {
		t.Fatalf("csv (a spreadsheet's, with a byte order mark and a header): %d %v", code, out)
	}
	// A row with more than the uid, or a line past 4,096 bytes (one 20 MB row of 10M
	// columns took 865 MB before), is refused naming its line, and adds nothing.
	if code, out := upload("text/csv", "uid\nx\ny,note\n"); code != 400 || !strings.Contains(fmt.Sprint(out), "line 3: one column") {
		t.Fatalf("a row with two columns: %d %v", code, out)
	}
	if code, out := upload("text/csv", "x\n"+strings.Repeat("a,", 3_000_000)+"\n"); code != 400 || !strings.Contains(fmt.Sprint(out), "line 2: longer than 4096 bytes") {
		t.Fatalf("a 6 MB line: %d %v", code, out)
	}
	code, out := upload("application/x-ndjson", "\"g\"\n\"uid_h\"\n")
	if code != 400 || !strings.Contains(fmt.Sprint(out), "line 2") {
		t.Fatalf("a bad line: %d %v", code, out)
	}
	if code, _ := upload("text/plain", "x"); code != 400 {
		t.Fatalf("text/plain: %d, want 400", code)
	}
	if c := e.admin("GET", path, nil); num(c["total"]) != 6 {
		t.Fatalf("a failed upload added items: %v", c)
	}
	e.move(path, "start")
	if code, _ := upload("text/csv", "z\n"); code != http.StatusConflict {
		t.Fatalf("upload after the start: %d, want 409", code)
	}
	var got []string
	for _, it := range e.items(0, keys[0], 10) {
		got = append(got, it.Item.(string))
	}
	if strings.Join(got, ",") != "a,b,c,d,e,f" {
		t.Fatalf("items %v, want a..f", got)
	}
}

// Create refuses bad input with a 400 naming the field, and stores nothing.
func TestCampaignCreateInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.template()
	base := func() map[string]any {
		return map[string]any{"name": "c", "template_id": tpl, "executor": "gid_g", "items": map[string]any{"count": 5}}
	}
	for _, tc := range []struct {
		field string
		value any
		want  string
	}{
		{"name", "", "name"},
		{"template_id", 999, "template_id"},
		{"executor", "ops", "executor"},
		{"items", map[string]any{}, "items"},
		{"items", map[string]any{"count": 0}, "items.count"},
		{"items", map[string]any{"count": 1, "uids": []string{"a"}}, "items"},
		{"items", map[string]any{"uids": []string{"uid_a"}}, "items.uids[0]"},
		{"rate_per_second", 0, "rate_per_second"},
		{"window", 0, "window"},
		{"lease_seconds", 0, "lease_seconds"},
		{"error_budget", map[string]any{"max_failures": 1}, "error_budget"},
		{"params", []int{1}, "params"},
	} {
		body := base()
		body[tc.field] = tc.value
		code, out := e.do(0, "POST", "/v1/admin/campaigns", adminToken, body)
		if code != 400 || !strings.Contains(fmt.Sprint(out), tc.want) {
			t.Errorf("%s=%v: %d %v, want 400 naming %s", tc.field, tc.value, code, out, tc.want)
		}
	}
	if n := e.count("SELECT COUNT(*) FROM campaign"); n != 0 {
		t.Fatalf("%d campaigns stored from bad requests", n)
	}
	if code, _ := e.do(0, "POST", "/v1/admin/campaigns/99/start", adminToken, nil); code != 404 {
		t.Fatalf("start an unknown campaign: %d, want 404", code)
	}
	if code, _ := e.do(0, "POST", "/v1/admin/campaigns/1/restart", adminToken, nil); code != 404 {
		t.Fatalf("an unknown move: %d, want 404", code)
	}
}

// When Redis loses a campaign's window, it is restored from MySQL as last synced: the
// items finished since are handed out again (at most the window), and the final count
// still counts each item once.
func TestCampaignSurvivesRedisLoss(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	keys, id, path := e.runningCampaign(100, map[string]any{"items": map[string]any{"count": 30}, "window": 8})
	work := func(n int) (handed []int64) {
		for len(handed) < n {
			got := e.items(0, keys[0], min(8, n-len(handed)))
			if len(got) == 0 {
				t.Fatalf("no items after %d", len(handed))
			}
			for _, it := range got {
				handed = append(handed, num(it.Item))
				e.mustComplete(keys[0], it.LogID)
			}
		}
		return handed
	}
	work(10)
	e.runners() // synced: offset 10
	work(6)     // not synced
	e.loseCampaign(id)
	again := work(20)
	if again[0] != 10 {
		t.Fatalf("after the loss the first item is %d, want 10 (the synced offset)", again[0])
	}
	c := e.admin("GET", path, nil)
	if c["state"] != "finished" || num(c["done"]) != 30 {
		t.Fatalf("after the loss: %v, want finished with 30 done", c)
	}
	if redone := len(again) - 14; redone != 6 {
		t.Fatalf("%d items handed out again, want the 6 finished since the sync", redone)
	}
}

// Many agents through two instances: every item is done exactly once in the count,
// none handed out beyond the window.
func TestCampaignConcurrentAgents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	_, keys := e.groupOf("g", 20)
	const total = 600
	_, path := e.campaign(map[string]any{"items": map[string]any{"count": total}, "window": 50, "rate_per_second": 100000})
	e.move(path, "start")
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			for misses := 0; misses < 20; {
				r := e.fetch(i%2, k)
				if r.Task == nil {
					misses++
					continue
				}
				mu.Lock()
				seen[num(r.Task.Item)]++
				mu.Unlock()
				if code, out := e.complete((i+1)%2, k, r.Task.LogID, "success"); code != 200 {
					t.Errorf("complete: %d %v", code, out)
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != total {
		t.Fatalf("%d distinct items handed out, want %d", len(seen), total)
	}
	for item, n := range seen {
		if n != 1 {
			t.Fatalf("item %d handed out %d times", item, n)
		}
	}
	c := e.admin("GET", path, nil)
	if c["state"] != "finished" || num(c["done"]) != total {
		t.Fatalf("after the run: %v", c)
	}
}

// campaignUser sets up a running campaign of count items for one user, "1", with
// nothing else due, and returns the dispatch service and the user's uid and key hash.
func campaignUser(t testing.TB, e *env, count int) (uid, hash string) {
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1"}})
	_, path := e.campaign(map[string]any{"items": map[string]any{"count": count}, "rate_per_second": 100000, "window": 100000})
	e.move(path, "start")
	uid, hash, _ = clientkey.Parse(e.key("1"))
	return uid, hash
}

// A campaign item's cycle (a fetch that finds no task due, then the item's complete)
// costs four Redis round trips (the heap's peek, the take, the key check, the
// complete) and nothing of MySQL: the campaign's window is in Redis, synced apart.
func TestCampaignItemIsRedisOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	uid, hash := campaignUser(t, e, 100)
	svc := e.apps[0].Dispatch
	ctx := t.Context()
	cycle := func() {
		t.Helper()
		r, err := svc.Fetch(ctx, uid, hash, 0)
		if err != nil || r.Task == nil || r.Task.CampaignID == nil {
			t.Fatalf("fetch: %+v %v", r.Task, err)
		}
		if err := svc.Complete(ctx, uid, hash, r.Task.LogID, taskd.ResultSuccess, nil); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // warms the heap, the key set and the list of running campaigns
	counter := &redisCounter{}
	e.rdb.AddHook(counter)
	e.store.DB().Close() // what follows must not need MySQL
	for range 5 {
		cycle()
	}
	if n := counter.n.Load(); n != 20 {
		t.Fatalf("5 item cycles sent %d Redis commands, want 20", n)
	}
	// A fetch carrying the complete: its peek checks the key for both.
	r, err := svc.Fetch(ctx, uid, hash, 0)
	if err != nil || r.Task == nil {
		t.Fatalf("fetch: %+v %v", r.Task, err)
	}
	counter.n.Store(0)
	for range 5 {
		if r, err = svc.CompleteAndFetch(ctx, uid, hash, r.Task.LogID, taskd.ResultSuccess, nil, 0); err != nil || r.Task == nil {
			t.Fatalf("complete and fetch: %+v %v", r.Task, err)
		}
	}
	if n := counter.n.Load(); n != 15 {
		t.Fatalf("5 combined item cycles sent %d Redis commands, want 15", n)
	}
	if done, err := e.rdb.HGet(ctx, queue.Keys{Prefix: e.prefix}.Campaign(1)[0], "done").Int(); err != nil || done != 11 {
		t.Fatalf("after 11 completes, %d done (%v)", done, err)
	}
}

// BenchmarkCampaignItemCycle is one agent's fetch and complete of a campaign item,
// through the service.
func BenchmarkCampaignItemCycle(b *testing.B) {
	e := newEnv(b, 1)
	uid, hash := campaignUser(b, e, 10_000_000)
	svc := e.apps[0].Dispatch
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r, err := svc.Fetch(ctx, uid, hash, 0)
		if err != nil || r.Task == nil {
			b.Fatalf("fetch: %+v %v", r.Task, err)
		}
		if err := svc.Complete(ctx, uid, hash, r.Task.LogID, taskd.ResultSuccess, nil); err != nil {
			b.Fatal(err)
		}
	}
}
