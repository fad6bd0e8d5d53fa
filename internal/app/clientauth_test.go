package app_test

import (
	"strings"
	"testing"
)

// Issue 42, client routes: every client route authenticates before it reports what is
// wrong with the body's fields. A wrong key with a bad field is a 401, not a 400 that
// tells an unauthenticated caller how the server checks its input.
func TestClientRoutesAuthenticateBeforeCheckingFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	k := e.key("1")
	wrong := k[:len(k)-1] + map[bool]string{true: "A", false: "B"}[!strings.HasSuffix(k, "A")]
	long := strings.Repeat("x", 300)
	for _, c := range []struct {
		path string
		body any
	}{
		{"/v1/fetch", map[string]any{"agent": map[string]any{"version": long}}},
		{"/v1/fetch", map[string]any{"agent": map[string]any{"labels": map[string]string{"bad key!": "v"}}}},
		{"/v1/fetch", map[string]any{"wait_ms": -1}},
		{"/v1/fetch", map[string]any{"max": 0}},
		{"/v1/fetch", map[string]any{"complete": map[string]any{"log_id": "nope", "result": "success"}}},
		{"/v1/complete", map[string]any{"log_id": "nope", "result": "success"}},
		{"/v1/complete", map[string]any{"log_id": "nope", "result": "maybe"}},
		{"/v1/progress", map[string]any{"log_id": "nope"}},
		{"/v1/progress", map[string]any{"log_id": "nope", "checkpoint": []int{1}}},
	} {
		code, out := e.do(0, "POST", c.path, wrong, c.body)
		if code != 401 {
			t.Errorf("%s %v with a wrong key: %d %v, want 401", c.path, c.body, code, out)
		}
		// With the right key the same body is refused for what it holds.
		if code, out := e.do(0, "POST", c.path, k, c.body); code != 400 && code != 409 {
			t.Errorf("%s %v with the right key: %d %v, want 400 or 409", c.path, c.body, code, out)
		}
	}
}
