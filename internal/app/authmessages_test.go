package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestAuthMessages: a credential in the wrong place or the wrong form is answered with
// what is wrong and what is expected, on the admin API and on the client endpoints.
func TestAuthMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	key := e.key("u_auth")
	cases := []struct {
		name, method, path, header string
		status                     int
		want                       []string // substrings of the message
	}{
		{"admin without header", "GET", "/v1/admin/tasks", "", 401,
			[]string{"no Authorization header", `expected "Authorization: Bearer <admin token>"`}},
		{"admin token without Bearer", "GET", "/v1/admin/tasks", adminToken, 401,
			[]string{`without the "Bearer " scheme`, `expected "Authorization: Bearer <admin token>"`}},
		{"admin token as Basic", "GET", "/v1/admin/tasks", "Basic " + adminToken, 401,
			[]string{`scheme is "Basic", not Bearer`}},
		{"client key on admin", "GET", "/v1/admin/tasks", "Bearer " + key, 403,
			[]string{"a client key cannot use the admin API", "DISPATCH_ADMIN_TOKEN", "Bearer <admin token>"}},
		{"wrong admin token", "GET", "/v1/admin/tasks", "Bearer nope", 401,
			[]string{"invalid admin token", "DISPATCH_ADMIN_TOKEN"}},
		{"admin token on fetch", "POST", "/v1/fetch", "Bearer " + adminToken, 401,
			[]string{"an admin token is not a client key", "/v1/fetch", "Bearer <client key>"}},
		{"admin token on dispatches", "GET", "/v1/dispatches", "Bearer " + adminToken, 401,
			[]string{"an admin token is not a client key"}},
		{"client key without Bearer", "POST", "/v1/fetch", key, 401,
			[]string{`without the "Bearer " scheme`, `expected "Authorization: Bearer <client key>"`}},
		{"fetch without header", "POST", "/v1/complete", "", 401,
			[]string{"client key required", "no Authorization header"}},
		{"malformed client key", "POST", "/v1/fetch", "Bearer abc", 401,
			[]string{"malformed client key", "<uid>.<secret>"}},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, e.urls[0]+c.path, strings.NewReader("{}"))
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d (%q)", c.name, resp.StatusCode, c.status, out.Error.Message)
		}
		for _, w := range c.want {
			if !strings.Contains(out.Error.Message, w) {
				t.Errorf("%s: message %q lacks %q", c.name, out.Error.Message, w)
			}
		}
	}
}
