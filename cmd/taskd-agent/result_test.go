package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/agent/agenttest"
)

// readResultSoon is readResult, failing the test if it has not returned within
// 30 s (a FIFO used to block it for ever).
func readResultSoon(t *testing.T, path string) (*resultFile, error) {
	t.Helper()
	type answer struct {
		f   *resultFile
		err error
	}
	got := make(chan answer, 1)
	go func() {
		f, err := readResult(path)
		got <- answer{f, err}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	select {
	case a := <-got:
		return a.f, a.err
	case <-ctx.Done():
		t.Fatalf("readResult(%s) hangs", path)
		return nil, nil
	}
}

// A result file that is not a regular file of a bounded size, written where
// $TASKD_RESULT says, is refused: a link is not followed, a FIFO does not block, an
// oversized file is not read whole.
func TestResultFileRefusedUnlessRegularAndSmall(t *testing.T) {
	t.Parallel()
	valid := []byte(`{"result": "success"}`)
	outside := filepath.Join(t.TempDir(), "elsewhere.json")
	if err := os.WriteFile(outside, valid, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(path string) error{
		"a symlink":   func(path string) error { return os.Symlink(outside, path) },
		"a FIFO":      func(path string) error { return syscall.Mkfifo(path, 0o600) },
		"a directory": func(path string) error { return os.Mkdir(path, 0o700) },
		"over the size bound": func(path string) error {
			return os.WriteFile(path, append(bytes.Repeat([]byte(" "), maxResultBytes), valid...), 0o600)
		},
	}
	for name, make := range cases {
		path := filepath.Join(t.TempDir(), "result.json")
		if err := make(path); err != nil {
			t.Fatal(err)
		}
		f, err := readResultSoon(t, path)
		if f != nil || err == nil || !strings.Contains(err.Error(), "$TASKD_RESULT") {
			t.Errorf("a result file that is %s: %+v, %v; want it refused with a reason naming $TASKD_RESULT", name, f, err)
		}
	}
	// A regular file at the bound is read.
	path := filepath.Join(t.TempDir(), "result.json")
	if err := os.WriteFile(path, append(bytes.Repeat([]byte(" "), maxResultBytes-len(valid)), valid...), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := readResultSoon(t, path); err != nil || f == nil || f.Result != "success" {
		t.Errorf("a result file of %d bytes: %+v, %v", maxResultBytes, f, err)
	}
}

// A command that makes $TASKD_RESULT a FIFO fails its task with the reason, without
// hanging, and its run's directory is removed.
func TestResultFIFOFailsTheTask(t *testing.T) {
	t.Parallel()
	seen := filepath.Join(t.TempDir(), "result-path")
	r := testRunner(t, `mkfifo "$TASKD_RESULT"; echo "$TASKD_RESULT" > `+seen)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := agenttest.Do(ctx, agent.HandlerFunc(r.work), agenttest.Task{})
	if err != nil {
		t.Fatalf("a command whose result file is a FIFO: %v", err)
	}
	var detail map[string]any
	json.Unmarshal(c.Detail, &detail)
	if c.Result != "failure" || !strings.Contains(fmtAny(detail["result_error"]), "regular file") {
		t.Errorf("a command whose result file is a FIFO: %s %s, want a failure naming the reason", c.Result, c.Detail)
	}
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Dir(strings.TrimSpace(string(b)))); !os.IsNotExist(err) {
		t.Errorf("the run's directory is left behind: %v", err)
	}
}

func fmtAny(v any) string {
	s, _ := v.(string)
	return s
}

// testRunner is a runner for cmd with its progress socket, as runAgent makes it.
func testRunner(t *testing.T, cmd string) *runner {
	t.Helper()
	r := &runner{command: []string{"/bin/sh", "-c", cmd}, killGrace: time.Second,
		log: slog.New(slog.DiscardHandler), running: map[string]*commandRun{}}
	progress, err := listenProgress(r.checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(progress.close)
	r.socket = progress.path
	return r
}
