package dispatch

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/clientkey"
	"github.com/taskpull/taskd/internal/web"
)

// clientBodyLimit bounds client request bodies; completion details are small.
const clientBodyLimit = 64 << 10

// Handlers serves the client API's fetch and complete.
type Handlers struct {
	svc *Service
	log *slog.Logger
	// isAdminToken recognizes an admin token sent where a client key belongs, so the
	// reply can say so; nil recognizes none.
	isAdminToken func(token string) bool
	// empty holds the replies of empty fetches, built once per next due time.
	empty *emptyReplies
}

// NewHandlers returns the handlers over svc.
func NewHandlers(svc *Service, log *slog.Logger) *Handlers {
	return &Handlers{svc: svc, log: log, empty: &emptyReplies{}}
}

// RecognizeAdminTokens makes a request bearing an admin token (isAdminToken) answer
// that an admin token is not a client key, rather than that the key is malformed.
func (h *Handlers) RecognizeAdminTokens(isAdminToken func(token string) bool) *Handlers {
	h.isAdminToken = isAdminToken
	return h
}

// decodeAuthenticated decodes a client request's body. Authentication comes first: a
// body that does not decode is answered 401 when the key is not valid either. A valid
// request's key is checked later, in the same Redis round trip as its work.
func (h *Handlers) decodeAuthenticated(w http.ResponseWriter, r *http.Request, uid, hash string, optional bool, v any) error {
	if err := web.Decode(w, r, clientBodyLimit, optional, v); err != nil {
		return h.refusal(r, uid, hash, err)
	}
	return nil
}

// refusal is what a request refused for its body or fields (err) is answered:
// authentication comes first, so a wrong key is a 401 whatever the body holds, and a
// caller without a valid key learns nothing of how the body is checked.
func (h *Handlers) refusal(r *http.Request, uid, hash string, err error) error {
	if kerr := h.svc.cache.VerifyKey(r.Context(), uid, hash); kerr != nil {
		return kerr
	}
	return err
}

type fetchRequest struct {
	WaitMS *int64 `json:"wait_ms"`
	// Max and TemplateIDs make a batch fetch: up to max tasks at once (bounded by the
	// client's max_in_flight), only of those templates.
	Max         *int64  `json:"max"`
	TemplateIDs []int64 `json:"template_ids"`
	// Complete, when present, is completed first, by the rules of POST /v1/complete:
	// one request per cycle.
	Complete *completeRequest `json:"complete"`
	// Agent says which agent polls: remembered (the latest per uid) for the fleet view.
	Agent *taskd.AgentInfo `json:"agent"`
}

// Fetch is POST /v1/fetch.
func (h *Handlers) Fetch() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uid, hash, ok := clientKey(w, r, h.log, h.isAdminToken)
		if !ok {
			return
		}
		var req fetchRequest
		if err := h.decodeAuthenticated(w, r, uid, hash, true, &req); err != nil {
			web.Error(w, r, h.log, err)
			return
		}
		// Every field is checked before the carried complete is applied: a request
		// refused for its own fields changes nothing.
		var wait time.Duration
		if req.WaitMS != nil {
			if *req.WaitMS < 0 {
				web.Error(w, r, h.log, h.refusal(r, uid, hash, taskd.Errorf(taskd.CodeInvalid, "wait_ms: must be >= 0")))
				return
			}
			wait = time.Duration(min(*req.WaitMS, 3_600_000)) * time.Millisecond
		}
		batch, err := parseBatch(req)
		if err == nil && req.Agent != nil {
			err = req.Agent.Check()
		}
		if err != nil {
			web.Error(w, r, h.log, h.refusal(r, uid, hash, err))
			return
		}
		if err := h.svc.Report(r.Context(), uid, hash, req.Agent); err != nil {
			web.Error(w, r, h.log, err)
			return
		}
		fetch := func() (FetchResult, error) {
			if batch != nil {
				return h.svc.FetchBatch(r.Context(), uid, hash, *batch, wait)
			}
			return h.svc.Fetch(r.Context(), uid, hash, wait)
		}
		var res FetchResult
		if req.Complete != nil {
			// A fetch is not under the server's per-request bound (its long poll
			// bounds each round); the complete it carries is, as on its own. Once it is
			// applied, a failure of the fetch that follows does not undo it: resending
			// the complete is safe (a repeat is answered as the first was). A 409 of the
			// complete is the request's 409, and nothing is fetched.
			c, cerr := parseComplete(*req.Complete, "complete.")
			if cerr != nil {
				web.Error(w, r, h.log, h.refusal(r, uid, hash, cerr))
				return
			}
			switch {
			case c.move != nil, batch != nil:
				// A stage move, or a complete before a batch, is its own complete, then
				// the fetch as usual.
				bounded, cancel := context.WithTimeout(r.Context(), h.svc.cfg.RequestTimeout)
				if c.move != nil {
					err = h.svc.CompleteStage(bounded, uid, hash, c.logID, c.detail, *c.move)
				} else {
					err = h.svc.Complete(bounded, uid, hash, c.logID, c.result, c.detail)
				}
				cancel()
				if err == nil {
					res, err = fetch()
				}
			default:
				res, err = h.svc.CompleteAndFetch(r.Context(), uid, hash, c.logID, c.result, c.detail, wait)
			}
		} else {
			res, err = fetch()
		}
		if err != nil {
			web.Error(w, r, h.log, err)
			return
		}
		h.svc.seen(uid, req.Agent)
		if batch != nil {
			// A batch's reply always has its tasks, [] for none.
			web.Encode(w, http.StatusOK, batchReply{Task: res.Task, Tasks: nonNil(res.Tasks), NextDueAt: res.NextDueAt})
			return
		}
		if res.Task == nil && res.Tasks == nil {
			// Most polls are empty: their reply is looked up (replies.go).
			if body, ok := h.empty.reply(res.NextDueAt); ok {
				web.EncodeRaw(w, http.StatusOK, body)
				return
			}
		}
		web.Encode(w, http.StatusOK, res)
	})
}

// batchReply is a batch fetch's reply: tasks always present, task its first or null.
type batchReply struct {
	Task      *Assignment   `json:"task"`
	Tasks     []*Assignment `json:"tasks"`
	NextDueAt *time.Time    `json:"next_due_at"`
}

// parseBatch checks a fetch's max and template_ids; nil for a fetch without either.
func parseBatch(req fetchRequest) (*Batch, error) {
	if req.Max == nil && req.TemplateIDs == nil {
		return nil, nil
	}
	b := &Batch{Max: 1}
	if req.Max != nil {
		if *req.Max < 1 || *req.Max > taskd.MaxInFlightLimit {
			return nil, taskd.Errorf(taskd.CodeInvalid, "max: must be 1..%d, got %d", taskd.MaxInFlightLimit, *req.Max)
		}
		b.Max = int(*req.Max)
	}
	if req.TemplateIDs != nil {
		if len(req.TemplateIDs) == 0 || len(req.TemplateIDs) > maxTemplateIDs {
			return nil, taskd.Errorf(taskd.CodeInvalid, "template_ids: give 1..%d template ids, or leave it out for any template", maxTemplateIDs)
		}
		for i, id := range req.TemplateIDs {
			if id < 1 {
				return nil, taskd.Errorf(taskd.CodeInvalid, "template_ids[%d]: must be a template id (>= 1), got %d", i, id)
			}
		}
		b.Templates = req.TemplateIDs
	}
	return b, nil
}

// maxTemplateIDs bounds a fetch's template_ids.
const maxTemplateIDs = 100

type completeRequest struct {
	LogID  string          `json:"log_id"`
	Result string          `json:"result"`
	Detail json.RawMessage `json:"detail"`
	// NextStage, Context and DelaySeconds hand a multi-stage task on to its next stage.
	NextStage    string          `json:"next_stage"`
	Context      json.RawMessage `json:"context"`
	DelaySeconds *int64          `json:"delay_seconds"`
	// Retry false says a failure is final: no attempt will mend it, and the occurrence
	// is dead at once, whatever attempts are left. Absent: true.
	Retry *bool `json:"retry"`
}

// maxStageDelay bounds a complete's delay_seconds: a week.
const maxStageDelay = 7 * 24 * 3600

// Complete is POST /v1/complete.
func (h *Handlers) Complete() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uid, hash, ok := clientKey(w, r, h.log, h.isAdminToken)
		if !ok {
			return
		}
		var req completeRequest
		if err := h.decodeAuthenticated(w, r, uid, hash, false, &req); err != nil {
			web.Error(w, r, h.log, err)
			return
		}
		c, err := parseComplete(req, "")
		switch {
		case err != nil:
			err = h.refusal(r, uid, hash, err)
		case c.move != nil:
			err = h.svc.CompleteStage(r.Context(), uid, hash, c.logID, c.detail, *c.move)
		default:
			err = h.svc.Complete(r.Context(), uid, hash, c.logID, c.result, c.detail)
		}
		if err != nil {
			web.Error(w, r, h.log, err)
			return
		}
		web.Encode(w, http.StatusOK, map[string]bool{"ok": true})
	})
}

type progressRequest struct {
	LogID       string          `json:"log_id"`
	Checkpoint  json.RawMessage `json:"checkpoint"`
	ExtendLease bool            `json:"extend_lease"`
}

// Progress is POST /v1/progress.
func (h *Handlers) Progress() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uid, hash, ok := clientKey(w, r, h.log, h.isAdminToken)
		if !ok {
			return
		}
		var req progressRequest
		if err := h.decodeAuthenticated(w, r, uid, hash, false, &req); err != nil {
			web.Error(w, r, h.log, err)
			return
		}
		err := checkLogID(req.LogID, "")
		switch cp := req.Checkpoint; {
		case err != nil:
		case string(cp) == "null":
			req.Checkpoint = nil
		case len(cp) > 0 && cp[0] != '{':
			err = taskd.Errorf(taskd.CodeInvalid, "checkpoint: must be an object")
		case len(cp) > MaxCheckpoint:
			err = taskd.Errorf(taskd.CodeTooLarge, "checkpoint: %d bytes is over the limit of %d", len(cp), MaxCheckpoint)
		}
		var lease *time.Time
		if err == nil {
			lease, err = h.svc.Progress(r.Context(), uid, hash, req.LogID, req.Checkpoint, req.ExtendLease)
		} else {
			err = h.refusal(r, uid, hash, err)
		}
		if err != nil {
			web.Error(w, r, h.log, err)
			return
		}
		web.Encode(w, http.StatusOK, map[string]any{"ok": true, "lease_expires_at": lease})
	})
}

// clientKey reads the caller's client key from the request: its uid and the key's
// hash. A missing or malformed one is answered 401 here (ok false).
func clientKey(w http.ResponseWriter, r *http.Request, log *slog.Logger, isAdminToken func(string) bool) (uid, hash string, ok bool) {
	token := web.Bearer(r)
	uid, hash, ok = clientkey.Parse(token)
	if ok {
		return uid, hash, true
	}
	const want = "<client key>"
	var err error
	switch {
	case token == "":
		err = taskd.Errorf(taskd.CodeUnauthenticated, "client key required: %s", web.CredentialProblem(r, want))
	case isAdminToken != nil && isAdminToken(token):
		err = taskd.Errorf(taskd.CodeUnauthenticated, "an admin token is not a client key: %s takes \"Authorization: Bearer <client key>\", a key issued by POST /v1/admin/clients/{uid}/keys or by /v1/enroll", r.URL.Path)
	default:
		err = taskd.Errorf(taskd.CodeUnauthenticated, "malformed client key: expected \"<uid>.<secret>\" as issued by POST /v1/admin/clients/{uid}/keys or by /v1/enroll")
	}
	web.Error(w, r, log, err)
	return "", "", false
}

// checkLogID checks a log id field (named with prefix).
func checkLogID(id, prefix string) error {
	if id == "" {
		return taskd.Errorf(taskd.CodeInvalid, "%slog_id: required", prefix)
	}
	if len(id) > 64 {
		return taskd.Errorf(taskd.CodeInvalid, "%slog_id: too long", prefix)
	}
	return nil
}

// parsedComplete is a complete request's fields, checked.
type parsedComplete struct {
	logID  string
	result taskd.Result
	detail json.RawMessage
	move   *StageMove // a multi-stage task's next stage, or nil
}

// parseComplete checks a complete request's fields (named with prefix, "complete."
// inside a fetch).
func parseComplete(req completeRequest, prefix string) (parsedComplete, error) {
	if err := checkLogID(req.LogID, prefix); err != nil {
		return parsedComplete{}, err
	}
	result, err := ParseResult(req.Result)
	if err != nil {
		if prefix != "" {
			return parsedComplete{}, taskd.Errorf(taskd.CodeInvalid, "%sresult: must be success or failure, got %q", prefix, req.Result)
		}
		return parsedComplete{}, err
	}
	if len(req.Detail) > 0 && string(req.Detail) != "null" && req.Detail[0] != '{' {
		return parsedComplete{}, taskd.Errorf(taskd.CodeInvalid, "%sdetail: must be an object", prefix)
	}
	if string(req.Detail) == "null" {
		req.Detail = nil
	}
	if req.Retry != nil && !*req.Retry {
		if result != taskd.ResultFailure {
			return parsedComplete{}, taskd.Errorf(taskd.CodeInvalid, "%sretry: false only with result failure (a success is not retried anyway)", prefix)
		}
		result = taskd.ResultFinalFailure
	}
	c := parsedComplete{logID: req.LogID, result: result, detail: req.Detail}
	if string(req.Context) == "null" {
		req.Context = nil
	}
	switch {
	case req.NextStage == "" && (req.Context != nil || req.DelaySeconds != nil):
		return c, taskd.Errorf(taskd.CodeInvalid, "%scontext, %sdelay_seconds: only with next_stage", prefix, prefix)
	case req.NextStage == "":
		return c, nil
	case result != taskd.ResultSuccess:
		return c, taskd.Errorf(taskd.CodeInvalid, "%snext_stage: only with result success (a failed stage is retried)", prefix)
	case len(req.Context) > 0 && req.Context[0] != '{':
		return c, taskd.Errorf(taskd.CodeInvalid, "%scontext: must be an object", prefix)
	case len(req.Context) > MaxCheckpoint:
		return c, taskd.Errorf(taskd.CodeTooLarge, "%scontext: %d bytes is over the limit of %d", prefix, len(req.Context), MaxCheckpoint)
	case req.DelaySeconds != nil && (*req.DelaySeconds < 0 || *req.DelaySeconds > maxStageDelay):
		return c, taskd.Errorf(taskd.CodeInvalid, "%sdelay_seconds: must be 0..%d (a week), got %d", prefix, maxStageDelay, *req.DelaySeconds)
	}
	c.move = &StageMove{Next: req.NextStage, Context: req.Context}
	if req.DelaySeconds != nil {
		c.move.Delay = time.Duration(*req.DelaySeconds) * time.Second
	}
	return c, nil
}

// nonNil is tasks, or an empty list for none.
func nonNil(tasks []*Assignment) []*Assignment {
	if tasks == nil {
		return []*Assignment{}
	}
	return tasks
}
