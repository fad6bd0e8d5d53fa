package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/taskpull/taskd/api"
)

// Every route the server serves is in the OpenAPI document, and every path in the
// document is served. The console's pages (/console/) are HTML for browsers, not API.
func TestOpenAPIDocumentCoversEveryRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	var served []string
	err := chi.Walk(e.apps[0].Handler().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if !strings.HasPrefix(route, "/console/") {
			served = append(served, strings.ToUpper(method)+" "+strings.TrimSuffix(route, "/"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.Document, &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			switch method {
			case "get", "head", "put", "post", "delete", "patch":
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	sort.Strings(served)
	sort.Strings(documented)
	if strings.Join(served, "\n") != strings.Join(documented, "\n") {
		t.Fatalf("routes and OpenAPI paths differ\nserved:\n%s\n\ndocumented:\n%s",
			strings.Join(served, "\n"), strings.Join(documented, "\n"))
	}
	resp, err := http.Get(e.urls[0] + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !json.Valid(body) || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// After some traffic /metrics shows the documented series with the right values.
func TestMetricsAfterTraffic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	_, keys := e.groupOf("g", 4)
	e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-time.Minute)), "dispatch_times": 3})
	dispatched := 0
	for _, k := range keys {
		if r := e.fetch(0, k); r.Task != nil {
			dispatched++
			e.mustComplete(k, r.Task.LogID)
		}
	}
	e.fetch(0, keys[0]) // empty: nothing more for this user
	resp, err := http.Get(e.urls[0] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(raw)
	for _, want := range []string{
		`taskd_dispatches_total{kind="once"} 3`,
		`taskd_completions_total{kind="once",result="success"} 3`,
		`taskd_fetches_total{outcome="task"} 3`,
		`taskd_fetches_total{outcome="empty"} 2`,
		`taskd_quota_claim_conflicts_total{reason="exhausted"} 1`,
		`taskd_heap_rebuild_duration_seconds_count `,
		`taskd_heap_cache_lookups_total{result="hit"} `,
		`taskd_http_request_duration_seconds_count{method="POST",route="/v1/fetch",status="200"} 5`,
		`taskd_http_request_duration_seconds_count{method="POST",route="/v1/admin/tasks/{kind}",status="201"} 1`,
		`taskd_group_commit_batch_size_count{kind="complete"} 3`,
		`taskd_group_commit_batch_size_count{kind="claim"} `,
		`taskd_group_commit_queued{kind="claim"} 0`,
		`taskd_group_commit_queued{kind="complete"} 0`,
		`taskd_result_waits 0`,
		`go_goroutines `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if dispatched != 3 {
		t.Fatalf("dispatched %d, want 3", dispatched)
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, `uid=`) || strings.Contains(line, "/v1/admin/tasks/once/") {
			t.Errorf("unbounded label value in %q", line)
		}
	}
}
