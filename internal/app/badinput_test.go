package app_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
)

// Bad input on every client endpoint gets the documented status and code, and writes
// nothing.
func TestClientEndpointsRejectBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	k := e.key("1")
	huge := `{"log_id": "` + strings.Repeat("x", 70<<10) + `", "result": "success"}`
	cases := []struct {
		name, path, key string
		body            any
		status          int
		code            string
	}{
		{"fetch: no key", "/v1/fetch", "", nil, 401, "unauthenticated"},
		{"fetch: malformed key", "/v1/fetch", "not-a-key", nil, 401, "unauthenticated"},
		{"fetch: unknown key", "/v1/fetch", "1." + strings.Repeat("A", 43), nil, 401, "unauthenticated"},
		{"fetch: key of another uid's shape", "/v1/fetch", "2" + k[1:], nil, 401, "unauthenticated"},
		{"fetch: malformed JSON", "/v1/fetch", k, `{"wait_ms":`, 400, "malformed_json"},
		{"fetch: unknown field", "/v1/fetch", k, `{"uid": "2"}`, 400, "invalid_argument"},
		{"fetch: wrong type", "/v1/fetch", k, `{"wait_ms": "soon"}`, 400, "invalid_argument"},
		{"fetch: negative wait", "/v1/fetch", k, `{"wait_ms": -1}`, 400, "invalid_argument"},
		{"fetch: trailing data", "/v1/fetch", k, `{} {}`, 400, "malformed_json"},
		{"fetch: huge body", "/v1/fetch", k, `{"wait_ms": 1` + strings.Repeat(" ", 70<<10) + `}`, 413, "too_large"},
		{"complete: no key", "/v1/complete", "", `{"log_id": "x", "result": "success"}`, 401, "unauthenticated"},
		{"complete: empty body", "/v1/complete", k, ``, 400, "invalid_argument"},
		{"complete: malformed JSON", "/v1/complete", k, `{"log_id"`, 400, "malformed_json"},
		{"complete: unknown field", "/v1/complete", k, `{"log_id": "x", "result": "success", "uid": "2"}`, 400, "invalid_argument"},
		{"complete: wrong type", "/v1/complete", k, `{"log_id": 5, "result": "success"}`, 400, "invalid_argument"},
		{"complete: bad result", "/v1/complete", k, `{"log_id": "x", "result": "maybe"}`, 400, "invalid_argument"},
		{"complete: missing log id", "/v1/complete", k, `{"result": "success"}`, 400, "invalid_argument"},
		{"complete: detail not an object", "/v1/complete", k, `{"log_id": "x", "result": "success", "detail": [1]}`, 400, "invalid_argument"},
		{"complete: huge body", "/v1/complete", k, huge, 413, "too_large"},
		{"enroll: wrong secret", "/v1/enroll", "", `{"uid": "9", "enroll_secret": "nope"}`, 401, "unauthenticated"},
		{"enroll: bad uid", "/v1/enroll", "", `{"uid": "a b", "enroll_secret": "enroll-secret"}`, 400, "invalid_argument"},
		{"enroll: unknown field", "/v1/enroll", "", `{"uid": "9", "enroll_secret": "enroll-secret", "admin": true}`, 400, "invalid_argument"},
		{"enroll: malformed JSON", "/v1/enroll", "", `{"uid": `, 400, "malformed_json"},
		{"enroll: huge body", "/v1/enroll", "", `{"uid": "` + strings.Repeat("9", 70<<10) + `"}`, 413, "too_large"},
	}
	for _, c := range cases {
		code, out := e.do(0, "POST", c.path, c.key, c.body)
		got := ""
		if errObj, ok := out["error"].(map[string]any); ok {
			got, _ = errObj["code"].(string)
		}
		if code != c.status || got != c.code {
			t.Errorf("%s: %d %q, want %d %q (%v)", c.name, code, got, c.status, c.code, out)
		}
	}
	for table, want := range map[string]int{"dispatch": 0, "occurrence_claim": 0, "occurrence_user": 0, "user_state": 0, "client_key": 1} {
		if n := e.count("SELECT COUNT(*) FROM " + table); n != want {
			t.Errorf("after bad requests, %s has %d rows, want %d", table, n, want)
		}
	}
	// and the task is still there for a good request
	if r := e.fetch(0, k); r.Task == nil {
		t.Fatal("good fetch after bad ones: no task")
	}
}

func TestAdminAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	k := e.key("1")
	for _, c := range []struct {
		token  string
		status int
	}{{"", 401}, {"wrong-token", 401}, {k, 403}, {adminToken, 200}} {
		if code, out := e.do(0, "GET", "/v1/admin/templates", c.token, nil); code != c.status {
			t.Errorf("token %q: %d %v, want %d", c.token, code, out, c.status)
		}
	}
	// every admin route: no token 401, a client key 403, and nothing written
	err := chi.Walk(e.apps[0].Handler().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if !strings.HasPrefix(route, "/v1/admin/") {
			return nil
		}
		path := strings.NewReplacer("{kind}", "once", "{id}", "1", "{gid}", "g", "{uid}", "1").Replace(route)
		for token, want := range map[string]int{"": 401, k: 403} {
			code, out := e.do(0, method, path, token, `{}`)
			if code != want {
				t.Errorf("%s %s with token %q: %d %v, want %d", method, path, token, code, out, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.count("SELECT COUNT(*) FROM audit_log WHERE action <> 'client_key.create'"); n != 0 {
		t.Fatalf("unauthorised requests wrote %d audit entries", n)
	}
}
