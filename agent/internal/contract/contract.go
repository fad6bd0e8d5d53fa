// Package contract is the client API as the agent SDK relies on it, written once as
// a suite of cases that runs against any server that speaks it: agenttest's fake and
// a real dispatchd (agent/contract_test.go). The real server is the reference; the
// suite keeps the fake from drifting from it. Each case speaks HTTP itself, with the
// wire types, and checks what the SDK reads: statuses, error codes, the fields of a
// task (and which are left out), repeats and redos, leases and checkpoints.
package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpull/taskd/agent/internal/wire"
)

// Server is a server under test, and what the cases need done to it besides the
// client API. Its methods report failures to the t they are given.
type Server interface {
	// URL is the server's base URL.
	URL() string
	// EnrollSecret is the secret POST /v1/enroll takes.
	EnrollSecret() string
	// Key issues a client key for uid; Revoke revokes every key of uid.
	Key(t *testing.T, uid string) string
	Revoke(t *testing.T, uid string)
	// SetMaxInFlight sets how many dispatches uid may hold open at once.
	SetMaxInFlight(t *testing.T, uid string, n int)
	// Template makes a template.
	Template(t *testing.T, tpl Template) int64
	// Add adds a task of template tpl for uid, due now, and returns its id.
	Add(t *testing.T, uid string, tpl int64, params any) string
	// Campaign starts a campaign of template tpl, of items 0..count-1, worked by uid
	// (with a lease), and returns its id.
	Campaign(t *testing.T, uid string, tpl int64, count int) int64
	// Expire ends the open dispatch logID now, as an admin (or a lapsed lease) does.
	Expire(t *testing.T, logID string)
	// Agent is the agent uid reported last, as the fleet view (GET /v1/admin/clients)
	// shows it once the server recorded it; false for none.
	Agent(t *testing.T, uid string) (wire.Agent, bool)
}

// Template is a template's settings: a lease (0: none), the attempts a task has
// (0: the default), stages (none: a single-stage task). A failed or expired attempt
// with attempts left is retried at once.
type Template struct {
	LeaseSeconds int
	MaxAttempts  int
	Stages       []string
}

// Servers gives the cases their servers: Plain one that answers polls as fast as
// they come, Limited one that refuses a uid's second poll within a second with 429
// and a Retry-After (a server's own poll limit, or a fake's injected fault: the case
// accepts either of two polls refused). Cases share a server, each on uids of its own.
type Servers struct {
	Plain   Server
	Limited Server
}

// Run runs every case, in parallel, against servers.
func Run(t *testing.T, servers Servers) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := servers.Plain
			if c.limited {
				s = servers.Limited
			}
			c.run(t, s)
		})
	}
}

type testCase struct {
	name    string
	limited bool
	run     func(t *testing.T, s Server)
}

var cases = []testCase{
	{name: "unauthenticated", run: testUnauthenticated},
	{name: "enroll", run: testEnroll},
	{name: "empty fetch", run: testEmptyFetch},
	{name: "long poll", run: testLongPoll},
	{name: "task fields", run: testTaskFields},
	{name: "complete", run: testComplete},
	{name: "carried complete", run: testCarriedComplete},
	{name: "final failure", run: testFinalFailure},
	{name: "redo", run: testRedo},
	{name: "lease, progress and expiry", run: testLease},
	{name: "stages", run: testStages},
	{name: "batch", run: testBatch},
	{name: "refused bodies", run: testRefusedBodies},
	{name: "campaign item", run: testCampaignItem},
	{name: "agent object", run: testAgentObject},
	{name: "rate limited", limited: true, run: testRateLimited},
}

// uidSeq keeps the uids of cases sharing a server apart.
var uidSeq atomic.Int64

// newUID is a uid no other case uses.
func newUID() string { return fmt.Sprintf("c%d", uidSeq.Add(1)) }

// reply is a reply to a request a case sent.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// errorCode is the reply's error code, or "" when the body is not the error shape.
func (r reply) errorCode() string {
	var e wire.ErrorReply
	json.Unmarshal(r.body, &e)
	return e.Error.Code
}

func (r reply) errorMessage() string {
	var e wire.ErrorReply
	json.Unmarshal(r.body, &e)
	return e.Error.Message
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body)) }

// post sends body (encoded as JSON unless it is []byte or nil) to path with key ("":
// none).
func post(t *testing.T, s Server, path, key string, body any) reply {
	t.Helper()
	r, err := send(t.Context(), s, path, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// send is post without t, for a goroutine of a case's own.
func send(ctx context.Context, s Server, path, key string, body any) (reply, error) {
	raw, ok := body.([]byte)
	if !ok && body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return reply{}, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+path, bytes.NewReader(raw))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, fmt.Errorf("POST %s: %w", path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// must is post for a request that must be answered 200, decoded into out (if not nil).
func must(t *testing.T, s Server, path, key string, body, out any) reply {
	t.Helper()
	r := post(t, s, path, key, body)
	if r.status != http.StatusOK {
		t.Fatalf("POST %s %s: %v", path, bodyText(body), r)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			t.Fatalf("POST %s: %v: %s", path, err, r.body)
		}
	}
	return r
}

// refused is post for a request that must be refused with status and code.
func refused(t *testing.T, s Server, path, key string, body any, status int, code string) reply {
	t.Helper()
	r := post(t, s, path, key, body)
	if r.status != status || r.errorCode() != code {
		t.Errorf("POST %s %s: %v, want %d %s", path, bodyText(body), r, status, code)
	}
	return r
}

func bodyText(body any) string {
	b, ok := body.([]byte)
	if !ok {
		b, _ = json.Marshal(body)
	}
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

func fetch(t *testing.T, s Server, key string, req wire.FetchRequest) wire.FetchReply {
	t.Helper()
	var out wire.FetchReply
	must(t, s, "/v1/fetch", key, req, &out)
	return out
}

// one fetches (the single form) and fails t unless a task came.
func one(t *testing.T, s Server, key string) *wire.Task {
	t.Helper()
	r := fetch(t, s, key, wire.FetchRequest{})
	if r.Task == nil {
		t.Fatal("fetch: no task")
	}
	return r.Task
}

// await long-polls until a task comes (20 s at most) and fails t if none does: a task
// brought back (a retry, a next stage) may take the server a moment.
func await(t *testing.T, s Server, key string) *wire.Task {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if task := fetch(t, s, key, wire.FetchRequest{WaitMS: new64(1000)}).Task; task != nil {
			return task
		}
	}
	t.Fatal("no task came back within 20 s")
	return nil
}

func complete(t *testing.T, s Server, key, logID, result string) {
	t.Helper()
	var ok wire.OK
	must(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: logID, Result: result}, &ok)
	if !ok.OK {
		t.Fatalf("complete %s: not ok", logID)
	}
}

// nothing fails t if a fetch hands out a task (when is when, for the message).
func nothing(t *testing.T, s Server, key, when string) {
	t.Helper()
	if r := fetch(t, s, key, wire.FetchRequest{}); r.Task != nil {
		t.Errorf("%s, a fetch handed out %+v", when, r.Task)
	}
}

// handedOut fetches (the single form) and fails t unless a task comes whose members
// are exactly members (sorted), in a reply of task and next_due_at only.
func handedOut(t *testing.T, s Server, key string, members ...string) wire.Task {
	t.Helper()
	r := must(t, s, "/v1/fetch", key, wire.FetchRequest{}, nil)
	if got := keys(t, r.body); !slices.Equal(got, []string{"next_due_at", "task"}) {
		t.Errorf("reply members %v, want next_due_at and task (tasks only in a batch's reply): %s", got, r.body)
	}
	var raw struct {
		Task json.RawMessage `json:"task"`
	}
	json.Unmarshal(r.body, &raw)
	if string(raw.Task) == "null" {
		t.Fatal("fetch: no task")
	}
	if got := keys(t, raw.Task); !slices.Equal(got, members) {
		t.Errorf("task members %v, want %v: %s", got, members, raw.Task)
	}
	var task wire.Task
	json.Unmarshal(raw.Task, &task)
	return task
}

// keys are the members of the JSON object raw, sorted.
func keys(t *testing.T, raw []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

func new64(n int64) *int64 { return &n }

// A request without a key, with a key the server never issued, or with a revoked
// key is refused 401 unauthenticated, whatever its body: the SDK enrolls again on it.
func testUnauthenticated(t *testing.T, s Server) {
	uid := newUID()
	key := s.Key(t, uid)
	must(t, s, "/v1/fetch", key, wire.FetchRequest{}, nil)
	unknown := uid + ".0123456789abcdef0123456789abcdef"
	s.Revoke(t, uid)
	for _, k := range []string{"", unknown, key} {
		refused(t, s, "/v1/fetch", k, wire.FetchRequest{}, http.StatusUnauthorized, "unauthenticated")
		refused(t, s, "/v1/complete", k, wire.CompleteRequest{LogID: "x", Result: "success"}, http.StatusUnauthorized, "unauthenticated")
		refused(t, s, "/v1/progress", k, wire.ProgressRequest{LogID: "x", ExtendLease: true}, http.StatusUnauthorized, "unauthenticated")
		refused(t, s, "/v1/fetch", k, []byte(`{"nonsense`), http.StatusUnauthorized, "unauthenticated")
	}
}

// Enrollment with the secret issues a key that works; a wrong secret is 401, a
// missing uid 400 (the SDK stops on either).
func testEnroll(t *testing.T, s Server) {
	uid := newUID()
	var out wire.EnrollReply
	must(t, s, "/v1/enroll", "", wire.EnrollRequest{UID: uid, EnrollSecret: s.EnrollSecret()}, &out)
	if out.ClientKey == "" {
		t.Fatal("enroll: no client_key")
	}
	must(t, s, "/v1/fetch", out.ClientKey, wire.FetchRequest{}, nil)
	refused(t, s, "/v1/enroll", "", wire.EnrollRequest{UID: uid, EnrollSecret: "wrong"}, http.StatusUnauthorized, "unauthenticated")
	refused(t, s, "/v1/enroll", "", wire.EnrollRequest{EnrollSecret: s.EnrollSecret()}, http.StatusBadRequest, "invalid_argument")
}

// A fetch with nothing due: task null, next_due_at null (nothing scheduled); tasks
// only in a batch's reply, [] there. A fetch may have no body.
func testEmptyFetch(t *testing.T, s Server) {
	key := s.Key(t, newUID())
	for _, body := range []any{nil, wire.FetchRequest{}, wire.FetchRequest{WaitMS: new64(0)}} {
		r := must(t, s, "/v1/fetch", key, body, nil)
		if got := keys(t, r.body); !slices.Equal(got, []string{"next_due_at", "task"}) {
			t.Errorf("fetch %s: members %v, want next_due_at and task: %s", bodyText(body), got, r.body)
		}
		var out wire.FetchReply
		json.Unmarshal(r.body, &out)
		if out.Task != nil || out.NextDueAt != nil {
			t.Errorf("fetch %s: %s, want no task and no next due time", bodyText(body), r.body)
		}
	}
	max := 2
	r := must(t, s, "/v1/fetch", key, wire.FetchRequest{Max: &max}, nil)
	var raw map[string]json.RawMessage
	json.Unmarshal(r.body, &raw)
	if string(raw["tasks"]) != "[]" || string(raw["task"]) != "null" {
		t.Errorf("batch fetch: %s, want tasks [] and task null", r.body)
	}
	// A long poll that finds nothing answers when its wait is up.
	start := time.Now()
	if r := fetch(t, s, key, wire.FetchRequest{WaitMS: new64(300)}); r.Task != nil {
		t.Errorf("long poll: a task: %+v", r.Task)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("a long poll of 300 ms took %s", took)
	}
}

// A long poll hands out a task that comes due while it waits, before its wait is up.
func testLongPoll(t *testing.T, s Server) {
	uid := newUID()
	key := s.Key(t, uid)
	tpl := s.Template(t, Template{})
	type answer struct {
		r   reply
		err error
	}
	got := make(chan answer, 1)
	go func() {
		r, err := send(t.Context(), s, "/v1/fetch", key, wire.FetchRequest{WaitMS: new64(4000)})
		got <- answer{r, err}
	}()
	time.Sleep(300 * time.Millisecond)
	id := s.Add(t, uid, tpl, nil)
	a := <-got
	if a.err != nil || a.r.status != http.StatusOK {
		t.Fatalf("the long poll: %v %v", a.r, a.err)
	}
	var out wire.FetchReply
	json.Unmarshal(a.r.body, &out)
	if out.Task == nil || out.Task.TaskID != id {
		t.Errorf("the long poll answered %s, want %s", a.r.body, id)
	}
}

// A task as fetch hands it out: every field the SDK reads, and none of those a task
// of its kind does not have.
func testTaskFields(t *testing.T, s Server) {
	uid := newUID()
	key := s.Key(t, uid)
	tpl := s.Template(t, Template{})
	before := time.Now().Add(-2 * time.Second)
	id := s.Add(t, uid, tpl, map[string]any{"n": 1, "s": "x"})
	task := handedOut(t, s, key, "attempt", "due_at", "kind", "lease_expires_at", "log_id", "params", "redo", "task_id", "template_id")
	switch {
	case task.LogID == "" || len(task.LogID) > 64:
		t.Errorf("log_id %q", task.LogID)
	case task.TaskID != id || !strings.HasPrefix(id, "once:"):
		t.Errorf("task_id %q, want %q (once:<n>)", task.TaskID, id)
	case task.Kind != "once":
		t.Errorf("kind %q, want once", task.Kind)
	case task.TemplateID != tpl:
		t.Errorf("template_id %d, want %d", task.TemplateID, tpl)
	case !sameJSON(task.Params, []byte(`{"n": 1, "s": "x"}`)):
		t.Errorf("params %s", task.Params)
	case task.Redo || task.Attempt != 1 || task.LeaseExpiresAt != nil:
		t.Errorf("redo %v, attempt %d, lease %v: want false, 1, none", task.Redo, task.Attempt, task.LeaseExpiresAt)
	case task.DueAt.Before(before) || task.DueAt.After(time.Now()) || task.DueAt.Location() != time.UTC:
		t.Errorf("due_at %s, want about now, in UTC", task.DueAt)
	}
}

// A complete is answered {"ok": true}, and again so when repeated; a complete of a log
// id that is not the caller's open dispatch is 409 stale_lease (the SDK drops the
// result); a refused detail is 400 with a message that starts with "detail" (the SDK
// mends the detail then).
func testComplete(t *testing.T, s Server) {
	uid := newUID()
	key := s.Key(t, uid)
	tpl := s.Template(t, Template{})
	s.Add(t, uid, tpl, nil)
	task := one(t, s, key)
	r := refused(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: task.LogID, Result: "success", Detail: json.RawMessage(`[1]`)},
		http.StatusBadRequest, "invalid_argument")
	if !strings.HasPrefix(r.errorMessage(), "detail") {
		t.Errorf("a detail that is no object: %v, want a message naming detail first", r)
	}
	refused(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: task.LogID, Result: "maybe"}, http.StatusBadRequest, "invalid_argument")
	refused(t, s, "/v1/complete", key, wire.CompleteRequest{Result: "success"}, http.StatusBadRequest, "invalid_argument")
	var ok map[string]any
	for range 2 {
		must(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: task.LogID, Result: "success", Detail: json.RawMessage(`{"rows": 3}`)}, &ok)
		if len(ok) != 1 || ok["ok"] != true {
			t.Errorf("complete: %v, want {\"ok\": true}", ok)
		}
	}
	nothing(t, s, key, "a completed task")
	// A finished dispatch takes no progress report (the SDK stops its keeper).
	refused(t, s, "/v1/progress", key, wire.ProgressRequest{LogID: task.LogID, ExtendLease: true}, http.StatusConflict, "stale_lease")
	refused(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: "0190c6a2-7d7e-7b4e-9b1e-3f2a1c0d9e8f", Result: "success"},
		http.StatusConflict, "stale_lease")
	// Another uid's dispatch is not the caller's.
	other := newUID()
	s.Add(t, other, tpl, nil)
	theirs := one(t, s, s.Key(t, other))
	refused(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: theirs.LogID, Result: "success"}, http.StatusConflict, "stale_lease")
}

// A fetch may carry a complete: it is applied first (a 409 of it is the fetch's 409,
// and nothing is handed out), then the fetch goes on.
func testCarriedComplete(t *testing.T, s Server) {
	uid := newUID()
	key := s.Key(t, uid)
	tpl := s.Template(t, Template{})
	a, b := s.Add(t, uid, tpl, nil), s.Add(t, uid, tpl, nil)
	first := one(t, s, key)
	refused(t, s, "/v1/fetch", key, wire.FetchRequest{Complete: &wire.CompleteRequest{LogID: "0190c6a2-7d7e-7b4e-9b1e-3f2a1c0d9e8f", Result: "success"}},
		http.StatusConflict, "stale_lease")
	r := refused(t, s, "/v1/fetch", key, wire.FetchRequest{Complete: &wire.CompleteRequest{LogID: first.LogID, Result: "maybe"}},
		http.StatusBadRequest, "invalid_argument")
	if !strings.HasPrefix(r.errorMessage(), "complete.result") {
		t.Errorf("a carried complete's refusal: %v, want it to name complete.result", r)
	}
	r2 := fetch(t, s, key, wire.FetchRequest{Complete: &wire.CompleteRequest{LogID: first.LogID, Result: "success"}})
	if r2.Task == nil || r2.Task.Redo || r2.Task.TaskID == first.TaskID || !slices.Contains([]string{a, b}, r2.Task.TaskID) {
		t.Fatalf("the fetch carrying the first task's complete: %+v, want the other task", r2.Task)
	}
	// The carried complete landed: again, it is a repeat.
	complete(t, s, key, first.LogID, "success")
}

// A failure with "retry": false is final: the task is not handed out again, attempts
// left or not (FailPermanent), alone or carried by a fetch; a repeat answers 200.
// retry false with a success is a 400 naming retry (complete.retry in a fetch), and
// changes nothing.
func testFinalFailure(t *testing.T, s Server) {
	uid := newUID()
	key := s.Key(t, uid)
	tpl := s.Template(t, Template{MaxAttempts: 3})
	s.Add(t, uid, tpl, nil)
	s.Add(t, uid, tpl, nil)
	final := new(false)
	task := one(t, s, key)
	if task.Attempt != 1 {
		t.Fatalf("first task: %+v, want attempt 1", task)
	}
	r := refused(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: task.LogID, Result: "success", Retry: final},
		http.StatusBadRequest, "invalid_argument")
	if !strings.HasPrefix(r.errorMessage(), "retry") {
		t.Errorf("retry false with a success: %v, want a message naming retry first", r)
	}
	r = refused(t, s, "/v1/fetch", key, wire.FetchRequest{Complete: &wire.CompleteRequest{LogID: task.LogID, Result: "success", Retry: final}},
		http.StatusBadRequest, "invalid_argument")
	if !strings.HasPrefix(r.errorMessage(), "complete.retry") {
		t.Errorf("retry false with a success, carried: %v, want a message naming complete.retry first", r)
	}
	for range 2 {
		must(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: task.LogID, Result: "failure", Retry: final,
			Detail: json.RawMessage(`{"error": "bad input"}`)}, nil)
	}
	// The other task, then a carried final failure of it: nothing is left to hand out.
	other := one(t, s, key)
	if other.TaskID == task.TaskID {
		t.Fatalf("after a final failure: %+v came back", other)
	}
	r2 := fetch(t, s, key, wire.FetchRequest{Complete: &wire.CompleteRequest{LogID: other.LogID, Result: "failure", Retry: final}})
	if r2.Task != nil {
		t.Fatalf("the fetch carrying a final failure handed out %+v", r2.Task)
	}
	complete(t, s, key, other.LogID, "failure") // a repeat, final or not
	nothing(t, s, key, "after two final failures with attempts left")
}

// A uid at its limit of open dispatches is handed its open one again, redo true, same
// log id and attempt; a complete of it ends it.
func testRedo(t *testing.T, s Server) {
	uid := newUID()
	key := s.Key(t, uid)
	tpl := s.Template(t, Template{})
	s.Add(t, uid, tpl, nil)
	first := one(t, s, key)
	again := one(t, s, key)
	if !again.Redo || again.LogID != first.LogID || again.Attempt != first.Attempt || again.TaskID != first.TaskID {
		t.Fatalf("fetched again: %+v, want %+v again with redo", again, first)
	}
	complete(t, s, key, first.LogID, "success")
	nothing(t, s, key, "after the complete")
}

// A lease: lease_expires_at about its length ahead; a progress report extends it and
// saves a checkpoint; once the dispatch is expired, its progress and complete are 409
// stale_lease, and the retry (attempt 2, a new log id) brings the checkpoint.
func testLease(t *testing.T, s Server) {
	uid := newUID()
	key := s.Key(t, uid)
	tpl := s.Template(t, Template{LeaseSeconds: 60, MaxAttempts: 2})
	id := s.Add(t, uid, tpl, nil)
	sent := time.Now()
	task := one(t, s, key)
	if task.LeaseExpiresAt == nil {
		t.Fatal("no lease_expires_at")
	}
	if l := task.LeaseExpiresAt.Sub(sent); l < 55*time.Second || l > 65*time.Second {
		t.Errorf("the lease ends %s after the fetch, want about 60 s", l)
	}
	var p wire.ProgressReply
	must(t, s, "/v1/progress", key, wire.ProgressRequest{LogID: task.LogID, ExtendLease: true}, &p)
	if !p.OK || p.LeaseExpiresAt == nil || p.LeaseExpiresAt.Before(*task.LeaseExpiresAt) {
		t.Errorf("extend: %+v, want ok and a lease no shorter than %s", p, task.LeaseExpiresAt)
	}
	must(t, s, "/v1/progress", key, wire.ProgressRequest{LogID: task.LogID, Checkpoint: json.RawMessage(`{"step": 2}`)}, &p)
	if !p.OK {
		t.Errorf("checkpoint: %+v", p)
	}
	refused(t, s, "/v1/progress", key, wire.ProgressRequest{LogID: task.LogID, Checkpoint: json.RawMessage(`[2]`)},
		http.StatusBadRequest, "invalid_argument")
	big := json.RawMessage(`{"s": "` + strings.Repeat("x", wire.MaxCheckpoint) + `"}`)
	refused(t, s, "/v1/progress", key, wire.ProgressRequest{LogID: task.LogID, Checkpoint: big}, http.StatusRequestEntityTooLarge, "too_large")
	refused(t, s, "/v1/progress", key, wire.ProgressRequest{LogID: "0190c6a2-7d7e-7b4e-9b1e-3f2a1c0d9e8f", ExtendLease: true},
		http.StatusConflict, "stale_lease")

	s.Expire(t, task.LogID)
	refused(t, s, "/v1/progress", key, wire.ProgressRequest{LogID: task.LogID, ExtendLease: true}, http.StatusConflict, "stale_lease")
	refused(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: task.LogID, Result: "success"}, http.StatusConflict, "stale_lease")
	retry := await(t, s, key)
	switch {
	case retry.TaskID != id || retry.Attempt != 2 || retry.Redo || retry.LogID == task.LogID:
		t.Errorf("the retry: %+v, want %s at attempt 2, a new dispatch", retry, id)
	case !sameJSON(retry.Checkpoint, []byte(`{"step": 2}`)):
		t.Errorf("the retry's checkpoint: %s, want the one saved", retry.Checkpoint)
	}
	// No lease: an extension says none.
	plain := s.Template(t, Template{})
	s.Add(t, uid, plain, nil)
	complete(t, s, key, retry.LogID, "success")
	unleased := one(t, s, key)
	must(t, s, "/v1/progress", key, wire.ProgressRequest{LogID: unleased.LogID, ExtendLease: true}, &p)
	if !p.OK || p.LeaseExpiresAt != nil {
		t.Errorf("extending a task without a lease: %+v, want ok and no lease", p)
	}
}

// A multi-stage task: the first dispatch works the first stage; a complete naming the
// next stage, with a context, brings the task back at that stage with that context.
func testStages(t *testing.T, s Server) {
	uid := newUID()
	key := s.Key(t, uid)
	tpl := s.Template(t, Template{Stages: []string{"fetch", "index"}})
	id := s.Add(t, uid, tpl, nil)
	first := one(t, s, key)
	if first.TaskID != id || first.Stage != "fetch" || first.Context != nil {
		t.Fatalf("first dispatch: %+v, want stage fetch, no context", first)
	}
	refused(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: first.LogID, Result: "success", NextStage: "nope"},
		http.StatusBadRequest, "invalid_argument")
	refused(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: first.LogID, Result: "failure", NextStage: "index"},
		http.StatusBadRequest, "invalid_argument")
	refused(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: first.LogID, Result: "success", Context: json.RawMessage(`{}`)},
		http.StatusBadRequest, "invalid_argument")
	big := json.RawMessage(`{"s": "` + strings.Repeat("x", wire.MaxCheckpoint) + `"}`)
	r := refused(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: first.LogID, Result: "success", NextStage: "index", Context: big},
		http.StatusRequestEntityTooLarge, "too_large")
	if !strings.HasPrefix(r.errorMessage(), "context") {
		t.Errorf("a context too large: %v, want a message naming context first", r)
	}
	must(t, s, "/v1/complete", key, wire.CompleteRequest{LogID: first.LogID, Result: "success", NextStage: "index",
		Context: json.RawMessage(`{"pages": 3}`)}, nil)
	second := await(t, s, key)
	if second.TaskID != id || second.Stage != "index" || !sameJSON(second.Context, []byte(`{"pages": 3}`)) ||
		second.Attempt != 1 || second.Redo || second.LogID == first.LogID {
		t.Fatalf("second dispatch: %+v, want stage index with the context, attempt 1", second)
	}
	complete(t, s, key, second.LogID, "success")
	nothing(t, s, key, "after the last stage")
}

// A batch fetch: up to max tasks, bounded by the uid's max in flight, of the
// templates asked for; task is the first of tasks. max and template_ids out of
// bounds are 400.
func testBatch(t *testing.T, s Server) {
	uid := newUID()
	key := s.Key(t, uid)
	s.SetMaxInFlight(t, uid, 3)
	mine, other := s.Template(t, Template{}), s.Template(t, Template{})
	want := []string{s.Add(t, uid, mine, nil), s.Add(t, uid, mine, nil)}
	s.Add(t, uid, other, nil)
	max := 3
	r := fetch(t, s, key, wire.FetchRequest{Max: &max, TemplateIDs: []int64{mine}})
	var got []string
	for _, task := range r.Tasks {
		got = append(got, task.TaskID)
		if task.TemplateID != mine {
			t.Errorf("a task of template %d, asked for %d only", task.TemplateID, mine)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || r.Task == nil || r.Task.LogID != r.Tasks[0].LogID {
		t.Fatalf("batch: task %+v, tasks %v; want tasks %v, task the first", r.Task, got, want)
	}
	// One slot is left: the other template's task fills it, and no more.
	r = fetch(t, s, key, wire.FetchRequest{Max: &max})
	if len(r.Tasks) != 1 || r.Tasks[0].TemplateID != other || r.Tasks[0].Redo {
		t.Errorf("batch with one slot free: %+v, want the other template's task", r.Tasks)
	}
	for _, bad := range []string{`{"max": 0}`, `{"max": 101}`, `{"template_ids": []}`, `{"template_ids": [0]}`, `{"max": "2"}`} {
		refused(t, s, "/v1/fetch", key, []byte(bad), http.StatusBadRequest, "invalid_argument")
	}
}

// Bodies refused before anything is done: an unknown field, the wrong kind of value,
// a negative wait (invalid_argument); malformed JSON and trailing data
// (malformed_json); nesting deeper than the server's bound (the message naming the
// member); a body over the limit (413 too_large).
func testRefusedBodies(t *testing.T, s Server) {
	key := s.Key(t, newUID())
	for _, c := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"wait_ms": 0, "bogus": 1}`, 400, "invalid_argument"},
		{`{"wait_ms": "soon"}`, 400, "invalid_argument"},
		{`{"wait_ms": -1}`, 400, "invalid_argument"},
		{`{"wait_ms": `, 400, "malformed_json"},
		{`{"wait_ms": 0} {}`, 400, "malformed_json"},
		{`{"wait_ms": 0}}`, 400, "malformed_json"},
	} {
		refused(t, s, "/v1/fetch", key, []byte(c.body), c.status, c.code)
	}
	nested := func(depth int) string { return strings.Repeat("[", depth) + strings.Repeat("]", depth) }
	// The body is one level; a detail of MaxDepth-1 levels is as deep as it may go.
	deepest := fmt.Sprintf(`{"log_id": "0190c6a2-7d7e-7b4e-9b1e-3f2a1c0d9e8f", "result": "success", "detail": {"a": %s}}`, nested(wire.MaxDepth-2))
	refused(t, s, "/v1/complete", key, []byte(deepest), http.StatusConflict, "stale_lease")
	tooDeep := fmt.Sprintf(`{"log_id": "0190c6a2-7d7e-7b4e-9b1e-3f2a1c0d9e8f", "result": "success", "detail": {"a": %s}}`, nested(wire.MaxDepth-1))
	r := refused(t, s, "/v1/complete", key, []byte(tooDeep), http.StatusBadRequest, "invalid_argument")
	if want := "detail: nested deeper than " + strconv.Itoa(wire.MaxDepth); !strings.HasPrefix(r.errorMessage(), want) {
		t.Errorf("too deep: %v, want %q", r, want)
	}
	huge := []byte(`{"log_id": "x", "result": "success", "detail": {"s": "` + strings.Repeat("x", wire.BodyLimit) + `"}}`)
	refused(t, s, "/v1/complete", key, huge, http.StatusRequestEntityTooLarge, "too_large")
}

// A campaign's item: task_id campaign:<id>, kind campaign, campaign_id and item (its
// index), a lease; completed as a task is.
func testCampaignItem(t *testing.T, s Server) {
	uid := newUID()
	key := s.Key(t, uid)
	tpl := s.Template(t, Template{})
	id := s.Campaign(t, uid, tpl, 1)
	item := handedOut(t, s, key, "attempt", "campaign_id", "due_at", "item", "kind", "lease_expires_at", "log_id", "params", "redo",
		"task_id", "template_id")
	if item.TaskID != fmt.Sprintf("campaign:%d", id) || item.Kind != "campaign" || item.CampaignID == nil || *item.CampaignID != id ||
		string(item.Item) != "0" || item.LeaseExpiresAt == nil || item.Attempt != 1 || item.TemplateID != tpl {
		t.Fatalf("campaign item: %+v, want item 0 of campaign %d", item, id)
	}
	complete(t, s, key, item.LogID, "success")
	nothing(t, s, key, "after the only item")
}

// A poll over the limit: 429 rate_limited with Retry-After in whole seconds (the SDK
// waits exactly that); after it, a poll is answered.
func testRateLimited(t *testing.T, s Server) {
	key := s.Key(t, newUID())
	var limited *reply
	for range 2 {
		if r := post(t, s, "/v1/fetch", key, wire.FetchRequest{}); r.status == http.StatusTooManyRequests {
			limited = &r
		} else if r.status != http.StatusOK {
			t.Fatalf("fetch: %v", r)
		}
	}
	if limited == nil {
		t.Fatal("no 429 in two polls")
	}
	secs, err := strconv.Atoi(limited.header.Get("Retry-After"))
	if limited.errorCode() != "rate_limited" || err != nil || secs < 1 || secs > 60 {
		t.Fatalf("429: %v, Retry-After %q; want rate_limited and a whole number of seconds", limited, limited.header.Get("Retry-After"))
	}
	time.Sleep(time.Duration(secs) * time.Second)
	must(t, s, "/v1/fetch", key, wire.FetchRequest{}, nil)
}

// A fetch's agent object is the uid's in the fleet view, until a fetch reports
// another; a fetch without one leaves it. One the server refuses (400, naming the
// field under "agent.") the SDK's check refuses too, and one it takes the check takes:
// the SDK refuses a bad Config at New rather than have every fetch refused.
func testAgentObject(t *testing.T, s Server) {
	uid := newUID()
	key := s.Key(t, uid)
	first := wire.Agent{Version: "1.2.3", Hostname: "host-a", Labels: map[string]string{"site": "ams1", "taskd.dev/os": "linux"}}
	fetch(t, s, key, wire.FetchRequest{Agent: &first})
	fetch(t, s, key, wire.FetchRequest{})
	if got, ok := s.Agent(t, uid); !ok || !sameAgent(got, first) {
		t.Errorf("after a fetch with %+v and one without: %+v (%v)", first, got, ok)
	}
	second := wire.Agent{Version: "1.2.4", Labels: map[string]string{"site": "fra2"}}
	fetch(t, s, key, wire.FetchRequest{Agent: &second})
	if got, ok := s.Agent(t, uid); !ok || !sameAgent(got, second) {
		t.Errorf("after a fetch with %+v: %+v (%v)", second, got, ok)
	}

	many := map[string]string{}
	for i := range wire.MaxAgentLabels {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	tooMany := maps.Clone(many)
	tooMany["one-more"] = "v"
	for _, c := range []struct {
		agent wire.Agent
		ok    bool
	}{
		{wire.Agent{}, true},
		{wire.Agent{Labels: many}, true},
		{wire.Agent{Labels: map[string]string{"a.b/c_d-e": "", "x": strings.Repeat("é", 127)}}, true},
		{wire.Agent{Version: strings.Repeat("v", wire.MaxAgentVersion)}, true},
		{wire.Agent{Labels: tooMany}, false},
		{wire.Agent{Version: strings.Repeat("v", wire.MaxAgentVersion+1)}, false},
		{wire.Agent{Version: "1.0\u202e"}, false},
		{wire.Agent{Version: " "}, false},
		{wire.Agent{Hostname: "host\x00"}, false},
		{wire.Agent{Labels: map[string]string{"bad key": "v"}}, false},
		{wire.Agent{Labels: map[string]string{strings.Repeat("k", wire.MaxLabelKey+1): "v"}}, false},
		{wire.Agent{Labels: map[string]string{"k": strings.Repeat("v", wire.MaxLabelValue+1)}}, false},
		{wire.Agent{Labels: map[string]string{"k": "line\nbreak"}}, false},
	} {
		body := wire.FetchRequest{Agent: &c.agent}
		if checkErr := c.agent.Check(); (checkErr == nil) != c.ok {
			t.Errorf("wire.Agent.Check(%s): %v, want ok %v", bodyText(body), checkErr, c.ok)
		}
		if c.ok {
			must(t, s, "/v1/fetch", key, body, nil)
			continue
		}
		r := refused(t, s, "/v1/fetch", key, body, http.StatusBadRequest, "invalid_argument")
		if !strings.HasPrefix(r.errorMessage(), "agent.") {
			t.Errorf("fetch %s: %v, want a message naming agent.<field>", bodyText(body), r)
		}
	}
}

// sameAgent compares agent objects as the server keeps them: no labels is no labels.
func sameAgent(a, b wire.Agent) bool {
	return a.Version == b.Version && a.Hostname == b.Hostname && maps.Equal(a.Labels, b.Labels)
}
