package esfake

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func bulk(t *testing.T, s *Server, body string) (int, http.Header, map[string]any) {
	t.Helper()
	res, err := http.Post(s.URL()+"/_bulk", "application/x-ndjson", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, res.Header, out
}

func TestBulk(t *testing.T) {
	s := New(t)
	s.SetItemFault(func(it Item) int {
		if it.ID == "b" && it.Attempt == 1 {
			return http.StatusTooManyRequests
		}
		return 0
	})
	status, h, out := bulk(t, s, `{"index":{"_index":"i1","_id":"a"}}
{"n":1}
{"index":{"_index":"i1","_id":"b"}}
{"n":2}
{"create":{"_index":"i1","_id":"a"}}
{"n":3}
{"index":{"_index":"i1","_id":"c"}}
not json
`)
	if status != 200 || h.Get("X-Elastic-Product") != "Elasticsearch" || out["errors"] != true {
		t.Fatalf("status %d header %v body %v", status, h, out)
	}
	var statuses []float64
	for _, it := range out["items"].([]any) {
		for _, r := range it.(map[string]any) {
			statuses = append(statuses, r.(map[string]any)["status"].(float64))
		}
	}
	if want := []float64{201, 429, 409, 400}; len(statuses) != 4 || statuses[0] != want[0] ||
		statuses[1] != want[1] || statuses[2] != want[2] || statuses[3] != want[3] {
		t.Fatalf("item statuses %v, want %v", statuses, want)
	}
	// b again succeeds; a again overwrites (no duplicate); same id in another index is
	// reported as a duplicate.
	_, _, out = bulk(t, s, `{"index":{"_index":"i1","_id":"b"}}
{"n":2}
{"index":{"_index":"i1","_id":"a"}}
{"n":4}
{"index":{"_index":"i2","_id":"a"}}
{"n":4}
`)
	if out["errors"] != false {
		t.Fatalf("second bulk: %v", out)
	}
	if ids := s.IDs(); len(ids) != 2 || s.Count() != 3 || len(s.Duplicates()) != 1 {
		t.Fatalf("ids %v count %d duplicates %v", ids, s.Count(), s.Duplicates())
	}
	if seqA, _ := s.DocSeq("a"); seqA != 1 {
		t.Fatalf("seq of a: %d", seqA)
	}

	s.FailRequests(1, http.StatusServiceUnavailable)
	if status, h, _ := bulk(t, s, "{\"index\":{\"_index\":\"i1\",\"_id\":\"z\"}}\n{}\n"); status != 503 ||
		h.Get("X-Elastic-Product") != "Elasticsearch" {
		t.Fatalf("injected 503: %d", status)
	}
	if status, _, _ := bulk(t, s, "{\"index\":{\"_index\":\"i1\",\"_id\":\"z\"}}\n{}"); status != 400 {
		t.Fatalf("missing final newline: %d", status)
	}
	s.SetDown(true)
	if _, err := http.Post(s.URL()+"/_bulk", "application/x-ndjson", strings.NewReader("\n")); err == nil {
		t.Fatal("a down server answered")
	}
	s.SetDown(false)
	if _, ok := s.DocSeq("z"); ok {
		t.Fatal("a failed request indexed a document")
	}
}
