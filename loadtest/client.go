package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// Client speaks the server's HTTP API: the admin routes with the admin token, the
// agent routes with a client key.
type Client struct {
	base    string
	nodes   []string // every server's base URL; base is the first
	admin   string
	hc      *http.Client
	timeout time.Duration
}

// NewClient makes a client for the server at base. Its connection pool keeps up to
// conns idle connections, so agents reuse connections as real agents with keep-alive
// would.
func NewClient(base, adminToken string, conns int, timeout time.Duration) *Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
	}
	var nodes []string
	for _, b := range strings.Split(base, ",") {
		nodes = append(nodes, strings.TrimRight(strings.TrimSpace(b), "/"))
	}
	return &Client{base: nodes[0], nodes: nodes, admin: adminToken, hc: &http.Client{Transport: tr}, timeout: timeout}
}

// Node is the client of the i-th server (modulo their number) of a base that lists
// several, sharing this client's connections: agent i talks to Node(i), so a run
// spreads its agents evenly over the servers.
func (c *Client) Node(i int) *Client {
	n := *c
	n.base = c.nodes[i%len(c.nodes)]
	return &n
}

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// APIError is a reply outside 2xx, or a failure to get one (Status 0).
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	if e.Status == 0 {
		return "transport: " + e.Message
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// do sends one request with the bearer token ("" for none) and decodes a 2xx JSON
// reply into out (if not nil). Any other outcome is an *APIError.
func (c *Client) do(ctx context.Context, method, path, token string, body []byte, out any) error {
	auth := ""
	if token != "" {
		auth = "Bearer " + token
	}
	return c.send(ctx, method, path, auth, body, out)
}

// send is do with the Authorization header's whole value ("" for none).
func (c *Client) send(ctx context.Context, method, path, auth string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return &APIError{Message: err.Error()}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return &APIError{Message: transportReason(err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return &APIError{Message: transportReason(err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		if e.Error.Code == "" {
			e.Error.Code = "no_code"
		}
		return &APIError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return &APIError{Status: resp.StatusCode, Code: "bad_reply", Message: err.Error()}
		}
	}
	return nil
}

// transportReason shortens a transport error to a stable reason for error counts.
func transportReason(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Op + " " + oe.Err.Error()
	}
	return err.Error()
}

// Admin sends an admin request with a JSON body (nil: none).
func (c *Client) Admin(ctx context.Context, method, path string, body, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return err
		}
	}
	return c.do(ctx, method, path, c.admin, raw, out)
}

// Assignment is the part of a fetched task an agent needs.
type Assignment struct {
	LogID   string    `json:"log_id"`
	TaskID  string    `json:"task_id"`
	DueAt   time.Time `json:"due_at"`
	Redo    bool      `json:"redo"`
	Attempt int       `json:"attempt"`
	// CampaignID and Item are a campaign item's (task_id campaign:<id>): the campaign
	// and the item (its index, or its uid), as JSON.
	CampaignID int64           `json:"campaign_id"`
	Item       json.RawMessage `json:"item"`
}

// FetchReply is POST /v1/fetch's answer.
type FetchReply struct {
	Task      *Assignment `json:"task"`
	NextDueAt *time.Time  `json:"next_due_at"`
}

// Fetch polls once as the key's owner.
func (c *Client) Fetch(ctx context.Context, key string) (FetchReply, error) {
	var r FetchReply
	err := c.do(ctx, http.MethodPost, "/v1/fetch", key, nil, &r)
	return r, err
}

// BatchReply is a batch fetch's answer.
type BatchReply struct {
	Tasks     []*Assignment `json:"tasks"`
	NextDueAt *time.Time    `json:"next_due_at"`
}

// FetchBatch polls once as the key's owner for up to max tasks.
func (c *Client) FetchBatch(ctx context.Context, key string, max int) (BatchReply, error) {
	var r BatchReply
	body, _ := json.Marshal(map[string]any{"max": max})
	err := c.do(ctx, http.MethodPost, "/v1/fetch", key, body, &r)
	return r, err
}

// Confirm fetches as the key's owner for no task (a template no task has): what it
// does is confirm the owner's successes waiting for its next fetch (confirm_seconds).
func (c *Client) Confirm(ctx context.Context, key string) error {
	body, _ := json.Marshal(map[string]any{"max": 1, "template_ids": []int64{math.MaxInt64}})
	var r BatchReply
	return c.do(ctx, http.MethodPost, "/v1/fetch", key, body, &r)
}

// Complete reports a task's result.
func (c *Client) Complete(ctx context.Context, key, logID string, success bool) error {
	body, _ := json.Marshal(completeBody(logID, success))
	return c.do(ctx, http.MethodPost, "/v1/complete", key, body, nil)
}

// FetchCompleting completes logID and polls again, in one request.
func (c *Client) FetchCompleting(ctx context.Context, key, logID string, success bool) (FetchReply, error) {
	var r FetchReply
	body, _ := json.Marshal(map[string]any{"complete": completeBody(logID, success)})
	err := c.do(ctx, http.MethodPost, "/v1/fetch", key, body, &r)
	return r, err
}

func completeBody(logID string, success bool) map[string]any {
	result := "success"
	if !success {
		result = "failure"
	}
	return map[string]any{"log_id": logID, "result": result, "detail": map[string]any{"by": "loadtest"}}
}

// Task is a task definition as GET /v1/admin/tasks lists it (the fields the checker
// needs).
type Task struct {
	TaskID        string `json:"task_id"`
	Kind          string `json:"kind"`
	Executor      string `json:"executor"`
	DispatchTimes int    `json:"dispatch_times"`
	Mode          string `json:"mode"`
	Status        string `json:"status"`
	// Cron and TimeZone: a cron task's schedule; Windows: its maintenance windows.
	Cron     string        `json:"cron"`
	TimeZone string        `json:"time_zone"`
	Windows  taskd.Windows `json:"windows"`
	// Rollout is the task's rollout (nil: none).
	Rollout *RolloutSpec `json:"rollout"`
}

// RolloutSpec is what the checker reads of a task's rollout: its phases and gate.
type RolloutSpec struct {
	Phases []PhaseSpec `json:"phases"`
	Gate   struct {
		MinFinished int `json:"min_finished"`
	} `json:"gate"`
}

// PhaseSpec is a rollout phase: a percentage of the quota, or a count.
type PhaseSpec struct {
	Percent *float64 `json:"percent"`
	Count   *int     `json:"count"`
}

// Cap is phase i's (0-based) cap on each occurrence's claims of a task of quota; -1:
// none. As the server computes it: a count at most the quota, a percentage rounded up.
func (r *RolloutSpec) Cap(i, quota int) int {
	p := r.Phases[i]
	switch {
	case p.Count != nil && quota != -1:
		return min(*p.Count, quota)
	case p.Count != nil:
		return *p.Count
	case *p.Percent >= 100 && quota == -1:
		return -1
	case *p.Percent >= 100:
		return quota
	}
	return int(math.Ceil(*p.Percent * float64(quota) / 100))
}

// RolloutState is what the checker reads of GET .../rollout: the state, the phase
// (1-based), and the moves that ended phases.
type RolloutState struct {
	TaskID  string        `json:"task_id"`
	State   string        `json:"state"`
	Phase   int           `json:"phase"`
	History []PhaseEnding `json:"history"`
}

// PhaseEnding is a move that ended a rollout's phase: which, when, the event, and the
// admin who made it ("" for the server's own).
type PhaseEnding struct {
	Phase    int       `json:"phase"`
	At       time.Time `json:"at"`
	Event    string    `json:"event"`
	Finished int       `json:"finished"`
	Actor    string    `json:"actor"`
}

// Rollout reads task taskID's rollout.
func (c *Client) Rollout(ctx context.Context, taskID string) (RolloutState, error) {
	var r RolloutState
	kind, id, _ := strings.Cut(taskID, ":")
	err := c.Admin(ctx, http.MethodGet, "/v1/admin/tasks/"+kind+"/"+id+"/rollout", nil, &r)
	return r, err
}

// Record is what the checker reads of a dispatch record (GET /v1/admin/dispatches).
type Record struct {
	LogID        string     `json:"log_id"`
	UID          string     `json:"uid"`
	TaskID       string     `json:"task_id"`
	DueAt        time.Time  `json:"due_at"`
	State        string     `json:"state"`
	FinishedAt   *time.Time `json:"finished_at"`
	Resumed      bool       `json:"resumed"`
	RolloutPhase *int       `json:"rollout_phase"`
	// Result, Detail and Checkpoint: a DDI action's feedback lands in them.
	Result     *string         `json:"result"`
	Detail     json.RawMessage `json:"detail"`
	Checkpoint json.RawMessage `json:"checkpoint"`
}

// Records lists every dispatch record of task taskID (at most maxPages of 1000).
func (c *Client) Records(ctx context.Context, taskID string, maxPages int) ([]Record, error) {
	return listAll[Record](ctx, c, "/v1/admin/dispatches?task_id="+url.QueryEscape(taskID), "dispatches", maxPages)
}

// RecordsSince lists every dispatch record dispatched at or after from (at most
// maxPages of 1000).
func (c *Client) RecordsSince(ctx context.Context, from time.Time, maxPages int) ([]Record, error) {
	path := "/v1/admin/dispatches"
	if !from.IsZero() {
		path += "?from=" + url.QueryEscape(from.UTC().Format(time.RFC3339Nano))
	}
	return listAll[Record](ctx, c, path, "dispatches", maxPages)
}

// Tasks lists every task (all pages, at most maxPages of 1000), deleted ones apart.
func (c *Client) Tasks(ctx context.Context, maxPages int) ([]Task, error) {
	return listAll[Task](ctx, c, "/v1/admin/tasks", "tasks", maxPages)
}

// listAll reads every page of the admin list at path (pages of 1000, followed by
// their next_cursor), at most maxPages; field names the list in each page.
func listAll[T any](ctx context.Context, c *Client, path, field string, maxPages int) ([]T, error) {
	var all []T
	cursor := ""
	for page := 0; page < maxPages; page++ {
		q := url.Values{"limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var r map[string]json.RawMessage
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		if err := c.Admin(ctx, http.MethodGet, path+sep+q.Encode(), nil, &r); err != nil {
			return nil, fmt.Errorf("list %s: %w", field, err)
		}
		var items []T
		if err := json.Unmarshal(r[field], &items); err != nil {
			return nil, fmt.Errorf("list %s: %w", field, err)
		}
		all = append(all, items...)
		cursor = ""
		if next, ok := r["next_cursor"]; ok {
			if err := json.Unmarshal(next, &cursor); err != nil {
				return nil, fmt.Errorf("list %s: next_cursor: %w", field, err)
			}
		}
		if cursor == "" {
			return all, nil
		}
	}
	return nil, fmt.Errorf("list %s: more than %d pages", field, maxPages)
}

// Event is one event of GET /v1/admin/events.
type Event struct {
	EventID string    `json:"event_id"`
	Type    string    `json:"type"`
	LogID   string    `json:"log_id"`
	UID     string    `json:"uid"`
	TaskID  string    `json:"task_id"`
	DueAt   time.Time `json:"due_at"`
	Attempt int       `json:"attempt"`
	Result  string    `json:"result,omitempty"`
	At      time.Time `json:"at"`
}

// Events lists the events of one type at or after from (zero: from the beginning),
// every page, reading at most max events; keep says which to hold on to.
func (c *Client) Events(ctx context.Context, typ string, from time.Time, max int64, keep func(Event) bool) ([]Event, int64, error) {
	var out []Event
	var read int64
	cursor := ""
	for read < max {
		q := url.Values{"type": {typ}, "limit": {"1000"}}
		if !from.IsZero() {
			q.Set("from", from.UTC().Format(time.RFC3339Nano))
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var r struct {
			Events     []Event `json:"events"`
			NextCursor string  `json:"next_cursor"`
		}
		if err := c.Admin(ctx, http.MethodGet, "/v1/admin/events?"+q.Encode(), nil, &r); err != nil {
			return nil, read, fmt.Errorf("list %s events: %w", typ, err)
		}
		read += int64(len(r.Events))
		for _, e := range r.Events {
			if keep(e) {
				out = append(out, e)
			}
		}
		if r.NextCursor == "" {
			return out, read, nil
		}
		cursor = r.NextCursor
	}
	return nil, read, fmt.Errorf("list %s events: more than -max-events %d", typ, max)
}

// TaskStat is the part of GET /v1/admin/stats the checker compares.
type TaskStat struct {
	TaskID    string `json:"task_id"`
	Claimed   int    `json:"claimed"`
	Remaining *int   `json:"remaining"`
}

// Stats reads the per-task statistics over [from, to).
func (c *Client) Stats(ctx context.Context, from, to time.Time) ([]TaskStat, error) {
	q := url.Values{"from": {from.UTC().Format(time.RFC3339)}, "to": {to.UTC().Format(time.RFC3339)}}
	var r struct {
		Tasks []TaskStat `json:"tasks"`
	}
	if err := c.Admin(ctx, http.MethodGet, "/v1/admin/stats?"+q.Encode(), nil, &r); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return r.Tasks, nil
}

// Campaign is a campaign as GET /v1/admin/campaigns shows it (the fields the report and
// the checker need), its progress live.
type Campaign struct {
	ID            int64      `json:"id"`
	Name          string     `json:"name"`
	Executor      string     `json:"executor"`
	Total         int64      `json:"total"`
	RatePerSecond float64    `json:"rate_per_second"`
	State         string     `json:"state"`
	Reason        string     `json:"reason"`
	Offset        int64      `json:"offset"`
	Done          int64      `json:"done"`
	Failed        int64      `json:"failed"`
	InFlight      int64      `json:"in_flight"`
	StartedAt     *time.Time `json:"started_at"`
}

// Campaigns lists every campaign (all pages, at most maxPages of 1000).
func (c *Client) Campaigns(ctx context.Context, maxPages int) ([]Campaign, error) {
	return listAll[Campaign](ctx, c, "/v1/admin/campaigns", "campaigns", maxPages)
}

// CampaignsOf reads the campaigns ids (as Campaigns lists them), in the list's order.
func (c *Client) CampaignsOf(ctx context.Context, ids []int64) ([]Campaign, error) {
	all, err := c.Campaigns(ctx, 100)
	if err != nil {
		return nil, err
	}
	want := make(map[int64]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	return slices.DeleteFunc(all, func(cp Campaign) bool { return !want[cp.ID] }), nil
}

// StartCampaign starts campaign id.
func (c *Client) StartCampaign(ctx context.Context, id int64) error {
	return c.Admin(ctx, http.MethodPost, fmt.Sprintf("/v1/admin/campaigns/%d/start", id), nil, nil)
}

// StopCampaign stops campaign id; one that finished already (409) is left as it is.
func (c *Client) StopCampaign(ctx context.Context, id int64) error {
	err := c.Admin(ctx, http.MethodPost, fmt.Sprintf("/v1/admin/campaigns/%d/stop", id), nil, nil)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		return nil
	}
	return err
}

// idPath makes an id safe in a path (ids are [A-Za-z0-9_-], so this is for safety).
func idPath(id string) string { return url.PathEscape(id) }
