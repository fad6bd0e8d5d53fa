package client_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/client"
)

// The producer in docs/PRODUCERS.md builds against the client as it is, and does what
// the guide says: run against a real server while an agent answers, it prints the
// task it created and the device's answer.
func TestProducersGuideProgram(t *testing.T) {
	t.Parallel()
	guide, err := os.ReadFile("../docs/PRODUCERS.md")
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(guide, []byte("```go\n"))
	if start < 0 {
		t.Fatal("PRODUCERS.md has no Go program")
	}
	src := guide[start+len("```go\n"):]
	src = src[:bytes.Index(src, []byte("```"))]
	// Inside the module, so that the client's import path resolves to this checkout.
	dir, err := os.MkdirTemp(".", "guideexample-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "collect-logs")
	if out, err := exec.Command("go", "build", "-o", bin, "./"+filepath.Base(dir)).CombinedOutput(); err != nil {
		t.Fatalf("the guide's producer does not build: %v\n%s", err, out)
	}

	s := startServer(t, nil)
	c := newClient(t, s.URL, client.Config{})
	key, err := c.IssueKey(t.Context(), "store-17")
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{URL: s.URL, Key: key, StartupJitter: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- a.Run(ctx, agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
			return agent.Done(map[string]any{"lines": 120, "params": task.Params})
		}))
	}()

	cmd := exec.Command(bin, "store-17")
	cmd.Env = append(os.Environ(), "TASKD_URL="+s.URL, "TASKD_ADMIN_TOKEN="+adminToken)
	out, err := cmd.CombinedOutput()
	stop()
	if err := <-agentDone; err != nil {
		t.Errorf("agent: %v", err)
	}
	if err != nil {
		t.Fatalf("collect-logs: %v\n%s", err, out)
	}
	want := "created once:1\nstore-17: done after 1 attempt(s): {\"lines\":120,\"params\":{\"since\":\"1h\"}}\n"
	if string(out) != want {
		t.Errorf("collect-logs printed\n%s\nwant\n%s", out, want)
	}
	if !strings.Contains(string(guide), "client/guide_test.go") {
		t.Error("the guide no longer names the test that runs its program")
	}
}
