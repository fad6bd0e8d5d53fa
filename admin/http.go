package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/authguard"
	"github.com/taskpull/taskd/internal/web"
)

// bodyLimit bounds admin request bodies (a template schema or task params).
const bodyLimit = 1 << 20

// Token is an admin bearer token and the name the audit log records for it.
type Token struct{ Name, Secret string }

// ParseTokens reads DISPATCH_ADMIN_TOKEN entries: "name=secret", or a bare secret
// (named "admin", or "admin-N" when there are several).
func ParseTokens(entries []string) []Token {
	out := make([]Token, 0, len(entries))
	for i, e := range entries {
		name, secret, ok := strings.Cut(e, "=")
		if !ok || name == "" {
			name, secret = "admin", e
			if len(entries) > 1 {
				name = "admin-" + strconv.Itoa(i+1)
			}
		}
		out = append(out, Token{Name: name, Secret: secret})
	}
	return out
}

type actorKey struct{}

// ActorFrom returns the name of the admin token that authenticated the request.
func ActorFrom(ctx context.Context) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok {
		return a
	}
	return "system"
}

// WithActor returns ctx carrying actor (for callers outside HTTP, and tests).
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// RequireAdmin lets through requests bearing one of the admin tokens and records which
// one for the audit log. A valid client key gets 403 (it is a real identity, just not an
// admin); anything else 401.
func RequireAdmin(tokens []Token, isClientKey func(ctx context.Context, key string) bool, log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := web.Bearer(r)
			if got == "" {
				web.Error(w, r, log, taskd.Errorf(taskd.CodeUnauthenticated, "admin token required: %s", web.CredentialProblem(r, "<admin token>")))
				return
			}
			for _, t := range tokens {
				if t.Secret != "" && authguard.SameSecret(got, t.Secret) {
					next.ServeHTTP(w, r.WithContext(WithActor(r.Context(), t.Name)))
					return
				}
			}
			if isClientKey(r.Context(), got) {
				web.Error(w, r, log, taskd.Errorf(taskd.CodePermission, "a client key cannot use the admin API; it takes one of the admin tokens of DISPATCH_ADMIN_TOKEN as \"Authorization: Bearer <admin token>\""))
				return
			}
			web.Error(w, r, log, taskd.Errorf(taskd.CodeUnauthenticated, "invalid admin token: it is none of the tokens of DISPATCH_ADMIN_TOKEN (nor a client key)"))
		})
	}
}

// Handlers are the admin API's handlers.
type Handlers struct {
	svc *Service
	log *slog.Logger
}

// NewHandlers returns the admin handlers over svc.
func NewHandlers(svc *Service, log *slog.Logger) *Handlers { return &Handlers{svc: svc, log: log} }

func (h *Handlers) fail(w http.ResponseWriter, r *http.Request, err error) {
	web.Error(w, r, h.log, err)
}

// endpoint is an admin handler: it returns the status and the body to encode (none for
// 204), or an error, which becomes the API's error reply.
type endpoint func(w http.ResponseWriter, r *http.Request) (int, any, error)

func (h *Handlers) serve(e endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, body, err := e(w, r)
		switch {
		case err != nil:
			h.fail(w, r, err)
		case status == http.StatusNoContent:
			w.WriteHeader(status)
		default:
			web.Encode(w, status, body)
		}
	})
}

// ifMatch is the request's If-Match: the versions its write may be made against.
func ifMatch(r *http.Request) taskd.IfMatch { return taskd.ParseIfMatch(r.Header.Get("If-Match")) }

// tagged sets the reply's ETag to v when the request succeeded, and returns err.
func tagged(w http.ResponseWriter, v taskd.Version, err error) error {
	if err == nil {
		w.Header().Set("ETag", v.ETag())
	}
	return err
}

type templateRequest struct {
	Name   reqName         `json:"name"`
	Schema json.RawMessage `json:"schema"`
	// ResultSchema is what a success's detail must be (absent or null: anything).
	ResultSchema json.RawMessage `json:"result_schema"`
	settingsRequest
	Stages []string `json:"stages"`
	// Windows are the maintenance windows of the template's tasks that set none.
	Windows taskd.Windows `json:"windows"`
	// DDI makes it a template of software deployments for DDI controllers, whose
	// schema is the server's (taskd.DDISchema).
	DDI bool `json:"ddi"`
}

// template checks the request's settings and stages and returns the template it
// describes (the name and schema are the service's to check).
func (req *templateRequest) template() (taskd.Template, error) {
	t := taskd.Template{Name: req.Name.s, Schema: req.Schema, ResultSchema: req.ResultSchema, Stages: req.Stages, DDI: req.DDI}
	if req.DDI {
		// A deployment's params are what DDI controllers read, and a controller's
		// feedback is its result: the server fixes both.
		switch {
		case len(req.Schema) > 0 && string(req.Schema) != "null":
			return t, taskd.Errorf(taskd.CodeInvalid, "schema: a ddi template's schema is the server's (a deployment of chunks); leave it out")
		case len(req.ResultSchema) > 0 && string(req.ResultSchema) != "null":
			return t, taskd.Errorf(taskd.CodeInvalid, "result_schema: a ddi template has none (a controller's feedback is its result)")
		case len(req.Stages) > 0:
			return t, taskd.Errorf(taskd.CodeInvalid, "stages: a ddi template has none")
		}
		t.Schema, t.ResultSchema = json.RawMessage(taskd.DDISchema), nil
	}
	var err error
	if t.Settings, err = req.settings(); err != nil {
		return t, err
	}
	if err := req.Windows.Validate(); err != nil {
		return t, err
	}
	if len(req.Windows) > 0 {
		t.Windows = req.Windows.Normalized()
	}
	if t.Stages == nil {
		t.Stages = []string{}
	}
	return t, taskd.ValidateStages(t.Stages)
}

// CreateTemplate is POST /v1/admin/templates.
func (h *Handlers) CreateTemplate() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		var req templateRequest
		if err := web.Decode(w, r, bodyLimit, false, &req); err != nil {
			return 0, nil, err
		}
		t, err := req.template()
		if err != nil {
			return 0, nil, err
		}
		t, err = h.svc.CreateTemplate(r.Context(), t)
		reply := struct {
			taskd.Template
			// Warnings are keywords of the schema that validation ignores (a typo).
			Warnings []Warning `json:"warnings,omitempty"`
		}{t, unknownKeywords(t.Schema)}
		return http.StatusCreated, reply, tagged(w, taskd.Count(t.Version), err)
	})
}

// templateEditable are the members a template merge patch may name: its schema stays
// (tasks' params were checked against it).
var (
	templateEditable = map[string]bool{"name": true, "stages": true, "windows": true}
	templateServer   = map[string]bool{"id": true, "created_at": true, "updated_at": true, "version": true}
)

func init() {
	for _, f := range settingsFields {
		templateEditable[f] = true
	}
}

// PatchTemplate is PATCH /v1/admin/templates/{id}: a JSON merge patch (RFC 7396) of the
// template's name, task-type settings and stages; null takes a setting back to "not
// set" (tasks then get the server's default). The merge is applied to the template as
// it is when the update holds it locked. The schema is not editable.
func (h *Handlers) PatchTemplate() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		id, err := pathID(r, "id")
		if err != nil {
			return 0, nil, err
		}
		var patch json.RawMessage
		if err := web.Decode(w, r, bodyLimit, false, &patch); err != nil {
			return 0, nil, err
		}
		if err := checkPatch(patch, templateEditable, templateServer); err != nil {
			if strings.Contains(err.Error(), `"schema"`) {
				err = taskd.Errorf(taskd.CodeInvalid, "schema: not editable (tasks' params were checked against it); create a new template")
			}
			return 0, nil, err
		}
		t, err := h.svc.UpdateTemplate(r.Context(), id, ifMatch(r), func(cur *taskd.Template) error {
			doc := map[string]any{"name": cur.Name, "stages": cur.Stages}
			if len(cur.Windows) > 0 {
				doc["windows"] = cur.Windows
			}
			settingsDoc(cur.Settings, doc)
			current, err := json.Marshal(doc)
			if err != nil {
				return err
			}
			merged, err := mergePatch(current, patch)
			if err != nil {
				return err
			}
			var req templateRequest
			if err := web.DecodeBytes(merged, &req); err != nil {
				return err
			}
			next, err := req.template()
			if err != nil {
				return err
			}
			if err := checkName(next.Name); err != nil {
				return err
			}
			cur.Name, cur.Settings, cur.Stages, cur.Windows = next.Name, next.Settings, next.Stages, next.Windows
			return nil
		})
		return http.StatusOK, t, tagged(w, taskd.Count(t.Version), err)
	})
}

// ListTemplates is GET /v1/admin/templates.
func (h *Handlers) ListTemplates() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		ts, err := h.svc.ListTemplates(r.Context())
		return http.StatusOK, map[string]any{"templates": ts}, err
	})
}

// GetTemplate is GET /v1/admin/templates/{id}.
func (h *Handlers) GetTemplate() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		id, err := pathID(r, "id")
		if err != nil {
			return 0, nil, err
		}
		t, err := h.svc.GetTemplate(r.Context(), id)
		return http.StatusOK, t, tagged(w, taskd.Count(t.Version), err)
	})
}

// DeleteTemplate is DELETE /v1/admin/templates/{id}.
func (h *Handlers) DeleteTemplate() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		id, err := pathID(r, "id")
		if err != nil {
			return 0, nil, err
		}
		return http.StatusNoContent, nil, h.svc.DeleteTemplate(r.Context(), id, ifMatch(r))
	})
}

// Task times fit a DATETIME and a Redis score; a period fits a time.Duration.
var (
	minTime = taskd.MinTaskTime
	maxTime = taskd.MaxTaskTime
)

const maxSpaceMinutes = taskd.MaxSpaceMinutes

// taskRequest is the body of task create and replace (and what a merge patch makes
// of a task). Pointers tell "absent" from zero, so defaults apply only to absent fields;
// numbers and times keep what the request wrote until task checks them.
type taskRequest struct {
	Executor      string          `json:"executor"`
	StartTime     *reqTime        `json:"start_time"`
	TemplateID    *reqInt         `json:"template_id"`
	Params        json.RawMessage `json:"params"`
	DispatchTimes *reqInt         `json:"dispatch_times"`
	Mode          string          `json:"mode"`
	Priority      *reqInt         `json:"priority"`
	Status        string          `json:"status"`
	settingsRequest
	SpaceMinutes *reqInt  `json:"space_minutes"`
	Cron         *string  `json:"cron"`
	TimeZone     *string  `json:"time_zone"`
	Misfire      *string  `json:"misfire"`
	EndTime      *reqTime `json:"end_time"`
	// Rollout releases the quota in phases (null or absent: none).
	Rollout *taskd.Rollout `json:"rollout"`
	// Windows are the task's own maintenance windows (null or absent: its
	// template's; []: none, whatever the template says).
	Windows *taskd.Windows `json:"windows"`
}

// intField reads an optional integer field into dst when it is present.
func intField(dst *int, n *reqInt, field string, lo, hi int64, want string) error {
	if n == nil {
		return nil
	}
	v, err := n.in(field, lo, hi, want)
	*dst = int(v)
	return err
}

// task checks the request field by field and returns the task it describes.
func (req *taskRequest) task(kind taskd.Kind) (taskd.Task, error) {
	t := taskd.Task{Key: taskd.TaskKey{Kind: kind}, DispatchTimes: 1, Priority: 5, Status: taskd.StatusActive}
	if _, err := taskd.ParseExecutor(req.Executor); err != nil {
		return t, err
	}
	t.Executor = req.Executor
	if req.StartTime == nil {
		return t, taskd.Errorf(taskd.CodeInvalid, "start_time: required")
	}
	t.StartTime = req.StartTime.UTC().Truncate(time.Second)
	if t.StartTime.Before(minTime) || !t.StartTime.Before(maxTime) {
		return t, taskd.Errorf(taskd.CodeInvalid, "start_time: must be between 1970 and 9999")
	}
	if req.TemplateID == nil {
		return t, taskd.Errorf(taskd.CodeInvalid, "template_id: required, a template id")
	}
	var err error
	if t.TemplateID, err = req.TemplateID.in("template_id", 1, 1<<63-1, "a template id, 1..9223372036854775807"); err != nil {
		return t, err
	}
	if len(req.Params) == 0 || string(req.Params) == "null" {
		t.Params = json.RawMessage("{}")
	} else {
		t.Params = req.Params
	}
	if err := intField(&t.DispatchTimes, req.DispatchTimes, "dispatch_times", taskd.Unlimited, maxInt32,
		"-1 (unlimited) or 1..2147483647"); err != nil {
		return t, err
	}
	if t.DispatchTimes == 0 {
		return t, taskd.Errorf(taskd.CodeInvalid, "dispatch_times: must be -1 (unlimited) or 1..2147483647, got 0")
	}
	if t.Mode, err = taskd.ParseMode(req.Mode); err != nil {
		return t, err
	}
	if err := intField(&t.Priority, req.Priority, "priority", 1, 9, "1..9"); err != nil {
		return t, err
	}
	switch req.Status {
	case "", "active":
	case "paused":
		t.Status = taskd.StatusPaused
	default:
		return t, taskd.Errorf(taskd.CodeInvalid, "status: must be active or paused, got %q", req.Status)
	}
	if t.Own, err = req.settings(); err != nil {
		return t, err
	}
	if req.Rollout != nil {
		r := req.Rollout.WithDefaults()
		t.Rollout = &r
	}
	if req.Windows != nil {
		if err := req.Windows.Validate(); err != nil {
			return t, err
		}
		t.OwnWindows = req.Windows.Normalized()
		if t.OwnWindows == nil {
			t.OwnWindows = taskd.Windows{} // none, whatever the template says
		}
	}
	if kind == taskd.KindOnce {
		if req.SpaceMinutes != nil || req.EndTime != nil || req.Cron != nil || req.TimeZone != nil || req.Misfire != nil {
			return t, taskd.Errorf(taskd.CodeInvalid, "space_minutes, cron, time_zone, misfire, end_time: rotate tasks only")
		}
		return t, nil
	}
	if t.Misfire, err = taskd.ParseMisfire(deref(req.Misfire)); err != nil {
		return t, err
	}
	switch {
	case req.Cron != nil && req.SpaceMinutes != nil:
		return t, taskd.Errorf(taskd.CodeInvalid, "cron, space_minutes: a rotate task takes one of them, not both (a patch that switches sets the other to null)")
	case req.Cron != nil:
		c, err := taskd.ParseCron(*req.Cron, deref(req.TimeZone))
		if err != nil {
			return t, err
		}
		t.Cron, t.TimeZone = c.Expr(), c.Zone()
	case req.TimeZone != nil:
		return t, taskd.Errorf(taskd.CodeInvalid, "time_zone: only with cron (a space_minutes period has no wall time)")
	case req.SpaceMinutes == nil:
		return t, taskd.Errorf(taskd.CodeInvalid, "space_minutes or cron: required (every 1..%d minutes, or a cron expression)", maxSpaceMinutes)
	default:
		if err := intField(&t.SpaceMinutes, req.SpaceMinutes, "space_minutes", 1, maxSpaceMinutes,
			"1.."+strconv.Itoa(maxSpaceMinutes)+" (ten years)"); err != nil {
			return t, err
		}
	}
	if req.EndTime != nil {
		end := req.EndTime.UTC().Truncate(time.Second)
		if !end.Before(maxTime) {
			return t, taskd.Errorf(taskd.CodeInvalid, "end_time: must be before 9999")
		}
		if !end.After(t.StartTime) {
			return t, taskd.Errorf(taskd.CodeInvalid, "end_time: must be after start_time")
		}
		t.EndTime = &end
	}
	return t, nil
}

// taskView is a task as the API shows it.
type taskView struct {
	TaskID string `json:"task_id"`
	ID     int64  `json:"id"`
	Kind   string `json:"kind"`
	taskd.Task
	Mode   string `json:"mode"`
	Status string `json:"status"`
	// Warnings are a create's, replace's or patch's hints (warnings.go); absent elsewhere.
	Warnings []Warning `json:"warnings,omitempty"`
	// Outcome, in a list, says a task is over though its status is not (done, dead,
	// ended: taskd.Task.Outcome); absent while more may be handed out, and elsewhere.
	Outcome string `json:"outcome,omitempty"`
}

func viewTask(t taskd.Task) taskView {
	return taskView{TaskID: t.Key.String(), ID: t.Key.ID, Kind: t.Key.Kind.String(), Task: t,
		Mode: t.Mode.String(), Status: t.Status.String()}
}

func pathKind(r *http.Request) (taskd.Kind, error) {
	k, err := taskd.ParseKind(chi.URLParam(r, "kind"))
	if err != nil {
		return 0, taskd.Errorf(taskd.CodeNotFound, "no such task kind %q", chi.URLParam(r, "kind"))
	}
	return k, nil
}

// CreateTask is POST /v1/admin/tasks/{kind}.
func (h *Handlers) CreateTask() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		kind, err := pathKind(r)
		if err != nil {
			return 0, nil, err
		}
		t, err := decodeTask(w, r, kind)
		if err != nil {
			return 0, nil, err
		}
		t, err = h.svc.CreateTask(r.Context(), t)
		return http.StatusCreated, h.withWarnings(r.Context(), t, err), tagged(w, taskd.Count(t.Version), err)
	})
}

func decodeTask(w http.ResponseWriter, r *http.Request, kind taskd.Kind) (taskd.Task, error) {
	var req taskRequest
	if err := web.Decode(w, r, bodyLimit, false, &req); err != nil {
		return taskd.Task{}, err
	}
	return req.task(kind)
}

func pathTaskKey(r *http.Request) (taskd.TaskKey, error) {
	kind, err := pathKind(r)
	if err != nil {
		return taskd.TaskKey{}, err
	}
	id, err := pathID(r, "id")
	return taskd.TaskKey{Kind: kind, ID: id}, err
}

// GetTask is GET /v1/admin/tasks/{kind}/{id}.
func (h *Handlers) GetTask() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		key, err := pathTaskKey(r)
		if err != nil {
			return 0, nil, err
		}
		t, err := h.svc.GetTask(r.Context(), key)
		return http.StatusOK, viewTask(t), tagged(w, taskd.Count(t.Version), err)
	})
}

// ReplaceTask is PUT /v1/admin/tasks/{kind}/{id}.
func (h *Handlers) ReplaceTask() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		key, err := pathTaskKey(r)
		if err != nil {
			return 0, nil, err
		}
		t, err := decodeTask(w, r, key.Kind)
		if err != nil {
			return 0, nil, err
		}
		t.Key = key
		t, err = h.svc.ReplaceTask(r.Context(), t, ifMatch(r))
		return http.StatusOK, h.withWarnings(r.Context(), t, err), tagged(w, taskd.Count(t.Version), err)
	})
}

// DeleteTask is DELETE /v1/admin/tasks/{kind}/{id}.
func (h *Handlers) DeleteTask() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		key, err := pathTaskKey(r)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusNoContent, nil, h.svc.DeleteTask(r.Context(), key, ifMatch(r))
	})
}

type membersRequest struct {
	UIDs []string `json:"uids"`
}

// MaxMembersPerRequest bounds the uids of one membership change, so that its
// transaction and the telling of its users' caches end well within a request's time.
// A larger group is set in several requests: a PUT of the first uids, then POSTs
// adding the rest.
const MaxMembersPerRequest = 10_000

func (h *Handlers) decodeMembers(w http.ResponseWriter, r *http.Request) (string, []string, error) {
	gid, err := pathGroup(r)
	if err != nil {
		return "", nil, err
	}
	var req membersRequest
	if err := web.Decode(w, r, bodyLimit, false, &req); err != nil {
		return "", nil, err
	}
	if req.UIDs == nil {
		return "", nil, taskd.Errorf(taskd.CodeInvalid, "uids: required")
	}
	if len(req.UIDs) > MaxMembersPerRequest {
		return "", nil, taskd.Errorf(taskd.CodeTooLarge, "uids: at most %d per request, got %d; send a larger group in several requests "+
			"(PUT the first %d, then POST the rest)", MaxMembersPerRequest, len(req.UIDs), MaxMembersPerRequest)
	}
	return gid, req.UIDs, nil // the service checks each id
}

// ReplaceMembers is PUT /v1/admin/groups/{gid}/members.
func (h *Handlers) ReplaceMembers() http.Handler {
	return h.changeMembers(func(ctx context.Context, gid string, uids []string) error {
		return h.svc.ReplaceMembers(ctx, gid, uids)
	})
}

// AddMembers is POST /v1/admin/groups/{gid}/members.
func (h *Handlers) AddMembers() http.Handler {
	return h.changeMembers(func(ctx context.Context, gid string, uids []string) error {
		return h.svc.AddMembers(ctx, gid, uids)
	})
}

// changeMembers decodes a membership change, applies it and answers the new members.
func (h *Handlers) changeMembers(change func(ctx context.Context, gid string, uids []string) error) http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		gid, uids, err := h.decodeMembers(w, r)
		if err != nil {
			return 0, nil, err
		}
		if err := change(r.Context(), gid, uids); err != nil {
			return 0, nil, err
		}
		return h.members(r.Context(), gid)
	})
}

// SetGroup is PUT /v1/admin/groups/{gid}: {"selector", "agent_version"} makes the
// group dynamic (or changes its rule); the reply is the group, with warnings.
func (h *Handlers) SetGroup() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		gid, err := pathGroup(r)
		if err != nil {
			return 0, nil, err
		}
		var rule taskd.DynamicGroup
		if err := web.Decode(w, r, bodyLimit, false, &rule); err != nil {
			return 0, nil, err
		}
		g, warnings, err := h.svc.SetGroupRule(r.Context(), gid, rule)
		return http.StatusOK, groupReply{Group: g, Warnings: warnings}, err
	})
}

// groupReply is a group as PUT /v1/admin/groups/{gid} answers it.
type groupReply struct {
	taskd.Group
	Warnings []Warning `json:"warnings,omitempty"`
}

// GetGroup is GET /v1/admin/groups/{gid}.
func (h *Handlers) GetGroup() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		gid, err := pathGroup(r)
		if err != nil {
			return 0, nil, err
		}
		g, err := h.svc.Group(r.Context(), gid)
		return http.StatusOK, g, err
	})
}

// DeleteGroup is DELETE /v1/admin/groups/{gid}.
func (h *Handlers) DeleteGroup() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		gid, err := pathGroup(r)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusNoContent, nil, h.svc.DeleteGroup(r.Context(), gid)
	})
}

// RemoveMember is DELETE /v1/admin/groups/{gid}/members/{uid}.
func (h *Handlers) RemoveMember() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		gid, err := pathGroup(r)
		if err != nil {
			return 0, nil, err
		}
		uid, err := pathUser(r)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusNoContent, nil, h.svc.RemoveMember(r.Context(), gid, uid)
	})
}

// ListMembers is GET /v1/admin/groups/{gid}/members.
func (h *Handlers) ListMembers() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		gid, err := pathGroup(r)
		if err != nil {
			return 0, nil, err
		}
		return h.members(r.Context(), gid)
	})
}

func (h *Handlers) members(ctx context.Context, gid string) (int, any, error) {
	uids, err := h.svc.Members(ctx, gid)
	return http.StatusOK, map[string]any{"uids": uids}, err
}

// IssueKey is POST /v1/admin/clients/{uid}/keys.
func (h *Handlers) IssueKey() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		uid, err := pathUser(r)
		if err != nil {
			return 0, nil, err
		}
		key, err := h.svc.IssueKey(r.Context(), uid)
		// The key is shown this once: no cache keeps a copy.
		w.Header().Set("Cache-Control", "no-store")
		return http.StatusCreated, map[string]string{"client_key": key}, err
	})
}

// RevokeKeys is DELETE /v1/admin/clients/{uid}/keys.
func (h *Handlers) RevokeKeys() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		uid, err := pathUser(r)
		if err != nil {
			return 0, nil, err
		}
		n, err := h.svc.RevokeKeys(r.Context(), uid)
		return http.StatusOK, map[string]int{"revoked": n}, err
	})
}

// deref is *s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
