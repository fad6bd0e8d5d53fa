package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The DDI workload: every user is a hawkBit DDI controller (SWUpdate's suricatta, for
// one) with its client key as its TargetToken. A cycle is its base poll and, when the
// poll names a deployment, what such a device does with it: read it, report
// proceeding, install (-think), close it. The reply's config.polling.sleep is not
// obeyed: the agents pace the polls as they pace fetches (closed loop, or -rate).
//
// A controller knows its dispatch by action id only, never by log id; so that the
// check can still tie what the controllers saw to the server's records, every feedback
// names its action in its details (actionTag), which the server keeps on the dispatch
// record (checkDDI).

// Endpoints of the DDI workload whose latency is recorded.
const (
	EndpointDDIPoll       = "ddi_poll"       // GET .../controller/v1/{uid}
	EndpointDDIDeployment = "ddi_deployment" // GET .../deploymentBase/{actionId}
	EndpointDDIFeedback   = "ddi_feedback"   // POST .../deploymentBase/{actionId}/feedback
)

// ActionRef names a DDI action as its controller knows it.
type ActionRef struct {
	UID string
	ID  int64
}

// FeedbackRef is a feedback on a DDI action that the server acknowledged (200):
// status.execution and status.result.finished.
type FeedbackRef struct {
	ActionRef
	Execution string
	Finished  string
}

// actionTagPrefix heads the detail that names a feedback's action.
const actionTagPrefix = "loadtest action "

// actionTag is the detail every feedback on action id carries.
func actionTag(id int64) string { return actionTagPrefix + strconv.FormatInt(id, 10) }

// ddiPath is controller uid's DDI path under tenant.
func ddiPath(tenant, uid string) string {
	return "/ddi/" + url.PathEscape(tenant) + "/controller/v1/" + url.PathEscape(uid)
}

// PollDDI is controller uid's base poll, with its client key as TargetToken. It
// returns the action id of the deploymentBase link, 0 for none.
func (c *Client) PollDDI(ctx context.Context, tenant, uid, key string) (int64, error) {
	var r struct {
		Links map[string]struct {
			Href string `json:"href"`
		} `json:"_links"`
	}
	if err := c.send(ctx, http.MethodGet, ddiPath(tenant, uid), "TargetToken "+key, nil, &r); err != nil {
		return 0, err
	}
	l, ok := r.Links["deploymentBase"]
	if !ok {
		return 0, nil
	}
	_, last, _ := strings.Cut(l.Href, "/deploymentBase/")
	id, err := strconv.ParseInt(last, 10, 64)
	if err != nil || id <= 0 {
		return 0, &APIError{Status: http.StatusOK, Code: "bad_reply", Message: fmt.Sprintf("deploymentBase link %q names no action", l.Href)}
	}
	return id, nil
}

// DeploymentDDI reads action id's deployment and checks that it is that action's, with
// a chunk to install. The path is built on the client's own base, not taken from the
// link, which names the server as devices reach it (DISPATCH_DDI_URL: perhaps a proxy
// the tester does not go through); the link gave the id.
func (c *Client) DeploymentDDI(ctx context.Context, tenant, uid, key string, id int64) error {
	var r struct {
		ID         string `json:"id"`
		Deployment struct {
			Chunks []json.RawMessage `json:"chunks"`
		} `json:"deployment"`
	}
	path := ddiPath(tenant, uid) + "/deploymentBase/" + strconv.FormatInt(id, 10)
	if err := c.send(ctx, http.MethodGet, path, "TargetToken "+key, nil, &r); err != nil {
		return err
	}
	if r.ID != strconv.FormatInt(id, 10) || len(r.Deployment.Chunks) == 0 {
		return &APIError{Status: http.StatusOK, Code: "bad_reply",
			Message: fmt.Sprintf("deploymentBase of action %d: id %q, %d chunks", id, r.ID, len(r.Deployment.Chunks))}
	}
	return nil
}

// FeedbackDDI sends a feedback on action id, as SWUpdate does: its status's execution,
// result.finished and details (the action's tag first).
func (c *Client) FeedbackDDI(ctx context.Context, tenant, uid, key string, id int64, execution, finished string, details ...string) error {
	body, _ := json.Marshal(map[string]any{"id": strconv.FormatInt(id, 10), "status": map[string]any{
		"execution": execution, "result": map[string]any{"finished": finished},
		"details": append([]string{actionTag(id)}, details...)}})
	path := ddiPath(tenant, uid) + "/deploymentBase/" + strconv.FormatInt(id, 10) + "/feedback"
	return c.send(ctx, http.MethodPost, path, "TargetToken "+key, body, nil)
}

// ddiCycle is one cycle of controller uid: the base poll; if it names a deployment,
// read it, report proceeding, install (opts.think), close it (an opts.failRate share
// as failures). A step that fails ends the cycle: the controller still holds the
// action, and its next poll shows it again (a redo), as a device that lost a reply
// would find it.
func ddiCycle(ctx context.Context, c *Client, uid, key string, begin time.Time, opts phaseOptions, rng *mrand.Rand, rec *recorder, ctrs *counters) {
	id, err := c.PollDDI(ctx, opts.tenant, uid, key)
	rec.latency(EndpointDDIPoll, time.Since(begin))
	ctrs.requests.Add(1)
	if err != nil {
		recordErr(rec, ctrs, EndpointDDIPoll, err)
		return
	}
	rec.fetches++
	if id == 0 {
		rec.empty++
		return
	}
	action := ActionRef{UID: uid, ID: id}
	rec.receivedAction(action)
	step := func(endpoint string, call func() error) bool {
		t := time.Now()
		err := call()
		rec.latency(endpoint, time.Since(t))
		ctrs.requests.Add(1)
		if err != nil {
			recordErr(rec, ctrs, endpoint, err)
		}
		return err == nil
	}
	if !step(EndpointDDIDeployment, func() error { return c.DeploymentDDI(ctx, opts.tenant, uid, key, id) }) {
		return
	}
	rec.deployments++
	feedback := func(execution, finished, detail string) bool {
		ok := step(EndpointDDIFeedback, func() error {
			return c.FeedbackDDI(ctx, opts.tenant, uid, key, id, execution, finished, detail)
		})
		if ok {
			rec.feedbackDone(FeedbackRef{ActionRef: action, Execution: execution, Finished: finished})
		}
		return ok
	}
	if !feedback("proceeding", "none", "downloaded; installing") {
		return
	}
	if opts.think > 0 && !sleep(ctx, opts.think) {
		return
	}
	if opts.failRate == 0 || rng.Float64() >= opts.failRate {
		feedback("closed", "success", "update installed")
	} else {
		feedback("closed", "failure", "a failure the load test reports")
	}
}

// receivedAction records an action a base poll named: a new one, or one the
// controller holds already, shown again (a redo).
func (r *recorder) receivedAction(a ActionRef) {
	if r.seenActions[a.ID] {
		r.redos++
	} else {
		r.seenActions[a.ID] = true
		r.dispatched++
	}
	r.actions = append(r.actions, a)
}

// feedbackDone records an acknowledged feedback; a closing one ends a cycle.
func (r *recorder) feedbackDone(f FeedbackRef) {
	r.feedbacks++
	r.acked = append(r.acked, f)
	if f.Execution == "closed" {
		r.completed++
		if f.Finished == "failure" {
			r.failures++
		}
	}
}
