package app_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/taskpull/taskd/internal/app"
)

// An enrollment's reply, which carries a client key, is kept by no cache and sniffed
// as nothing but JSON; so are its errors.
func TestEnrollReplyIsNotStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	for _, c := range []struct {
		name, body string
		status     int
	}{
		{"enroll", `{"uid": "7", "enroll_secret": "enroll-secret"}`, 200},
		{"enroll, wrong secret", `{"uid": "7", "enroll_secret": "wrong"}`, 401},
		{"enroll, bad body", `{"uid": 7}`, 400},
	} {
		req, _ := http.NewRequest("POST", e.urls[0]+"/v1/enroll", strings.NewReader(c.body))
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.status)
		}
		if got := resp.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s: Cache-Control %q, want no-store", c.name, got)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q, want nosniff", c.name, got)
		}
	}
}

// The enrollment bounds an operator sets reach the API: a uid outside
// DISPATCH_ENROLL_UIDS is 403, past DISPATCH_ENROLL_RATE an enrollment is 429 with
// Retry-After, and enrolling past DISPATCH_KEYS_PER_UID leaves the admin's key working.
func TestEnrollBounds(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 2, func(c *app.Config) {
		c.EnrollUIDs = regexp.MustCompile(`agent-[0-9]+`)
		c.EnrollRate, c.EnrollBurst = 0.001, 3
		c.KeysPerUID = 1
	})
	enroll := func(node int, uid string) (int, map[string]any) {
		return e.do(node, "POST", "/v1/enroll", "", map[string]any{"uid": uid, "enroll_secret": "enroll-secret"})
	}
	if code, out := enroll(0, "42"); code != 403 {
		t.Fatalf("enroll of a uid outside DISPATCH_ENROLL_UIDS: %d %v, want 403", code, out)
	}
	admin := e.key("agent-1")
	var last string
	for i := range 3 { // the burst, over both nodes
		code, out := enroll(i%2, "agent-1")
		if code != 200 {
			t.Fatalf("enrollment %d of the burst: %d %v", i+1, code, out)
		}
		last = out["client_key"].(string)
	}
	if code, out := e.do(0, "POST", "/v1/fetch", admin, nil); code != 200 {
		t.Fatalf("the admin's key after three enrollments past the enrolled cap of 1: %d %v", code, out)
	}
	if code, out := e.do(1, "POST", "/v1/fetch", last, nil); code != 200 {
		t.Fatalf("the last enrolled key: %d %v", code, out)
	}
	req, _ := http.NewRequest("POST", e.urls[1]+"/v1/enroll", strings.NewReader(`{"uid": "agent-2", "enroll_secret": "enroll-secret"}`))
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("an enrollment past the rate: %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
