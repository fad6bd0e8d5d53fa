package app_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
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

// idemUpload uploads body as filename through instance i with Idempotency-Key key
// ("" for none); chunked sends it without Content-Length.
func (e *env) idemUpload(i int, key, filename string, body []byte, chunked bool) (int, map[string]any, http.Header) {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.urls[i]+"/v1/admin/artifacts?filename="+url.QueryEscape(filename), bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if chunked {
		req.ContentLength = -1
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
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

// artifactsKept checks that the artifact table and the directory dir hold n
// artifacts, and that n were audited as created.
func artifactsKept(t *testing.T, e *env, dir string, n int) {
	t.Helper()
	if got := e.count("SELECT COUNT(*) FROM artifact"); got != n {
		t.Fatalf("artifact records: %d, want %d", got, n)
	}
	if got := filesIn(t, dir); len(got) != n {
		t.Fatalf("files in the artifact directory: %v, want %d", got, n)
	}
	if got := e.count("SELECT COUNT(*) FROM audit_log WHERE action = 'artifact.create'"); got != n {
		t.Fatalf("artifact.create audit entries: %d, want %d", got, n)
	}
}

// An artifact upload takes an Idempotency-Key though its body is streamed: the same
// key, filename and bytes within 24 h answer the first reply again (201, its body and
// Location, Idempotent-Replayed), on any node and chunked or not, and keep no second
// artifact; the key with other bytes or another filename is a 422 that keeps nothing;
// a refused upload does not spend its key; past 24 h the key is new again.
func TestIdempotentArtifactUploads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnvWith(t, 2, func(c *app.Config) { c.ArtifactDir = dir; c.ArtifactMaxBytes = 100_000 })
	body := make([]byte, 60_000)
	rand.Read(body)
	code, first, h1 := e.idemUpload(0, "up-1", "fw.swu", body, false)
	if code != 201 || h1.Get("Location") == "" || h1.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first upload: %d %v %v", code, first, h1)
	}
	artifactsKept(t, e, dir, 1)
	for i, chunked := range []bool{false, true} {
		code, again, h := e.idemUpload(1-i%2, "up-1", "fw.swu", body, chunked)
		if code != 201 || again["id"] != first["id"] || h.Get("Location") != h1.Get("Location") ||
			h.Get("Idempotent-Replayed") != "true" || fmt.Sprint(again) != fmt.Sprint(first) {
			t.Fatalf("the same upload again (chunked %v): %d %v %v, want the first reply", chunked, code, again, h)
		}
	}
	artifactsKept(t, e, dir, 1)
	other := slices.Clone(body)
	other[0]++
	for what, up := range map[string]func() (int, map[string]any, http.Header){
		"other bytes":    func() (int, map[string]any, http.Header) { return e.idemUpload(0, "up-1", "fw.swu", other, false) },
		"fewer bytes":    func() (int, map[string]any, http.Header) { return e.idemUpload(1, "up-1", "fw.swu", body[1:], false) },
		"other filename": func() (int, map[string]any, http.Header) { return e.idemUpload(0, "up-1", "fw2.swu", body, false) },
	} {
		if code, out, _ := up(); code != 422 || errCode(out) != "params_invalid" || !strings.Contains(errMessage(out), "Idempotency-Key") {
			t.Errorf("the key with %s: %d %v, want 422", what, code, out)
		}
	}
	artifactsKept(t, e, dir, 1)
	// A create's key is not an upload's: another request.
	tpl := map[string]any{"name": "t", "schema": map[string]any{"type": "object"}}
	if code, _, _ := e.idem(0, adminToken, "POST", "/v1/admin/templates", "tpl-1", tpl); code != 201 {
		t.Fatalf("a template: %d", code)
	}
	if code, out, _ := e.idemUpload(0, "tpl-1", "fw.swu", body, false); code != 422 {
		t.Errorf("an upload under a template's key: %d %v, want 422", code, out)
	}
	// Refused uploads (too large, a bad filename, a bad key) keep nothing and spend
	// nothing.
	if code, out, _ := e.idemUpload(0, "up-2", "big.swu", make([]byte, 100_001), true); code != 413 {
		t.Fatalf("an upload over the limit: %d %v", code, out)
	}
	if code, out, _ := e.idemUpload(0, "up-2", "../x", body, false); code != 400 {
		t.Fatalf("a bad filename: %d %v", code, out)
	}
	if code, out, _ := e.idemUpload(0, strings.Repeat("k", 256), "fw.swu", body, false); code != 400 ||
		!strings.Contains(errMessage(out), "Idempotency-Key") {
		t.Fatalf("a long key: %d %v", code, out)
	}
	artifactsKept(t, e, dir, 1)
	code, second, _ := e.idemUpload(1, "up-2", "other.swu", other, false)
	if code != 201 || second["id"] == first["id"] {
		t.Fatalf("an upload under the refused one's key: %d %v", code, second)
	}
	artifactsKept(t, e, dir, 2)
	// Without a key, the same bytes are another artifact; past 24 h the key is new.
	if code, out, _ := e.idemUpload(0, "", "fw.swu", body, false); code != 201 || out["id"] == first["id"] {
		t.Fatalf("without a key: %d %v", code, out)
	}
	e.clock.Advance(24*time.Hour + time.Second)
	if code, out, h := e.idemUpload(0, "up-1", "fw.swu", body, false); code != 201 || out["id"] == first["id"] ||
		h.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the key after 24 h: %d %v %v, want a new artifact", code, out, h)
	}
	artifactsKept(t, e, dir, 4)
}

// Uploads with one key at once, on two nodes: each stores its bytes, one keeps its
// artifact, and the others answer its reply (or 409 for one that waited too long) and
// leave nothing behind.
func TestIdempotentArtifactUploadsAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnvWith(t, 2, func(c *app.Config) { c.ArtifactDir = dir })
	body := make([]byte, 200_000)
	rand.Read(body)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[any]int{}
	for i := range 6 {
		wg.Go(func() {
			code, out, _ := e.idemUpload(i%2, "same", "fw.swu", body, i%3 == 0)
			mu.Lock()
			defer mu.Unlock()
			switch code {
			case 201:
				ids[out["id"]]++
			case 409:
			default:
				t.Errorf("upload %d: %d %v", i, code, out)
			}
		})
	}
	wg.Wait()
	if len(ids) != 1 {
		t.Fatalf("ids answered: %v, want one", ids)
	}
	artifactsKept(t, e, dir, 1)
}

// A client key issued under an Idempotency-Key is answered again to a retry, yet
// MySQL keeps neither it nor the Idempotency-Key in the clear: the server otherwise
// keeps only a key's hash.
func TestIdempotentKeyIssueKeepsNoSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	code, first, _ := e.idem(0, adminToken, "POST", "/v1/admin/clients/7/keys", "issue-7-once", nil)
	if code != 201 {
		t.Fatalf("issue: %d %v", code, first)
	}
	code, again, h := e.idem(1, adminToken, "POST", "/v1/admin/clients/7/keys", "issue-7-once", nil)
	if code != 201 || again["client_key"] != first["client_key"] || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the issue again: %d %v, want the first key replayed", code, again)
	}
	key := first["client_key"].(string)
	if n := e.count("SELECT COUNT(*) FROM idempotency_key WHERE LOCATE(?, body) > 0 OR idem_key = ?", key, "issue-7-once"); n != 0 {
		t.Errorf("%d rows of idempotency_key hold the client key or the Idempotency-Key in the clear", n)
	}
	if n := e.count("SELECT COUNT(*) FROM idempotency_key"); n != 1 {
		t.Errorf("%d rows of idempotency_key, want the one", n)
	}
}
