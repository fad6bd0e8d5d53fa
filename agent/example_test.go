package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/agent/agenttest"
)

type crawlParams struct {
	URL string `json:"url"`
}

// An agent that runs one kind of task, against the fake server: it stops once the
// task is done.
func Example() {
	srv := agenttest.NewServer()
	defer srv.Close()
	id := srv.Add(agenttest.Task{TemplateID: 3, Params: crawlParams{URL: "https://example.com/"}})

	a, err := agent.New(agent.Config{URL: srv.URL, Key: srv.Key("42"), StartupJitter: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	h := agent.Typed(func(ctx context.Context, t *agent.Task, p crawlParams) agent.Outcome {
		fmt.Println("crawling", p.URL, "attempt", t.Attempt)
		stop() // the agent stops once this task's result is sent
		return agent.Done(map[string]int{"pages": 12})
	})
	if err := a.Run(ctx, h); err != nil {
		panic(err)
	}
	results, _ := srv.Wait(context.Background(), id)
	fmt.Println(results[0].Result, string(results[0].Detail))
	// Output:
	// crawling https://example.com/ attempt 1
	// success {"pages":12}
}

// An agent says what it is: its program's version and labels, beside the hostname and
// the labels the SDK adds (taskd.dev/os, taskd.dev/arch, taskd.dev/sdk-version). The
// server shows them in GET /v1/admin/clients.
func ExampleConfig_labels() {
	srv := agenttest.NewServer()
	defer srv.Close()
	a, err := agent.New(agent.Config{URL: srv.URL, Key: srv.Key("host-17"), Once: true, StartupJitter: -1,
		Version: "2.3.1", Labels: map[string]string{"site": "ams1", "rack": "r17"},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if err := a.Run(context.Background(), agent.HandlerFunc(func(ctx context.Context, t *agent.Task) agent.Outcome {
		return agent.Done(nil)
	})); err != nil {
		panic(err)
	}
	info, _ := srv.Agent("host-17")
	fmt.Println(info.Version, info.Labels["site"], info.Labels["rack"], info.Labels["taskd.dev/os"] == runtime.GOOS)
	// Output: 2.3.1 ams1 r17 true
}

// A Mux routes tasks by template; an agent running one fetches only its templates.
func ExampleMux() {
	var mux agent.Mux
	mux.Handle(1, agent.HandlerFunc(func(ctx context.Context, t *agent.Task) agent.Outcome {
		return agent.Done(map[string]string{"by": "resize"})
	}))
	mux.Handle(2, agent.HandlerFunc(func(ctx context.Context, t *agent.Task) agent.Outcome {
		return agent.Fail(errors.New("thumbnail service down"))
	}))
	c, err := agenttest.Do(context.Background(), &mux, agenttest.Task{TemplateID: 2})
	fmt.Println(c.Result, string(c.Detail), err)
	// Output: failure {"error":"thumbnail service down"} <nil>
}

// A long task saves checkpoints as it goes; a retry (or a redo) brings the last one
// back in LastCheckpoint.
func ExampleTask_Checkpoint() {
	type progress struct {
		Rows int `json:"rows"`
	}
	h := agent.HandlerFunc(func(ctx context.Context, t *agent.Task) agent.Outcome {
		var from progress
		if t.LastCheckpoint != nil {
			json.Unmarshal(t.LastCheckpoint, &from)
		}
		for rows := from.Rows + 1000; rows <= 3000; rows += 1000 {
			if err := t.Checkpoint(progress{Rows: rows}); err != nil {
				return agent.Fail(err)
			}
		}
		return agent.Fail(errors.New("disk full"))
	})
	c, err := agenttest.Do(context.Background(), h, agenttest.Task{Checkpoint: progress{Rows: 1000}})
	last := c.Checkpoints[len(c.Checkpoints)-1]
	fmt.Println(c.Result, string(last), err)
	// Output: failure {"rows":3000} <nil>
}

// A multi-stage task hands its next stage a context, after a delay.
func ExampleNextStage() {
	h := agent.HandlerFunc(func(ctx context.Context, t *agent.Task) agent.Outcome {
		return agent.NextStage("parse", map[string]string{"blob": "s3://b/1"}, time.Minute)
	})
	c, _ := agenttest.Do(context.Background(), h, agenttest.Task{Stages: []string{"fetch", "parse"}})
	fmt.Println(c.Stage, "->", c.NextStage, string(c.Context), c.Delay)
	// Output: fetch -> parse {"blob":"s3://b/1"} 1m0s
}

// FailPermanent is a failure no attempt will mend: the server ends the task at once,
// whatever attempts are left (the complete says "retry": false).
func ExampleFailPermanent() {
	h := agent.HandlerFunc(func(ctx context.Context, t *agent.Task) agent.Outcome {
		return agent.FailPermanent(errors.New("no such account"))
	})
	c, _ := agenttest.Do(context.Background(), h, agenttest.Task{MaxAttempts: 5})
	fmt.Println(c.Result, c.Final, string(c.Detail))
	// Output: failure true {"error":"no such account","permanent":true}
}

// GiveBack hands a task back at once; the server counts it as a failed attempt.
func ExampleGiveBack() {
	h := agent.HandlerFunc(func(ctx context.Context, t *agent.Task) agent.Outcome {
		return agent.GiveBack("draining for maintenance")
	})
	c, _ := agenttest.Do(context.Background(), h, agenttest.Task{})
	fmt.Println(c.Result, string(c.Detail))
	// Output: failure {"given_back":true,"reason":"draining for maintenance"}
}

// A handler that panics fails its task with the panic in the detail; the agent lives on.
func ExampleHandlerFunc_panic() {
	h := agent.HandlerFunc(func(ctx context.Context, t *agent.Task) agent.Outcome {
		var m map[string]int
		m["boom"]++
		return agent.Done(nil)
	})
	c, _ := agenttest.Do(context.Background(), h, agenttest.Task{})
	var d struct {
		Error string `json:"error"`
		Panic bool   `json:"panic"`
	}
	json.Unmarshal(c.Detail, &d)
	fmt.Println(c.Result, d.Panic, d.Error)
	// Output: failure true panic: assignment to entry in nil map
}
