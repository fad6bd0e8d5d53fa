package dispatch_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/internal/web"
)

// post sends body to h as the holder of bearer (none when empty) and decodes the
// JSON reply.
func post(t *testing.T, h http.Handler, bearer, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/", strings.NewReader(body))
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("reply is not JSON: %q", rec.Body.String())
	}
	return rec.Code, out
}

// errorCode is the code of an error reply, or "".
func errorCode(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestHTTPFetchAndCompleteMapping(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	h := dispatch.NewHandlers(svc, b.log)
	key := b.task("uid_1", t0.Add(-time.Minute), params(`{"n":7}`))
	b.task("uid_1", t0.Add(time.Hour))
	a := b.agent("1")

	code, out := post(t, h.Fetch(), a.key, "")
	task, _ := out["task"].(map[string]any)
	if code != http.StatusOK || task["task_id"] != key.String() || task["redo"] != false || task["attempt"] != 1.0 ||
		task["params"].(map[string]any)["n"] != 7.0 || out["next_due_at"] != t0.Add(time.Hour).Format(time.RFC3339) {
		t.Fatalf("fetch: %d %v", code, out)
	}
	logID := task["log_id"].(string)

	for _, c := range []struct {
		name     string
		h        http.Handler
		bearer   string
		body     string
		wantCode int
		wantErr  string
	}{
		{"fetch without a key", h.Fetch(), "", "", 401, "unauthenticated"},
		{"fetch with a malformed key", h.Fetch(), "not-a-key", "", 401, "unauthenticated"},
		{"negative wait_ms", h.Fetch(), a.key, `{"wait_ms":-1}`, 400, "invalid_argument"},
		{"complete without log_id", h.Complete(), a.key, `{"result":"success"}`, 400, "invalid_argument"},
		{"complete with an unknown result", h.Complete(), a.key, `{"log_id":"` + logID + `","result":"maybe"}`, 400, "invalid_argument"},
		{"complete with a detail that is no object", h.Complete(), a.key, `{"log_id":"` + logID + `","result":"success","detail":[1]}`, 400, "invalid_argument"},
		{"complete of an unknown log id", h.Complete(), a.key, `{"log_id":"no-such-log","result":"success"}`, 409, "stale_lease"},
		{"malformed body, valid key", h.Complete(), a.key, `{`, 400, "malformed_json"},
	} {
		if code, out := post(t, c.h, c.bearer, c.body); code != c.wantCode || errorCode(out) != c.wantErr {
			t.Errorf("%s: %d %v, want %d %s", c.name, code, out, c.wantCode, c.wantErr)
		}
	}

	// None of the refusals touched the dispatch: it is still open, and completes.
	if rec := b.record(logID); rec.RedoCount != 0 || rec.FinishedAt != nil {
		t.Fatalf("record after refused requests: %+v", rec)
	}
	if code, out := post(t, h.Complete(), a.key, `{"log_id":"`+logID+`","result":"success","detail":{"ms":12}}`); code != 200 || out["ok"] != true {
		t.Fatalf("complete: %d %v", code, out)
	}
	code, out = post(t, h.Fetch(), a.key, `{"wait_ms":0}`)
	if code != 200 || out["task"] != nil {
		t.Fatalf("fetch after complete: %d %v", code, out)
	}
}

// An empty fetch's reply, built without reflection, is byte for byte what the JSON
// encoder writes for it, headers included: with a next due time and without one.
func TestHTTPEmptyFetchReply(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	h := dispatch.NewHandlers(svc, b.log)
	none := b.agent("1")
	b.task("uid_2", t0.Add(90*time.Minute))
	later := b.agent("2")
	next := t0.Add(90 * time.Minute)
	for _, c := range []struct {
		key  string
		want dispatch.FetchResult
	}{
		{none.key, dispatch.FetchResult{}},
		{later.key, dispatch.FetchResult{NextDueAt: &next}},
	} {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/", http.NoBody)
		req.Header.Set("Authorization", "Bearer "+c.key)
		got := httptest.NewRecorder()
		h.Fetch().ServeHTTP(got, req)
		want := httptest.NewRecorder()
		web.Encode(want, http.StatusOK, c.want)
		if got.Code != want.Code || got.Body.String() != want.Body.String() ||
			fmt.Sprint(got.Header()) != fmt.Sprint(want.Header()) {
			t.Errorf("empty fetch reply: %d %v %q, want %d %v %q", got.Code, got.Header(), got.Body,
				want.Code, want.Header(), want.Body)
		}
	}
}

// A revoked key is refused before anything else is looked at: a body that does not
// decode is a 401, not a 400 that would tell a stranger the key's uid exists.
func TestHTTPRevokedKey(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	h := dispatch.NewHandlers(svc, b.log)
	a := b.agent("1")
	if n, err := b.keys.Revoke(b.ctx, "test", "1"); err != nil || n != 1 {
		t.Fatalf("revoke: %d, %v", n, err)
	}
	for _, c := range []struct {
		name string
		h    http.Handler
		body string
	}{
		{"fetch", h.Fetch(), ""},
		{"fetch, malformed body", h.Fetch(), "{"},
		{"complete", h.Complete(), `{"log_id":"x","result":"success"}`},
		{"complete, malformed body", h.Complete(), "{"},
	} {
		if code, out := post(t, c.h, a.key, c.body); code != 401 || errorCode(out) != "unauthenticated" {
			t.Errorf("%s with a revoked key: %d %v, want 401 unauthenticated", c.name, code, out)
		}
	}
}

// A fetch may carry the previous dispatch's complete: it is completed first, then the
// fetch proceeds; a complete that is refused refuses the whole request, and nothing is
// fetched.
func TestHTTPFetchCarriesComplete(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	h := dispatch.NewHandlers(svc, b.log)
	first := b.task("uid_1", t0.Add(-2*time.Minute))
	second := b.task("uid_1", t0.Add(-time.Minute))
	a := b.agent("1")

	code, out := post(t, h.Fetch(), a.key, "")
	task, _ := out["task"].(map[string]any)
	if code != http.StatusOK || task["task_id"] != first.String() {
		t.Fatalf("first fetch: %d %v", code, out)
	}
	logID := task["log_id"].(string)

	for _, c := range []struct {
		name     string
		body     string
		wantCode int
		wantErr  string
		wantMsg  string
	}{
		{"no log id", `{"complete":{"result":"success"}}`, 400, "invalid_argument", "complete.log_id"},
		{"bad result", `{"complete":{"log_id":"` + logID + `","result":"maybe"}}`, 400, "invalid_argument", "complete.result"},
		{"detail no object", `{"complete":{"log_id":"` + logID + `","result":"success","detail":3}}`, 400, "invalid_argument", "complete.detail"},
		{"unknown log id", `{"complete":{"log_id":"no-such-log","result":"success"}}`, 409, "stale_lease", "no-such-log"},
		{"unknown field", `{"complete":{"log_id":"` + logID + `","result":"success","extra":1}}`, 400, "invalid_argument", "extra"},
		{"bad wait_ms", `{"wait_ms":-1,"complete":{"log_id":"` + logID + `","result":"success"}}`, 400, "invalid_argument", "wait_ms"},
	} {
		code, out := post(t, h.Fetch(), a.key, c.body)
		msg, _ := out["error"].(map[string]any)["message"].(string)
		if code != c.wantCode || errorCode(out) != c.wantErr || !strings.Contains(msg, c.wantMsg) {
			t.Errorf("%s: %d %v, want %d %s naming %s", c.name, code, out, c.wantCode, c.wantErr, c.wantMsg)
		}
	}
	// The refusals fetched nothing and completed nothing: the first is still open.
	if rec := b.record(logID); rec.FinishedAt != nil || rec.RedoCount != 0 {
		t.Fatalf("first dispatch after refused requests: %+v", rec)
	}

	code, out = post(t, h.Fetch(), a.key, `{"complete":{"log_id":"`+logID+`","result":"success","detail":{"ms":3}}}`)
	task, _ = out["task"].(map[string]any)
	if code != http.StatusOK || task["task_id"] != second.String() || task["redo"] != false {
		t.Fatalf("fetch with complete: %d %v", code, out)
	}
	if rec := b.record(logID); rec.State != taskd.StateDone || rec.Result != taskd.ResultSuccess {
		t.Fatalf("first dispatch after the combined fetch: %+v", rec)
	}
	// Completing the same one again inside a fetch is a repeat: answered as the first
	// was, and the fetch hands out the open second one again (a redo).
	code, out = post(t, h.Fetch(), a.key, `{"complete":{"log_id":"`+logID+`","result":"success"}}`)
	task, _ = out["task"].(map[string]any)
	if code != http.StatusOK || task["task_id"] != second.String() || task["redo"] != true {
		t.Fatalf("repeated complete in a fetch: %d %v", code, out)
	}
}
