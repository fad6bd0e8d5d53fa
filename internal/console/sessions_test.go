package console

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// When Redis does not answer, a session is neither taken as signed out nor let in: the
// page says the console cannot reach its sessions (503), and the API is not called.
func TestSessionsUnavailable(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the API was called: %s %s", r.Method, r.URL)
	})
	c := New(api, slog.New(slog.NewTextHandler(io.Discard, nil)), Config{Redis: rdb,
		SessionKey: func(h string) string { return "test:" + h }, AdminTokens: []string{"token"}})
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/templates", nil)
	req.AddCookie(&http.Cookie{Name: cookieName, Value: "some-session"})
	rec := httptest.NewRecorder()
	c.Routes().ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("%d %s, want 503", rec.Code, rec.Header().Get("Location"))
	}
	if spanText(DefaultIdleTimeout) != "1 hour" || spanText(DefaultLifetime) != "12 hours" || spanText(90*60e9) != "90 minutes" {
		t.Fatalf("durations: %s, %s", spanText(DefaultIdleTimeout), spanText(DefaultLifetime))
	}
}

// While a dependency is away, every page says so: here the sessions' Redis, so the
// page is the one that says it cannot reach them, with the node's mode above it.
func TestPagesSayTheNodeIsDegraded(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	c := New(api, slog.New(slog.NewTextHandler(io.Discard, nil)), Config{Redis: rdb,
		SessionKey: func(h string) string { return "test:" + h }, AdminTokens: []string{"token"},
		Mode: func(context.Context) ([]string, string) { return []string{"redis"}, "fetches from MySQL" }})
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/templates", nil)
	req.AddCookie(&http.Cookie{Name: cookieName, Value: "some-session"})
	rec := httptest.NewRecorder()
	c.Routes().ServeHTTP(rec, req)
	want := "This node is degraded: redis unreachable. It serves fetches from MySQL."
	if !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("%d, page without %q:\n%s", rec.Code, want, rec.Body.String())
	}
}
