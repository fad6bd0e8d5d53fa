package esfake

import (
	"encoding/json"
	"io"
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

func put(t *testing.T, s *Server, path, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, s.URL()+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// The fake can be another server speaking the API: no product header, no ILM, template
// keys it does not know, setup calls failing for a while, replies that are not bulk
// replies or have an item too many.
func TestOtherServers(t *testing.T) {
	s := New(t)
	s.WithoutProductHeader()
	s.WithoutEndpoint("_ilm", http.StatusBadRequest)
	s.RefuseTemplateKeys("_meta", "index.lifecycle.name")
	s.FailSetup(1, http.StatusServiceUnavailable)
	if st, h, _ := put(t, s, "/_index_template/x", `{}`); st != 503 || h.Get("X-Elastic-Product") != "" {
		t.Fatalf("first setup call: %d %v", st, h)
	}
	if st, _, body := put(t, s, "/_ilm/policy/x", `{}`); st != 400 || !strings.Contains(body, "no handler found for uri") {
		t.Fatalf("ILM: %d %s", st, body)
	}
	if st, _, body := put(t, s, "/_index_template/x", `{"_meta":{}}`); st != 400 || !strings.Contains(body, "unknown field [_meta]") {
		t.Fatalf("_meta: %d %s", st, body)
	}
	if st, _, body := put(t, s, "/_index_template/x", `{"template":{"settings":{"index.lifecycle.name":"p"}}}`); st != 400 ||
		!strings.Contains(body, "unknown setting [index.lifecycle.name]") {
		t.Fatalf("lifecycle setting: %d %s", st, body)
	}
	if st, _, _ := put(t, s, "/_index_template/x", `{"template":{"settings":{"index.number_of_shards":1}}}`); st != 200 {
		t.Fatalf("plain template: %d", st)
	}
	if _, ok := s.Template("x"); !ok {
		t.Fatal("template not stored")
	}
	if calls := s.SetupCalls(); len(calls) != 5 || calls[0] != "PUT /_index_template/x 503" || calls[4] != "PUT /_index_template/x 200" {
		t.Fatalf("calls %v", calls)
	}

	s.FailRequestsWith(1, TopLevelError)
	if st, _, out := bulk(t, s, "{\"index\":{\"_index\":\"i\",\"_id\":\"a\"}}\n{}\n"); st != 200 || out["error"] == nil || out["items"] != nil {
		t.Fatalf("top-level error: %d %v", st, out)
	}
	s.FailRequestsWith(1, ProxyBadGateway)
	if st, _, out := bulk(t, s, "{\"index\":{\"_index\":\"i\",\"_id\":\"a\"}}\n{}\n"); st != 502 || out != nil {
		t.Fatalf("proxy 502: %d %v", st, out)
	}
	s.SetReplyFault(func(Item) ReplyFault { return ReplyTwice })
	if _, _, out := bulk(t, s, "{\"index\":{\"_index\":\"i\",\"_id\":\"a\"}}\n{}\n"); len(out["items"].([]any)) != 2 {
		t.Fatalf("reply twice: %v", out)
	}
	if s.Count() != 1 {
		t.Fatalf("%d stored", s.Count())
	}
}

func del(t *testing.T, s *Server, path string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, s.URL()+path, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// itemErrors returns each item's status and error reason.
func itemErrors(out map[string]any) (statuses []int, reasons []string) {
	items, _ := out["items"].([]any)
	for _, it := range items {
		for _, r := range it.(map[string]any) {
			res := r.(map[string]any)
			statuses = append(statuses, int(res["status"].(float64)))
			e, _ := res["error"].(map[string]any)
			reason, _ := e["reason"].(string)
			reasons = append(reasons, reason)
		}
	}
	return statuses, reasons
}

const datedTemplate = `{"index_patterns":["ev-*"],"priority":200,"template":{"mappings":{"dynamic":false,"properties":{
	"at":{"type":"date","format":"strict_date_optional_time||epoch_millis"},"due_at":{"type":"date"},"result":{"type":"keyword"}}}}}`

// An index is created from the template whose pattern matches it and keeps its
// mappings; Elasticsearch fails the item of a document it cannot take (an immense
// keyword, a date it cannot parse), and a DELETE removes the index and its documents.
func TestIndicesFollowTheirTemplate(t *testing.T) {
	s := New(t)
	if st, _, body := put(t, s, "/_index_template/ev", datedTemplate); st != 200 {
		t.Fatalf("template: %d %s", st, body)
	}
	long := strings.Repeat("x", 32767)
	_, _, out := bulk(t, s, `{"index":{"_index":"ev-1","_id":"ok"}}
{"at":"2026-11-26T14:56:38.773768Z","due_at":"2026-11-26T14:00:00Z","result":"done"}
{"index":{"_index":"ev-1","_id":"long"}}
{"at":"2026-11-26T14:56:38Z","result":"`+long+`"}
{"index":{"_index":"ev-1","_id":"baddate"}}
{"at":"yesterday"}
{"index":{"_index":"other","_id":"free"}}
{"at":"yesterday","result":"`+long+`"}
`)
	statuses, reasons := itemErrors(out)
	if len(statuses) != 4 || statuses[0] != 201 || statuses[1] != 400 || statuses[2] != 400 || statuses[3] != 201 {
		t.Fatalf("statuses %v reasons %v", statuses, reasons)
	}
	if !strings.Contains(reasons[1], `immense term in field="result"`) ||
		!strings.Contains(reasons[2], "failed to parse field [at] of type [date] in document with id 'baddate'") {
		t.Fatalf("reasons %v", reasons)
	}
	if m, ok := s.Mapping("ev-1"); !ok || m["at"] != "date" || m["result"] != "keyword" {
		t.Fatalf("mapping of ev-1: %v %v", m, ok)
	}
	if got := strings.Join(s.Indices(), ","); got != "ev-1,other" {
		t.Fatalf("indices %s", got)
	}
	if st := del(t, s, "/ev-1"); st != 200 {
		t.Fatalf("delete: %d", st)
	}
	if st := del(t, s, "/ev-1"); st != 404 {
		t.Fatalf("delete of a missing index: %d", st)
	}
	if ids := s.IDs(); len(ids) != 1 || ids[0] != "free" {
		t.Fatalf("ids after delete %v", ids)
	}
}

// The measured server: it does not know Elasticsearch's date formats and refuses a
// bulk request as a whole, storing none of it; a date field without a format parses
// RFC 3339. Another grammar takes only epoch milliseconds.
func TestOtherDateGrammars(t *testing.T) {
	s := New(t)
	s.SetDateGrammar(RFC3339Dates)
	s.RefuseWholeRequests()
	put(t, s, "/_index_template/ev", datedTemplate)
	st, _, out := bulk(t, s, `{"index":{"_index":"ev-1","_id":"a"}}
{"due_at":"2026-11-26T14:00:00Z"}
{"index":{"_index":"ev-1","_id":"b"}}
{"at":"2026-11-26T14:56:38.773768Z"}
`)
	want := "field [at] value [2026-11-26T14:56:38.773768Z] parse err: time format is [strict_date_optional_time||epoch_millis]"
	if st != 400 || out["error"] != want || out["items"] != nil {
		t.Fatalf("%d %v, want 400 with %q", st, out, want)
	}
	if s.Count() != 0 || len(s.Indices()) != 0 {
		t.Fatalf("a refused request stored %d documents, created %v", s.Count(), s.Indices())
	}
	if st, _, out := bulk(t, s, "{\"index\":{\"_index\":\"ev-1\",\"_id\":\"a\"}}\n{\"due_at\":\"2026-11-26T14:00:00.5Z\"}\n"); st != 200 || out["errors"] != false {
		t.Fatalf("a date without a format: %d %v", st, out)
	}

	e := New(t)
	e.SetDateGrammar(EpochMillisDates)
	put(t, e, "/_index_template/ev", datedTemplate)
	_, _, out = bulk(t, e, `{"index":{"_index":"ev-1","_id":"a"}}
{"due_at":1795705200000}
{"index":{"_index":"ev-1","_id":"b"}}
{"due_at":"2026-11-26T14:00:00Z"}
`)
	statuses, reasons := itemErrors(out)
	if len(statuses) != 2 || statuses[0] != 201 || statuses[1] != 400 ||
		reasons[1] != "field [due_at] value [2026-11-26T14:00:00Z] parse err: time format is [epoch_millis]" {
		t.Fatalf("epoch millis: %v %v", statuses, reasons)
	}
}
