// Package ddi serves Eclipse hawkBit's Direct Device Integration API (DDI), so that
// the device clients that already speak it (SWUpdate's suricatta,
// rauc-hawkbit-updater) take software deployments from taskd: the controller id is
// the uid, a deployment is a task of a DDI template, an action is its dispatch. The
// rules (claims, leases, feedback) are the dispatch service's (dispatch/ddi.go); this
// package is the wire format: paths, authentication, JSON.
package ddi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/clientkey"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/internal/web"
)

// bodyLimit bounds a feedback's or configData's body.
const bodyLimit = 64 << 10

// attributesAge is how long a node has a controller's attributes before its polls ask
// for them again.
const attributesAge = time.Hour

// Artifacts are the server's uploaded artifacts, as a deployment names them.
type Artifacts interface {
	// Lookup returns artifact id (not_found for none).
	Lookup(ctx context.Context, id int64) (taskd.Artifact, error)
	// Serve answers a device's download of artifact id (with Range requests), or
	// redirects it to where the bytes are; on an error it has written nothing.
	Serve(w http.ResponseWriter, r *http.Request, id int64) error
}

// Config is the endpoint's settings.
type Config struct {
	// Tenant is the one tenant the paths name (hawkBit's are case-insensitive).
	Tenant string
	// Timeout bounds a download's lookups (the bytes take as long as they take).
	Timeout time.Duration
	// BaseURL, when set, is the server's URL as devices reach it, for the links of
	// replies; "": the request's own scheme and host.
	BaseURL string
}

// Handlers serve the DDI paths.
type Handlers struct {
	svc       *dispatch.Service
	artifacts Artifacts
	log       *slog.Logger
	cfg       Config
	// attributed are the controllers whose configData this node has, and when: its
	// polls stop asking for it (the configData link) for attributesAge, as hawkBit's
	// do once it has the attributes. A client sends them on start either way
	// (SWUpdate does).
	attributed sync.Map // uid -> time.Time
}

// NewHandlers returns the DDI handlers over svc; artifacts may be nil (deployments
// then name artifacts by URL only).
func NewHandlers(svc *dispatch.Service, artifacts Artifacts, log *slog.Logger, cfg Config) *Handlers {
	if cfg.Tenant == "" {
		cfg.Tenant = "DEFAULT"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	return &Handlers{svc: svc, artifacts: artifacts, log: log.With("component", "ddi"), cfg: cfg}
}

// Routes mounts the DDI paths on r (under /ddi: r is that prefix's router).
func (h *Handlers) Routes(r chi.Router) {
	r.Route("/{tenant}/controller/v1/{controllerId}", func(r chi.Router) {
		r.Get("/", h.serve(h.base))
		r.Get("/deploymentBase/{actionId}", h.serve(h.deployment))
		r.Post("/deploymentBase/{actionId}/feedback", h.serve(h.feedbackOn(h.svc.FeedbackDDI)))
		r.Get("/cancelAction/{actionId}", h.serve(h.cancelAction))
		r.Post("/cancelAction/{actionId}/feedback", h.serve(h.feedbackOn(h.svc.CancelFeedbackDDI)))
		r.Put("/configData", h.serve(h.configData))
		r.Get("/installedBase/{actionId}", h.serve(h.installed))
		r.Get("/softwaremodules/{moduleId}/artifacts/{filename}", h.download)
		r.Head("/softwaremodules/{moduleId}/artifacts/{filename}", h.download)
	})
}

// request is a DDI request's controller and credential, checked as far as the path
// and header go.
type request struct {
	uid  string
	cred dispatch.Credential
	base string // the controller's URL: the links' prefix
}

// endpoint is a DDI handler: its status and reply body, or an error.
type endpoint func(w http.ResponseWriter, r *http.Request, q request) (int, any, error)

func (h *Handlers) serve(e endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, err := h.request(r)
		if err != nil {
			web.Error(w, r, h.log, err)
			return
		}
		status, body, err := e(w, r, q)
		switch {
		case err != nil:
			web.Error(w, r, h.log, err)
		case body == nil:
			w.WriteHeader(status)
		default:
			web.Encode(w, status, body)
		}
	}
}

// request reads the tenant, controller id and credential: the tenant must be the
// server's and the controller id a uid; the Authorization header is "TargetToken
// <client key of the controller>" or "GatewayToken <client key of the gateway>".
func (h *Handlers) request(r *http.Request) (request, error) {
	tenant, uid := chi.URLParam(r, "tenant"), chi.URLParam(r, "controllerId")
	if !strings.EqualFold(tenant, h.cfg.Tenant) {
		return request{}, taskd.Errorf(taskd.CodeNotFound, "tenant %q: this server's tenant is %s", tenant, h.cfg.Tenant)
	}
	if !taskd.ValidID(uid) {
		return request{}, taskd.Errorf(taskd.CodeNotFound, "controller %q: a controller id is a uid (1..64 of A-Z a-z 0-9 _ -)", uid)
	}
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if scheme != "TargetToken" && scheme != "GatewayToken" || token == "" {
		return request{}, taskd.Errorf(taskd.CodeUnauthenticated,
			"DDI takes \"Authorization: TargetToken <client key of %s>\" or \"GatewayToken <gateway key>\"", uid)
	}
	keyUID, hash, ok := clientkey.Parse(token)
	if !ok {
		return request{}, taskd.Errorf(taskd.CodeUnauthenticated, "malformed %s: a client key \"<uid>.<secret>\" as POST /v1/admin/clients/{uid}/keys issues it", scheme)
	}
	if scheme == "TargetToken" && keyUID != uid {
		return request{}, taskd.Errorf(taskd.CodePermission, "the TargetToken is a key of %s, not of controller %s (ids are compared as spelled)", keyUID, uid)
	}
	if scheme == "GatewayToken" && keyUID == uid {
		// The controller's own key sent as a gateway token: it is checked as its own.
		scheme = "TargetToken"
	}
	base := h.cfg.BaseURL
	if base == "" {
		proto := "http"
		if r.TLS != nil {
			proto = "https"
		}
		base = proto + "://" + r.Host + "/ddi"
	}
	return request{uid: uid, cred: dispatch.Credential{UID: keyUID, Hash: hash},
		base: base + "/" + h.cfg.Tenant + "/controller/v1/" + uid}, nil
}

type link struct {
	Href string `json:"href"`
}

// base is GET /{tenant}/controller/v1/{controllerId}: the base poll.
func (h *Handlers) base(w http.ResponseWriter, r *http.Request, q request) (int, any, error) {
	poll, err := h.svc.PollDDI(r.Context(), q.uid, q.cred)
	if err != nil {
		return 0, nil, err
	}
	links := map[string]link{}
	if at, ok := h.attributed.Load(q.uid); !ok || time.Since(at.(time.Time)) > attributesAge {
		links["configData"] = link{q.base + "/configData"}
	}
	if a := poll.Action; a != nil {
		id := strconv.FormatInt(a.ID, 10)
		if poll.Cancel {
			links["cancelAction"] = link{q.base + "/cancelAction/" + id}
		} else {
			links["deploymentBase"] = link{q.base + "/deploymentBase/" + id}
		}
	}
	type polling struct {
		Sleep string `json:"sleep"`
	}
	return http.StatusOK, map[string]any{
		"config": map[string]polling{"polling": {Sleep: taskd.DDISleep(poll.Sleep)}},
		"_links": links,
	}, nil
}

// actionID reads the path's action id: a positive integer, else not found.
func actionID(r *http.Request) (int64, error) {
	s := chi.URLParam(r, "actionId")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 || id > taskd.MaxActionID {
		return 0, taskd.Errorf(taskd.CodeNotFound, "action %q not found: an action id is a positive 32-bit integer", s)
	}
	return id, nil
}

// deployment is GET .../deploymentBase/{actionId}.
func (h *Handlers) deployment(w http.ResponseWriter, r *http.Request, q request) (int, any, error) {
	id, err := actionID(r)
	if err != nil {
		return 0, nil, err
	}
	a, err := h.svc.ActionOf(r.Context(), q.uid, q.cred, id)
	if err != nil {
		return 0, nil, err
	}
	if a.Dispatch.Cancelled {
		return 0, nil, taskd.Errorf(taskd.CodeGone, "action %d was cancelled: see its cancelAction", id)
	}
	body, err := h.deploymentBody(r.Context(), q, a)
	if taskd.ErrorCode(err) == taskd.CodeGone {
		// An artifact it names is gone: the device can never take it. The action
		// fails (its task's retries come back to it if the task is mended), rather
		// than being shown for ever.
		var te *taskd.Error
		errors.As(err, &te)
		if ferr := h.svc.FeedbackDDI(r.Context(), q.uid, q.cred, id, dispatch.DDIFeedback{Execution: "closed", Finished: "failure",
			Details: []string{te.Message}}); ferr != nil {
			h.log.WarnContext(r.Context(), "a deployment naming a deleted artifact could not be failed", "action", id, "err", ferr)
		}
	}
	return http.StatusOK, body, err
}

// installed is GET .../installedBase/{actionId}: a deployment the controller closed.
func (h *Handlers) installed(w http.ResponseWriter, r *http.Request, q request) (int, any, error) {
	id, err := actionID(r)
	if err != nil {
		return 0, nil, err
	}
	a, err := h.svc.ActionOf(r.Context(), q.uid, q.cred, id)
	switch {
	case taskd.ErrorCode(err) == taskd.CodeGone && a != nil && a.Dispatch.Result == taskd.ResultSuccess:
	case err != nil:
		return 0, nil, err
	default:
		return 0, nil, taskd.Errorf(taskd.CodeNotFound, "action %d is not installed yet", id)
	}
	body, err := h.deploymentBody(r.Context(), q, a)
	return http.StatusOK, body, err
}

// The deployment as DDI shows it.
type (
	deploymentReply struct {
		ID         string     `json:"id"`
		Deployment deployment `json:"deployment"`
	}
	deployment struct {
		Download string  `json:"download"`
		Update   string  `json:"update"`
		Chunks   []chunk `json:"chunks"`
	}
	chunk struct {
		Part      string     `json:"part"`
		Version   string     `json:"version"`
		Name      string     `json:"name"`
		Artifacts []artifact `json:"artifacts"`
	}
	artifact struct {
		Filename string          `json:"filename"`
		Hashes   taskd.Hashes    `json:"hashes"`
		Size     int64           `json:"size"`
		Links    map[string]link `json:"_links"`
	}
)

// deploymentBody is action a's deployment: its task's params, with the server's
// artifacts described and linked.
func (h *Handlers) deploymentBody(ctx context.Context, q request, a *taskd.DDIAction) (deploymentReply, error) {
	dep, err := taskd.ParseDeployment(a.Dispatch.Params)
	if err != nil {
		return deploymentReply{}, err
	}
	out := deploymentReply{ID: strconv.FormatInt(a.ID, 10), Deployment: deployment{
		Download: or(dep.Download, "forced"), Update: or(dep.Update, "forced"), Chunks: []chunk{}}}
	for _, c := range dep.Chunks {
		ch := chunk{Part: c.Part, Version: c.Version, Name: c.Name, Artifacts: []artifact{}}
		for _, x := range c.Artifacts {
			href := x.URL
			if x.ArtifactID != 0 {
				if h.artifacts == nil {
					return deploymentReply{}, fmt.Errorf("action %d names artifact %d, and this server keeps no artifacts", a.ID, x.ArtifactID)
				}
				up, err := h.artifacts.Lookup(ctx, x.ArtifactID)
				if taskd.ErrorCode(err) == taskd.CodeNotFound {
					return deploymentReply{}, taskd.Errorf(taskd.CodeGone, "action %d names artifact %d, which was deleted", a.ID, x.ArtifactID)
				}
				if err != nil {
					return deploymentReply{}, err
				}
				x = taskd.ArtifactRef{ArtifactID: up.ID, Filename: up.Filename, Size: up.Size, Hashes: &up.Hashes}
				href = q.base + "/softwaremodules/" + strconv.FormatInt(up.ID, 10) + "/artifacts/" + url.PathEscape(up.Filename)
			}
			var hashes taskd.Hashes
			if x.Hashes != nil {
				hashes = *x.Hashes
			}
			ch.Artifacts = append(ch.Artifacts, artifact{Filename: x.Filename, Hashes: hashes, Size: x.Size,
				Links: map[string]link{"download": {href}, "download-http": {href}}})
		}
		out.Deployment.Chunks = append(out.Deployment.Chunks, ch)
	}
	return out, nil
}

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// feedbackBody is a feedback: hawkBit's status (its id, time and timestamp, legacy or
// informative, are not read).
type feedbackBody struct {
	Status *struct {
		Execution string `json:"execution"`
		Result    struct {
			Finished string `json:"finished"`
			Progress *struct {
				Cnt int `json:"cnt"`
				Of  int `json:"of"`
			} `json:"progress"`
		} `json:"result"`
		Details []string `json:"details"`
	} `json:"status"`
}

// readFeedback reads a feedback body.
func readFeedback(w http.ResponseWriter, r *http.Request) (dispatch.DDIFeedback, error) {
	var body feedbackBody
	if err := decode(w, r, &body); err != nil {
		return dispatch.DDIFeedback{}, err
	}
	if body.Status == nil {
		return dispatch.DDIFeedback{}, taskd.Errorf(taskd.CodeInvalid, "status: required")
	}
	s := body.Status
	f := dispatch.DDIFeedback{Execution: s.Execution, Finished: s.Result.Finished, Details: s.Details}
	if p := s.Result.Progress; p != nil {
		f.Cnt, f.Of = p.Cnt, p.Of
	}
	return f, f.Check()
}

// decode reads a DDI request's JSON body into v, bounded; members it does not name
// are let be (DDI clients send legacy ones).
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, bodyLimit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return taskd.Errorf(taskd.CodeTooLarge, "request body is over %d bytes", bodyLimit)
		}
		return taskd.Errorf(taskd.CodeInvalid, "reading request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return taskd.Errorf(taskd.CodeInvalid, "request body: required")
	}
	if err := web.CheckDepth(body); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return taskd.Errorf(taskd.CodeMalformedJSON, "request body: %v", err)
	}
	return nil
}

// feedbackOn is a POST of a controller's feedback on an action (.../feedback), which
// apply applies.
func (h *Handlers) feedbackOn(apply func(ctx context.Context, uid string, c dispatch.Credential, id int64, f dispatch.DDIFeedback) error) endpoint {
	return func(w http.ResponseWriter, r *http.Request, q request) (int, any, error) {
		id, err := actionID(r)
		if err != nil {
			return 0, nil, err
		}
		f, err := readFeedback(w, r)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, nil, apply(r.Context(), q.uid, q.cred, id, f)
	}
}

// cancelAction is GET .../cancelAction/{actionId}.
func (h *Handlers) cancelAction(w http.ResponseWriter, r *http.Request, q request) (int, any, error) {
	id, err := actionID(r)
	if err != nil {
		return 0, nil, err
	}
	a, err := h.svc.ActionOf(r.Context(), q.uid, q.cred, id)
	if err != nil {
		return 0, nil, err
	}
	if !a.Dispatch.Cancelled {
		return 0, nil, taskd.Errorf(taskd.CodeNotFound, "action %d has no cancel", id)
	}
	s := strconv.FormatInt(id, 10)
	return http.StatusOK, map[string]any{"id": s, "cancelAction": map[string]string{"stopId": s}}, nil
}

// configData is PUT .../configData: the controller's attributes, as its uid's labels.
// Every mode replaces them (hawkBit's merge, replace and remove differ; a controller
// sends all its attributes each time).
func (h *Handlers) configData(w http.ResponseWriter, r *http.Request, q request) (int, any, error) {
	var body struct {
		Mode string            `json:"mode"`
		Data map[string]string `json:"data"`
	}
	if err := decode(w, r, &body); err != nil {
		return 0, nil, err
	}
	switch body.Mode {
	case "", "merge", "replace":
	case "remove":
		body.Data = map[string]string{}
	default:
		return 0, nil, taskd.Errorf(taskd.CodeInvalid, "mode: must be merge, replace or remove; got %q", body.Mode)
	}
	if body.Data == nil {
		return 0, nil, taskd.Errorf(taskd.CodeInvalid, "data: required (the controller's attributes)")
	}
	if err := h.svc.ConfigDDI(r.Context(), q.uid, q.cred, body.Data); err != nil {
		return 0, nil, err
	}
	h.attributed.Store(q.uid, time.Now())
	return http.StatusOK, nil, nil
}

// download is GET .../softwaremodules/{moduleId}/artifacts/{filename}: an uploaded
// artifact's bytes, to a controller that holds an action naming it.
func (h *Handlers) download(w http.ResponseWriter, r *http.Request) {
	q, err := h.request(r)
	var id int64
	if err == nil {
		id, err = strconv.ParseInt(chi.URLParam(r, "moduleId"), 10, 64)
		if err != nil || id <= 0 {
			err = taskd.Errorf(taskd.CodeNotFound, "artifact %q not found", chi.URLParam(r, "moduleId"))
		}
	}
	if err == nil {
		err = h.svc.HoldsArtifact(r.Context(), q.uid, q.cred, id)
	}
	if err == nil && h.artifacts == nil {
		err = taskd.Errorf(taskd.CodeNotFound, "this server keeps no artifacts")
	}
	if err == nil {
		// Routing matched the escaped path: the name compares unescaped.
		name, uerr := url.PathUnescape(chi.URLParam(r, "filename"))
		lookup, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
		var a taskd.Artifact
		a, err = h.artifacts.Lookup(lookup, id)
		cancel()
		if taskd.ErrorCode(err) == taskd.CodeNotFound || (err == nil && (uerr != nil || a.Filename != name)) {
			err = taskd.Errorf(taskd.CodeNotFound, "artifact %d/%s not found", id, name)
		}
	}
	if err == nil {
		err = h.artifacts.Serve(w, r, id)
	}
	if err != nil {
		web.Error(w, r, h.log, err)
	}
}
