package client_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd/client"
)

// fault answers the first n requests matching method and path itself (status, with
// Retry-After retryAfter), or, with status 0, lets them through and then cuts the
// connection before the reply: a reply lost. It counts the requests and keeps their
// Idempotency-Keys.
type fault struct {
	method, path string
	n            int
	status       int
	retryAfter   string
	passThrough  bool // the server does the request, the client gets status instead

	mu    sync.Mutex
	seen  int
	at    []time.Time
	keys  []string
	reply []string // Idempotent-Replayed of the replies let through
}

func (f *fault) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != f.method || r.URL.Path != f.path {
			next.ServeHTTP(w, r)
			return
		}
		f.mu.Lock()
		f.seen++
		f.at = append(f.at, time.Now())
		f.keys = append(f.keys, r.Header.Get("Idempotency-Key"))
		hit := f.seen <= f.n
		f.mu.Unlock()
		if !hit {
			next.ServeHTTP(w, r)
			f.mu.Lock()
			f.reply = append(f.reply, w.Header().Get("Idempotent-Replayed"))
			f.mu.Unlock()
			return
		}
		if f.passThrough || f.status == 0 {
			next.ServeHTTP(&discard{header: http.Header{}}, r)
		}
		if f.status == 0 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		code := map[int]string{429: "rate_limited", 503: "unavailable"}[f.status]
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": "injected"}})
	})
}

func (f *fault) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// A 429's Retry-After is waited out and the request sent again, up to MaxRetries; one
// longer than MaxRetryWait is returned at once, as is a 429 past the retries.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	f := &fault{method: "GET", path: "/v1/admin/templates", n: 2, status: 429, retryAfter: "1"}
	s := startServer(t, f.wrap)
	c := newClient(t, s.URL, client.Config{})
	if _, err := c.Templates(t.Context()); err != nil {
		t.Fatalf("Templates after two 429s: %v", err)
	}
	if f.count() != 3 {
		t.Errorf("%d requests, want 3 (two refused, one answered)", f.count())
	}
	for i := 1; i < len(f.at); i++ {
		if gap := f.at[i].Sub(f.at[i-1]); gap < time.Second {
			t.Errorf("try %d came %s after the one before, within Retry-After: 1", i+1, gap)
		}
	}

	long := &fault{method: "GET", path: "/v1/admin/overview", n: 10, status: 429, retryAfter: "120"}
	s = startServer(t, long.wrap)
	c = newClient(t, s.URL, client.Config{MaxRetryWait: 30 * time.Second})
	_, err := c.Overview(t.Context())
	var e *client.Error
	if !errors.As(err, &e) || e.Code != "rate_limited" || e.RetryAfter != 120*time.Second || long.count() != 1 {
		t.Errorf("a Retry-After past MaxRetryWait: %v (%+v), %d requests; want the error at once", err, e, long.count())
	}

	always := &fault{method: "GET", path: "/v1/admin/overview", n: 10, status: 503, retryAfter: "0"}
	s = startServer(t, always.wrap)
	c = newClient(t, s.URL, client.Config{MaxRetries: 2})
	if _, err := c.Overview(t.Context()); !errors.As(err, &e) || e.Status != 503 || always.count() != 3 {
		t.Errorf("503 on every try: %v, %d requests; want the 503 after 3", err, always.count())
	}
	never := &fault{method: "GET", path: "/v1/admin/overview", n: 10, status: 503}
	s = startServer(t, never.wrap)
	c = newClient(t, s.URL, client.Config{MaxRetries: -1})
	if _, err := c.Overview(t.Context()); err == nil || never.count() != 1 {
		t.Errorf("MaxRetries -1: %v, %d requests; want one", err, never.count())
	}
}

// A create whose reply is lost (the server made it, the client got a 503, or the
// connection broke) is sent again with the same Idempotency-Key, and the server
// answers the first reply: one record. A write no key or version guards is not sent
// again after a 503.
func TestCreatesRetriedSafely(t *testing.T) {
	t.Parallel()
	for _, f := range []*fault{
		{method: "POST", path: "/v1/admin/templates", n: 1, status: 503, retryAfter: "0", passThrough: true},
		{method: "POST", path: "/v1/admin/templates", n: 1, status: 0}, // the connection cut
	} {
		s := startServer(t, f.wrap)
		c := newClient(t, s.URL, client.Config{})
		tmpl, err := c.CreateTemplate(t.Context(), client.Template{Name: "nightly"})
		if err != nil {
			t.Fatalf("status %d: %v", f.status, err)
		}
		all, err := c.Templates(t.Context())
		if err != nil || len(all) != 1 || all[0].ID != tmpl.ID {
			t.Errorf("status %d: templates %+v, %v; want the one created", f.status, all, err)
		}
		if f.count() != 2 || f.keys[0] == "" || f.keys[0] != f.keys[1] || f.reply[0] != "true" {
			t.Errorf("status %d: %d requests, keys %q, replayed %q; want two with one key, the second replayed",
				f.status, f.count(), f.keys, f.reply)
		}
	}

	f := &fault{method: "POST", path: "/v1/admin/dispatches/x-1/cancel", n: 1, status: 503, retryAfter: "0"}
	s := startServer(t, f.wrap)
	c := newClient(t, s.URL, client.Config{})
	if _, err := c.CancelDispatch(t.Context(), "x-1"); err == nil || f.count() != 1 {
		t.Errorf("cancel after a 503: %v, %d requests; want the 503, not sent again", err, f.count())
	}
}

// A create sent with one Idempotency-Key to two nodes, one after the other and then
// from many goroutines at once, makes one task; the same key with another body is a
// 422 naming the conflict.
func TestIdempotentCreatesAcrossNodes(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	nodes := []*client.Client{newClient(t, s.URL, client.Config{}), newClient(t, s.node(nil), client.Config{})}
	ctx := t.Context()
	tmpl, err := nodes[0].CreateTemplate(ctx, client.Template{Name: "report"})
	if err != nil {
		t.Fatal(err)
	}
	task := client.Task{Kind: "once", Executor: "uid_store-17", TemplateID: tmpl.ID,
		StartTime: time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC), Params: json.RawMessage(`{"month":"2026-11"}`)}
	first, err := nodes[0].CreateTask(ctx, task, client.IdempotencyKey("report-2026-11-store-17"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := nodes[1].CreateTask(ctx, task, client.IdempotencyKey("report-2026-11-store-17"))
	if err != nil || again.TaskID != first.TaskID || again.Version != first.Version {
		t.Errorf("the same create on the other node: %+v, %v; want %s again", again, err, first.TaskID)
	}

	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Go(func() {
			got, err := nodes[i%2].CreateTask(ctx, task, client.IdempotencyKey("report-2026-12-store-17"))
			ids[i], errs[i] = got.TaskID, err
		})
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Errorf("concurrent create %d: %s, %v; want every one %s", i, ids[i], errs[i], ids[0])
		}
	}
	all, err := client.Collect(nodes[1].Tasks(ctx, client.Filter{}))
	if err != nil || len(all) != 2 {
		t.Errorf("tasks: %d, %v; want two (one per key)", len(all), err)
	}

	task.Priority = 9
	_, err = nodes[1].CreateTask(ctx, task, client.IdempotencyKey("report-2026-11-store-17"))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 422 || !strings.Contains(e.Message, "report-2026-11-store-17") {
		t.Errorf("the key again with another body: %v; want a 422 naming the key", err)
	}
}

// A write made against a version the record no longer has is refused with
// ErrPreconditionFailed, names the version now, and changes nothing; one against the
// version now goes through.
func TestConditionalWrites(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	alice, bob := newClient(t, s.URL, client.Config{}), newClient(t, s.URL, client.Config{})
	ctx := t.Context()
	tmpl, err := alice.CreateTemplate(ctx, client.Template{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := alice.CreateTask(ctx, client.Task{Kind: "once", Executor: "uid_1", TemplateID: tmpl.ID,
		StartTime: time.Now().Add(time.Hour), Params: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	read, err := bob.Task(ctx, task.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	edited, err := alice.UpdateTask(ctx, task.TaskID, map[string]any{"priority": 8}, client.IfMatch(task.Version))
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.UpdateTask(ctx, task.TaskID, map[string]any{"priority": 2}, client.IfMatch(read.Version))
	var e *client.Error
	if !errors.Is(err, client.ErrPreconditionFailed) || !errors.As(err, &e) || e.Current != edited.Version {
		t.Errorf("bob's stale edit: %v (current %q); want ErrPreconditionFailed naming %q", err, e.Current, edited.Version)
	}
	if now, _ := bob.Task(ctx, task.TaskID); now.Priority != 8 {
		t.Errorf("priority %d after the refused edit, want alice's 8", now.Priority)
	}
	if err := bob.DeleteTask(ctx, task.TaskID, client.IfMatch(read.Version)); !errors.Is(err, client.ErrPreconditionFailed) {
		t.Errorf("bob's stale delete: %v", err)
	}

	spec := client.CampaignSpec{Name: "c", TemplateID: tmpl.ID, Executor: "uid_1"}
	spec.Items.Count = 3
	camp, err := alice.CreateCampaign(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.MoveCampaign(ctx, camp.ID, "start", client.IfMatch(camp.Version)); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.MoveCampaign(ctx, camp.ID, "pause", client.IfMatch(camp.Version)); !errors.Is(err, client.ErrPreconditionFailed) {
		t.Errorf("a move against the campaign's version before its start: %v", err)
	}
}

// A delete whose reply was lost (the server deleted, the client got a 503) is sent
// again and its 404 taken for the success it is; a write made with IfMatch is not
// sent again after a 503, since a second try would find the version its first made.
func TestRetriedWritesAnswerTruly(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := newClient(t, s.URL, client.Config{})
	tmpl, err := c.CreateTemplate(t.Context(), client.Template{Name: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/admin/templates/" + strconv.FormatInt(tmpl.ID, 10)
	del := &fault{method: "DELETE", path: path, n: 1, status: 503, retryAfter: "0", passThrough: true}
	patch := &fault{method: "PATCH", path: path, n: 1, status: 503, retryAfter: "0", passThrough: true}
	faulty := newClient(t, s.node(func(h http.Handler) http.Handler { return patch.wrap(del.wrap(h)) }), client.Config{})

	_, err = faulty.UpdateTemplate(t.Context(), tmpl.ID, map[string]any{"lease_seconds": 30}, client.IfMatch(tmpl.Version))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 503 || patch.count() != 1 {
		t.Errorf("a write made with IfMatch after a 503: %v, %d requests; want the 503, not sent again", err, patch.count())
	}
	if err := faulty.DeleteTemplate(t.Context(), tmpl.ID); err != nil || del.count() != 2 {
		t.Errorf("a delete whose reply was lost: %v, %d requests; want success after two", err, del.count())
	}
	if _, err := c.Template(t.Context(), tmpl.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the template after the delete: %v", err)
	}
}

// A 429 means nothing was done: a delete sent again after one that finds nothing is
// the error it is.
func TestDeleteAfterARateLimitIsNotFound(t *testing.T) {
	t.Parallel()
	f := &fault{method: "DELETE", path: "/v1/admin/templates/4242", n: 1, status: 429, retryAfter: "0"}
	s := startServer(t, f.wrap)
	c := newClient(t, s.URL, client.Config{})
	if err := c.DeleteTemplate(t.Context(), 4242); !errors.Is(err, client.ErrNotFound) || f.count() != 2 {
		t.Errorf("deleting a template that never was, after a 429: %v, %d requests; want ErrNotFound after two", err, f.count())
	}
}
