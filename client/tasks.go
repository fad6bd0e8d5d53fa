package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// CreateTask creates a task of t.Kind ("once" or "rotate") from t's fields (what the
// server sets is not sent). It sends an Idempotency-Key (a random one unless given),
// so its retries create one task at most.
func (cl *Client) CreateTask(ctx context.Context, t Task, opts ...Option) (Task, error) {
	kind := t.Kind
	if kind != "once" && kind != "rotate" {
		return Task{}, fmt.Errorf("client: CreateTask: Kind %q: want once or rotate", kind)
	}
	return send[Task](cl, ctx, http.MethodPost, "/v1/admin/tasks/"+kind, taskBody(t), true, opts)
}

// PreviewTask says what t would dispatch (its audience, its next occurrences and their
// recipients, warnings), creating nothing.
func (cl *Client) PreviewTask(ctx context.Context, t Task) (Preview, error) {
	if t.Kind != "once" && t.Kind != "rotate" {
		return Preview{}, fmt.Errorf("client: PreviewTask: Kind %q: want once or rotate", t.Kind)
	}
	return send[Preview](cl, ctx, http.MethodPost, "/v1/admin/tasks/"+t.Kind+"/preview", taskBody(t), false, nil)
}

// taskBody is t as a create or replace sends it: the fields the server sets left out.
func taskBody(t Task) Task {
	return Task{Executor: t.Executor, TemplateID: t.TemplateID, StartTime: t.StartTime, Params: t.Params,
		DispatchTimes: t.DispatchTimes, Mode: t.Mode, Priority: t.Priority, Status: t.Status,
		LeaseSeconds: t.LeaseSeconds, MaxAttempts: t.MaxAttempts, RetryBackoffSeconds: t.RetryBackoffSeconds,
		RetryMultiplier: t.RetryMultiplier, RetryMaxSeconds: t.RetryMaxSeconds,
		DispatchRatePerMinute: t.DispatchRatePerMinute, ConfirmSeconds: t.ConfirmSeconds, Rollout: t.Rollout,
		Windows: t.Windows, SpaceMinutes: t.SpaceMinutes, Cron: t.Cron, TimeZone: t.TimeZone, EndTime: t.EndTime,
		Misfire: t.Misfire}
}

// Tasks lists the tasks, by kind then id; Filter's Executor, Kind, Status and
// TemplateID narrow it.
func (cl *Client) Tasks(ctx context.Context, f Filter) iter.Seq2[Task, error] {
	return list[Task](cl, ctx, "/v1/admin/tasks", f, "tasks", "executor", "kind", "status", "template_id")
}

// Task reads a task by its task id ("once:12").
func (cl *Client) Task(ctx context.Context, taskID string) (Task, error) {
	path, err := taskPath(taskID, "")
	if err != nil {
		return Task{}, err
	}
	return send[Task](cl, ctx, http.MethodGet, path, nil, false, nil)
}

// ReplaceTask replaces the task t.TaskID with t's fields: what t leaves zero is
// inherited or defaulted, as at create.
func (cl *Client) ReplaceTask(ctx context.Context, t Task, opts ...Option) (Task, error) {
	path, err := taskPath(t.TaskID, "")
	if err != nil {
		return Task{}, err
	}
	return send[Task](cl, ctx, http.MethodPut, path, taskBody(t), false, opts)
}

// UpdateTask edits a task with a JSON merge patch (RFC 7396): the fields patch names
// are set (null: inherited again, or the default), the others kept. Pausing is
// {"status": "paused"}, resuming {"status": "active"}. Agents see the edit on their
// next fetch.
func (cl *Client) UpdateTask(ctx context.Context, taskID string, patch map[string]any, opts ...Option) (Task, error) {
	path, err := taskPath(taskID, "")
	if err != nil {
		return Task{}, err
	}
	return send[Task](cl, ctx, http.MethodPatch, path, patch, false, opts)
}

// DeleteTask deletes a task: it dispatches no more, and its open dispatches are
// cancelled.
func (cl *Client) DeleteTask(ctx context.Context, taskID string, opts ...Option) error {
	path, err := taskPath(taskID, "")
	if err != nil {
		return err
	}
	_, err = send[struct{}](cl, ctx, http.MethodDelete, path, nil, false, opts)
	return err
}

// Schedule lists the occurrences of executor's tasks ("uid_<id>" or "gid_<id>") due
// in [from, to) (zero: the server's defaults).
func (cl *Client) Schedule(ctx context.Context, from, to time.Time, executor string) (Schedule, error) {
	c := newCall(http.MethodGet, "/v1/admin/schedule", nil)
	c.query = url.Values{}
	for name, t := range map[string]time.Time{"from": from, "to": to} {
		if !t.IsZero() {
			c.query.Set(name, t.UTC().Format(time.RFC3339Nano))
		}
	}
	if executor != "" {
		c.query.Set("executor", executor)
	}
	var out Schedule
	return out, cl.do(ctx, c, &out)
}

// Rollout reads where a task's rollout stands.
func (cl *Client) Rollout(ctx context.Context, taskID string) (RolloutState, error) {
	path, err := taskPath(taskID, "/rollout")
	if err != nil {
		return RolloutState{}, err
	}
	return send[RolloutState](cl, ctx, http.MethodGet, path, nil, false, nil)
}

// MoveRollout moves a task's rollout: "advance", "pause", "resume" or "abort".
func (cl *Client) MoveRollout(ctx context.Context, taskID, move string, opts ...Option) (RolloutState, error) {
	path, err := taskPath(taskID, "/rollout/"+esc(move))
	if err != nil {
		return RolloutState{}, err
	}
	return send[RolloutState](cl, ctx, http.MethodPost, path, nil, false, opts)
}

// Rollouts lists the tasks' rollouts that are not over.
func (cl *Client) Rollouts(ctx context.Context) ([]RolloutState, error) {
	var out struct {
		Rollouts []RolloutState `json:"rollouts"`
	}
	err := cl.do(ctx, newCall(http.MethodGet, "/v1/admin/rollouts", nil), &out)
	return out.Rollouts, err
}

// Results yields a task's dispatch records as they finish, long-polling the server
// between them: every attempt that ended, in the order the server saw them end (a
// failure to be retried, state retry_wait, then its retry's record), each as it stood
// when read. It ends when no more can come: a one-time task whose quota is spent and
// whose every dispatch reached its end, or a task that ended or was deleted. A
// rotating task without an end goes on until ctx ends, which ends the iteration with
// ctx's error.
func (cl *Client) Results(ctx context.Context, taskID string) iter.Seq2[Dispatch, error] {
	return func(yield func(Dispatch, error) bool) {
		path, err := taskPath(taskID, "/results")
		if err != nil {
			yield(Dispatch{}, err)
			return
		}
		cursor := ""
		for {
			c := newCall(http.MethodGet, path, nil)
			c.query = url.Values{"wait": {"60s"}}
			if cursor != "" {
				c.query.Set("cursor", cursor)
			}
			var page struct {
				Results    []Dispatch `json:"results"`
				NextCursor string     `json:"next_cursor"`
				Done       bool       `json:"done"`
			}
			if err := cl.do(ctx, c, &page); err != nil {
				yield(Dispatch{}, err)
				return
			}
			for _, d := range page.Results {
				if !yield(d, nil) {
					return
				}
			}
			if page.Done {
				return
			}
			if page.NextCursor != "" {
				cursor = page.NextCursor
			}
		}
	}
}

// Wait waits until a task has no more results to give (see Results) and answers
// each of its dispatches' final record, in the order they first finished: one per
// claim of a quota slot, its last attempt (a retry, a next stage or an admin's retry
// continues a claim; Resumed says so), with its State (done, dead, expired,
// cancelled), Result, Detail and Attempt. An attempt that expired is followed by its
// next, when there is one.
func (cl *Client) Wait(ctx context.Context, taskID string) ([]Dispatch, error) {
	var out []Dispatch
	latest := map[string]int{} // uid and occurrence -> index in out of its latest claim
	for d, err := range cl.Results(ctx, taskID) {
		if err != nil {
			return out, err
		}
		key := d.UID + " " + d.DueAt.UTC().Format(time.RFC3339Nano)
		// A record continues its uid's latest claim when it resumes it (a retry, a
		// next stage) or follows an expiry of it (the next attempt claims again).
		if i, ok := latest[key]; ok && (d.Resumed || out[i].State == "expired") {
			out[i] = d
			continue
		}
		latest[key] = len(out)
		out = append(out, d)
	}
	return out, nil
}

// Run hands one piece of work to executor ("uid_<id>" or "gid_<id>") in one call: it
// reuses the template named templateName (the oldest of that name), or creates it
// (any params, the server's defaults), and creates a one-time task of it, due now,
// with params (marshalled as JSON; nil for none) and the server's defaults for the
// rest: dispatched once to the uid, or for a group once to each of its members now
// (dispatch_times their count: a member who joins later may take the place of one
// that never fetches), priority 5, no lease and so one attempt. Wait answers its
// results. For any other setting, CreateTask.
//
// Its create is idempotent across its own retries. An IdempotencyKey given to Run
// does not make a later Run with the same key answer the same task: the task it
// sends is due at the time of the call (and a group's quota is its size then), so a
// later one is another request, and the server answers 422. To create a task once
// across restarts of your program, use CreateTask with a fixed StartTime and key.
func (cl *Client) Run(ctx context.Context, templateName, executor string, params any, opts ...Option) (Task, error) {
	tmpl, err := cl.templateNamed(ctx, templateName)
	if err != nil {
		return Task{}, err
	}
	t := Task{Kind: "once", Executor: executor, TemplateID: tmpl, StartTime: time.Now().UTC().Truncate(time.Second)}
	if params != nil {
		if t.Params, err = json.Marshal(params); err != nil {
			return Task{}, fmt.Errorf("client: Run: params: %w", err)
		}
	}
	if t.DispatchTimes = 1; strings.HasPrefix(executor, "gid_") {
		// Once to each member: a quota of unlimited would never be spent, and Wait
		// would wait for members yet to join.
		g, err := cl.Group(ctx, strings.TrimPrefix(executor, "gid_"))
		if err != nil {
			return Task{}, err
		}
		if g.Members == 0 {
			return Task{}, fmt.Errorf("client: Run: group %s has no members", g.GID)
		}
		t.DispatchTimes = g.Members
	}
	return cl.CreateTask(ctx, t, opts...)
}

// templateNamed is the id of the oldest template called name, created if there is
// none. Two producers creating it at once each create one, and both go on with the
// older.
func (cl *Client) templateNamed(ctx context.Context, name string) (int64, error) {
	oldest := func() (int64, error) {
		all, err := cl.Templates(ctx)
		if err != nil {
			return 0, err
		}
		var id int64
		for _, t := range all {
			if t.Name == name && (id == 0 || t.ID < id) {
				id = t.ID
			}
		}
		return id, nil
	}
	if id, err := oldest(); err != nil || id != 0 {
		return id, err
	}
	if _, err := cl.CreateTemplate(ctx, Template{Name: name}); err != nil {
		return 0, err
	}
	return oldest()
}

// taskPath is the path of a task ("once:12") with rest after it.
func taskPath(taskID, rest string) (string, error) {
	kind, id, ok := strings.Cut(taskID, ":")
	if n, err := strconv.ParseInt(id, 10, 64); !ok || err != nil || n <= 0 || (kind != "once" && kind != "rotate") {
		return "", fmt.Errorf("client: task id %q: want once:<n> or rotate:<n>", taskID)
	}
	return "/v1/admin/tasks/" + kind + "/" + id + rest, nil
}
