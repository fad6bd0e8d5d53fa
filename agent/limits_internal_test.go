package agent

// What a hostile or broken server cannot make an agent do (issue 42): run more tasks
// than it asked for, spin on a Retry-After that overflows, hang on an enrollment,
// grow a metric series per template id it names.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskpull/taskd/agent/internal/wire"
)

// floodServer hands out n tasks on the first fetch, whatever was asked, and nothing
// after.
func floodServer(t *testing.T, n int) (*httptest.Server, *atomic.Int64) {
	var fetches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/fetch":
			var tasks []*wire.Task
			if fetches.Add(1) == 1 {
				for i := range n {
					tasks = append(tasks, &wire.Task{LogID: fmt.Sprintf("L%d", i), TaskID: fmt.Sprintf("T%d", i), Kind: "once",
						DueAt: time.Now(), TemplateID: 1, Params: json.RawMessage(`{}`), Attempt: 1})
				}
			}
			reply := map[string]any{"task": nil, "tasks": tasks}
			if len(tasks) > 0 {
				reply["task"] = tasks[0]
			}
			json.NewEncoder(w).Encode(reply)
		default:
			w.Write([]byte(`{}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &fetches
}

// A reply holding more tasks than the fetch asked for starts no more than were asked
// for: never more handlers at once than Concurrency.
func TestRepliesBeyondWhatWasAskedAreNotRun(t *testing.T) {
	t.Parallel()
	for _, concurrency := range []int{1, 3} {
		srv, _ := floodServer(t, 200)
		a, err := New(Config{URL: srv.URL, Key: "k", Concurrency: concurrency, Once: true, StartupJitter: -1,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		runs, now, peak := 0, 0, 0
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		err = a.Run(ctx, HandlerFunc(func(ctx context.Context, task *Task) Outcome {
			mu.Lock()
			runs++
			now++
			peak = max(peak, now)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond) // let handlers started together overlap
			mu.Lock()
			now--
			mu.Unlock()
			return Done(nil)
		}))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if runs > concurrency || peak > concurrency {
			t.Errorf("concurrency %d, a reply of 200 tasks: %d run, %d at once", concurrency, runs, peak)
		}
	}
}

// A Retry-After too large for a time.Duration (or a date centuries ahead) is a wait
// of at most maxRetryAfter, never a negative one.
func TestRetryAfterOverflowIsCapped(t *testing.T) {
	t.Parallel()
	for _, header := range []string{"10000000000", "9223372036854775807", "99999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", header)
			w.WriteHeader(http.StatusTooManyRequests)
		}))
		a, err := New(Config{URL: srv.URL, Key: "k", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.post(t.Context(), "/v1/fetch", "k", struct{}{}, nil)
		srv.Close()
		var ae *apiError
		if !errors.As(err, &ae) {
			t.Fatalf("Retry-After %s: %v", header, err)
		}
		if ae.retryAfter < 0 || ae.retryAfter > 10*time.Minute {
			t.Errorf("Retry-After %s: a wait of %v", header, ae.retryAfter)
		}
	}
}

// An enrollment the server never answers is given up after a bound, and tried again.
func TestSilentEnrollmentIsTriedAgain(t *testing.T) {
	t.Parallel()
	var enrolls, fetches atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/enroll":
			if enrolls.Add(1) == 1 {
				select { // silent until the agent gives up
				case <-r.Context().Done():
				case <-release:
				}
				return
			}
			w.Write([]byte(`{"client_key": "k"}`))
		case "/v1/fetch":
			fetches.Add(1)
			w.Write([]byte(`{"task": null}`))
		}
	}))
	t.Cleanup(srv.Close)
	defer close(release)
	a, err := New(Config{URL: srv.URL, UID: "u", EnrollSecret: "s", Once: true, StartupJitter: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a.enrollTimeout = 100 * time.Millisecond
	// The bound: Run would otherwise wait for ever on the first enrollment.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := a.Run(ctx, HandlerFunc(func(context.Context, *Task) Outcome { return Done(nil) })); err != nil {
		t.Fatal(err)
	}
	if enrolls.Load() < 2 || fetches.Load() < 1 {
		t.Errorf("a server silent on the first enrollment: %d enrollments, %d fetches; want it given up, enrolled again, and fetching", enrolls.Load(), fetches.Load())
	}
}

// A server naming ever new template ids does not grow the task metric without bound.
func TestTemplateLabelsBounded(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	for id := int64(1); id <= 1000; id++ {
		m.ran(id, "success", time.Millisecond)
	}
	if n := series(m.tasks); n > 101 {
		t.Errorf("1000 template ids: %d series of taskd_agent_task_seconds", n)
	}
	// The first ones keep their own series.
	m.ran(1, "success", time.Millisecond)
	if got := series(m.tasks); got > 101 {
		t.Errorf("%d series", got)
	}
}

// series counts the series c collects.
func series(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	n := 0
	for range ch {
		n++
	}
	return n
}
