// Package agenttest is an in-process fake taskd server for testing agents and their
// handlers without a dispatchd: it speaks the client API the agent package uses
// (enroll, fetch with batches, long polls and carried completes, complete with
// stages, progress with checkpoints and lease extension, campaign items), keeps
// tasks, attempts and leases as the real server does (one contract suite runs against
// it and a real server alike), and injects faults: 429 and 503 with Retry-After,
// other statuses, lost requests and lost replies, lease expiry, redo.
//
// Do runs one handler on one task and returns what the agent sent.
package agenttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/taskpull/taskd/agent/internal/wire"
	"github.com/taskpull/taskd/internal/jsondepth"
)

// Request is a kind of request a fault applies to, and that Count counts.
type Request string

// The requests.
const (
	// Fetch is POST /v1/fetch.
	Fetch Request = "fetch"
	// Complete is a result: POST /v1/complete, or a fetch carrying a complete.
	Complete Request = "complete"
	// Progress is POST /v1/progress.
	Progress Request = "progress"
	// Enroll is POST /v1/enroll.
	Enroll Request = "enroll"
)

// Fault is a fault the server injects into requests of one kind, the next Times of
// them (default 1). A fault on Complete applies to a fetch that carries a complete
// too (to the whole request). Status answers with that status (in the API's error
// shape) and, with RetryAfter, a Retry-After header (whole seconds, rounded up),
// doing nothing else; DropRequest closes the connection before the request is
// applied; DropReply applies it, then closes the connection instead of answering.
type Fault struct {
	On          Request
	Status      int
	RetryAfter  time.Duration
	DropRequest bool
	DropReply   bool
	Times       int
}

// Task is a task to hand out: one occurrence, due at DueAt.
type Task struct {
	// UID is the uid the task is for; "" for whichever uid fetches it first (it then
	// stays with that uid, as a task does).
	UID string
	// TemplateID is the task's template (default 1).
	TemplateID int64
	// Params are the task's params, encoded as JSON (nil: {}).
	Params any
	// LeaseSeconds is the lease's length (0: no lease).
	LeaseSeconds int
	// MaxAttempts is how many dispatches of a stage may fail or expire before the
	// task is dead (default 1, or 3 with a lease, as the server's defaults).
	MaxAttempts int
	// Stages are the template's stages (the task starts at the first); empty: none,
	// and any next stage a complete names is taken.
	Stages []string
	// Checkpoint is a checkpoint saved before, which the first dispatch brings.
	Checkpoint any
	// DueAt is when the task is due (zero: now).
	DueAt time.Time
	// CampaignID, when not 0, makes the task an item of that campaign (its id
	// campaign:<CampaignID>, its kind campaign), and Item is the item: its index or
	// its uid.
	CampaignID int64
	Item       any
}

// Completion is a result the server took for one dispatch.
type Completion struct {
	LogID   string
	TaskID  string
	Attempt int
	// Stage is the stage the dispatch worked.
	Stage string
	// Result is "success" or "failure". Final says a failure was final ("retry":
	// false): the task was finished at once, whatever attempts were left.
	Result    string
	Final     bool
	Detail    json.RawMessage
	NextStage string
	Context   json.RawMessage
	Delay     time.Duration
	// Checkpoints are the checkpoints sent for the dispatch, in order.
	Checkpoints []json.RawMessage
}

// Server is the fake server. Its methods are safe for concurrent use.
type Server struct {
	// URL is the server's base URL, for agent.Config.URL.
	URL string
	// EnrollSecret is the secret POST /v1/enroll takes.
	EnrollSecret string

	srv *httptest.Server

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every change
	keys        map[string]string
	maxInFlight map[string]int
	tasks       []*occurrence
	byID        map[string][]*occurrence // a campaign's items share their id
	dispatches  map[string]*dispatch
	faults      []*Fault
	counts      map[Request]int
	notBefore   map[Request]time.Time
	early       int
	completions []Completion
	agents      map[string]wire.Agent // by uid: the latest a fetch reported
	nextLog     int
	// stopAfter, when set, is a task after whose first result nothing more is handed
	// out (Do).
	stopAfter string
	stopped   bool
}

// occurrence is a task's one occurrence.
type occurrence struct {
	id          string
	kind        string
	item        json.RawMessage // a campaign's item
	spec        Task
	uid         string // who has it ("" before its first dispatch)
	params      json.RawMessage
	stage       string
	context     json.RawMessage
	checkpoint  json.RawMessage
	attempt     int // attempts used at the stage
	availableAt time.Time
	open        *dispatch
	finished    bool
}

type dispatch struct {
	logID       string
	occ         *occurrence
	uid         string
	attempt     int
	stage       string
	leaseEnd    *time.Time
	open        bool
	result      *Completion // the result taken, for a repeat
	checkpoints []json.RawMessage
	forceRedo   bool
}

// maxWait caps a long poll, as the server's default does.
const maxWait = 30 * time.Second

// NewServer starts a fake server; Close stops it.
func NewServer() *Server {
	s := &Server{EnrollSecret: "agenttest-enroll-secret", changed: make(chan struct{}), keys: map[string]string{},
		maxInFlight: map[string]int{}, byID: map[string][]*occurrence{}, dispatches: map[string]*dispatch{},
		counts: map[Request]int{}, notBefore: map[Request]time.Time{}, agents: map[string]wire.Agent{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/enroll", s.handleEnroll)
	mux.HandleFunc("POST /v1/fetch", s.handleFetch)
	mux.HandleFunc("POST /v1/complete", s.handleComplete)
	mux.HandleFunc("POST /v1/progress", s.handleProgress)
	s.srv = httptest.NewServer(s.faulty(mux))
	s.URL = s.srv.URL
	return s
}

// Close stops the server, cutting off the requests in progress.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Key issues a client key for uid.
func (s *Server) Key(uid string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newKeyLocked(uid)
}

func (s *Server) newKeyLocked(uid string) string {
	b := make([]byte, 16)
	rand.Read(b)
	key := uid + "." + hex.EncodeToString(b)
	s.keys[key] = uid
	return key
}

// Revoke revokes every key of uid: requests with them answer 401.
func (s *Server) Revoke(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, u := range s.keys {
		if u == uid {
			delete(s.keys, k)
		}
	}
}

// SetMaxInFlight sets how many dispatches uid may hold open at once (default 1).
func (s *Server) SetMaxInFlight(uid string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxInFlight[uid] = n
}

// Add adds a task and returns its id (once:<n>, or campaign:<id> for a campaign's
// item).
func (s *Server) Add(t Task) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.TemplateID == 0 {
		t.TemplateID = 1
	}
	if t.MaxAttempts <= 0 {
		t.MaxAttempts = 1
		if t.LeaseSeconds > 0 {
			t.MaxAttempts = 3
		}
	}
	if t.DueAt.IsZero() {
		t.DueAt = time.Now()
	}
	t.DueAt = t.DueAt.UTC().Truncate(time.Second)
	o := &occurrence{id: fmt.Sprintf("once:%d", len(s.tasks)+1), kind: "once", spec: t, availableAt: t.DueAt}
	if t.CampaignID != 0 {
		o.id, o.kind = fmt.Sprintf("campaign:%d", t.CampaignID), "campaign"
		o.item = mustJSON(t.Item, nil)
	}
	o.params = mustJSON(t.Params, json.RawMessage(`{}`))
	o.checkpoint = mustJSON(t.Checkpoint, nil)
	if len(t.Stages) > 0 {
		o.stage = t.Stages[0]
	}
	s.tasks = append(s.tasks, o)
	s.byID[o.id] = append(s.byID[o.id], o)
	s.changedLocked()
	return o.id
}

func mustJSON(v any, none json.RawMessage) json.RawMessage {
	if v == nil {
		return none
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("agenttest: %v", err))
	}
	return b
}

// Inject adds a fault, after those already waiting.
func (s *Server) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Times <= 0 {
		f.Times = 1
	}
	s.faults = append(s.faults, &f)
}

// Expire ends the open dispatch logID now, as a lapsed lease would: the attempt is
// used, the task is handed out again while it has attempts left, and a complete or
// progress report of logID answers 409 stale_lease. It reports whether logID was open.
func (s *Server) Expire(logID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dispatches[logID]
	if d == nil || !d.open {
		return false
	}
	s.expireLocked(d, time.Now())
	return true
}

// Redo makes the next fetch of logID's uid hand the open dispatch logID out again
// (redo: true), first, whatever else it hands out, as a server does after a lost
// reply. It reports whether logID was open.
func (s *Server) Redo(logID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dispatches[logID]
	if d == nil || !d.open {
		return false
	}
	d.forceRedo = true
	s.changedLocked()
	return true
}

// Count is how many requests of kind r came (faulted ones too).
func (s *Server) Count(r Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[r]
}

// EarlyRetries is how many requests came before a Retry-After the server had given
// for their kind had passed (a 429 binds fetches and progress reports alike, as the
// server's poll limit counts both).
func (s *Server) EarlyRetries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.early
}

// AgentInfo is what an agent reported of itself on fetch.
type AgentInfo struct {
	Version  string
	Hostname string
	Labels   map[string]string
}

// Agent is the agent uid reported last, as GET /v1/admin/clients shows it; false when
// no fetch of uid reported one.
func (s *Server) Agent(uid string) (AgentInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.agents[uid]
	return AgentInfo{Version: a.Version, Hostname: a.Hostname, Labels: maps.Clone(a.Labels)}, ok
}

// Completions is every result taken, in order.
func (s *Server) Completions() []Completion {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.completions)
}

// Wait waits until task taskID is finished (its last stage succeeded, or an attempt
// failed or expired with none left; for a campaign, every item added of it) and
// returns its results.
func (s *Server) Wait(ctx context.Context, taskID string) ([]Completion, error) {
	for {
		s.mu.Lock()
		occs := s.byID[taskID]
		if occs == nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("agenttest: no task %s", taskID)
		}
		s.expireAllLocked(time.Now())
		if !slices.ContainsFunc(occs, func(o *occurrence) bool { return !o.finished }) {
			var out []Completion
			for _, c := range s.completions {
				if c.TaskID == taskID {
					out = append(out, c)
				}
			}
			s.mu.Unlock()
			return out, nil
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("agenttest: waiting for %s: %w", taskID, ctx.Err())
		case <-changed:
		case <-time.After(100 * time.Millisecond): // leases lapse without a change
		}
	}
}

func (s *Server) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// ---- the HTTP side ----

type apiError struct {
	status     int
	code       string
	message    string
	retryAfter time.Duration
}

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.retryAfter+time.Second-1)/time.Second)))
	}
	writeJSON(w, e.status, wire.ErrorReply{Error: wire.Error{Code: e.code, Message: e.message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// codes are the API's error codes by status, for injected faults.
var codes = map[int]string{400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied",
	404: "not_found", 409: "stale_lease", 413: "too_large", 429: "rate_limited", 503: "unavailable"}

// faulty counts requests, checks Retry-After, and injects faults.
func (s *Server) faulty(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, wire.BodyLimit))
		if err != nil {
			writeError(w, errorf(http.StatusRequestEntityTooLarge, "too_large", "request body is over %d bytes", wire.BodyLimit))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		kinds := requestKinds(r.URL.Path, body)
		now := time.Now()
		s.mu.Lock()
		var fault *Fault
		for _, k := range kinds {
			s.counts[k]++
			if now.Before(s.notBefore[k]) {
				s.early++
			}
		}
		for _, f := range s.faults {
			if f.Times > 0 && slices.Contains(kinds, f.On) {
				f.Times--
				fault = f
				break
			}
		}
		if fault != nil && fault.Status != 0 && fault.RetryAfter > 0 {
			until := now.Add((fault.RetryAfter + time.Second - 1).Truncate(time.Second))
			bound := kinds
			if fault.Status == http.StatusTooManyRequests && (kinds[0] == Fetch || kinds[0] == Progress) {
				bound = []Request{Fetch, Progress}
			}
			for _, k := range bound {
				if k != Complete || kinds[0] == Complete {
					s.notBefore[k] = until
				}
			}
		}
		s.mu.Unlock()
		switch {
		case fault == nil:
			next.ServeHTTP(w, r)
		case fault.Status != 0:
			code := codes[fault.Status]
			if code == "" {
				code = "internal"
			}
			writeError(w, &apiError{status: fault.Status, code: code, message: "injected fault", retryAfter: fault.RetryAfter})
		case fault.DropRequest:
			hangUp(w)
		case fault.DropReply:
			next.ServeHTTP(httptest.NewRecorder(), r)
			hangUp(w)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// requestKinds names the kinds of a request: its own, and Complete for a fetch that
// carries one.
func requestKinds(path string, body []byte) []Request {
	switch path {
	case "/v1/fetch":
		var probe struct {
			Complete json.RawMessage `json:"complete"`
		}
		if json.Unmarshal(body, &probe) == nil && len(probe.Complete) > 0 && string(probe.Complete) != "null" {
			return []Request{Fetch, Complete}
		}
		return []Request{Fetch}
	case "/v1/complete":
		return []Request{Complete}
	case "/v1/progress":
		return []Request{Progress}
	case "/v1/enroll":
		return []Request{Enroll}
	}
	return []Request{Request(path)}
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("agenttest: the connection cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		conn.Close()
	}
}

// decode reads r's body into v as the server does: unknown fields refused, nesting
// bounded (the refusal names the top-level field), malformed JSON and trailing data
// refused as malformed_json.
func decode(r *http.Request, v any, optional bool) *apiError {
	body, _ := io.ReadAll(r.Body)
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return errorf(400, "invalid_argument", "request body: required")
	}
	if field, deep := jsondepth.Over(body, wire.MaxDepth); deep {
		if field == "" {
			field = "request body"
		}
		return errorf(400, "invalid_argument", "%s: nested deeper than %d levels (objects and arrays within each other)", field, wire.MaxDepth)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var syntax *json.SyntaxError
	if err := dec.Decode(v); errors.As(err, &syntax) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errorf(400, "malformed_json", "request body: malformed JSON: %v", err)
	} else if err != nil {
		return errorf(400, "invalid_argument", "request body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(400, "malformed_json", "request body: trailing data after the JSON value")
	}
	return nil
}

// uidOf is the caller's uid, or a 401.
func (s *Server) uidOf(r *http.Request) (string, *apiError) {
	auth := r.Header.Get("Authorization")
	key, ok := bytes.CutPrefix([]byte(auth), []byte("Bearer "))
	if !ok {
		return "", errorf(401, "unauthenticated", "missing or malformed client key")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	uid, found := s.keys[string(key)]
	if !found {
		return "", errorf(401, "unauthenticated", "client key not valid")
	}
	return uid, nil
}

func (s *Server) handleEnroll(w http.ResponseWriter, r *http.Request) {
	var req wire.EnrollRequest
	if e := decode(r, &req, false); e != nil {
		writeError(w, e)
		return
	}
	if req.UID == "" {
		writeError(w, errorf(400, "invalid_argument", "uid: required"))
		return
	}
	if req.EnrollSecret != s.EnrollSecret {
		writeError(w, errorf(401, "unauthenticated", "enroll secret not valid"))
		return
	}
	s.mu.Lock()
	key := s.newKeyLocked(req.UID)
	s.mu.Unlock()
	writeJSON(w, 200, wire.EnrollReply{ClientKey: key})
}

func (s *Server) handleFetch(w http.ResponseWriter, r *http.Request) {
	uid, e := s.uidOf(r)
	if e != nil {
		writeError(w, e)
		return
	}
	var req wire.FetchRequest
	if e := decode(r, &req, true); e != nil {
		writeError(w, e)
		return
	}
	batch := req.Max != nil || req.TemplateIDs != nil
	max := 1
	if req.Max != nil {
		if *req.Max < 1 || *req.Max > 100 {
			writeError(w, errorf(400, "invalid_argument", "max: must be 1..100, got %d", *req.Max))
			return
		}
		max = *req.Max
	}
	if req.TemplateIDs != nil && (len(req.TemplateIDs) == 0 || len(req.TemplateIDs) > 100) {
		writeError(w, errorf(400, "invalid_argument", "template_ids: give 1..100 template ids, or leave it out for any template"))
		return
	}
	for i, id := range req.TemplateIDs {
		if id < 1 {
			writeError(w, errorf(400, "invalid_argument", "template_ids[%d]: must be a template id (>= 1), got %d", i, id))
			return
		}
	}
	if req.Agent != nil {
		if err := req.Agent.Check(); err != nil {
			writeError(w, errorf(400, "invalid_argument", "%v", err))
			return
		}
	}
	var wait time.Duration
	if req.WaitMS != nil {
		if *req.WaitMS < 0 {
			writeError(w, errorf(400, "invalid_argument", "wait_ms: must be >= 0"))
			return
		}
		wait = min(time.Duration(*req.WaitMS)*time.Millisecond, maxWait)
	}
	if req.Complete != nil {
		if e := s.complete(uid, *req.Complete, "complete."); e != nil {
			writeError(w, e)
			return
		}
	}
	deadline := time.Now().Add(wait)
	for {
		s.mu.Lock()
		tasks, next := s.takeLocked(uid, max, req.TemplateIDs, time.Now())
		changed := s.changed
		s.mu.Unlock()
		now := time.Now()
		if len(tasks) > 0 || !now.Before(deadline) {
			reply := wire.FetchReply{NextDueAt: next}
			if len(tasks) > 0 {
				reply.Task = tasks[0]
			}
			if batch {
				reply.Tasks = tasks // [] for none
			}
			if req.Agent != nil {
				// As the server does: an answered fetch's agent is the uid's.
				s.mu.Lock()
				s.agents[uid] = *req.Agent
				s.mu.Unlock()
			}
			writeJSON(w, 200, reply)
			return
		}
		pause := deadline.Sub(now)
		if next != nil && next.After(now) {
			pause = min(pause, next.Sub(now))
		}
		t := time.NewTimer(min(pause, time.Second)) // leases lapse without a change
		select {
		case <-r.Context().Done():
			t.Stop()
			return
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// takeLocked hands uid up to max tasks: a dispatch forced to come again first, new
// ones into its free slots, or, when nothing new is due, the open ones again (redo).
func (s *Server) takeLocked(uid string, max int, templates []int64, now time.Time) ([]*wire.Task, *time.Time) {
	s.expireAllLocked(now)
	allowed := func(o *occurrence) bool {
		return len(templates) == 0 || slices.Contains(templates, o.spec.TemplateID)
	}
	var held []*dispatch
	for _, o := range s.tasks {
		if d := o.open; d != nil && d.uid == uid && allowed(o) {
			held = append(held, d)
		}
	}
	var out []*wire.Task
	for _, d := range held {
		if d.forceRedo && len(out) < max {
			d.forceRedo = false
			out = append(out, s.taskOf(d, true))
		}
	}
	open := 0
	for _, d := range s.dispatches {
		if d.open && d.uid == uid {
			open++
		}
	}
	mif := s.maxInFlight[uid]
	if mif == 0 {
		mif = 1
	}
	free := mif - open
	var next *time.Time
	for _, o := range s.tasks {
		if o.finished || o.open != nil || !allowed(o) || (o.uid != "" && o.uid != uid) ||
			(o.spec.UID != "" && o.spec.UID != uid) || s.stopped {
			continue
		}
		if o.availableAt.After(now) || free <= 0 || len(out) >= max {
			if next == nil || o.availableAt.Before(*next) {
				next = new(o.availableAt)
			}
			continue
		}
		free--
		s.nextLog++
		d := &dispatch{logID: fmt.Sprintf("L%06d", s.nextLog), occ: o, uid: uid, attempt: o.attempt + 1,
			stage: o.stage, open: true}
		if o.spec.LeaseSeconds > 0 {
			d.leaseEnd = new(now.Add(time.Duration(o.spec.LeaseSeconds) * time.Second))
		}
		o.uid, o.open = uid, d
		s.dispatches[d.logID] = d
		out = append(out, s.taskOf(d, false))
	}
	if len(out) == 0 && !s.stopped {
		for _, d := range held {
			if len(out) < max {
				out = append(out, s.taskOf(d, true))
			}
		}
	}
	if out == nil {
		out = []*wire.Task{}
	}
	return out, next
}

// taskOf is d as a fetch hands it out; redo says it was handed out before.
func (s *Server) taskOf(d *dispatch, redo bool) *wire.Task {
	o := d.occ
	t := &wire.Task{LogID: d.logID, TaskID: o.id, Kind: o.kind, DueAt: o.spec.DueAt, TemplateID: o.spec.TemplateID,
		Params: o.params, Redo: redo, Attempt: d.attempt, LeaseExpiresAt: d.leaseEnd, Checkpoint: o.checkpoint,
		Stage: d.stage, Context: o.context}
	if o.spec.CampaignID != 0 {
		t.CampaignID, t.Item = new(o.spec.CampaignID), o.item
	}
	return t
}

// expireAllLocked expires the open dispatches whose lease lapsed.
func (s *Server) expireAllLocked(now time.Time) {
	for _, d := range s.dispatches {
		if d.open && d.leaseEnd != nil && !now.Before(*d.leaseEnd) {
			s.expireLocked(d, now)
		}
	}
}

// expireLocked ends the open dispatch d as an expiry: an attempt used.
func (s *Server) expireLocked(d *dispatch, now time.Time) {
	d.open = false
	o := d.occ
	o.open = nil
	o.attempt = d.attempt
	if s.stopAfter == o.id {
		s.stopped = true
	}
	if o.attempt >= o.spec.MaxAttempts {
		o.finished = true
	} else {
		o.availableAt = now
	}
	s.changedLocked()
}

func (s *Server) handleComplete(w http.ResponseWriter, r *http.Request) {
	uid, e := s.uidOf(r)
	if e != nil {
		writeError(w, e)
		return
	}
	var req wire.CompleteRequest
	if e := decode(r, &req, false); e != nil {
		writeError(w, e)
		return
	}
	if e := s.complete(uid, req, ""); e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, 200, wire.OK{OK: true})
}

// complete applies a complete of uid, by the server's rules; prefix names its fields
// ("complete." in a fetch).
func (s *Server) complete(uid string, req wire.CompleteRequest, prefix string) *apiError {
	switch {
	case req.LogID == "":
		return errorf(400, "invalid_argument", "%slog_id: required", prefix)
	case req.Result != "success" && req.Result != "failure":
		return errorf(400, "invalid_argument", "%sresult: must be success or failure, got %q", prefix, req.Result)
	case len(req.Detail) > 0 && string(req.Detail) != "null" && req.Detail[0] != '{':
		return errorf(400, "invalid_argument", "%sdetail: must be an object", prefix)
	case req.NextStage == "" && (len(req.Context) > 0 || req.DelaySeconds != nil):
		return errorf(400, "invalid_argument", "%scontext, %sdelay_seconds: only with next_stage", prefix, prefix)
	case req.Retry != nil && !*req.Retry && req.Result != "failure":
		return errorf(400, "invalid_argument", "%sretry: false only with result failure (a success is not retried anyway)", prefix)
	case req.NextStage != "" && req.Result != "success":
		return errorf(400, "invalid_argument", "%snext_stage: only with result success (a failed stage is retried)", prefix)
	case len(req.Context) > 0 && string(req.Context) != "null" && req.Context[0] != '{':
		return errorf(400, "invalid_argument", "%scontext: must be an object", prefix)
	case len(req.Context) > wire.MaxCheckpoint:
		return errorf(413, "too_large", "%scontext: %d bytes is over the limit of %d", prefix, len(req.Context), wire.MaxCheckpoint)
	case req.DelaySeconds != nil && (*req.DelaySeconds < 0 || *req.DelaySeconds > 7*24*3600):
		return errorf(400, "invalid_argument", "%sdelay_seconds: must be 0..604800 (a week), got %d", prefix, *req.DelaySeconds)
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dispatches[req.LogID]
	if d == nil || d.uid != uid {
		return errorf(409, "stale_lease", "log_id %s is not your open dispatch", req.LogID)
	}
	if d.open && d.leaseEnd != nil && !now.Before(*d.leaseEnd) {
		s.expireLocked(d, now)
	}
	if !d.open {
		if d.result != nil {
			return nil // a repeat: answered as the first was
		}
		return errorf(409, "stale_lease", "log_id %s: the lease expired", req.LogID)
	}
	o := d.occ
	if req.NextStage != "" && len(o.spec.Stages) > 0 && !slices.Contains(o.spec.Stages, req.NextStage) {
		return errorf(400, "invalid_argument", "next_stage: %q is not a stage of template %d", req.NextStage, o.spec.TemplateID)
	}
	c := Completion{LogID: d.logID, TaskID: o.id, Attempt: d.attempt, Stage: d.stage, Result: req.Result,
		Final: req.Retry != nil && !*req.Retry, Detail: wire.OrNil(req.Detail), NextStage: req.NextStage, Context: wire.OrNil(req.Context), Checkpoints: d.checkpoints}
	if req.DelaySeconds != nil {
		c.Delay = time.Duration(*req.DelaySeconds) * time.Second
	}
	d.open, d.result, o.open = false, &c, nil
	switch {
	case req.NextStage != "":
		o.stage, o.context, o.attempt, o.availableAt = req.NextStage, c.Context, 0, now.Add(c.Delay)
	case req.Result == "success":
		o.finished = true
	default:
		o.attempt = d.attempt
		if o.attempt >= o.spec.MaxAttempts || c.Final {
			o.finished = true
		} else {
			o.availableAt = now
		}
	}
	if s.stopAfter == o.id {
		s.stopped = true
	}
	s.completions = append(s.completions, c)
	s.changedLocked()
	return nil
}

func (s *Server) handleProgress(w http.ResponseWriter, r *http.Request) {
	uid, e := s.uidOf(r)
	if e != nil {
		writeError(w, e)
		return
	}
	var req wire.ProgressRequest
	if e := decode(r, &req, false); e != nil {
		writeError(w, e)
		return
	}
	cp := wire.OrNil(req.Checkpoint)
	switch {
	case req.LogID == "":
		writeError(w, errorf(400, "invalid_argument", "log_id: required"))
		return
	case len(cp) > 0 && cp[0] != '{':
		writeError(w, errorf(400, "invalid_argument", "checkpoint: must be an object"))
		return
	case len(cp) > wire.MaxCheckpoint:
		writeError(w, errorf(413, "too_large", "checkpoint: %d bytes is over the limit of %d", len(cp), wire.MaxCheckpoint))
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dispatches[req.LogID]
	if d != nil && d.open && d.leaseEnd != nil && !now.Before(*d.leaseEnd) {
		s.expireLocked(d, now)
	}
	if d == nil || d.uid != uid || !d.open {
		writeError(w, errorf(409, "stale_lease", "log_id %s is not your open dispatch", req.LogID))
		return
	}
	if cp != nil {
		d.checkpoints = append(d.checkpoints, cp)
		d.occ.checkpoint = cp
	}
	if req.ExtendLease && d.leaseEnd != nil {
		d.leaseEnd = new(now.Add(time.Duration(d.occ.spec.LeaseSeconds) * time.Second))
	}
	writeJSON(w, 200, wire.ProgressReply{OK: true, LeaseExpiresAt: d.leaseEnd})
}
