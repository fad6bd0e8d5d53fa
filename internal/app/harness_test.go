package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/queue"
	"github.com/taskpull/taskd/schedule"
)

const adminToken = "test-admin-token"

// t0 is the fake clock's start: tests move time by hand.
var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// countingLoader counts heap rebuilds (LoadSource calls) and can hold a rebuild between
// its MySQL read and its Redis write.
type countingLoader struct {
	queue.Loader
	rebuilds atomic.Int64
	mu       sync.Mutex
	hold     func() // called after LoadSource returns, if set
}

func (l *countingLoader) LoadSource(ctx context.Context, uid string, groups []string, from, until time.Time) (schedule.Source, error) {
	l.rebuilds.Add(1)
	src, err := l.Loader.LoadSource(ctx, uid, groups, from, until)
	l.mu.Lock()
	hold := l.hold
	l.mu.Unlock()
	if hold != nil {
		hold()
	}
	return src, err
}

// env is a test deployment: one database, one Redis prefix, one fake clock, and n
// server instances sharing them, each with its own HTTP server.
type env struct {
	t       testing.TB
	clock   *clock.Fake
	store   *store.Store
	rdb     redis.UniversalClient
	prefix  string
	apps    []*app.App
	loaders []*countingLoader
	urls    []string
	client  *http.Client
}

func newEnv(t testing.TB, instances int) *env {
	t.Helper()
	return newEnvWith(t, instances, nil)
}

// newEnvWith is newEnv with the instances' config adjusted by tweak.
func newEnvWith(t testing.TB, instances int, tweak func(*app.Config)) *env {
	t.Helper()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	e := &env{t: t, clock: clock.NewFake(t0), store: st, rdb: rdb, prefix: prefix,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}}
	// Errors (internal ones are logged once, at the top) show in the test output.
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	// The request bound is wide: under the race detector, a thousand concurrent fetches
	// on two cores queue for longer than production's default; tests of the bound set
	// their own.
	cfg := app.Config{RedisPrefix: prefix, CatchUp: time.Hour, AdminTokens: []string{adminToken},
		EnrollSecret: "enroll-secret", MaxWait: 5 * time.Second, SweepInterval: time.Second, Node: "test",
		RequestTimeout: time.Minute}
	if tweak != nil {
		tweak(&cfg)
	}
	node := cfg.Node
	for i := 0; i < instances; i++ {
		loader := &countingLoader{Loader: st}
		if instances > 1 { // nodes of their own, as in production: the leases tell them apart
			cfg.Node = fmt.Sprintf("%s-%d", node, i)
		}
		a := app.New(cfg, app.Deps{Store: st, Redis: rdb, Clock: e.clock, Log: log, Loader: loader})
		srv := httptest.NewServer(a.Handler())
		t.Cleanup(srv.Close)
		e.apps = append(e.apps, a)
		e.loaders = append(e.loaders, loader)
		e.urls = append(e.urls, srv.URL)
	}
	return e
}

// do sends a request to instance i and decodes the JSON reply into a map.
func (e *env) do(i int, method, path, token string, body any) (int, map[string]any) {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = bytes.NewBufferString(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		buf, _ := json.Marshal(b)
		r = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, e.urls[i]+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Errorf("%s %s: %v", method, path, err)
		return 0, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			e.t.Errorf("%s %s: reply is not JSON: %q", method, path, raw)
		}
	}
	return resp.StatusCode, out
}

func (e *env) admin(method, path string, body any) map[string]any {
	e.t.Helper()
	code, out := e.do(0, method, path, adminToken, body)
	if code >= 300 {
		e.t.Fatalf("%s %s: %d %v", method, path, code, out)
	}
	return out
}

func (e *env) template() int64 {
	e.t.Helper()
	out := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "t",
		"schema": map[string]any{"type": "object"}})
	return int64(out["id"].(float64))
}

// task creates a task; fields override the defaults.
func (e *env) task(kind string, fields map[string]any) string {
	e.t.Helper()
	body := map[string]any{"template_id": e.template(), "params": map[string]any{"n": 1}}
	for k, v := range fields {
		body[k] = v
	}
	return e.admin("POST", "/v1/admin/tasks/"+kind, body)["task_id"].(string)
}

func (e *env) key(uid string) string {
	e.t.Helper()
	return e.admin("POST", "/v1/admin/clients/"+uid+"/keys", nil)["client_key"].(string)
}

type task struct {
	LogID    string     `json:"log_id"`
	TaskID   string     `json:"task_id"`
	DueAt    time.Time  `json:"due_at"`
	Redo     bool       `json:"redo"`
	Attempt  int        `json:"attempt"`
	LeaseExp *time.Time `json:"lease_expires_at"`
	// Checkpoint is the saved progress the task came with, as JSON ("" for none).
	Checkpoint json.RawMessage `json:"checkpoint"`
	// Stage and Context: a multi-stage task's.
	Stage   string          `json:"stage"`
	Context json.RawMessage `json:"context"`
	// CampaignID and Item: a campaign item's.
	CampaignID *int64 `json:"campaign_id"`
	Item       any    `json:"item"`
}

type fetchReply struct {
	Task      *task      `json:"task"`
	NextDueAt *time.Time `json:"next_due_at"`
}

// fetch polls as the key's owner through instance i; it fails the test on non-200.
func (e *env) fetch(i int, key string) fetchReply {
	e.t.Helper()
	code, out := e.do(i, "POST", "/v1/fetch", key, nil)
	if code != 200 {
		e.t.Errorf("fetch: %d %v", code, out)
		return fetchReply{}
	}
	var r fetchReply
	b, _ := json.Marshal(out)
	json.Unmarshal(b, &r)
	return r
}

func (e *env) complete(i int, key, logID, result string) (int, map[string]any) {
	return e.do(i, "POST", "/v1/complete", key, map[string]any{"log_id": logID, "result": result})
}

func (e *env) mustComplete(key, logID string) {
	e.t.Helper()
	if code, out := e.complete(0, key, logID, "success"); code != 200 {
		e.t.Fatalf("complete %s: %d %v", logID, code, out)
	}
}

// taskOf fetches and returns the task id handed out, or "" for none.
func (e *env) taskOf(key string) string {
	e.t.Helper()
	r := e.fetch(0, key)
	if r.Task == nil {
		return ""
	}
	return r.Task.TaskID
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func (e *env) count(query string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.store.DB().QueryRow(query, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return n
}

func uidN(i int) string { return fmt.Sprintf("u%04d", i) }
