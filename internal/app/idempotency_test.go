package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// idem sends an admin request to instance i with an Idempotency-Key (and token),
// returning the status, the decoded reply and the headers.
func (e *env) idem(i int, token, method, path, key string, body any) (int, map[string]any, http.Header) {
	e.t.Helper()
	buf, _ := json.Marshal(body)
	req, err := http.NewRequest(method, e.urls[i]+path, bytes.NewReader(buf))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(raw, &out)
	return resp.StatusCode, out, resp.Header
}

// Creates with an Idempotency-Key (issue 39, API.md round 5): the same key and body
// answer the first reply again, on any node, and create nothing; another body is a
// 422; a refused create does not spend the key; keys are per admin token and last 24 h.
func TestIdempotentCreates(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 2, func(c *app.Config) { c.AdminTokens = []string{adminToken, "ops=ops-token"} })
	tpl := map[string]any{"name": "report", "schema": map[string]any{"type": "object"}}
	code, first, h1 := e.idem(0, adminToken, "POST", "/v1/admin/templates", "k-1", tpl)
	if code != 201 {
		t.Fatalf("first create: %d %v", code, first)
	}
	code, again, h2 := e.idem(1, adminToken, "POST", "/v1/admin/templates", "k-1", tpl)
	if code != 201 || again["id"] != first["id"] || h2.Get("ETag") != h1.Get("ETag") || h2.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same create again, on the other node: %d %v %v, want the first reply", code, again, h2)
	}
	if n := e.count("SELECT COUNT(*) FROM task_params_template"); n != 1 {
		t.Fatalf("templates: %d, want 1", n)
	}
	other := map[string]any{"name": "report2", "schema": map[string]any{"type": "object"}}
	if code, out, _ := e.idem(0, adminToken, "POST", "/v1/admin/templates", "k-1", other); code != 422 ||
		!strings.Contains(errMessage(out), "Idempotency-Key") {
		t.Fatalf("the key with another body: %d %v, want 422", code, out)
	}
	// Another admin token: its own keys.
	if code, out, _ := e.idem(0, "ops-token", "POST", "/v1/admin/templates", "k-1", other); code != 201 || out["id"] == first["id"] {
		t.Fatalf("the key under another token: %d %v, want a creation", code, out)
	}
	// A refused create does not spend its key.
	bad := map[string]any{"executor": "uid_1", "start_time": ts(t0), "template_id": 999, "params": map[string]any{}}
	if code, _, _ := e.idem(0, adminToken, "POST", "/v1/admin/tasks/once", "k-2", bad); code < 400 {
		t.Fatalf("a bad task: %d", code)
	}
	good := map[string]any{"executor": "uid_1", "start_time": ts(t0), "template_id": first["id"], "params": map[string]any{}}
	code, task, _ := e.idem(0, adminToken, "POST", "/v1/admin/tasks/once", "k-2", good)
	if code != 201 {
		t.Fatalf("the corrected task under the same key: %d %v", code, task)
	}
	// Past 24 h the key is new again.
	e.clock.Advance(24*time.Hour + time.Second)
	if code, out, h := e.idem(0, adminToken, "POST", "/v1/admin/tasks/once", "k-2", good); code != 201 || out["id"] == task["id"] || h.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the key after 24 h: %d %v, want a new task", code, out)
	}
	// The janitor prunes the keys past 24 h.
	e.clock.Advance(24*time.Hour + time.Second)
	if p, err := e.apps[0].Prune(t.Context()); err != nil || p.IdempotencyKeys == 0 {
		t.Fatalf("prune: %+v %v, want the old keys deleted", p, err)
	}
	if n := e.count("SELECT COUNT(*) FROM idempotency_key"); n != 0 {
		t.Fatalf("keys after the prune: %d", n)
	}
	// Keys: 1..255 printable characters.
	if code, out, _ := e.idem(0, adminToken, "POST", "/v1/admin/templates", strings.Repeat("x", 256), tpl); code != 400 ||
		!strings.Contains(errMessage(out), "Idempotency-Key") {
		t.Fatalf("a long key: %d %v", code, out)
	}
}

// Ten requests with one key at once, on two nodes: one creation; every reply is its
// reply, or a 409 for one that waited too long.
func TestIdempotentCreatesAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	tpl := map[string]any{"name": "at-once", "schema": map[string]any{"type": "object"}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[any]int{}
	for i := range 10 {
		wg.Go(func() {
			code, out, _ := e.idem(i%2, adminToken, "POST", "/v1/admin/templates", "same", tpl)
			mu.Lock()
			defer mu.Unlock()
			switch code {
			case 201:
				ids[out["id"]]++
			case 409:
			default:
				t.Errorf("request %d: %d %v", i, code, out)
			}
		})
	}
	wg.Wait()
	if len(ids) != 1 {
		t.Fatalf("ids answered: %v, want one", ids)
	}
	if n := e.count("SELECT COUNT(*) FROM task_params_template"); n != 1 {
		t.Fatalf("templates: %d, want 1", n)
	}
}
