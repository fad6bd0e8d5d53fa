package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A campaign's failures are seen without Kafka: GET /v1/admin/campaigns/{id}/failures
// has the latest ones, failure results with their detail and lease expiries, beside
// failed (items failed for good) and budget_failures (what the error budget counts): a
// campaign its budget paused shows failed 0 beside 3 budget failures, and both are
// right.
func TestCampaignFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	keys, id, path := e.runningCampaign(1, map[string]any{"items": map[string]any{"count": 100}, "lease_seconds": 10,
		"max_attempts": 3, "error_budget": map[string]any{"max_failures": 2, "per_seconds": 60}})

	// A lease runs out, then two failure results with a detail: three failures, none final.
	first := e.fetch(0, keys[0]).Task
	e.clock.Advance(11 * time.Second)
	for i := range 2 {
		it := e.fetch(0, keys[0]).Task
		if it == nil {
			t.Fatalf("failure %d: no item", i+1)
		}
		if code, out := e.do(0, "POST", "/v1/complete", keys[0], map[string]any{"log_id": it.LogID, "result": "failure",
			"detail": map[string]any{"error": fmt.Sprintf("upstream %d", i)}}); code != 200 {
			t.Fatalf("fail: %d %v", code, out)
		}
	}
	out := e.admin("GET", path+"/failures", nil)
	conforms(t, "CampaignFailures", out)
	if out["state"] != "paused" || !strings.Contains(out["reason"].(string), "error budget: 3 failures") {
		t.Fatalf("paused by its budget: %v", out)
	}
	if num(out["campaign_id"]) != id || num(out["failed"]) != 0 || num(out["budget_failures"]) != 3 {
		t.Fatalf("failed 0 (none for good) beside 3 budget failures: %v", out)
	}
	list := out["failures"].([]any)
	if len(list) != 3 {
		t.Fatalf("3 failures: %v", list)
	}
	newest, oldest := list[0].(map[string]any), list[2].(map[string]any)
	if newest["cause"] != "failure" || newest["final"] != false || newest["uid"] != "u0000" ||
		fmt.Sprint(newest["detail"]) != "map[error:upstream 1]" {
		t.Fatalf("newest: %v", newest)
	}
	if oldest["cause"] != "lease_expired" || oldest["detail"] != nil || num(oldest["item"]) != num(first.Item) || num(oldest["attempt"]) != 1 {
		t.Fatalf("oldest, the lease that ran out: %v", oldest)
	}
	// The campaign reply says the same numbers: failed 0, the reason with 3.
	if c := e.admin("GET", path, nil); num(c["failed"]) != 0 {
		t.Fatalf("campaign: %v", c)
	}
	// Past the budget's period the budget counts none; the log keeps them.
	e.clock.Advance(61 * time.Second)
	out = e.admin("GET", path+"/failures", nil)
	if num(out["budget_failures"]) != 0 || len(out["failures"].([]any)) != 3 {
		t.Fatalf("after the period: %v", out)
	}
	if code, _ := e.do(0, "GET", path+"/failures?limit=5", adminToken, nil); code != http.StatusBadRequest {
		t.Fatalf("an unknown parameter: %d, want 400", code)
	}
	if code, _ := e.do(0, "GET", "/v1/admin/campaigns/999999/failures", adminToken, nil); code != http.StatusNotFound {
		t.Fatalf("no such campaign: %d, want 404", code)
	}
}

// The failure log is bounded: the latest 50 are kept, and a final failure says so; an
// item that fails for good counts in failed.
func TestCampaignFailuresBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	keys, _, path := e.runningCampaign(1, map[string]any{"items": map[string]any{"count": 60}, "max_attempts": 1})
	for i := range 60 {
		it := e.fetch(0, keys[0]).Task
		if it == nil {
			t.Fatalf("item %d: none", i)
		}
		detail := map[string]any{"n": i}
		if i == 59 {
			detail = map[string]any{"big": strings.Repeat("x", 3000)}
		}
		if code, out := e.do(0, "POST", "/v1/complete", keys[0], map[string]any{"log_id": it.LogID, "result": "failure",
			"detail": detail}); code != 200 {
			t.Fatalf("fail: %d %v", code, out)
		}
	}
	out := e.admin("GET", path+"/failures", nil)
	conforms(t, "CampaignFailures", out)
	list := out["failures"].([]any)
	if len(list) != 50 || num(out["failed"]) != 60 || out["budget_failures"] != nil {
		t.Fatalf("50 kept of 60 failed for good, no budget: %d kept, %v", len(list), out["failed"])
	}
	newest, last := list[0].(map[string]any), list[49].(map[string]any)
	if newest["final"] != true || fmt.Sprint(newest["detail"]) != "map[bytes:3010 truncated:true]" {
		t.Fatalf("a long detail is replaced by its size: %v", newest)
	}
	if num(last["item"]) != 10 {
		t.Fatalf("the oldest kept is item 10: %v", last)
	}
}
