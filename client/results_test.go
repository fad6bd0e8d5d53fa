package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/client"
)

// Results yields every attempt as it ends, and Wait, started before any agent ran,
// answers once the task is over with each uid's last attempt: for a group of two,
// one whose first attempt failed and was retried, and one that succeeded at once.
func TestResultsAsTheyFinish(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := newClient(t, s.URL, client.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a Wait that never ends fails here
	defer cancel()
	if _, err := c.SetGroupMembers(ctx, "pair", []string{"p1", "p2"}); err != nil {
		t.Fatal(err)
	}
	tmpl, err := c.CreateTemplate(ctx, client.Template{Name: "probe", LeaseSeconds: 60, MaxAttempts: 2, RetryBackoffSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.CreateTask(ctx, client.Task{Kind: "once", Executor: "gid_pair", TemplateID: tmpl.ID, DispatchTimes: 2,
		StartTime: time.Now().Add(-time.Minute), Params: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}

	type waited struct {
		final []client.Dispatch
		err   error
	}
	waiting := make(chan waited, 1)
	go func() {
		final, err := c.Wait(ctx, task.TaskID)
		waiting <- waited{final, err}
	}()
	var every []client.Dispatch
	streamed := make(chan error, 1)
	go func() {
		for d, err := range c.Results(ctx, task.TaskID) {
			if err != nil {
				streamed <- err
				return
			}
			every = append(every, d)
		}
		streamed <- nil
	}()

	agentCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, uid := range []string{"p1", "p2"} {
		key, err := c.IssueKey(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.New(agent.Config{URL: s.URL, Key: key, StartupJitter: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		go a.Run(agentCtx, agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			if uid == "p1" && task.Attempt == 1 {
				return agent.Fail(errors.New("busy"))
			}
			return agent.Done(map[string]any{"uid": uid, "attempt": task.Attempt})
		}))
	}

	w := <-waiting
	if w.err != nil {
		t.Fatal(w.err)
	}
	if err := <-streamed; err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range w.final {
		got[d.UID] = d.State + " " + string(d.Detail)
	}
	want := map[string]string{"p1": `done {"attempt":2,"uid":"p1"}`, "p2": `done {"attempt":1,"uid":"p2"}`}
	if len(w.final) != 2 || got["p1"] != want["p1"] || got["p2"] != want["p2"] {
		t.Errorf("Wait: %v, want %v", got, want)
	}
	var p1 []string
	for _, d := range every {
		if d.UID == "p1" {
			p1 = append(p1, d.Result)
		}
	}
	if len(every) != 3 || !slices.Equal(p1, []string{"failure", "success"}) {
		t.Errorf("Results yielded %d records, p1's results %v; want 3, p1 failure then success", len(every), p1)
	}
}

// A uid that takes one occurrence twice (until_exhausted) has two claims, and Wait
// answers both.
func TestWaitKeepsEveryClaim(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := newClient(t, s.URL, client.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tmpl, err := c.CreateTemplate(ctx, client.Template{Name: "chunk"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.CreateTask(ctx, client.Task{Kind: "once", Executor: "uid_w", TemplateID: tmpl.ID, DispatchTimes: 2,
		Mode: "until_exhausted", StartTime: time.Now().Add(-time.Minute), Params: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, c, s.URL, "w", func(task *agent.Task) agent.Outcome { return agent.Done(map[string]string{"log": task.LogID}) })
	final, err := c.Wait(ctx, task.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if len(final) != 2 || final[0].LogID == final[1].LogID || final[0].State != "done" || final[1].State != "done" {
		t.Errorf("Wait: %+v; want both claims, done", final)
	}
}

// An attempt that expired is followed by its next, and Wait answers the claim once,
// with its last attempt.
func TestWaitFollowsAnExpiry(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := newClient(t, s.URL, client.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tmpl, err := c.CreateTemplate(ctx, client.Template{Name: "slow", LeaseSeconds: 300, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.CreateTask(ctx, client.Task{Kind: "once", Executor: "uid_x", TemplateID: tmpl.ID,
		StartTime: time.Now().Add(-time.Minute), Params: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	held, err := fetchOne(t, c, s.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExpireDispatch(ctx, held); err != nil {
		t.Fatal(err)
	}
	runAgent(t, c, s.URL, "x", func(*agent.Task) agent.Outcome { return agent.Done(nil) })
	final, err := c.Wait(ctx, task.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if len(final) != 1 || final[0].State != "done" || final[0].Attempt != 2 {
		t.Errorf("Wait: %+v; want one claim, its second attempt done", final)
	}
}
