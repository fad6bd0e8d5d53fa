package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/internal/app"
)

// Every task is run once, by an agent running four at a time, and a Mux's agent
// fetches only its own templates: the other template's tasks stay undispatched.
func TestEveryTaskRunOnce(t *testing.T) {
	t.Parallel()
	d := startDispatchd(t, nil, nil)
	mine, other := d.template(nil), d.template(nil)
	const n = 40
	want := map[string]bool{}
	for i := 0; i < n; i++ {
		want[d.task("w1", mine, map[string]any{"params": map[string]any{"i": i}})] = true
	}
	var others []string
	for i := 0; i < 5; i++ {
		others = append(others, d.task("w1", other, nil))
	}
	d.admin("PUT", "/v1/admin/clients/w1", map[string]any{"max_in_flight": 4})
	var runs counter
	var mux agent.Mux
	mux.Handle(mine, agent.Typed(func(ctx context.Context, task *agent.Task, p struct{ I int }) agent.Outcome {
		runs.add(task.TaskID)
		return agent.Done(map[string]int{"i": p.I})
	}))
	a := newAgent(t, d.URL, agent.Config{Key: d.key("w1"), Concurrency: 4})
	r := runAgent(t, a, &mux)
	done := func() int {
		return len(d.records(url.Values{"uid": {"w1"}, "state": {"done"}}))
	}
	waitFor(t, 2*time.Minute, "every task done", func() bool { return done() == n })
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	got := runs.snapshot()
	for id := range want {
		if got[id] != 1 {
			t.Errorf("task %s ran %d times, want once", id, got[id])
		}
	}
	if len(got) != n {
		t.Errorf("%d tasks ran, want %d: %v", len(got), n, got)
	}
	recs := d.records(url.Values{"uid": {"w1"}})
	if len(recs) != n {
		t.Errorf("%d dispatch records, want %d (one per task): %+v", len(recs), n, recs)
	}
	for _, id := range others {
		if recs := d.records(url.Values{"task_id": {id}}); len(recs) != 0 {
			t.Errorf("task %s of a template the agent does not handle was dispatched: %+v", id, recs)
		}
	}
}

// A task whose lease is 2 s runs for three lease lengths and completes: the agent
// extended the lease (progress with extend_lease) while it ran, and never cancelled
// the handler.
func TestLeaseExtendedPastItsLength(t *testing.T) {
	t.Parallel()
	var progress atomic.Int64
	d := startDispatchd(t, nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/progress" {
				progress.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	tpl := d.template(map[string]any{"lease_seconds": 2, "max_attempts": 1})
	id := d.task("l1", tpl, nil)
	var runs atomic.Int64
	var cause atomic.Value
	a := newAgent(t, d.URL, agent.Config{Key: d.key("l1")})
	r := runAgent(t, a, agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
		runs.Add(1)
		if task.LeaseExpiresAt == nil {
			return agent.Fail(errors.New("no lease"))
		}
		// Three lease lengths after the dispatch: the lease ran out twice over unless
		// it was extended.
		until := task.LeaseExpiresAt.Add(4 * time.Second)
		select {
		case <-time.After(time.Until(until)):
			return agent.Done(nil)
		case <-ctx.Done():
			cause.Store(context.Cause(ctx))
			return agent.Fail(context.Cause(ctx))
		}
	}))
	waitFor(t, time.Minute, "the task finished", func() bool {
		recs := d.records(url.Values{"task_id": {id}})
		return len(recs) > 0 && recs[0].State != "open"
	})
	r.wait(t)
	recs := d.records(url.Values{"task_id": {id}})
	if len(recs) != 1 || recs[0].State != "done" || recs[0].Attempt != 1 {
		t.Fatalf("records of %s: %+v, want one, done, attempt 1", id, recs)
	}
	if c := cause.Load(); c != nil {
		t.Errorf("the handler's context was cancelled: %v", c)
	}
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times", runs.Load())
	}
	if progress.Load() < 2 {
		t.Errorf("%d progress reports over three lease lengths, want at least 2", progress.Load())
	}
}

// FailPermanent on a real server: the task is dead at once with attempts left, its
// record and its complete and dead events say final, and the handler ran once.
func TestFailPermanentOnDispatchd(t *testing.T) {
	t.Parallel()
	d := startDispatchd(t, nil, nil)
	tpl := d.template(map[string]any{"max_attempts": 3, "retry_backoff_seconds": 0})
	id := d.task("p1", tpl, nil)
	var runs atomic.Int64
	r := runAgent(t, newAgent(t, d.URL, agent.Config{Key: d.key("p1")}),
		agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			runs.Add(1)
			return agent.FailPermanent(errors.New("bad input"))
		}))
	waitFor(t, time.Minute, "the task finished", func() bool {
		recs := d.records(url.Values{"task_id": {id}})
		return len(recs) > 0 && recs[0].State != "open"
	})
	time.Sleep(200 * time.Millisecond) // time for a retry to show, were there one
	r.wait(t)
	recs := d.records(url.Values{"task_id": {id}})
	if len(recs) != 1 || recs[0].State != "dead" || !recs[0].Final || recs[0].Attempt != 1 {
		t.Fatalf("records of %s: %+v, want one, dead at once, final", id, recs)
	}
	var detail map[string]any
	if json.Unmarshal(recs[0].Detail, &detail) != nil || detail["error"] != "bad input" || detail["permanent"] != true {
		t.Errorf("detail %s", recs[0].Detail)
	}
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times", runs.Load())
	}
	evs := d.admin("GET", "/v1/admin/events?"+url.Values{"task_id": {id}}.Encode(), nil)["events"].([]any)
	final := map[string]bool{}
	for _, e := range evs {
		ev := e.(map[string]any)
		final[ev["type"].(string)] = ev["final"] == true
	}
	if !final["complete"] || !final["dead"] || final["dispatch"] {
		t.Errorf("events of %s: %v, want complete and dead saying final", id, evs)
	}
}

// A stop while a task runs: the agent fetches nothing more, the handler finishes
// within the grace, its result is sent, and Run returns; a handler that outlasts the
// grace gets its context cancelled (ErrStopping) and its result is sent too.
func TestShutdownMidTaskCompletesIt(t *testing.T) {
	t.Parallel()
	t.Run("finishes within the grace", func(t *testing.T) {
		t.Parallel()
		d := startDispatchd(t, nil, nil)
		tpl := d.template(nil)
		first := d.task("s1", tpl, nil)
		second := d.task("s1", tpl, nil)
		started, release := make(chan string, 2), make(chan struct{})
		var cancelled atomic.Bool
		a := newAgent(t, d.URL, agent.Config{Key: d.key("s1"), ShutdownGrace: time.Minute})
		r := runAgent(t, a, agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			started <- task.TaskID
			<-release
			cancelled.Store(ctx.Err() != nil)
			return agent.Done(map[string]string{"by": "s1"})
		}))
		if got := <-started; got != first {
			t.Fatalf("first task run: %s, want %s", got, first)
		}
		r.stop()
		close(release)
		if err := r.wait(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if recs := d.records(url.Values{"task_id": {first}}); len(recs) != 1 || recs[0].State != "done" {
			t.Fatalf("the task running at the stop: %+v, want done", recs)
		}
		if recs := d.records(url.Values{"task_id": {second}}); len(recs) != 0 {
			t.Fatalf("a task was fetched after the stop: %+v", recs)
		}
		if cancelled.Load() {
			t.Error("the handler's context was cancelled within the grace")
		}
	})
	t.Run("outlasts the grace", func(t *testing.T) {
		t.Parallel()
		d := startDispatchd(t, nil, nil)
		id := d.task("s2", d.template(nil), nil)
		started := make(chan struct{})
		var cause atomic.Value
		a := newAgent(t, d.URL, agent.Config{Key: d.key("s2"), ShutdownGrace: 300 * time.Millisecond})
		r := runAgent(t, a, agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			close(started)
			<-ctx.Done()
			cause.Store(context.Cause(ctx))
			return agent.Fail(context.Cause(ctx))
		}))
		<-started
		if err := r.wait(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if c, _ := cause.Load().(error); !errors.Is(c, agent.ErrStopping) {
			t.Errorf("cause of the handler's cancellation: %v, want ErrStopping", c)
		}
		recs := d.records(url.Values{"task_id": {id}})
		if len(recs) != 1 || recs[0].Result == nil || *recs[0].Result != "failure" || !strings.Contains(string(recs[0].Detail), "stopping") {
			t.Fatalf("the task cut off by the stop: %+v, want its failure recorded", recs)
		}
	})
}

// The agent obeys the server's own 429 (its per-user poll limit, which long-poll
// rounds count against): no fetch comes before the Retry-After it was given has
// passed, and the task due later is still done.
func TestRetryAfterObeyed(t *testing.T) {
	t.Parallel()
	type answered struct {
		at   time.Time // when the reply was written
		wait time.Duration
	}
	var mu sync.Mutex
	var last *answered
	var limited, early, fetches int
	d := startDispatchd(t, func(c *app.Config) {
		c.PollRate, c.PollBurst = 0.5, 1 // one poll every 2 s
		c.MaxWait = 3 * time.Second
	}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/fetch" {
				h.ServeHTTP(w, r)
				return
			}
			mu.Lock()
			fetches++
			if last != nil && time.Now().Before(last.at.Add(last.wait)) {
				early++
			}
			mu.Unlock()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			mu.Lock()
			last = nil
			if rec.Code == http.StatusTooManyRequests {
				limited++
				s, _ := strconv.Atoi(rec.Header().Get("Retry-After"))
				last = &answered{wait: time.Duration(s) * time.Second}
			}
			mu.Unlock()
			copyRecorded(w, rec)
			mu.Lock()
			if last != nil {
				last.at = time.Now()
			}
			mu.Unlock()
		})
	})
	id := d.task("r1", d.template(nil), map[string]any{"start_time": time.Now().Add(8 * time.Second).UTC().Format(time.RFC3339)})
	m := agent.NewMetrics()
	a := newAgent(t, d.URL, agent.Config{Key: d.key("r1"), PollWait: 3 * time.Second, Metrics: m})
	r := runAgent(t, a, agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome { return agent.Done(nil) }))
	waitFor(t, time.Minute, "the task done", func() bool {
		recs := d.records(url.Values{"task_id": {id}})
		return len(recs) == 1 && recs[0].State == "done"
	})
	r.wait(t)
	mu.Lock()
	defer mu.Unlock()
	if limited == 0 {
		t.Fatalf("no 429 in %d fetches: the test did not test", fetches)
	}
	if early > 0 {
		t.Errorf("%d of %d fetches came before the Retry-After of the 429 before them", early, fetches)
	}
	if got := metric(t, m, "taskd_agent_rate_limited_total", "request", "fetch"); int(got) != limited {
		t.Errorf("rate-limited metric %v, want %d", got, limited)
	}
}

// copyRecorded writes a recorded reply to w.
func copyRecorded(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// The server stops while a task runs and its result cannot be sent; a new server
// process starts on the same address: the result lands (sent again), and the agent
// goes on fetching.
func TestServerRestartSurvived(t *testing.T) {
	t.Parallel()
	d := startDispatchd(t, nil, nil)
	tpl := d.template(nil)
	first := d.task("x1", tpl, nil)
	started, release := make(chan struct{}), make(chan struct{})
	var runs counter
	m := agent.NewMetrics()
	a := newAgent(t, d.URL, agent.Config{Key: d.key("x1"), Metrics: m})
	r := runAgent(t, a, agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
		if runs.add(task.TaskID) == 1 && task.TaskID == first {
			close(started)
			<-release
		}
		return agent.Done(nil)
	}))
	<-started
	d.stop()
	close(release)
	waitFor(t, time.Minute, "a result sent again while the server is down", func() bool {
		return metric(t, m, "taskd_agent_retries_total", "request", "complete") >= 1
	})
	d.start()
	waitFor(t, time.Minute, "the first task done", func() bool {
		recs := d.records(url.Values{"task_id": {first}})
		return len(recs) == 1 && recs[0].State == "done"
	})
	second := d.task("x1", tpl, nil)
	waitFor(t, time.Minute, "a task created after the restart done", func() bool {
		recs := d.records(url.Values{"task_id": {second}})
		return len(recs) == 1 && recs[0].State == "done"
	})
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if runs.get(first) != 1 || runs.get(second) != 1 {
		t.Errorf("runs: %v, want each task once", runs.snapshot())
	}
}

// The agent finishes a task but its result is lost (every request carrying it is cut
// off) until the server hands the task out again (redo): the agent does not run it
// again, and its result lands.
func TestRedoOfFinishedTaskNotRunAgain(t *testing.T) {
	t.Parallel()
	var blocking atomic.Bool
	var redone, cut atomic.Int64
	blocking.Store(true)
	d := startDispatchd(t, nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			carries := r.URL.Path == "/v1/complete" || r.URL.Path == "/v1/fetch" && bytes.Contains(body, []byte(`"complete"`))
			if carries && blocking.Load() {
				cut.Add(1)
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close()
				return
			}
			if r.URL.Path != "/v1/fetch" {
				h.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if bytes.Contains(rec.Body.Bytes(), []byte(`"redo":true`)) {
				redone.Add(1)
				blocking.Store(false)
			}
			copyRecorded(w, rec)
		})
	})
	id := d.task("d1", d.template(nil), nil)
	var runs atomic.Int64
	a := newAgent(t, d.URL, agent.Config{Key: d.key("d1")})
	r := runAgent(t, a, agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
		runs.Add(1)
		return agent.Done(map[string]string{"n": "1"})
	}))
	waitFor(t, time.Minute, "the task done", func() bool {
		recs := d.records(url.Values{"task_id": {id}})
		return len(recs) == 1 && recs[0].State == "done"
	})
	r.wait(t)
	if redone.Load() == 0 || cut.Load() == 0 {
		t.Fatalf("%d results cut off, %d redos: the test did not test", cut.Load(), redone.Load())
	}
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want once", runs.Load())
	}
	recs := d.records(url.Values{"task_id": {id}})
	if string(recs[0].Detail) != `{"n": "1"}` && string(recs[0].Detail) != `{"n":"1"}` {
		t.Errorf("detail %s, want the stored result's", recs[0].Detail)
	}
}

// A handler that panics fails its task, with the panic and the stack in the detail;
// the agent goes on to the next task.
func TestPanicSurvived(t *testing.T) {
	t.Parallel()
	d := startDispatchd(t, nil, nil)
	tpl := d.template(nil)
	bad := d.task("p1", tpl, map[string]any{"params": map[string]any{"panic": true}})
	good := d.task("p1", tpl, nil)
	a := newAgent(t, d.URL, agent.Config{Key: d.key("p1"), Logger: quietLogger()})
	r := runAgent(t, a, agent.Typed(func(ctx context.Context, task *agent.Task, p struct{ Panic bool }) agent.Outcome {
		if p.Panic {
			panic("handler bug")
		}
		return agent.Done(nil)
	}))
	waitFor(t, time.Minute, "both tasks finished", func() bool {
		b, g := d.records(url.Values{"task_id": {bad}}), d.records(url.Values{"task_id": {good}})
		return len(b) == 1 && b[0].State != "open" && len(g) == 1 && g[0].State == "done"
	})
	select {
	case err := <-r.done:
		t.Fatalf("Run returned after a panic: %v", err)
	default:
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rec := d.records(url.Values{"task_id": {bad}})[0]
	var detail struct {
		Error string `json:"error"`
		Panic bool   `json:"panic"`
		Stack string `json:"stack"`
	}
	json.Unmarshal(rec.Detail, &detail)
	if rec.Result == nil || *rec.Result != "failure" || !detail.Panic || detail.Error != "panic: handler bug" ||
		!strings.Contains(detail.Stack, "goroutine") {
		t.Fatalf("the panicking task's record: %+v", rec)
	}
}
