package agent_test

// The fault paths, against agenttest's fake server.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/agent/agenttest"
)

func fakeServer(t *testing.T) *agenttest.Server {
	t.Helper()
	s := agenttest.NewServer()
	t.Cleanup(s.Close)
	return s
}

// waitTask waits (a minute at most) for the fake's task id to finish and returns its
// results.
func waitTask(t *testing.T, s *agenttest.Server, id string) []agenttest.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := s.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func done(ctx context.Context, t *agent.Task) agent.Outcome { return agent.Done(nil) }

// 429 and 503 with Retry-After: each fetch after one waits the time it was told
// (the fake counts any that come early), and the task is done.
func TestFakeRetryAfterObeyed(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	s.Inject(agenttest.Fault{On: agenttest.Fetch, Status: 429, RetryAfter: time.Second, Times: 2})
	s.Inject(agenttest.Fault{On: agenttest.Fetch, Status: 503, RetryAfter: time.Second})
	id := s.Add(agenttest.Task{})
	m := agent.NewMetrics()
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), Metrics: m, Logger: quietLogger()}), agent.HandlerFunc(done))
	if cs := waitTask(t, s, id); len(cs) != 1 || cs[0].Result != "success" {
		t.Fatalf("results: %+v", cs)
	}
	r.wait(t)
	if n := s.EarlyRetries(); n != 0 {
		t.Errorf("%d requests came before their Retry-After", n)
	}
	if n := s.Count(agenttest.Fetch); n < 4 {
		t.Errorf("%d fetches, want the 3 refused and one more", n)
	}
	if got := metric(t, m, "taskd_agent_rate_limited_total", "request", "fetch"); got != 2 {
		t.Errorf("rate-limited metric %v, want 2", got)
	}
}

// A 429 on a progress report holds the lease extension back for its Retry-After, and
// fetches too (the server counts both against one limit).
func TestFakeProgressRetryAfterObeyed(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	s.Inject(agenttest.Fault{On: agenttest.Progress, Status: 429, RetryAfter: time.Second})
	id := s.Add(agenttest.Task{LeaseSeconds: 3, MaxAttempts: 1})
	var cause atomic.Value
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), Logger: quietLogger()}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			// Two extensions in: the refused one and the one after.
			deadline := time.Now().Add(30 * time.Second)
			for s.Count(agenttest.Progress) < 3 && time.Now().Before(deadline) && ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond)
			}
			if ctx.Err() != nil {
				cause.Store(context.Cause(ctx))
			}
			return agent.Done(nil)
		}))
	if cs := waitTask(t, s, id); len(cs) != 1 || cs[0].Result != "success" {
		t.Fatalf("results: %+v", cs)
	}
	r.wait(t)
	if c := cause.Load(); c != nil {
		t.Fatalf("handler cancelled: %v", c)
	}
	if n := s.EarlyRetries(); n != 0 {
		t.Errorf("%d requests came before their Retry-After", n)
	}
}

// Server errors and cut connections on fetches are retried (backoff), and the task is
// run once.
func TestFakeFetchFailuresRetried(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	s.Inject(agenttest.Fault{On: agenttest.Fetch, Status: 500, Times: 3})
	s.Inject(agenttest.Fault{On: agenttest.Fetch, Status: 503, Times: 1}) // no Retry-After: backoff
	s.Inject(agenttest.Fault{On: agenttest.Fetch, DropRequest: true, Times: 2})
	id := s.Add(agenttest.Task{})
	m := agent.NewMetrics()
	var runs atomic.Int64
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), Metrics: m, Logger: quietLogger()}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			runs.Add(1)
			return agent.Done(nil)
		}))
	waitTask(t, s, id)
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if runs.Load() != 1 {
		t.Errorf("ran %d times", runs.Load())
	}
	if got := metric(t, m, "taskd_agent_retries_total", "request", "fetch"); got < 6 {
		t.Errorf("fetch retries %v, want 6", got)
	}
}

// Results lost on the way (the request cut off, or applied and its reply cut off) are
// sent again; the server takes one result, and the handler runs once.
func TestFakeLostCompletesSentAgain(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	s.Inject(agenttest.Fault{On: agenttest.Complete, DropRequest: true, Times: 2})
	s.Inject(agenttest.Fault{On: agenttest.Complete, DropReply: true})
	id := s.Add(agenttest.Task{})
	var runs atomic.Int64
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), Logger: quietLogger()}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			runs.Add(1)
			return agent.Done(map[string]int{"n": 7})
		}))
	cs := waitTask(t, s, id)
	r.wait(t)
	if len(cs) != 1 || cs[0].Result != "success" || string(cs[0].Detail) != `{"n":7}` {
		t.Fatalf("results: %+v", cs)
	}
	if runs.Load() != 1 {
		t.Errorf("ran %d times", runs.Load())
	}
	if n := s.Count(agenttest.Complete); n < 4 {
		t.Errorf("%d requests carried the result, want the 3 lost and one more", n)
	}
}

// The server ends a running task's dispatch (its lease, as a lapse would): the next
// extension answers 409, the handler's context is cancelled with ErrLeaseLost, no
// result is sent, and the loss is counted.
func TestFakeLeaseTakenAway(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	id := s.Add(agenttest.Task{LeaseSeconds: 3, MaxAttempts: 1})
	m := agent.NewMetrics()
	started := make(chan string, 1)
	var cause atomic.Value
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), Metrics: m, Logger: quietLogger()}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			started <- task.LogID
			<-ctx.Done()
			cause.Store(context.Cause(ctx))
			return agent.Fail(ctx.Err())
		}))
	logID := <-started
	if !s.Expire(logID) {
		t.Fatal("the dispatch was not open")
	}
	waitTask(t, s, id)
	waitFor(t, time.Minute, "the handler cancelled", func() bool { return cause.Load() != nil })
	r.wait(t)
	if c, _ := cause.Load().(error); !errors.Is(c, agent.ErrLeaseLost) {
		t.Errorf("cause %v, want ErrLeaseLost", c)
	}
	if cs := s.Completions(); len(cs) != 0 {
		t.Errorf("results sent for a task taken away: %+v", cs)
	}
	if n := s.Count(agenttest.Complete); n != 0 {
		t.Errorf("%d results sent for a task taken away", n)
	}
	if got := metric(t, m, "taskd_agent_lease_lost_total"); got != 1 {
		t.Errorf("lease-lost metric %v, want 1", got)
	}
}

// Extensions that keep failing are retried without disturbing the handler, until the
// lease is about to lapse: then the handler's context is cancelled (ErrLeaseLost).
func TestFakeLeaseLapsesWhenExtensionsFail(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	s.Inject(agenttest.Fault{On: agenttest.Progress, Status: 500, Times: 1000})
	s.Add(agenttest.Task{LeaseSeconds: 2, MaxAttempts: 1})
	var cause atomic.Value
	var early atomic.Bool
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), Logger: quietLogger()}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			for s.Count(agenttest.Progress) < 2 && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
			// A failed extension (and its retry) did not cancel the handler.
			early.Store(ctx.Err() != nil && s.Count(agenttest.Progress) < 2)
			<-ctx.Done()
			cause.Store(context.Cause(ctx))
			return agent.Fail(ctx.Err())
		}))
	waitFor(t, time.Minute, "the handler cancelled", func() bool { return cause.Load() != nil })
	r.wait(t)
	if early.Load() {
		t.Error("the handler was cancelled before a failed extension was retried")
	}
	if c, _ := cause.Load().(error); !errors.Is(c, agent.ErrLeaseLost) {
		t.Errorf("cause %v, want ErrLeaseLost", c)
	}
}

// The server hands a running task out again (redo): the agent does not start a second
// handler on it.
func TestFakeRedoOfRunningTaskNotRunTwice(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	s.SetMaxInFlight("u", 2)
	id := s.Add(agenttest.Task{})
	var runs atomic.Int64
	started, release := make(chan string, 1), make(chan struct{})
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), Concurrency: 2, BusyPoll: 50 * time.Millisecond}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			runs.Add(1)
			select {
			case started <- task.LogID:
			default:
			}
			<-release
			return agent.Done(nil)
		}))
	logID := <-started
	if !s.Redo(logID) {
		t.Fatal("the dispatch was not open")
	}
	n := s.Count(agenttest.Fetch)
	waitFor(t, time.Minute, "two more fetches (the first of them hands out the redo)", func() bool {
		return s.Count(agenttest.Fetch) >= n+2
	})
	close(release)
	cs := waitTask(t, s, id)
	r.wait(t)
	if runs.Load() != 1 || len(cs) != 1 {
		t.Fatalf("ran %d times, results %+v; want once", runs.Load(), cs)
	}
}

// logRecorder keeps log messages.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, r.Message)
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }
func (l *logRecorder) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			return true
		}
	}
	return false
}

// A task finished here whose result was lost comes back (redo): the stored result is
// sent again, and the handler is not run again.
func TestFakeRedoOfFinishedTaskSendsStoredResult(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	s.Inject(agenttest.Fault{On: agenttest.Complete, DropRequest: true, Times: 4})
	id := s.Add(agenttest.Task{})
	var runs atomic.Int64
	logs := &logRecorder{}
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), Logger: slog.New(logs)}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			runs.Add(1)
			return agent.Done(map[string]string{"stored": "yes"})
		}))
	cs := waitTask(t, s, id)
	r.wait(t)
	if !logs.has("handed out again") {
		t.Fatal("no redo of the finished task: the test did not test")
	}
	if runs.Load() != 1 || len(cs) != 1 || string(cs[0].Detail) != `{"stored":"yes"}` {
		t.Fatalf("ran %d times, results %+v; want once, with the stored detail", runs.Load(), cs)
	}
}

// nested is JSON nested n deep.
func nested(n int) json.RawMessage {
	return json.RawMessage(strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n))
}

// A result refused for its detail (nested deeper than the server takes) is sent again
// with a short detail that says so; one too large for a request is sent short at
// once; one refused for its stage becomes a failure that says so.
func TestFakeRefusedResultsMended(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		out    agent.Outcome
		task   agenttest.Task
		result string
		want   string
	}{
		{"deep detail", agent.Done(nested(70)), agenttest.Task{}, "success", "nested deeper than 64 levels"},
		{"large detail", agent.Done(map[string]string{"log": strings.Repeat("x", 100<<10)}), agenttest.Task{}, "success",
			"over the server's request limit"},
		{"deep failure detail", agent.Fail(errors.New("x")).WithDetail(nested(80)), agenttest.Task{}, "failure", "nested deeper"},
		{"unknown stage", agent.NextStage("nope", nil, 0), agenttest.Task{Stages: []string{"a", "b"}}, "failure",
			`is not a stage`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			got, err := agenttest.Do(ctx, agent.HandlerFunc(func(context.Context, *agent.Task) agent.Outcome {
				return c.out
			}), c.task)
			if err != nil {
				t.Fatal(err)
			}
			if got.Result != c.result || !strings.Contains(string(got.Detail), c.want) || len(got.Detail) > 1024 {
				t.Fatalf("result %s, detail %.300s; want %s with a short detail saying %q", got.Result, got.Detail, c.result, c.want)
			}
		})
	}
}

// A result the server refuses with 409 (the task was taken away before it came in)
// is reported, not sent again: carried by a fetch, or on its own (while fetches are
// refused).
func TestFakeStaleResultNotRetried(t *testing.T) {
	t.Parallel()
	for _, alone := range []bool{false, true} {
		t.Run(fmt.Sprintf("alone=%v", alone), func(t *testing.T) {
			t.Parallel()
			s := fakeServer(t)
			id := s.Add(agenttest.Task{})
			m := agent.NewMetrics()
			r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), Metrics: m, Logger: quietLogger()}),
				agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
					s.Expire(task.LogID)
					if alone {
						s.Inject(agenttest.Fault{On: agenttest.Fetch, Status: 503, RetryAfter: time.Second, Times: 1000})
					}
					return agent.Done(nil)
				}))
			waitTask(t, s, id)
			waitFor(t, time.Minute, "the loss counted", func() bool { return metric(t, m, "taskd_agent_lease_lost_total") == 1 })
			if err := r.wait(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			want := 1
			if alone {
				want = 2 // the fetch refused with it, and once on its own
			}
			if n := s.Count(agenttest.Complete); n != want {
				t.Errorf("the stale result was sent %d times, want %d", n, want)
			}
			if cs := s.Completions(); len(cs) != 0 {
				t.Errorf("results taken: %+v", cs)
			}
		})
	}
}

// A result sent on its own is sent again after failures in transport until it lands,
// even while every fetch is refused (so no redo could bring the task back).
func TestFakeResultRetriedWhileFetchesFail(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	id := s.Add(agenttest.Task{})
	var runs atomic.Int64
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), Logger: quietLogger()}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			runs.Add(1)
			s.Inject(agenttest.Fault{On: agenttest.Complete, DropRequest: true, Times: 3})
			s.Inject(agenttest.Fault{On: agenttest.Fetch, Status: 503, RetryAfter: time.Second, Times: 1000})
			return agent.Done(nil)
		}))
	cs := waitTask(t, s, id)
	r.wait(t)
	if runs.Load() != 1 || len(cs) != 1 || cs[0].Result != "success" {
		t.Fatalf("ran %d times, results %+v", runs.Load(), cs)
	}
	if n := s.Count(agenttest.Complete); n < 4 {
		t.Errorf("%d requests carried the result, want the 3 lost and one more", n)
	}
}

// An agent with a uid and the enroll secret enrolls, keeps its key in a file only its
// owner reads, enrolls once more when the key is revoked (401), and a later agent
// takes the key from the file without enrolling.
func TestFakeEnrollment(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	keyFile := filepath.Join(t.TempDir(), "key")
	cfg := agent.Config{UID: "e1", EnrollSecret: s.EnrollSecret, KeyFile: keyFile, StartupJitter: time.Millisecond,
		Logger: quietLogger()}
	first := s.Add(agenttest.Task{})
	r := runAgent(t, newAgent(t, s.URL, cfg), agent.HandlerFunc(done))
	waitTask(t, s, first)
	fi, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	s.Revoke("e1")
	second := s.Add(agenttest.Task{})
	waitTask(t, s, second)
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := s.Count(agenttest.Enroll); n != 2 {
		t.Fatalf("%d enrollments, want 2 (the first, and once after the revocation)", n)
	}
	third := s.Add(agenttest.Task{})
	r = runAgent(t, newAgent(t, s.URL, cfg), agent.HandlerFunc(done))
	waitTask(t, s, third)
	r.wait(t)
	if n := s.Count(agenttest.Enroll); n != 2 {
		t.Errorf("%d enrollments after a restart with the key file, want still 2", n)
	}
}

// A key refused again right after enrolling once more stops the agent with an error;
// it does not enroll in a loop.
func TestFakeKeyRefusedAfterEnrollingStops(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	s.Inject(agenttest.Fault{On: agenttest.Fetch, Status: 401, Times: 2})
	a := newAgent(t, s.URL, agent.Config{Key: s.Key("e2"), UID: "e2", EnrollSecret: s.EnrollSecret,
		StartupJitter: time.Millisecond, Logger: quietLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := a.Run(ctx, agent.HandlerFunc(done))
	if err == nil || !strings.Contains(err.Error(), "refused right after enrolling") {
		t.Fatalf("Run: %v, want the key refused after enrolling", err)
	}
	if n := s.Count(agenttest.Enroll); n != 1 {
		t.Errorf("%d enrollments, want 1", n)
	}
}

// Checkpoints are throttled (here to one an hour) and the latest is always sent:
// a hundred of them make at most two reports, the last carrying the hundredth, and a
// retry brings it back.
func TestFakeCheckpointsThrottledLatestSent(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	id := s.Add(agenttest.Task{MaxAttempts: 2})
	var resumed atomic.Value
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), CheckpointInterval: time.Hour}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			if task.Attempt == 2 {
				resumed.Store(string(task.LastCheckpoint))
				return agent.Done(nil)
			}
			for i := 1; i <= 100; i++ {
				if err := task.Checkpoint(map[string]int{"n": i}); err != nil {
					return agent.Fail(err)
				}
			}
			return agent.Fail(errors.New("try again"))
		}))
	cs := waitTask(t, s, id)
	r.wait(t)
	if len(cs) != 2 {
		t.Fatalf("results %+v", cs)
	}
	cps := cs[0].Checkpoints
	if len(cps) == 0 || len(cps) > 2 || string(cps[len(cps)-1]) != `{"n":100}` {
		t.Fatalf("checkpoints sent: %s; want at most 2, the last {\"n\":100}", cps)
	}
	if got := resumed.Load(); got != `{"n":100}` {
		t.Errorf("the retry came with checkpoint %v", got)
	}
}

// A checkpoint the server would refuse is refused at once, with the reason.
func TestCheckpointRefusedLocally(t *testing.T) {
	t.Parallel()
	errs := make(chan []error, 1)
	_, err := agenttest.Do(context.Background(), agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
		errs <- []error{task.Checkpoint("not an object"), task.Checkpoint(map[string]string{"x": strings.Repeat("y", 17<<10)}),
			task.Checkpoint(nested(64)), task.Checkpoint(nested(63))}
		return agent.Done(nil)
	}), agenttest.Task{})
	if err != nil {
		t.Fatal(err)
	}
	got := <-errs
	for i, want := range []string{"object", "over the server's limit", "nested deeper", ""} {
		if (want == "") != (got[i] == nil) || got[i] != nil && !strings.Contains(got[i].Error(), want) {
			t.Errorf("checkpoint %d: %v, want %q", i, got[i], want)
		}
	}
	if err := (&agent.Task{}).Checkpoint(map[string]int{}); err == nil {
		t.Error("a Task no agent handed out took a checkpoint")
	}
}

// A task failed for good (FailPermanent) is sent as a final failure ("retry": false):
// the server ends it at once, with attempts left, and the handler ran once.
func TestFakeFailPermanentIsFinal(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	id := s.Add(agenttest.Task{MaxAttempts: 3})
	var runs atomic.Int64
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u")}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			runs.Add(1)
			return agent.FailPermanent(errors.New("bad input"))
		}))
	cs := waitTask(t, s, id)
	r.wait(t)
	if runs.Load() != 1 {
		t.Errorf("ran %d times, want once", runs.Load())
	}
	if len(cs) != 1 || cs[0].Result != "failure" || !cs[0].Final || cs[0].Attempt != 1 ||
		string(cs[0].Detail) != `{"error":"bad input","permanent":true}` {
		t.Fatalf("results %+v, want one final failure, on attempt 1", cs)
	}
}

// A server older than "retry" refuses it (400, unknown field): the failure is sent
// again without it, and the retries the server hands out are failed at once with the
// same detail, without running the handler again.
func TestFakeFailPermanentOnAnOlderServer(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	id := s.Add(agenttest.Task{MaxAttempts: 3})
	var refusals atomic.Int64
	target, _ := url.Parse(s.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	older := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"retry"`)) {
			refusals.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"code":"invalid_argument","message":"request body: unknown field \"retry\""}}`)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(older.Close)
	var runs atomic.Int64
	r := runAgent(t, newAgent(t, older.URL, agent.Config{Key: s.Key("u")}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			runs.Add(1)
			return agent.FailPermanent(errors.New("bad input"))
		}))
	cs := waitTask(t, s, id)
	r.wait(t)
	if runs.Load() != 1 || refusals.Load() == 0 {
		t.Errorf("ran %d times, %d refusals; want once, and the older server refusing retry", runs.Load(), refusals.Load())
	}
	if len(cs) != 3 {
		t.Fatalf("results %+v, want 3 (every attempt)", cs)
	}
	for _, c := range cs {
		if c.Result != "failure" || c.Final || string(c.Detail) != `{"error":"bad input","permanent":true}` {
			t.Errorf("result %+v", c)
		}
	}
}

// Params that do not decode into a Typed handler's type fail the task for good.
func TestTypedParamsThatDoNotDecode(t *testing.T) {
	t.Parallel()
	c, err := agenttest.Do(context.Background(), agent.Typed(func(ctx context.Context, task *agent.Task, p struct{ N int }) agent.Outcome {
		return agent.Done(nil)
	}), agenttest.Task{Params: map[string]string{"N": "not a number"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Result != "failure" || !strings.Contains(string(c.Detail), `"permanent":true`) {
		t.Fatalf("result %+v", c)
	}
}

// While the server has no slot free for the uid (max_in_flight 1, concurrency 3, a
// second task due), the agent does not ask again and again: it waits for its task to
// finish. (A second of running; a loop would have fetched hundreds of times.)
func TestFakeFullServerNotPolledInALoop(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	a, b := s.Add(agenttest.Task{}), s.Add(agenttest.Task{})
	var during atomic.Int64
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), Concurrency: 3}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			if task.TaskID == a {
				time.Sleep(time.Second)
				during.Store(int64(s.Count(agenttest.Fetch)))
			}
			return agent.Done(nil)
		}))
	waitTask(t, s, a)
	waitTask(t, s, b)
	r.wait(t)
	if n := during.Load(); n > 3 {
		t.Errorf("%d fetches while the one slot was held, want at most 3", n)
	}
}

// A handler that does not return even once its context is cancelled is left behind:
// its task is given back, and Run returns.
func TestFakeHandlerIgnoringStopIsGivenBack(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	id := s.Add(agenttest.Task{})
	started, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), ShutdownGrace: 100 * time.Millisecond, Logger: quietLogger()}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			close(started)
			<-release
			return agent.Done(nil)
		}))
	<-started
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	cs := waitTask(t, s, id)
	if len(cs) != 1 || cs[0].Result != "failure" || !strings.Contains(string(cs[0].Detail), `"given_back":true`) {
		t.Fatalf("results %+v, want the task given back", cs)
	}
}

// The metrics register with Prometheus and count a task by template and outcome.
func TestMetricsRegister(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	id := s.Add(agenttest.Task{TemplateID: 9})
	m := agent.NewMetrics()
	r := runAgent(t, newAgent(t, s.URL, agent.Config{Key: s.Key("u"), Metrics: m}), agent.HandlerFunc(done))
	waitTask(t, s, id)
	r.wait(t)
	if got := metric(t, m, "taskd_agent_task_seconds", "template", "9", "outcome", "success"); got != 1 {
		t.Errorf("task_seconds{template=9,outcome=success} count %v, want 1", got)
	}
	if got := metric(t, m, "taskd_agent_in_flight"); got != 0 {
		t.Errorf("in_flight %v after the run, want 0", got)
	}
	if got := metric(t, m, "taskd_agent_fetch_seconds", "result", "task"); got < 1 {
		t.Errorf("fetch_seconds{result=task} count %v", got)
	}
}

// New refuses settings it cannot run with, naming them.
func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  agent.Config
		want string
	}{
		{agent.Config{URL: "taskd:8080", Key: "k"}, "URL"},
		{agent.Config{URL: "http://h"}, "Key"},
		{agent.Config{URL: "http://h", UID: "u"}, "UID and EnrollSecret"},
		{agent.Config{URL: "http://h", Key: "k", Concurrency: 101}, "Concurrency"},
		{agent.Config{URL: "http://h", Key: "k", Templates: []int64{0}}, "Templates[0]"},
		{agent.Config{URL: "http://h", Key: "k", PollWait: -1}, "PollWait"},
	} {
		if _, err := agent.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
}
