package app_test

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// Artifacts through the admin API: the directory backend in a directory of the test's.

func artifactEnv(t *testing.T, tweak func(*app.Config)) (*env, string) {
	t.Helper()
	dir := t.TempDir()
	e := newEnvWith(t, 1, func(c *app.Config) {
		c.ArtifactDir = dir
		if tweak != nil {
			tweak(c)
		}
	})
	return e, dir
}

// uploadArtifact posts body as filename (query-escaped) and decodes the reply; a nil
// length sends the body chunked, without Content-Length.
func (e *env) uploadArtifact(filename string, body io.Reader, length *int64) (int, map[string]any, http.Header) {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.urls[0]+"/v1/admin/artifacts?filename="+url.QueryEscape(filename), body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.ContentLength = -1
	if length != nil {
		req.ContentLength = *length
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/octet-stream")
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

func lengthOf(b []byte) *int64 {
	n := int64(len(b))
	return &n
}

func sums(b []byte) map[string]any {
	s1, m5, s256 := sha1.Sum(b), md5.Sum(b), sha256.Sum256(b)
	return map[string]any{"sha1": hex.EncodeToString(s1[:]), "md5": hex.EncodeToString(m5[:]), "sha256": hex.EncodeToString(s256[:])}
}

func filesIn(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Upload (201, with the hashes crypto/* compute, and a Location), read, list (newest
// first, a page at a time) and delete (204) an artifact; its file comes and goes with
// it. An unknown id is a 404, a bad or missing filename a 400, and the routes take
// the admin token only.
func TestArtifactAdminAPI(t *testing.T) {
	t.Parallel()
	e, dir := artifactEnv(t, nil)
	var ids []string
	var bodies [][]byte
	for i := range 3 {
		body := make([]byte, 50_000+i)
		rand.Read(body)
		length := lengthOf(body)
		if i == 1 {
			length = nil // chunked
		}
		code, out, h := e.uploadArtifact(fmt.Sprintf("fw-%d.swu", i), bytes.NewReader(body), length)
		if code != 201 {
			t.Fatalf("upload %d: %d %v", i, code, out)
		}
		id := fmt.Sprint(out["id"])
		hashes, _ := json.Marshal(out["hashes"])
		want, _ := json.Marshal(sums(body))
		if out["filename"] != fmt.Sprintf("fw-%d.swu", i) || out["size"] != float64(len(body)) || string(hashes) != string(want) ||
			out["created_at"] != t0.Format(time.RFC3339) || h.Get("Location") != "/v1/admin/artifacts/"+id {
			t.Errorf("upload %d: %v, Location %q; want hashes %s", i, out, h.Get("Location"), want)
		}
		if len(out) != 5 {
			t.Errorf("upload %d: fields %v, want id, filename, size, hashes, created_at", i, out)
		}
		ids, bodies = append(ids, id), append(bodies, body)
	}
	if got := e.admin("GET", "/v1/admin/artifacts/"+ids[1], nil); got["filename"] != "fw-1.swu" || got["size"] != float64(50_001) {
		t.Errorf("GET: %v", got)
	}
	page := e.admin("GET", "/v1/admin/artifacts?limit=2", nil)
	list := page["artifacts"].([]any)
	if len(list) != 2 || fmt.Sprint(list[0].(map[string]any)["id"]) != ids[2] || fmt.Sprint(list[1].(map[string]any)["id"]) != ids[1] || page["next_cursor"] == "" {
		t.Fatalf("first page: %v", page)
	}
	page = e.admin("GET", "/v1/admin/artifacts?limit=2&cursor="+page["next_cursor"].(string), nil)
	if list := page["artifacts"].([]any); len(list) != 1 || fmt.Sprint(list[0].(map[string]any)["id"]) != ids[0] || page["next_cursor"] != "" {
		t.Fatalf("second page: %v", page)
	}
	if files := filesIn(t, dir); len(files) != 3 {
		t.Errorf("files: %v", files)
	}

	e.expect("DELETE", "/v1/admin/artifacts/"+ids[0], nil, 204, "")
	e.expect("GET", "/v1/admin/artifacts/"+ids[0], nil, 404, "not_found")
	e.expect("DELETE", "/v1/admin/artifacts/"+ids[0], nil, 404, "not_found")
	e.expect("GET", "/v1/admin/artifacts/999999", nil, 404, "not_found")
	if files := filesIn(t, dir); len(files) != 2 {
		t.Errorf("files after a delete: %v", files)
	}
	var action string
	e.store.DB().QueryRow("SELECT action FROM audit_log WHERE target = ? ORDER BY id DESC LIMIT 1", "artifact:"+ids[0]).Scan(&action)
	if action != "artifact.delete" {
		t.Errorf("audit of the delete: %q", action)
	}

	for _, name := range []string{"../fw.swu", "a/b", "fw\x00.swu", "", strings.Repeat("x", 256)} {
		code, out, _ := e.uploadArtifact(name, strings.NewReader("x"), lengthOf([]byte("x")))
		if code != 400 || !strings.Contains(fmt.Sprint(out), "filename") {
			t.Errorf("filename %q: %d %v, want 400 naming filename", name, code, out)
		}
	}
	code, out := e.raw("POST", "/v1/admin/artifacts", "application/octet-stream", []byte("x"))
	if code != 400 || !strings.Contains(fmt.Sprint(out), "filename: required") {
		t.Errorf("no filename: %d %v", code, out)
	}
	code, out = e.raw("POST", "/v1/admin/artifacts?filename=a&name=b", "application/octet-stream", []byte("x"))
	if code != 400 {
		t.Errorf("an unknown parameter: %d %v", code, out)
	}
	if code, _ := e.do(0, "GET", "/v1/admin/artifacts", "", nil); code != 401 {
		t.Errorf("no token: %d, want 401", code)
	}
	if code, _ := e.do(0, "GET", "/v1/admin/artifacts", e.key("u1"), nil); code != 403 {
		t.Errorf("a client key: %d, want 403", code)
	}
	if files := filesIn(t, dir); len(files) != 2 {
		t.Errorf("files after the refusals: %v", files)
	}
}

// A body over DISPATCH_ARTIFACT_MAX_BYTES is a 413 too_large, whether its length says
// so at once or it passes the limit as it comes (chunked), and leaves no record and no
// file; so does a body cut off midway.
func TestArtifactUploadOverLimitOrCut(t *testing.T) {
	t.Parallel()
	e, dir := artifactEnv(t, func(c *app.Config) { c.ArtifactMaxBytes = 100_000 })
	body := make([]byte, 300_000)
	rand.Read(body)
	for _, length := range []*int64{lengthOf(body), nil} {
		code, out, _ := e.uploadArtifact("big.swu", bytes.NewReader(body), length)
		if code != 413 || out["error"].(map[string]any)["code"] != "too_large" {
			t.Errorf("over the limit (length %v): %d %v", length, code, out)
		}
	}
	// A client that sends half its stated length, then hangs up.
	pr, pw := io.Pipe()
	go func() {
		pw.Write(body[:50_000])
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}()
	req, _ := http.NewRequest("POST", e.urls[0]+"/v1/admin/artifacts?filename=cut.swu", pr)
	req.ContentLength = 100_000
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if resp, err := e.client.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("a cut upload: %d", resp.StatusCode)
		}
	}
	// The server notices the cut when it reads; give it the moment the reply did not.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if files := filesIn(t, dir); len(files) == 0 && e.count("SELECT COUNT(*) FROM artifact") == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("left behind: files %v", files)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, out, _ := e.uploadArtifact("exact.swu", bytes.NewReader(body[:100_000]), nil); code != 201 {
		t.Errorf("exactly the limit: %d %v", code, out)
	}
}

// An artifact that a live task names in its params is not deleted (409 conflict
// naming the task); once the task is deleted, it is (204), and its file with it.
func TestArtifactDeleteInUse(t *testing.T) {
	t.Parallel()
	e, dir := artifactEnv(t, nil)
	code, out, _ := e.uploadArtifact("fw.swu", strings.NewReader("firmware"), lengthOf([]byte("firmware")))
	if code != 201 {
		t.Fatalf("upload: %d %v", code, out)
	}
	id := fmt.Sprint(out["id"])
	taskID := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "params": map[string]any{
		"chunks": []any{map[string]any{"part": "os", "name": "fw", "version": "1.0",
			"artifacts": []any{map[string]any{"artifact_id": out["id"]}}}}}})
	got := e.expect("DELETE", "/v1/admin/artifacts/"+id, nil, 409, "conflict")
	if msg := fmt.Sprint(got); !strings.Contains(msg, taskID) {
		t.Errorf("409 %v does not name %s", got, taskID)
	}
	if details := got["error"].(map[string]any)["details"]; fmt.Sprint(details) != fmt.Sprintf("map[tasks:[%s]]", taskID) {
		t.Errorf("details: %v", details)
	}
	e.expect("DELETE", "/v1/admin/tasks/"+strings.Replace(taskID, ":", "/", 1), nil, 204, "")
	e.expect("DELETE", "/v1/admin/artifacts/"+id, nil, 204, "")
	if files := filesIn(t, dir); len(files) != 0 {
		t.Errorf("files after the delete: %v", files)
	}
}

// An upload is exempt from the request bound (DISPATCH_REQUEST_TIMEOUT), as a campaign's
// is: it lasts as long as its body takes to come.
func TestArtifactUploadOutlastsTheRequestBound(t *testing.T) {
	t.Parallel()
	e, _ := artifactEnv(t, func(c *app.Config) { c.RequestTimeout = 100 * time.Millisecond })
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("first half, "))
		time.Sleep(300 * time.Millisecond)
		pw.Write([]byte("second half"))
		pw.Close()
	}()
	if code, out, _ := e.uploadArtifact("slow.swu", pr, nil); code != 201 || out["size"] != float64(len("first half, second half")) {
		t.Fatalf("a slow upload: %d %v", code, out)
	}
}

// A relative DISPATCH_ARTIFACT_DIR names a directory under the working directory, made
// at start; a directory the settings name that cannot be made stops the start, the
// default one is a warning.
func TestPrepareArtifacts(t *testing.T) {
	t.Parallel()
	e, dir := artifactEnv(t, nil)
	sub := filepath.Join(dir, "a", "b")
	cfg, err := app.LoadConfig(nil, func(k string) string {
		return map[string]string{"DISPATCH_ARTIFACT_DIR": sub}[k]
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a := app.New(cfg, app.Deps{Store: e.store, Redis: e.rdb, Clock: e.clock, Log: slog.New(slog.DiscardHandler)})
	if err := a.PrepareArtifacts(t.Context()); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(sub); err != nil || !info.IsDir() {
		t.Fatalf("the directory after Prepare: %v", err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	cfg.ArtifactDir = filepath.Join(file, "sub") // under a file: cannot be made
	a = app.New(cfg, app.Deps{Store: e.store, Redis: e.rdb, Clock: e.clock, Log: slog.New(slog.DiscardHandler)})
	if err := a.PrepareArtifacts(t.Context()); err == nil || !strings.Contains(err.Error(), "DISPATCH_ARTIFACT_DIR") {
		t.Errorf("a directory that cannot be made: %v", err)
	}
}

// The artifact settings are checked at start, each refusal naming its setting.
func TestArtifactSettingsRefuse(t *testing.T) {
	t.Parallel()
	s3 := map[string]string{"DISPATCH_ARTIFACT_S3_ENDPOINT": "minio:9000", "DISPATCH_ARTIFACT_S3_BUCKET": "fw",
		"DISPATCH_ARTIFACT_S3_ACCESS_KEY": "ak", "DISPATCH_ARTIFACT_S3_SECRET_KEY": "sk"}
	with := func(kv ...string) map[string]string {
		env := map[string]string{}
		for k, v := range s3 {
			env[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	if _, err := app.LoadConfig(nil, func(k string) string { return s3[k] }, io.Discard); err != nil {
		t.Fatalf("a whole S3 configuration: %v", err)
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{with("DISPATCH_ARTIFACT_S3_ENDPOINT", "https://minio:9000"), "DISPATCH_ARTIFACT_S3_ENDPOINT: must be host[:port] without a scheme"},
		{with("DISPATCH_ARTIFACT_S3_ENDPOINT", "minio:9000/x"), "DISPATCH_ARTIFACT_S3_ENDPOINT: must be host[:port]"},
		{with("DISPATCH_ARTIFACT_S3_BUCKET", ""), "DISPATCH_ARTIFACT_S3_BUCKET: the bucket is required with DISPATCH_ARTIFACT_S3_ENDPOINT"},
		{with("DISPATCH_ARTIFACT_S3_SECRET_KEY", ""), "DISPATCH_ARTIFACT_S3_SECRET_KEY: the secret key is required"},
		{map[string]string{"DISPATCH_ARTIFACT_S3_BUCKET": "fw"}, "DISPATCH_ARTIFACT_S3_BUCKET: is only for DISPATCH_ARTIFACT_S3_ENDPOINT"},
		{with("DISPATCH_ARTIFACT_S3_PART_SIZE", "1048576"), "DISPATCH_ARTIFACT_S3_PART_SIZE: must be 5242880..5368709120, got 1048576"},
		{with("DISPATCH_ARTIFACT_S3_PART_SIZE", "5242880", "DISPATCH_ARTIFACT_MAX_BYTES", "107374182400"), "DISPATCH_ARTIFACT_MAX_BYTES: must be at most 10000 parts"},
		{with("DISPATCH_ARTIFACT_S3_URL_EXPIRY", "0s"), "DISPATCH_ARTIFACT_S3_URL_EXPIRY: must be 1s..168h"},
		{map[string]string{"DISPATCH_ARTIFACT_MAX_BYTES": "0"}, "DISPATCH_ARTIFACT_MAX_BYTES: must be positive"},
		{map[string]string{"DISPATCH_ARTIFACT_UPLOAD_TIMEOUT": "-1s"}, "DISPATCH_ARTIFACT_UPLOAD_TIMEOUT: must be positive"},
	} {
		_, err := app.LoadConfig(nil, func(k string) string { return c.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.env, err, c.want)
		}
	}
}
