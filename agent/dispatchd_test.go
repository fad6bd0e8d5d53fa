package agent_test

// Tests against a real dispatchd, started in process on its own database and Redis
// prefix, on the wall clock (the agent's leases run on it).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/agent/internal/wire"
	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

const adminToken = "agent-test-admin-token"

// dispatchd is a server under test: one database, one Redis prefix, one listening
// address that survives a restart.
type dispatchd struct {
	t      testing.TB
	st     *store.Store
	rdb    redis.UniversalClient
	cfg    app.Config
	log    *slog.Logger
	wrap   func(http.Handler) http.Handler
	URL    string
	addr   string
	srv    *httptest.Server
	app    *app.App
	client *http.Client
}

// startDispatchd starts a server; tweak adjusts its config, wrap (if not nil) the
// handler (to watch or disturb requests).
func startDispatchd(t testing.TB, tweak func(*app.Config), wrap func(http.Handler) http.Handler) *dispatchd {
	t.Helper()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	cfg := app.Config{RedisPrefix: prefix, CatchUp: time.Hour, AdminTokens: []string{adminToken},
		EnrollSecret: "agent-test-enroll-secret", MaxWait: 5 * time.Second, SweepInterval: time.Second,
		Node: "agent-test", RequestTimeout: time.Minute}
	if tweak != nil {
		tweak(&cfg)
	}
	if wrap == nil {
		wrap = func(h http.Handler) http.Handler { return h }
	}
	d := &dispatchd{t: t, st: st, rdb: rdb, cfg: cfg, wrap: wrap,
		log:    slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})),
		client: &http.Client{Timeout: time.Minute}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.serve(l)
	t.Cleanup(d.stop)
	return d
}

func (d *dispatchd) serve(l net.Listener) {
	a := app.New(d.cfg, app.Deps{Store: d.st, Redis: d.rdb, Clock: clock.Real{}, Log: d.log})
	d.app = a
	srv := httptest.NewUnstartedServer(d.wrap(a.Handler()))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	d.srv, d.addr, d.URL = srv, l.Addr().String(), srv.URL
}

// stop stops the server, cutting off the requests in progress.
func (d *dispatchd) stop() {
	if d.srv != nil {
		d.srv.CloseClientConnections()
		d.srv.Close()
		d.srv = nil
	}
}

// start starts a new server process (a new app over the same MySQL and Redis) on the
// address the stopped one had.
func (d *dispatchd) start() {
	d.t.Helper()
	var l net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if l, err = net.Listen("tcp", d.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		d.t.Fatalf("listen again on %s: %v", d.addr, err)
	}
	d.serve(l)
}

// do sends an admin request and decodes the reply; a status of 300 or more fails t.
func (d *dispatchd) admin(method, path string, body any) map[string]any {
	d.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.URL+path, r)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		d.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			d.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return out
}

// template creates a template with fields (name and schema by default).
func (d *dispatchd) template(fields map[string]any) int64 {
	d.t.Helper()
	body := map[string]any{"name": fmt.Sprintf("t%d", time.Now().UnixNano()), "schema": map[string]any{"type": "object"}}
	for k, v := range fields {
		body[k] = v
	}
	return int64(d.admin("POST", "/v1/admin/templates", body)["id"].(float64))
}

// task creates a once task for uid of template tpl, due now; fields add to it.
func (d *dispatchd) task(uid string, tpl int64, fields map[string]any) string {
	d.t.Helper()
	body := map[string]any{"executor": "uid_" + uid, "template_id": tpl,
		"start_time": time.Now().UTC().Format(time.RFC3339), "params": map[string]any{}}
	for k, v := range fields {
		body[k] = v
	}
	return d.admin("POST", "/v1/admin/tasks/once", body)["task_id"].(string)
}

func (d *dispatchd) key(uid string) string {
	d.t.Helper()
	return d.admin("POST", "/v1/admin/clients/"+uid+"/keys", nil)["client_key"].(string)
}

// fleetClient is a client as GET /v1/admin/clients lists it.
type fleetClient struct {
	UID   string      `json:"uid"`
	Agent *wire.Agent `json:"agent"`
}

// listed is uid as GET /v1/admin/clients lists it, once the polls the server answered
// are written (the fleet writes them every few seconds; this flushes them now).
func (d *dispatchd) listed(uid string) (fleetClient, bool) {
	d.t.Helper()
	if err := d.app.Fleet.Flush(context.Background()); err != nil {
		d.t.Fatalf("flush the fleet: %v", err)
	}
	q := url.Values{"limit": {"1000"}}
	for {
		out := d.admin("GET", "/v1/admin/clients?"+q.Encode(), nil)
		b, _ := json.Marshal(out["clients"])
		var cs []fleetClient
		json.Unmarshal(b, &cs)
		for _, c := range cs {
			if c.UID == uid {
				return c, true
			}
		}
		next, _ := out["next_cursor"].(string)
		if next == "" {
			return fleetClient{}, false
		}
		q.Set("cursor", next)
	}
}

// record is a dispatch record, as the admin API lists it.
type record struct {
	LogID   string          `json:"log_id"`
	TaskID  string          `json:"task_id"`
	Attempt int             `json:"attempt"`
	State   string          `json:"state"`
	Result  *string         `json:"result"`
	Detail  json.RawMessage `json:"detail"`
	Final   bool            `json:"final"`
}

// records lists the dispatch records matching query (uid=..., task_id=...), newest first.
func (d *dispatchd) records(query url.Values) []record {
	d.t.Helper()
	query.Set("limit", "1000")
	out := d.admin("GET", "/v1/admin/dispatches?"+query.Encode(), nil)
	b, _ := json.Marshal(out["dispatches"])
	var recs []record
	json.Unmarshal(b, &recs)
	return recs
}

// waitFor polls cond until it holds, failing t after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running is an agent running in the background of a test.
type running struct {
	stop func()
	done chan error
}

// runAgent runs a in the background; the test's cleanup stops it if the test did not.
func runAgent(t testing.TB, a *agent.Agent, h agent.Handler) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Error("the agent did not stop")
		}
	})
	return r
}

// wait stops the agent and returns Run's error.
func (r *running) wait(t testing.TB) error {
	t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(time.Minute):
		t.Fatal("the agent did not stop within a minute")
		return nil
	}
}

// testLogger logs to t at level WARN and above.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// newAgent makes an agent for d with cfg's other settings; no start-up wait.
func newAgent(t testing.TB, url string, cfg agent.Config) *agent.Agent {
	t.Helper()
	cfg.URL = url
	if cfg.StartupJitter == 0 {
		cfg.StartupJitter = -1
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// counter counts by key, safely.
type counter struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counter) add(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
	return c.m[k]
}

func (c *counter) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *counter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// metric is the value of m's metric name (a counter or gauge; a histogram's count)
// whose labels include the pairs given.
func metric(t testing.TB, m *agent.Metrics, name string, labelPairs ...string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, mm := range mf.GetMetric() {
			for i := 0; i+1 < len(labelPairs); i += 2 {
				found := false
				for _, lp := range mm.GetLabel() {
					if lp.GetName() == labelPairs[i] && lp.GetValue() == labelPairs[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case mm.Counter != nil:
				sum += mm.GetCounter().GetValue()
			case mm.Gauge != nil:
				sum += mm.GetGauge().GetValue()
			case mm.Histogram != nil:
				sum += float64(mm.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// quietLogger drops the logs of tests that provoke errors on purpose.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
