package app_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// A client polling faster than DISPATCH_POLL_RATE on a node gets 429 rate_limited
// with Retry-After from that node, decided in its memory after the key check (it
// answers with MySQL closed), counted in /metrics beside the configured limits; the
// same client polling another node has that node's allowance too (the limit is per
// node), and other users are not affected.
func TestPollRateLimitOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 2, func(c *app.Config) { c.PollRate, c.PollBurst = 1, 2 })
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Hour))})
	k1, k2 := e.key("1"), e.key("2")
	for i := range 2 { // the burst, on instance 1
		if code, out := e.do(1, "POST", "/v1/fetch", k1, nil); code != 200 {
			t.Fatalf("poll %d of the burst: %d %v", i+1, code, out)
		}
	}
	// One poll on instance 0, which reads what a node reads once (the campaigns).
	if code, out := e.do(0, "POST", "/v1/fetch", k1, nil); code != 200 {
		t.Fatalf("poll 1 of the burst on instance 0: %d %v", code, out)
	}
	e.store.DB().Close() // what follows must not need MySQL
	poll := func(i int, key string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", e.urls[i]+"/v1/fetch", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body), resp.Header.Get("Retry-After")
	}
	if code, body, retry := poll(1, k1); code != 429 || !strings.Contains(body, `"rate_limited"`) || retry != "1" {
		t.Fatalf("third poll on instance 1: %d %s Retry-After %q, want 429 rate_limited, Retry-After 1", code, body, retry)
	}
	// Instance 0 has counted none of instance 1's: the same user has its burst there
	// (two nodes, twice the polls), then is refused there too.
	if code, body, _ := poll(0, k1); code != 200 {
		t.Fatalf("poll 2 of the burst on instance 0: %d %s", code, body)
	}
	if code, body, _ := poll(0, k1); code != 429 {
		t.Fatalf("third poll on instance 0: %d %s, want 429", code, body)
	}
	if code, out := e.do(0, "POST", "/v1/fetch", k2, nil); code == 429 {
		t.Fatalf("another user limited: %v", out)
	}
	e.clock.Advance(time.Second)
	if code, out := e.do(1, "POST", "/v1/fetch", k1, nil); code != 200 {
		t.Fatalf("after a second: %d %v", code, out)
	}
	resp, err := e.client.Get(e.urls[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`taskd_rate_limited_total{limit="poll"} 1`, "taskd_poll_rate_limit 1", "taskd_poll_burst_limit 2",
		"taskd_poll_limit_users 1"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics of instance 1: no %q", want)
		}
	}
}

// A fetch carrying a complete is one poll, also when the complete changed the user's
// heap and the fetch looks again.
func TestCombinedFetchIsOnePoll(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.PollRate, c.PollBurst = 1, 3 })
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "max_attempts": 2})
	k := e.key("1")
	first := mustFetch(t, e, k)                                  // poll 1
	code, out := e.do(0, "POST", "/v1/fetch", k, map[string]any{ // poll 2: a failure, its retry due at once
		"complete": map[string]any{"log_id": first.LogID, "result": "failure"}})
	if code != 200 {
		t.Fatalf("fetch carrying the failure: %d %v", code, out)
	}
	if code, out := e.do(0, "POST", "/v1/fetch", k, nil); code != 200 { // poll 3: within the burst
		t.Fatalf("the third poll: %d %v", code, out)
	}
	if code, _ := e.do(0, "POST", "/v1/fetch", k, nil); code != 429 {
		t.Fatalf("the fourth poll: %d, want 429", code)
	}
}

// Progress reports count against the same per-user limit as fetches: each is a MySQL
// write, and one key could otherwise write as fast as it can send (923 reports a
// second of 16 KiB each slowed every other agent's fetch fivefold).
func TestProgressCountsAgainstThePollLimit(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.PollRate, c.PollBurst = 1, 3 })
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "lease_seconds": 60})
	key := e.key("1")
	got := e.fetch(0, key) // 1 of the burst of 3
	if got.Task == nil {
		t.Fatal("no task")
	}
	progress := func() (int, map[string]any) {
		return e.do(0, "POST", "/v1/progress", key, `{"log_id":"`+got.Task.LogID+`","checkpoint":{"n":1}}`)
	}
	for i := range 2 {
		if code, out := progress(); code != 200 {
			t.Fatalf("report %d within the burst: %d %v", i+1, code, out)
		}
	}
	if code, out := progress(); code != 429 || out["error"].(map[string]any)["code"] != "rate_limited" {
		t.Fatalf("a report past the burst: %d %v, want 429 rate_limited", code, out)
	}
	if code, _ := e.do(0, "POST", "/v1/fetch", key, nil); code != 429 {
		t.Fatalf("a fetch after the reports used up the burst: %d, want 429", code)
	}
	e.clock.Advance(time.Second)
	if code, out := progress(); code != 200 {
		t.Fatalf("a report a second later: %d %v", code, out)
	}
}

// Each round of a long poll counts against the poll limit, as a fetch does: a long
// poll that outlasts the burst (two rounds, a second apart, with the clock standing
// still: nothing refills) is refused at its third round.
func TestLongPollRoundsCountAgainstThePollLimit(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.PollRate, c.PollBurst, c.MaxWait = 1, 2, 20*time.Second })
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Hour))})
	key := e.key("1")
	code, out := e.do(0, "POST", "/v1/fetch", key, map[string]any{"wait_ms": 20000})
	if code != 429 || out["error"].(map[string]any)["code"] != "rate_limited" {
		t.Fatalf("a long poll past the burst: %d %v, want 429 rate_limited at its third round", code, out)
	}
}
