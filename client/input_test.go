package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpull/taskd/client"
)

// What the client can tell is wrong is refused before anything is sent: a bad
// configuration, a task id of the wrong shape, a filter a list does not take, a write
// guarded by an empty version.
func TestRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	for _, cfg := range []client.Config{{URL: "localhost:8080", Token: "t"}, {URL: "ftp://h", Token: "t"}, {URL: "http://h"}} {
		if _, err := client.New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	defer srv.Close()
	c := newClient(t, srv.URL, client.Config{})
	ctx := t.Context()
	for name, err := range map[string]error{
		"task id without a kind": func() error { _, err := c.Task(ctx, "12"); return err }(),
		"task id of a campaign":  func() error { _, err := c.Task(ctx, "campaign:1"); return err }(),
		"a create without kind":  func() error { _, err := c.CreateTask(ctx, client.Task{Executor: "uid_1"}); return err }(),
		"a filter tasks do not take": func() error {
			_, err := client.Collect(c.Tasks(ctx, client.Filter{UID: "1"}))
			return err
		}(),
		"an empty version": func() error {
			_, err := c.UpdateTask(ctx, "once:1", map[string]any{"priority": 1}, client.IfMatch(""))
			return err
		}(),
	} {
		if err == nil || !strings.HasPrefix(err.Error(), "client: ") {
			t.Errorf("%s: %v, want the client's own error", name, err)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// A reply that is not the API's error shape (a proxy's page) is still an *Error, with
// its status and the start of its body.
func TestErrorOfAProxy(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	defer srv.Close()
	_, err := newClient(t, srv.URL, client.Config{}).Overview(t.Context())
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 502 || e.Code != "bad_gateway" || !strings.Contains(e.Message, "bad gateway") ||
		e.RetryAfter < 59*time.Minute {
		t.Errorf("%v (%+v)", err, e)
	}
}
