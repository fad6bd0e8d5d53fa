package client_test

// Tests against a real dispatchd, started in process on its own database and Redis
// prefix.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/client"
	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// adminToken is the admin token the clients send; the server knows it by the name
// "producer" (DISPATCH_ADMIN_TOKENS' name=token form), which the audit log shows.
const adminToken = "client-test-admin-token"

// server is a dispatchd under test; more nodes may join it (node).
type server struct {
	t   testing.TB
	st  *store.Store
	rdb redis.UniversalClient
	cfg app.Config
	URL string
	// routes counts the requests each route pattern answered ("GET /v1/admin/tasks").
	mu     sync.Mutex
	routes map[string]int
}

// startServer starts a node on a fresh database and Redis prefix; wrap (if not nil)
// wraps its handler.
func startServer(t testing.TB, wrap func(http.Handler) http.Handler) *server {
	t.Helper()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	s := &server{t: t, st: st, rdb: rdb, routes: map[string]int{},
		cfg: app.Config{RedisPrefix: prefix, CatchUp: time.Hour, AdminTokens: []string{"producer=" + adminToken},
			MaxWait: 5 * time.Second, SweepInterval: time.Second, Node: "client-test", RequestTimeout: time.Minute,
			ArtifactDir: t.TempDir()}}
	s.URL = s.node(wrap)
	return s
}

// node starts one more node over the server's MySQL and Redis and returns its URL.
func (s *server) node(wrap func(http.Handler) http.Handler) string {
	s.t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	a := app.New(s.cfg, app.Deps{Store: s.st, Redis: s.rdb, Clock: clock.Real{}, Log: log})
	var h http.Handler = s.record(a.Handler())
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	s.t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

// record counts each request under the route pattern chi matched for it.
func (s *server) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rctx := chi.NewRouteContext()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx)))
		s.mu.Lock()
		s.routes[r.Method+" "+rctx.RoutePattern()]++
		s.mu.Unlock()
	})
}

// client is a client of url with cfg's other settings.
func newClient(t testing.TB, url string, cfg client.Config) *client.Client {
	t.Helper()
	cfg.URL = url
	if cfg.Token == "" {
		cfg.Token = adminToken
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runAgent runs an agent for uid until nothing is due, answering each task with
// handle.
func runAgent(t testing.TB, c *client.Client, url, uid string, handle func(*agent.Task) agent.Outcome) {
	t.Helper()
	key, err := c.IssueKey(context.Background(), uid)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{URL: url, Key: key, Once: true, StartupJitter: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background(), agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
		return handle(task)
	}))
	if err != nil {
		t.Fatalf("agent %s: %v", uid, err)
	}
}

// name is a name no other test uses.
func name(prefix string) string { return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()) }
