package admin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/admin"
	"github.com/taskpull/taskd/clientkey"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/queue"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// actor is the admin every test's changes are made as (the audit log records it).
const actor = "alice"

// bundle is what the admin service under test works with: the database and cache it
// changes, the client key service it issues keys through, and a dispatch service on
// the same database and cache, as an agent's window on what the changes did.
type bundle struct {
	t        *testing.T
	ctx      context.Context // carries actor
	clock    *clock.Fake
	store    *store.Store
	cache    *queue.Cache
	keys     *clientkey.Service
	dispatch *dispatch.Service
	http     *admin.Handlers
	// template's schema wants params.n, if present, to be an integer.
	template int64
}

// setup returns an admin service on a fresh database and Redis prefix, with a fake
// clock at t0 and one template created through it.
func setup(t *testing.T) (*admin.Service, *bundle) {
	t.Helper()
	db := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	clk := clock.NewFake(t0)
	cache := queue.NewCache(rdb, db, clk, queue.Config{Prefix: prefix})
	keys := clientkey.New(db, cache, clk, log, clientkey.Config{})
	svc := admin.NewService(db, cache, keys, clk, log)
	b := &bundle{t: t, ctx: admin.WithActor(t.Context(), actor), clock: clk, store: db, cache: cache, keys: keys,
		dispatch: dispatch.NewService(db, cache, clk, log, dispatch.Config{RequestTimeout: time.Minute}),
		http:     admin.NewHandlers(svc, log)}
	tpl, err := svc.CreateTemplate(b.ctx, taskd.Template{Name: "job", Schema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)})
	if err != nil {
		t.Fatalf("create template: %v", err)
	}
	b.template = tpl.ID
	return svc, b
}

// once is a once task for executor at start as the API's defaults make it, not yet
// stored.
func (b *bundle) once(executor string, start time.Time) taskd.Task {
	return taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: executor, StartTime: start,
		TemplateID: b.template, Params: json.RawMessage(`{"n":1}`), DispatchTimes: 1, Mode: taskd.ModeOncePerUser,
		Priority: 5, Status: taskd.StatusActive}
}

// create stores t through the admin service.
func (b *bundle) create(svc *admin.Service, t taskd.Task) taskd.Task {
	b.t.Helper()
	created, err := svc.CreateTask(b.ctx, t)
	if err != nil {
		b.t.Fatalf("create task: %v", err)
	}
	return created
}

// agent is a client agent with a key of its own.
type agent struct{ uid, hash string }

func (b *bundle) agent(uid string) agent {
	b.t.Helper()
	key, err := b.keys.Issue(b.ctx, actor, uid)
	if err != nil {
		b.t.Fatalf("issue key: %v", err)
	}
	_, hash, _ := clientkey.Parse(key)
	return agent{uid: uid, hash: hash}
}

// poll is a's next fetch, as the dispatch service answers it.
func (b *bundle) poll(a agent) dispatch.FetchResult {
	b.t.Helper()
	res, err := b.dispatch.Fetch(b.ctx, a.uid, a.hash, 0)
	if err != nil {
		b.t.Fatalf("fetch for %s: %v", a.uid, err)
	}
	return res
}

// done completes a's dispatch logID successfully.
func (b *bundle) done(a agent, logID string) {
	b.t.Helper()
	if err := b.dispatch.Complete(b.ctx, a.uid, a.hash, logID, taskd.ResultSuccess, nil); err != nil {
		b.t.Fatalf("complete %s: %v", logID, err)
	}
}

// serve sends a request for path to h mounted at pattern (chi reads the path's
// parameters) and decodes the JSON reply, if any.
func (b *bundle) serve(h http.Handler, method, pattern, path, body string) (int, map[string]any) {
	b.t.Helper()
	r := chi.NewRouter()
	r.Method(method, pattern, h)
	req := httptest.NewRequestWithContext(b.ctx, method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	var out map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			b.t.Fatalf("%s %s: reply is not JSON: %q", method, path, rec.Body.String())
		}
	}
	return rec.Code, out
}

// nextDue fails the test unless res hands out nothing and says the next task is due
// at want (nil: nothing is scheduled).
func nextDue(t *testing.T, what string, res dispatch.FetchResult, want *time.Time) {
	t.Helper()
	switch {
	case res.Task != nil:
		t.Fatalf("%s: got task %+v, want none", what, res.Task)
	case want == nil && res.NextDueAt != nil:
		t.Fatalf("%s: next_due_at %v, want none", what, res.NextDueAt)
	case want != nil && (res.NextDueAt == nil || !res.NextDueAt.Equal(*want)):
		t.Fatalf("%s: next_due_at %v, want %v", what, res.NextDueAt, *want)
	}
}

// got fails the test unless res hands out a task of key, and returns it.
func got(t *testing.T, what string, res dispatch.FetchResult, key taskd.TaskKey) *dispatch.Assignment {
	t.Helper()
	if res.Task == nil || res.Task.TaskID != key.String() {
		t.Fatalf("%s: got %+v, want a task of %s", what, res.Task, key)
	}
	return res.Task
}

func at(t time.Time) *time.Time { return &t }

// wantCode fails the test unless err carries code.
func wantCode(t *testing.T, what string, err error, code taskd.Code) {
	t.Helper()
	if taskd.ErrorCode(err) != code || err == nil {
		t.Fatalf("%s: err = %v, want %s", what, err, code)
	}
}
