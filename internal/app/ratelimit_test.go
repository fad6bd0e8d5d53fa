package app_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// A client polling faster than DISPATCH_POLL_RATE gets 429 rate_limited with
// Retry-After, decided in Redis (it answers with MySQL closed), counted in /metrics
// beside the configured limits; other users are not affected.
func TestPollRateLimitOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 2, func(c *app.Config) { c.PollRate, c.PollBurst = 1, 2 })
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Hour))})
	k1, k2 := e.key("1"), e.key("2")
	for i := range 2 { // the burst, through both instances
		if code, out := e.do(i, "POST", "/v1/fetch", k1, nil); code != 200 {
			t.Fatalf("poll %d of the burst: %d %v", i+1, code, out)
		}
	}
	e.store.DB().Close() // what follows must not need MySQL
	req, _ := http.NewRequest("POST", e.urls[1]+"/v1/fetch", nil)
	req.Header.Set("Authorization", "Bearer "+k1)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || !strings.Contains(string(body), `"rate_limited"`) || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("third poll: %d %s Retry-After %q, want 429 rate_limited, Retry-After 1", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if code, out := e.do(0, "POST", "/v1/fetch", k2, nil); code == 429 {
		t.Fatalf("another user limited: %v", out)
	}
	e.clock.Advance(time.Second)
	if code, out := e.do(0, "POST", "/v1/fetch", k1, nil); code != 200 {
		t.Fatalf("after a second: %d %v", code, out)
	}
	resp, err = e.client.Get(e.urls[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`taskd_rate_limited_total{limit="poll"} 1`, "taskd_poll_rate_limit 1", "taskd_poll_burst_limit 2"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics of the instance that refused: no %q", want)
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
