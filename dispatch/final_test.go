package dispatch_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/dispatch"
)

// "retry": false makes a failure final: the dispatch is dead at once with attempts
// left, through POST /v1/complete, a fetch carrying the complete, and a batch fetch
// carrying it alike; a repeat answers 200 and changes nothing. retry false with a
// success, or retry of the wrong type, is a 400 naming the field, and writes nothing.
func TestHTTPFinalFailure(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	h := dispatch.NewHandlers(svc, b.log)
	three := attempts(3, 60)
	b.task("uid_1", t0.Add(-3*time.Minute), three)
	b.task("uid_1", t0.Add(-2*time.Minute), three)
	b.task("uid_1", t0.Add(-time.Minute), three)
	a := b.agent("1")

	code, out := post(t, h.Fetch(), a.key, "")
	task, _ := out["task"].(map[string]any)
	if code != http.StatusOK || task == nil {
		t.Fatalf("fetch: %d %v", code, out)
	}
	first := task["log_id"].(string)

	for _, c := range []struct {
		name    string
		h       http.Handler
		body    string
		wantMsg string
	}{
		{"success with retry false", h.Complete(), `{"log_id":"` + first + `","result":"success","retry":false}`, "retry"},
		{"retry not a boolean", h.Complete(), `{"log_id":"` + first + `","result":"failure","retry":"no"}`, "retry"},
		{"retry false with next_stage", h.Complete(), `{"log_id":"` + first + `","result":"failure","retry":false,"next_stage":"b"}`, "next_stage"},
		{"in a fetch: success with retry false", h.Fetch(), `{"complete":{"log_id":"` + first + `","result":"success","retry":false}}`, "complete.retry"},
		{"in a fetch: retry not a boolean", h.Fetch(), `{"complete":{"log_id":"` + first + `","result":"failure","retry":0}}`, "complete.retry"},
	} {
		code, out := post(t, c.h, a.key, c.body)
		msg, _ := out["error"].(map[string]any)["message"].(string)
		if code != http.StatusBadRequest || errorCode(out) != "invalid_argument" || !strings.Contains(msg, c.wantMsg) {
			t.Errorf("%s: %d %v, want 400 invalid_argument naming %s", c.name, code, out, c.wantMsg)
		}
	}
	if rec := b.record(first); rec.State != taskd.StateOpen || rec.FinishedAt != nil {
		t.Fatalf("record after refused requests: %+v", rec)
	}

	dead := func(what, logID string) {
		t.Helper()
		rec := b.record(logID)
		if rec.State != taskd.StateDead || rec.Result != taskd.ResultFailure || !rec.Final || rec.RetryAt != nil || rec.Attempt != 1 {
			t.Fatalf("%s: record %+v, want dead at once, final", what, rec)
		}
	}
	// POST /v1/complete, then again (a repeat).
	for range 2 {
		if code, out := post(t, h.Complete(), a.key, `{"log_id":"`+first+`","result":"failure","retry":false,"detail":{"error":"bad input"}}`); code != 200 || out["ok"] != true {
			t.Fatalf("final complete: %d %v", code, out)
		}
		dead("complete", first)
	}

	// A fetch carrying it: the second task comes next.
	code, out = post(t, h.Fetch(), a.key, "")
	second := out["task"].(map[string]any)["log_id"].(string)
	code, out = post(t, h.Fetch(), a.key, `{"complete":{"log_id":"`+second+`","result":"failure","retry":false}}`)
	task, _ = out["task"].(map[string]any)
	if code != http.StatusOK || task == nil || task["log_id"] == second {
		t.Fatalf("fetch carrying a final failure: %d %v", code, out)
	}
	dead("fetch", second)

	// A batch fetch carrying it.
	third := task["log_id"].(string)
	code, out = post(t, h.Fetch(), a.key, `{"max":1,"complete":{"log_id":"`+third+`","result":"failure","retry":false}}`)
	if code != http.StatusOK || len(out["tasks"].([]any)) != 0 {
		t.Fatalf("batch fetch carrying a final failure: %d %v", code, out)
	}
	dead("batch fetch", third)
}
