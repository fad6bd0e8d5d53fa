package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/client"
)

// A producer hands one piece of work to one device and waits for its answer. (An agent
// of the SDK plays the device.)
func Example() {
	ctx := context.Background()
	c, err := client.New(client.Config{URL: taskdURL(), Token: adminToken})
	if err != nil {
		panic(err)
	}
	task, err := c.Run(ctx, "collect-logs", "uid_store-17", map[string]any{"since": "1h"})
	if err != nil {
		panic(err)
	}
	go device(c, "store-17", func(params json.RawMessage) agent.Outcome {
		return agent.Done(map[string]any{"lines": 120})
	})

	results, err := c.Wait(ctx, task.TaskID)
	if err != nil {
		panic(err)
	}
	for _, r := range results {
		fmt.Println(r.UID, r.Result, string(r.Detail))
	}
	// Output: store-17 success {"lines":120}
}

// A nightly task for a group, at 02:30 in the stores' time zone, created once however
// often the producer runs: the Idempotency-Key names what it is for.
func ExampleClient_CreateTask() {
	ctx := context.Background()
	c, err := client.New(client.Config{URL: taskdURL(), Token: adminToken})
	if err != nil {
		panic(err)
	}
	tmpl, err := c.CreateTemplate(ctx, client.Template{Name: "stock-report",
		Schema: json.RawMessage(`{"type":"object","required":["format"]}`), MaxAttempts: 5})
	if err != nil {
		panic(err)
	}
	nightly := client.Task{Kind: "rotate", Executor: "gid_stores-nl", TemplateID: tmpl.ID,
		StartTime: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Cron: "30 2 * * *", TimeZone: "Europe/Amsterdam",
		DispatchTimes: -1, Params: json.RawMessage(`{"format":"csv"}`)}
	first, err := c.CreateTask(ctx, nightly, client.IdempotencyKey("stock-report-stores-nl"))
	if err != nil {
		panic(err)
	}
	again, err := c.CreateTask(ctx, nightly, client.IdempotencyKey("stock-report-stores-nl"))
	if err != nil {
		panic(err)
	}
	fmt.Println(first.Kind, first.Cron, first.TimeZone, first.MaxAttempts, first.Inherited)
	fmt.Println("created once:", again.TaskID == first.TaskID)
	// Output:
	// rotate 30 2 * * * Europe/Amsterdam 5 [max_attempts]
	// created once: true
}

// Two admins edit one task; the second, made against what it read before the first
// edit, is refused and changes nothing.
func ExampleIfMatch() {
	ctx := context.Background()
	c, err := client.New(client.Config{URL: taskdURL(), Token: adminToken})
	if err != nil {
		panic(err)
	}
	task, err := c.Run(ctx, "reboot", "uid_kiosk-3", nil)
	if err != nil {
		panic(err)
	}
	if _, err := c.UpdateTask(ctx, task.TaskID, map[string]any{"priority": 9}, client.IfMatch(task.Version)); err != nil {
		panic(err)
	}
	_, err = c.UpdateTask(ctx, task.TaskID, map[string]any{"status": "paused"}, client.IfMatch(task.Version))
	fmt.Println(errors.Is(err, client.ErrPreconditionFailed))
	// Output: true
}

// The failures of a task, page after page.
func ExampleClient_Dispatches() {
	ctx := context.Background()
	c, err := client.New(client.Config{URL: taskdURL(), Token: adminToken})
	if err != nil {
		panic(err)
	}
	task, err := c.Run(ctx, "rotate-certs", "uid_gateway-8", nil)
	if err != nil {
		panic(err)
	}
	device(c, "gateway-8", func(json.RawMessage) agent.Outcome {
		return agent.FailPermanent(errors.New("certificate store is read-only"))
	})
	for d, err := range c.Dispatches(ctx, client.Filter{TaskID: task.TaskID, State: "dead"}) {
		if err != nil {
			panic(err)
		}
		fmt.Println(d.UID, d.Attempt, d.Final, string(d.Detail))
	}
	// Output: gateway-8 1 true {"error":"certificate store is read-only","permanent":true}
}

// device runs an agent for uid until nothing is due for it, answering each task with
// do.
func device(c *client.Client, uid string, do func(params json.RawMessage) agent.Outcome) {
	key, err := c.IssueKey(context.Background(), uid)
	if err != nil {
		panic(err)
	}
	a, err := agent.New(agent.Config{URL: taskdURL(), Key: key, Once: true, StartupJitter: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if err := a.Run(context.Background(), agent.HandlerFunc(func(ctx context.Context, t *agent.Task) agent.Outcome {
		return do(t.Params)
	})); err != nil {
		panic(err)
	}
}

// The examples share one server, started when the first needs it and stopped when
// the tests end.
var (
	exampleOnce   sync.Once
	exampleServer *server
	exampleTB     = &mainTB{}
)

func taskdURL() string {
	exampleOnce.Do(func() { exampleServer = startServer(exampleTB, nil) })
	return exampleServer.URL
}

func TestMain(m *testing.M) {
	code := m.Run()
	exampleTB.cleanup()
	if exampleTB.failed && code == 0 {
		code = 1
	}
	os.Exit(code)
}

// mainTB is the testing.TB of what outlives one test: it runs the cleanups when the
// tests end, and a failure panics.
type mainTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

func (m *mainTB) Helper() {}
func (m *mainTB) Cleanup(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cleanups = append(m.cleanups, f)
}
func (m *mainTB) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (m *mainTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (m *mainTB) Errorf(format string, args ...any) {
	m.mu.Lock()
	m.failed = true
	m.mu.Unlock()
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}
func (m *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "taskd-client-example-")
	if err != nil {
		panic(err)
	}
	m.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (m *mainTB) cleanup() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.cleanups) - 1; i >= 0; i-- {
		m.cleanups[i]()
	}
	m.cleanups = nil
}
