package dispatch_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/clientkey"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/queue"
)

// t0 is where every test's fake clock starts; leases, retries and due times are
// reached by moving it, never by sleeping.
var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// bundle is what the service under test runs on, real MySQL and Redis of the test's
// own, and helpers that put tasks, groups and agents there.
type bundle struct {
	t      *testing.T
	ctx    context.Context
	clock  *clock.Fake
	store  *store.Store
	cache  *queue.Cache
	keys   *clientkey.Service
	rdb    redis.UniversalClient
	prefix string
	log    *slog.Logger
	// template is a template whose schema takes any object.
	template int64
}

// setup returns a dispatch service over a fresh database and Redis prefix, wired as
// internal/app wires it, with a fake clock at t0.
func setup(t *testing.T) (*dispatch.Service, *bundle) {
	t.Helper()
	return setupOn(t, testenv.Store(t))
}

// setupWith is setup on a store opened with opt (the group commit's shape).
func setupWith(t *testing.T, opt store.OpenOptions) (*dispatch.Service, *bundle) {
	t.Helper()
	st, err := store.Open(context.Background(), testenv.MySQLDSN(t), opt)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return setupOn(t, st)
}

func setupOn(t *testing.T, st *store.Store) (*dispatch.Service, *bundle) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	b := &bundle{t: t, ctx: t.Context(), clock: clock.NewFake(t0), store: st, rdb: rdb, prefix: prefix,
		log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	b.cache = queue.NewCache(rdb, b.store, b.clock, queue.Config{Prefix: prefix, CatchUp: time.Hour})
	b.keys = clientkey.New(b.store, b.cache, b.clock, b.log, clientkey.Config{})
	tpl, err := b.store.CreateTemplate(b.ctx, "test", taskd.Template{Name: "any", Schema: json.RawMessage(`{"type":"object"}`)}, t0)
	if err != nil {
		t.Fatalf("template: %v", err)
	}
	b.template = tpl.ID
	// The request bound is wide: the race detector on a busy machine is slow, and no
	// test here is about the bound.
	svc := dispatch.NewService(b.store, b.cache, b.clock, b.log, dispatch.Config{RequestTimeout: time.Minute})
	return svc, b
}

// task stores a task for executor ("uid_1", "gid_g") due at start, with the API's
// defaults (a once task, quota 1, once_per_user, one attempt, no lease) changed by
// edit, and makes its executor's heaps stale as the admin service would.
func (b *bundle) task(executor string, start time.Time, edit ...func(*taskd.Task)) taskd.TaskKey {
	b.t.Helper()
	t := taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: executor, StartTime: start,
		TemplateID: b.template, Params: json.RawMessage(`{"n":1}`), DispatchTimes: 1, Mode: taskd.ModeOncePerUser,
		Priority: 5, Status: taskd.StatusActive}
	for _, e := range edit {
		e(&t)
	}
	t, err := b.store.CreateTask(b.ctx, "test", t, b.clock.Now())
	if err != nil {
		b.t.Fatalf("create task: %v", err)
	}
	e, _ := taskd.ParseExecutor(executor)
	if e.Group {
		err = b.cache.InvalidateGroup(b.ctx, e.ID)
	} else {
		err = b.cache.InvalidateUser(b.ctx, e.ID)
	}
	if err != nil {
		b.t.Fatalf("invalidate %s: %v", executor, err)
	}
	return t.Key
}

// Task edits for bundle.task.
func quota(n int) func(*taskd.Task)        { return func(t *taskd.Task) { t.DispatchTimes = n } }
func mode(m taskd.Mode) func(*taskd.Task)  { return func(t *taskd.Task) { t.Mode = m } }
func leaseSeconds(s int) func(*taskd.Task) { return func(t *taskd.Task) { t.Own.LeaseSeconds = &s } }
func params(p string) func(*taskd.Task)    { return func(t *taskd.Task) { t.Params = json.RawMessage(p) } }
func attempts(max, backoff int) func(*taskd.Task) {
	return func(t *taskd.Task) { t.Own.MaxAttempts, t.Own.RetryBackoffSeconds = &max, &backoff }
}

// group makes uids the members of gid.
func (b *bundle) group(gid string, uids ...string) {
	b.t.Helper()
	changed, err := b.store.ReplaceMembers(b.ctx, "test", gid, uids, b.clock.Now())
	if err != nil {
		b.t.Fatalf("members of %s: %v", gid, err)
	}
	for _, u := range changed {
		if err := b.cache.InvalidateUser(b.ctx, u); err != nil {
			b.t.Fatalf("invalidate %s: %v", u, err)
		}
	}
}

// agent is a client agent: its uid, its key, and the key's hash as fetch checks it.
type agent struct{ uid, key, hash string }

// agent issues a client key to uid.
func (b *bundle) agent(uid string) agent {
	b.t.Helper()
	key, err := b.keys.Issue(b.ctx, "test", uid)
	if err != nil {
		b.t.Fatalf("issue key for %s: %v", uid, err)
	}
	_, hash, ok := clientkey.Parse(key)
	if !ok {
		b.t.Fatalf("issued key %q does not parse", key)
	}
	return agent{uid: uid, key: key, hash: hash}
}

// fetch fetches for a without waiting, failing the test on an error.
func (b *bundle) fetch(svc *dispatch.Service, a agent) dispatch.FetchResult {
	b.t.Helper()
	res, err := svc.Fetch(b.ctx, a.uid, a.hash, 0)
	if err != nil {
		b.t.Fatalf("fetch for %s: %v", a.uid, err)
	}
	return res
}

// mustGet fetches for a and fails the test unless it hands out a task of key.
func (b *bundle) mustGet(svc *dispatch.Service, a agent, key taskd.TaskKey) *dispatch.Assignment {
	b.t.Helper()
	res := b.fetch(svc, a)
	if res.Task == nil || res.Task.TaskID != key.String() {
		b.t.Fatalf("fetch for %s: got %+v, want a task of %s", a.uid, res.Task, key)
	}
	return res.Task
}

// mustGetNothing fetches for a and fails the test if it hands out a task.
func (b *bundle) mustGetNothing(svc *dispatch.Service, a agent) dispatch.FetchResult {
	b.t.Helper()
	res := b.fetch(svc, a)
	if res.Task != nil {
		b.t.Fatalf("fetch for %s: got %+v, want no task", a.uid, res.Task)
	}
	return res
}

// complete completes a's dispatch logID with result, failing the test on an error.
func (b *bundle) complete(svc *dispatch.Service, a agent, logID string, result taskd.Result) {
	b.t.Helper()
	if err := svc.Complete(b.ctx, a.uid, a.hash, logID, result, nil); err != nil {
		b.t.Fatalf("complete %s for %s: %v", logID, a.uid, err)
	}
}

// record reads a dispatch record from MySQL.
func (b *bundle) record(logID string) *taskd.Dispatch {
	b.t.Helper()
	d, err := b.store.GetDispatch(b.ctx, logID)
	if err != nil {
		b.t.Fatalf("dispatch %s: %v", logID, err)
	}
	return d
}

// count runs a COUNT-like query on the test's database.
func (b *bundle) count(query string, args ...any) int {
	b.t.Helper()
	var n int
	if err := b.store.DB().QueryRowContext(b.ctx, query, args...).Scan(&n); err != nil {
		b.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// wantClaimed fails the test unless the one occurrence claimed has n slots taken.
func (b *bundle) wantClaimed(n int) {
	b.t.Helper()
	if got := b.count("SELECT claimed FROM occurrence_claim"); got != n {
		b.t.Fatalf("claimed %d, want %d", got, n)
	}
}

// flushRedis drops every cached key of the test: what MySQL holds must be enough.
func (b *bundle) flushRedis() {
	b.t.Helper()
	testenv.DeletePrefix(b.t, b.rdb, b.prefix)
}

// wantCode fails the test unless err carries code.
func wantCode(t *testing.T, what string, err error, code taskd.Code) {
	t.Helper()
	if got := taskd.ErrorCode(err); err == nil || got != code {
		t.Fatalf("%s: err = %v (code %s), want %s", what, err, got, code)
	}
}

// sameTime fails the test unless got is want.
func sameTime(t *testing.T, what string, got *time.Time, want time.Time) {
	t.Helper()
	if got == nil || !got.Equal(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}
