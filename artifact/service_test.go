package artifact_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/artifact"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// fixture is a service over a test database of its own and a directory of its own.
type fixture struct {
	t     *testing.T
	st    *store.Store
	svc   *artifact.Service
	dir   string
	clock *clock.Fake
}

func newFixture(t *testing.T, cfg artifact.Config) *fixture {
	t.Helper()
	st := testenv.Store(t)
	f := &fixture{t: t, st: st, clock: clock.NewFake(t0)}
	if cfg.S3.Endpoint == "" && cfg.Dir == "" {
		cfg.Dir = filepath.Join(t.TempDir(), "artifacts") // made by Prepare
	}
	f.dir = cfg.Dir
	f.svc = artifact.New(st, cfg, f.clock, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := f.svc.Prepare(t.Context()); err != nil {
		t.Fatal(err)
	}
	return f
}

// files lists the directory's files (temporary ones too).
func (f *fixture) files() []string {
	f.t.Helper()
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		f.t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// count is how many artifact records there are.
func (f *fixture) count() int {
	f.t.Helper()
	var n int
	if err := f.st.DB().QueryRowContext(context.Background(), "SELECT COUNT(*) FROM artifact").Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// nothingLeft fails the test when a record or a file (or a temporary file) is left.
func (f *fixture) nothingLeft() {
	f.t.Helper()
	if n := f.count(); n != 0 {
		f.t.Errorf("%d artifact records left", n)
	}
	if names := f.files(); len(names) != 0 {
		f.t.Errorf("files left in the directory: %v", names)
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func hashesOf(b []byte) taskd.Hashes {
	s1, m5, s256 := sha1.Sum(b), md5.Sum(b), sha256.Sum256(b)
	return taskd.Hashes{SHA1: hex.EncodeToString(s1[:]), MD5: hex.EncodeToString(m5[:]), SHA256: hex.EncodeToString(s256[:])}
}

func codeOf(err error) taskd.Code { return taskd.ErrorCode(err) }

// An upload is hashed as it streams to the directory; its record (newest first in the
// list) has the size and the hashes crypto/* compute, and its file the bytes. A body
// of unknown length is the same.
func TestUploadHashesAndStores(t *testing.T) {
	t.Parallel()
	f := newFixture(t, artifact.Config{})
	for i, c := range []struct {
		n       int
		size    func(int) int64
		comment string
	}{
		{300_000, func(n int) int64 { return int64(n) }, "length known"},
		{70_001, func(int) int64 { return -1 }, "length unknown"},
		{0, func(int) int64 { return 0 }, "empty"},
	} {
		body := randomBytes(c.n)
		name := "fw-" + strconv.Itoa(i) + ".bin"
		a, err := f.svc.Upload(t.Context(), "ops", name, bytes.NewReader(body), c.size(c.n))
		if err != nil {
			t.Fatalf("%s: %v", c.comment, err)
		}
		if a.ID <= 0 || a.Filename != name || a.Size != int64(c.n) || a.Hashes != hashesOf(body) || !a.CreatedAt.Equal(t0) {
			t.Errorf("%s: uploaded %+v, want size %d, hashes %+v", c.comment, a, c.n, hashesOf(body))
		}
		got, err := f.svc.Lookup(t.Context(), a.ID)
		if err != nil || got != a {
			t.Errorf("%s: Lookup = %+v, %v; want %+v", c.comment, got, err, a)
		}
		stored, err := os.ReadFile(filepath.Join(f.dir, a.Key))
		if err != nil || !bytes.Equal(stored, body) {
			t.Errorf("%s: the file holds %d bytes (%v), want the %d uploaded", c.comment, len(stored), err, c.n)
		}
	}
	list, err := f.svc.List(t.Context(), 0, 2)
	if err != nil || len(list) != 2 || list[0].Filename != "fw-2.bin" || list[1].Filename != "fw-1.bin" {
		t.Fatalf("List(0, 2) = %+v, %v; want fw-2.bin, fw-1.bin", list, err)
	}
	list, err = f.svc.List(t.Context(), list[1].ID, 10)
	if err != nil || len(list) != 1 || list[0].Filename != "fw-0.bin" {
		t.Fatalf("List(after fw-1) = %+v, %v; want fw-0.bin", list, err)
	}
	if names := f.files(); len(names) != 3 {
		t.Errorf("files: %v, want three", names)
	}
	var action string
	if err := f.st.DB().QueryRow("SELECT action FROM audit_log WHERE actor = 'ops' ORDER BY id LIMIT 1").Scan(&action); err != nil || action != "artifact.create" {
		t.Errorf("audit: %q, %v; want artifact.create by ops", action, err)
	}
}

// A body over the limit is too_large and leaves nothing: refused at once when its
// stated length says so, and when it passes the limit as it streams. A body of exactly
// the limit is taken.
func TestUploadOverLimitLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, artifact.Config{MaxBytes: 100_000})
	body := randomBytes(100_001)
	for _, size := range []int64{-1, 100_001} {
		_, err := f.svc.Upload(t.Context(), "ops", "big.bin", bytes.NewReader(body), size)
		if codeOf(err) != taskd.CodeTooLarge {
			t.Errorf("size %d: %v, want too_large", size, err)
		}
		f.nothingLeft()
	}
	// A stated length that lies: the bytes past the limit still stop the upload.
	_, err := f.svc.Upload(t.Context(), "ops", "big.bin", bytes.NewReader(body), 10)
	if code := codeOf(err); code != taskd.CodeTooLarge && code != taskd.CodeInvalid {
		t.Errorf("a lying length: %v, want too_large or invalid_argument", err)
	}
	f.nothingLeft()
	if _, err := f.svc.Upload(t.Context(), "ops", "exact.bin", bytes.NewReader(body[:100_000]), -1); err != nil {
		t.Fatalf("exactly the limit: %v", err)
	}
}

// cutReader yields n bytes of b, then fails as a connection cut short does.
type cutReader struct {
	b   []byte
	n   int
	err error
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.n == 0 {
		return 0, c.err
	}
	k := min(len(p), c.n, len(c.b))
	copy(p, c.b[:k])
	c.b, c.n = c.b[k:], c.n-k
	return k, nil
}

// A body that fails midway (a cut connection) is invalid_argument with its cause, and
// leaves no record and no file, whether or not its length was stated; so does a body
// shorter than its stated length.
func TestUploadCutBodyLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, artifact.Config{})
	body := randomBytes(200_000)
	for _, size := range []int64{-1, 200_000} {
		r := &cutReader{b: body, n: 70_000, err: io.ErrUnexpectedEOF}
		_, err := f.svc.Upload(t.Context(), "ops", "cut.bin", r, size)
		if codeOf(err) != taskd.CodeInvalid || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("size %d: %v, want invalid_argument caused by io.ErrUnexpectedEOF", size, err)
		}
		f.nothingLeft()
	}
	_, err := f.svc.Upload(t.Context(), "ops", "short.bin", bytes.NewReader(body[:1000]), 2000)
	if codeOf(err) != taskd.CodeInvalid {
		t.Errorf("short of its length: %v, want invalid_argument", err)
	}
	f.nothingLeft()
}

// failingStore fails to write records.
type failingStore struct{ artifact.Store }

func (failingStore) CreateArtifact(context.Context, string, taskd.Artifact) (taskd.Artifact, error) {
	return taskd.Artifact{}, taskd.Unavailable("mysql", errors.New("gone"))
}

// When the record cannot be written, the bytes already stored are removed.
func TestUploadWithoutRecordRemovesTheBytes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	svc := artifact.New(failingStore{}, artifact.Config{Dir: dir}, clock.NewFake(t0), slog.New(slog.DiscardHandler))
	_, err := svc.Upload(t.Context(), "ops", "fw.bin", bytes.NewReader(randomBytes(1000)), -1)
	if codeOf(err) != taskd.CodeUnavailable {
		t.Fatalf("upload: %v, want unavailable", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left: %v", entries)
	}
}

// Filenames: no path, printable, bounded.
func TestUploadRefusesBadFilenames(t *testing.T) {
	t.Parallel()
	f := newFixture(t, artifact.Config{})
	for _, name := range []string{"", ".", "..", "a/b.bin", `a\b.bin`, "../etc/passwd", "fw\x00.bin", "fw\n.bin",
		"fw\u202e.bin", " fw.bin", "fw.bin ", strings.Repeat("x", 256), "\xff.bin"} {
		_, err := f.svc.Upload(t.Context(), "ops", name, strings.NewReader("x"), 1)
		if codeOf(err) != taskd.CodeInvalid || !strings.Contains(err.Error(), "filename") {
			t.Errorf("filename %q: %v, want invalid_argument naming filename", name, err)
		}
	}
	f.nothingLeft()
	for _, name := range []string{"fw-1.2.3.swu", "Prüfung 2026.tar.gz", strings.Repeat("x", 255)} {
		if err := artifact.CheckFilename(name); err != nil {
			t.Errorf("filename %q refused: %v", name, err)
		}
	}
}

// serve runs Serve for id behind an HTTP server, as the DDI endpoint would, answering
// its errors with their status.
func serveHTTP(t *testing.T, svc *artifact.Service) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/"), 10, 64)
		if err := svc.Serve(w, r, id); err != nil {
			http.Error(w, string(taskd.ErrorCode(err)), map[taskd.Code]int{taskd.CodeNotFound: 404, taskd.CodeUnavailable: 503}[taskd.ErrorCode(err)])
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, method, url string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req) // no redirect followed
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// A device gets the bytes, a range of them (206), nothing new when its copy is
// current (If-None-Match: 304), the headers alone for HEAD; an unknown id is
// not_found; bytes missing from the directory are unavailable.
func TestServeFromTheDirectory(t *testing.T) {
	t.Parallel()
	f := newFixture(t, artifact.Config{})
	body := randomBytes(100_000)
	a, err := f.svc.Upload(t.Context(), "ops", "fw 1.bin", bytes.NewReader(body), -1)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveHTTP(t, f.svc)
	url := srv.URL + "/" + strconv.FormatInt(a.ID, 10)
	etag := `"` + a.Hashes.SHA256 + `"`

	resp, got := get(t, "GET", url, nil)
	if resp.StatusCode != 200 || !bytes.Equal(got, body) || resp.Header.Get("ETag") != etag ||
		resp.Header.Get("Accept-Ranges") != "bytes" || resp.Header.Get("Content-Type") != "application/octet-stream" ||
		resp.Header.Get("Content-Disposition") != `attachment; filename="fw 1.bin"` {
		t.Errorf("GET: %d, %d bytes, headers %v", resp.StatusCode, len(got), resp.Header)
	}
	resp, got = get(t, "GET", url, map[string]string{"Range": "bytes=1000-1999"})
	if resp.StatusCode != 206 || !bytes.Equal(got, body[1000:2000]) || resp.Header.Get("Content-Range") != "bytes 1000-1999/100000" {
		t.Errorf("GET a range: %d, %d bytes, Content-Range %q", resp.StatusCode, len(got), resp.Header.Get("Content-Range"))
	}
	resp, got = get(t, "GET", url, map[string]string{"Range": "bytes=99990-"})
	if resp.StatusCode != 206 || !bytes.Equal(got, body[99990:]) {
		t.Errorf("GET the tail: %d, %d bytes", resp.StatusCode, len(got))
	}
	// A resume against a copy that changed (If-Range names another) gets the whole.
	resp, got = get(t, "GET", url, map[string]string{"Range": "bytes=0-9", "If-Range": `"other"`})
	if resp.StatusCode != 200 || len(got) != len(body) {
		t.Errorf("GET with a stale If-Range: %d, %d bytes, want 200 and the whole", resp.StatusCode, len(got))
	}
	resp, got = get(t, "GET", url, map[string]string{"Range": "bytes=0-9", "If-Range": etag})
	if resp.StatusCode != 206 || !bytes.Equal(got, body[:10]) {
		t.Errorf("GET with a current If-Range: %d, %d bytes", resp.StatusCode, len(got))
	}
	resp, got = get(t, "GET", url, map[string]string{"If-None-Match": etag})
	if resp.StatusCode != 304 || len(got) != 0 {
		t.Errorf("GET If-None-Match: %d, %d bytes, want 304", resp.StatusCode, len(got))
	}
	resp, _ = get(t, "GET", url, map[string]string{"Range": "bytes=200000-"})
	if resp.StatusCode != 416 {
		t.Errorf("GET past the end: %d, want 416", resp.StatusCode)
	}
	resp, got = get(t, "HEAD", url, nil)
	if resp.StatusCode != 200 || len(got) != 0 || resp.Header.Get("Content-Length") != "100000" {
		t.Errorf("HEAD: %d, %d bytes, Content-Length %q", resp.StatusCode, len(got), resp.Header.Get("Content-Length"))
	}
	if resp, _ := get(t, "GET", srv.URL+"/999999", nil); resp.StatusCode != 404 {
		t.Errorf("GET an unknown id: %d, want 404", resp.StatusCode)
	}
	if err := os.Remove(filepath.Join(f.dir, a.Key)); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, "GET", url, nil); resp.StatusCode != 503 {
		t.Errorf("GET with the file gone: %d, want 503", resp.StatusCode)
	}
}

// task creates a task of kind whose params are params, and returns its key.
func (f *fixture) task(kind taskd.Kind, params string) taskd.TaskKey {
	f.t.Helper()
	ctx := f.t.Context()
	tpl, err := f.st.CreateTemplate(ctx, "ops", taskd.Template{Name: "ddi", Schema: []byte(`{}`)}, t0)
	if err != nil {
		f.t.Fatal(err)
	}
	t := taskd.Task{Key: taskd.TaskKey{Kind: kind}, Executor: "gid_fleet", StartTime: t0, TemplateID: tpl.ID,
		Params: []byte(params), DispatchTimes: 1, Mode: taskd.ModeOncePerUser, Priority: 5, Status: taskd.StatusActive}
	if kind == taskd.KindRotate {
		t.SpaceMinutes = 1440
	}
	t, err = f.st.CreateTask(ctx, "ops", t, t0)
	if err != nil {
		f.t.Fatal(err)
	}
	return t.Key
}

func ddiParams(artifacts ...string) string {
	return `{"chunks": [{"part": "os", "name": "fw", "version": "1.0", "artifacts": [` + strings.Join(artifacts, ", ") + `]}]}`
}

// An artifact that a live task (once or rotate) names in a chunk is not deleted: a
// conflict naming the tasks. Once they are deleted, so is the artifact, record and
// file. Tasks that name other artifacts (or the same number elsewhere) are no
// obstacle.
func TestDeleteInUse(t *testing.T) {
	t.Parallel()
	f := newFixture(t, artifact.Config{})
	a, err := f.svc.Upload(t.Context(), "ops", "fw.bin", bytes.NewReader(randomBytes(5000)), -1)
	if err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatInt(a.ID, 10)
	other := strconv.FormatInt(a.ID*10+1, 10)
	once := f.task(taskd.KindOnce, ddiParams(`{"artifact_id": `+other+`}`, `{"artifact_id": `+id+`}`))
	rotate := f.task(taskd.KindRotate, `{"chunks": [{"part": "bApp", "artifacts": [{"filename": "x", "size": 1, "hashes": {}, "url": "https://example.com/x"}]},
		{"part": "os", "artifacts": [{"artifact_id": "`+id+`"}]}]}`)
	f.task(taskd.KindOnce, ddiParams(`{"artifact_id": `+other+`}`))
	f.task(taskd.KindOnce, `{"artifact_id": `+id+`, "chunks": []}`)
	f.task(taskd.KindRotate, `{"n": 1}`)

	err = f.svc.Delete(t.Context(), "ops", a.ID)
	var te *taskd.Error
	if !errors.As(err, &te) || te.Code != taskd.CodeConflict || !strings.Contains(te.Message, once.String()) ||
		!strings.Contains(te.Message, rotate.String()) {
		t.Fatalf("delete in use: %v, want conflict naming %s and %s", err, once, rotate)
	}
	if tasks := te.Details.(map[string]any)["tasks"]; len(tasks.([]string)) != 2 {
		t.Errorf("details: %v, want the two tasks", te.Details)
	}
	if _, err := os.Stat(filepath.Join(f.dir, a.Key)); err != nil {
		t.Errorf("the file is gone after a refused delete: %v", err)
	}
	for _, k := range []taskd.TaskKey{once, rotate} {
		if _, err := f.st.DeleteTask(t.Context(), "ops", k, nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.svc.Delete(t.Context(), "ops", a.ID); err != nil {
		t.Fatalf("delete once unused: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, a.Key)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file after the delete: %v, want gone", err)
	}
	if _, err := f.svc.Lookup(t.Context(), a.ID); codeOf(err) != taskd.CodeNotFound {
		t.Errorf("Lookup after the delete: %v, want not_found", err)
	}
	if err := f.svc.Delete(t.Context(), "ops", a.ID); codeOf(err) != taskd.CodeNotFound {
		t.Errorf("delete again: %v, want not_found", err)
	}
}

// An upload in two steps (Receive, then Keep or Discard) is Upload's: Receive stores
// and hashes the bytes without a record, Keep writes it, Discard leaves nothing.
// Digest hashes a body as an upload would, within the same limits, storing nothing.
func TestReceiveKeepDiscardAndDigest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, artifact.Config{MaxBytes: 1000})
	ctx := t.Context()
	body := randomBytes(700)
	got, n, err := f.svc.Digest(ctx, "fw.bin", bytes.NewReader(body), -1)
	if err != nil || n != 700 || got != hashesOf(body) {
		t.Fatalf("digest: %+v %d %v", got, n, err)
	}
	f.nothingLeft()
	for _, c := range []struct {
		body []byte
		size int64
		code taskd.Code
	}{
		{randomBytes(1001), -1, taskd.CodeTooLarge},
		{body, 2000, taskd.CodeTooLarge},
		{body, 701, taskd.CodeInvalid},
		{body, 699, taskd.CodeInvalid},
	} {
		if _, _, err := f.svc.Digest(ctx, "fw.bin", bytes.NewReader(c.body), c.size); codeOf(err) != c.code {
			t.Errorf("digest of %d bytes said to be %d: %v, want %s", len(c.body), c.size, err, c.code)
		}
	}

	received, err := f.svc.Receive(ctx, "fw.bin", bytes.NewReader(body), 700)
	if err != nil || received.ID != 0 || received.Hashes != hashesOf(body) || received.Size != 700 {
		t.Fatalf("receive: %+v %v", received, err)
	}
	if n := f.count(); n != 0 || len(f.files()) != 1 {
		t.Fatalf("after a receive: %d records, files %v", n, f.files())
	}
	f.svc.Discard(ctx, received)
	f.nothingLeft()
	if _, err := f.svc.Receive(ctx, "../fw.bin", bytes.NewReader(body), 700); codeOf(err) != taskd.CodeInvalid {
		t.Errorf("receive of a bad filename: %v", err)
	}
	if _, _, err := f.svc.Digest(ctx, "../fw.bin", bytes.NewReader(body), 700); codeOf(err) != taskd.CodeInvalid {
		t.Errorf("digest of a bad filename: %v", err)
	}
	received, err = f.svc.Receive(ctx, "fw.bin", bytes.NewReader(body), 700)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := f.svc.Keep(ctx, "alice", received)
	if err != nil || kept.ID == 0 || kept.Hashes != hashesOf(body) || kept.Filename != "fw.bin" {
		t.Fatalf("keep: %+v %v", kept, err)
	}
	if looked, err := f.svc.Lookup(ctx, kept.ID); err != nil || looked.Hashes != kept.Hashes || looked.Size != 700 {
		t.Fatalf("lookup after keep: %+v %v", looked, err)
	}
}
