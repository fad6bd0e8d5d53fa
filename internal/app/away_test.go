package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// awayEnv is two nodes whose MySQL and Redis are reached through proxies the test can
// cut: the dependency really goes away for both (its connections closed, new ones
// refused), not a fake of it. Redis is the standalone one, under a prefix of the
// test's own, whatever the other tests run on.
type awayEnv struct {
	*env
	mysql, redis *testenv.Proxy
}

func newAwayEnv(t *testing.T) *awayEnv {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	mp := testenv.NewProxy(t, cfg.Addr)
	cfg.Addr = mp.Addr()
	st, err := store.Open(context.Background(), cfg.FormatDSN(), store.OpenOptions{MaxConns: 12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	rp := testenv.NewProxy(t, testenv.StandaloneRedisAddr())
	rdb := redis.NewClient(&redis.Options{Addr: rp.Addr(), MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	prefix := fmt.Sprintf("taskdtest:away:%s:", testenv.Suffix())
	t.Cleanup(func() {
		direct := redis.NewClient(&redis.Options{Addr: testenv.StandaloneRedisAddr()})
		defer direct.Close()
		testenv.DeletePrefix(t, direct, prefix)
	})

	e := &env{t: t, clock: clock.NewFake(t0), store: st, rdb: rdb, prefix: prefix,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	for i := range 2 {
		a := app.New(app.Config{RedisPrefix: prefix, CatchUp: time.Hour, AdminTokens: []string{adminToken},
			MaxWait: 5 * time.Second, SweepInterval: time.Second, Node: fmt.Sprintf("away-%d", i),
			RequestTimeout: 5 * time.Second}, app.Deps{Store: st, Redis: rdb, Clock: e.clock, Log: log})
		srv := httptest.NewServer(a.Handler())
		t.Cleanup(srv.Close)
		e.apps = append(e.apps, a)
		e.urls = append(e.urls, srv.URL)
	}
	return &awayEnv{env: e, mysql: mp, redis: rp}
}

// While Redis is away, fetches are served from MySQL on both nodes: the quota is
// exact, a user's open dispatch comes back as a redo, a revoked key is refused at
// once, completes work; when Redis returns, the heaps and hints it kept from before
// are corrected (the heap-change feed), so nothing served meanwhile is given twice.
func TestFetchesWhileRedisIsAway(t *testing.T) {
	t.Parallel()
	e := newAwayEnv(t)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1", "2", "3", "4"}})
	task := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0), "dispatch_times": 2})
	keys := map[string]string{}
	for _, u := range []string{"1", "2", "3", "4"} {
		keys[u] = e.key(u)
	}
	// Warm: every user's heap, hint (none) and key set is in Redis, and the heaps
	// offer the task.
	for _, u := range []string{"1", "2", "3", "4"} {
		if code, out := e.do(0, "POST", "/v1/fetch", keys[u], map[string]any{"template_ids": []int64{999999}}); code != 200 {
			t.Fatalf("warm fetch of %s: %d %v", u, code, out)
		}
	}

	e.redis.Cut()
	e.ready(t, "redis")
	first := e.fetch(0, keys["1"])
	if first.Task == nil || first.Task.TaskID != task {
		t.Fatalf("fetch of 1 with Redis away: %+v, want %s", first, task)
	}
	again := e.fetch(1, keys["1"])
	if again.Task == nil || again.Task.LogID != first.Task.LogID || !again.Task.Redo {
		t.Fatalf("second fetch of 1 on the other node: %+v, want the redo of %s", again.Task, first.Task.LogID)
	}
	if r := e.fetch(1, keys["2"]); r.Task == nil || r.Task.TaskID != task {
		t.Fatalf("fetch of 2: %+v, want %s", r.Task, task)
	}
	if r := e.fetch(0, keys["3"]); r.Task != nil {
		t.Fatalf("fetch of 3 past the quota of 2: %+v, want none", r.Task)
	}
	e.mustComplete(keys["1"], first.Task.LogID)
	if r := e.fetch(0, keys["1"]); r.Task != nil {
		t.Fatalf("fetch of 1 after its complete: %+v, want none", r.Task)
	}
	// The revocation is saved; the node says it could not tell Redis (503, as it says
	// whenever Redis refuses), and the key stops working at once all the same.
	if code, out := e.do(0, "DELETE", "/v1/admin/clients/4/keys", adminToken, nil); code != 200 && code != http.StatusServiceUnavailable {
		t.Fatalf("revoke with Redis away: %d %v", code, out)
	}
	if code, out := e.do(1, "POST", "/v1/fetch", keys["4"], nil); code != http.StatusUnauthorized {
		t.Fatalf("fetch with a key revoked while Redis is away: %d %v, want 401", code, out)
	}
	if n := e.count("SELECT COUNT(*) FROM dispatch"); n != 2 {
		t.Fatalf("%d dispatch records, want 2", n)
	}
	degraded := 0
	for _, a := range e.apps {
		degraded += int(counterValue(t, a, "taskd_degraded_requests_total", "redis"))
	}
	if degraded < 5 {
		t.Fatalf("taskd_degraded_requests_total{dependency=redis} = %d on the two nodes, want every poll counted", degraded)
	}

	// Redis returns with what it held before: 3's heap still offers the task, 2's hint
	// knows nothing of its dispatch. The feed corrects both within a few seconds.
	e.redis.Restore()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r2 := e.fetch(0, keys["2"])
		r3 := e.fetch(1, keys["3"])
		if r3.Task != nil {
			t.Fatalf("3 was given %+v after Redis returned: the quota of 2 was spent while it was away", r3.Task)
		}
		if r2.Task != nil && r2.Task.Redo {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2's open dispatch not handed out again after Redis returned: %+v", r2.Task)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, _ := e.do(0, "POST", "/v1/fetch", keys["4"], nil); code != http.StatusUnauthorized {
		t.Fatalf("revoked key after Redis returned: %d, want 401", code)
	}
}

// While MySQL is away, a fetch answers what needs no MySQL: the open dispatch handed
// out again from the copy Redis keeps, an empty poll; a fetch that would claim, and a
// complete, answer 503 with Retry-After.
func TestFetchesWhileMySQLIsAway(t *testing.T) {
	t.Parallel()
	e := newAwayEnv(t)
	task := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "lease_seconds": 600})
	e.task("once", map[string]any{"executor": "uid_3", "start_time": ts(t0)})
	k1, k2, k3 := e.key("1"), e.key("2"), e.key("3")
	first := e.fetch(0, k1)
	if first.Task == nil || first.Task.TaskID != task {
		t.Fatalf("fetch of 1: %+v, want %s", first.Task, task)
	}
	e.fetch(1, k2) // 2 has nothing: its heap and hint say so

	e.mysql.Cut()
	e.ready(t, "mysql")
	for i := range 2 {
		r := e.fetch(i, k1)
		if r.Task == nil || r.Task.LogID != first.Task.LogID || !r.Task.Redo {
			t.Fatalf("fetch of 1 on node %d with MySQL away: %+v, want the redo of %s", i, r.Task, first.Task.LogID)
		}
		if r := e.fetch(i, k2); r.Task != nil {
			t.Fatalf("empty poll of 2 on node %d: %+v", i, r.Task)
		}
	}
	req, _ := http.NewRequest("POST", e.urls[0]+"/v1/fetch", nil)
	req.Header.Set("Authorization", "Bearer "+k3)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("fetch of 3, which would claim, with MySQL away: %d Retry-After %q, want 503 with Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, out := e.complete(1, k1, first.Task.LogID, "success"); code != http.StatusServiceUnavailable {
		t.Fatalf("complete with MySQL away: %d %v, want 503", code, out)
	}
	if n := counterValue(t, e.apps[0], "taskd_degraded_requests_total", "mysql"); n < 1 {
		t.Fatalf("taskd_degraded_requests_total{dependency=mysql} = %v, want the redo counted", n)
	}

	e.mysql.Restore()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _ := e.complete(0, k1, first.Task.LogID, "success")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("complete after MySQL returned: %d", code)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := e.fetch(1, k3); r.Task == nil {
		t.Fatal("fetch of 3 after MySQL returned: none")
	}
}

// counterValue is the value of a's counter name with the label value label, 0 if none.
func counterValue(t *testing.T, a *app.App, name, label string) float64 {
	t.Helper()
	families, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabel(m, label) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetValue() == value {
			return true
		}
	}
	return false
}

// ready checks that /readyz says the node is degraded with away away: 503, and 200
// when asked with degraded=ok.
func (e *awayEnv) ready(t *testing.T, away string) {
	t.Helper()
	for query, want := range map[string]int{"": http.StatusServiceUnavailable, "?degraded=ok": http.StatusOK} {
		code, out := e.do(0, "GET", "/readyz"+query, "", nil)
		gone, _ := out["away"].([]any)
		if code != want || out["mode"] != "degraded" || len(gone) != 1 || gone[0] != away {
			t.Fatalf("GET /readyz%s with %s away: %d %v, want %d, mode degraded, away [%s]", query, away, code, out, want, away)
		}
	}
}

// While MySQL is away, campaign items still go out from Redis on a node that has read
// the running campaigns, and their completes are taken there; a node that never read
// the list answers an empty poll instead of 503.
func TestCampaignItemsWhileMySQLIsAway(t *testing.T) {
	t.Parallel()
	e := newAwayEnv(t)
	keys, _, _ := e.runningCampaign(1, map[string]any{"items": map[string]any{"count": 5}})
	e.runners() // the items' window in Redis
	first := e.fetch(0, keys[0])
	if first.Task == nil || first.Task.CampaignID == nil {
		t.Fatalf("first item: %+v", first.Task)
	}
	e.mustComplete(keys[0], first.Task.LogID)

	e.mysql.Cut()
	r := e.fetch(0, keys[0])
	if r.Task == nil || r.Task.CampaignID == nil || r.Task.LogID == first.Task.LogID {
		t.Fatalf("an item with MySQL away, on the node that read the campaigns: %+v", r.Task)
	}
	if code, out := e.complete(0, keys[0], r.Task.LogID, "success"); code != 200 {
		t.Fatalf("an item's complete with MySQL away: %d %v", code, out)
	}
	if r := e.fetch(1, keys[0]); r.Task != nil {
		t.Fatalf("a node that never read the campaigns handed out %+v with MySQL away", r.Task)
	}
}
