package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/testenv"
)

// The command-line agent against a real dispatchd (in process, on its own database and
// Redis prefix), run as its users run it: the built binary, its flags, its commands.

const adminToken = "agent-test-admin-token"

// binary is the taskd-agent built once for the package's tests.
var binary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "taskd-agent-bin-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "taskd-agent")
	out, err := exec.Command("go", "build", "-o", path, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return path, nil
})

// newServerEnrollSecret is the enroll secret of newServer's servers.
const newServerEnrollSecret = "an-enroll-secret-of-32-characters!"

type server struct {
	t   *testing.T
	url string
}

func newServer(t *testing.T) *server {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	cfg := app.Config{RedisPrefix: prefix, CatchUp: time.Hour, AdminTokens: []string{adminToken},
		EnrollSecret: newServerEnrollSecret, MaxWait: time.Second, SweepInterval: 200 * time.Millisecond,
		Node: "agent-test", RequestTimeout: time.Minute}
	a := app.New(cfg, app.Deps{Store: testenv.Store(t), Redis: rdb, Clock: clock.Real{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go a.RunBackground(t.Context())
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return &server{t: t, url: srv.URL}
}

// admin sends an admin request and decodes the reply; a status of 300 or more fails
// the test.
func (s *server) admin(method, path string, body any) map[string]any {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.url+path, r)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode >= 300 {
		s.t.Fatalf("%s %s: %d %v", method, path, resp.StatusCode, out)
	}
	return out
}

// task creates a once task for uid, due a minute ago, with params and fields.
func (s *server) task(uid string, params map[string]any, fields map[string]any) string {
	s.t.Helper()
	tpl := s.admin("POST", "/v1/admin/templates", map[string]any{"name": "t", "schema": map[string]any{"type": "object"}})
	body := map[string]any{"executor": "uid_" + uid, "start_time": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339),
		"template_id": tpl["id"], "params": params}
	for k, v := range fields {
		body[k] = v
	}
	return s.admin("POST", "/v1/admin/tasks/once", body)["task_id"].(string)
}

// dispatches are uid's dispatch records, newest first.
func (s *server) dispatches(uid string) []map[string]any {
	s.t.Helper()
	out := s.admin("GET", "/v1/admin/dispatches?uid="+uid, nil)
	var ds []map[string]any
	for _, d := range out["dispatches"].([]any) {
		ds = append(ds, d.(map[string]any))
	}
	return ds
}

// agentCmd is taskd-agent run with args for uid, against s.
func (s *server) agentCmd(uid string, args ...string) *exec.Cmd {
	s.t.Helper()
	bin, err := binary()
	if err != nil {
		s.t.Fatal(err)
	}
	key := s.admin("POST", "/v1/admin/clients/"+uid+"/keys", nil)["client_key"].(string)
	// The key in the environment, as the guide says: on the command line ps shows it.
	// The PATH is the test's: the binary is not in it, as taskd-agent need not be
	// installed for its commands to call it.
	cmd := exec.Command(bin, append([]string{"run", "-url", s.url}, args...)...)
	cmd.Env = append(os.Environ(), "TASKD_KEY="+key)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	s.t.Cleanup(func() {
		if s.t.Failed() {
			s.t.Logf("taskd-agent's output:\n%s", logs.String())
		}
	})
	return cmd
}

// waitFor waits, up to a deadline, until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
	}
}

// Every task is run once, with its params on stdin and the task in its environment,
// and completed by its exit: 0 a success, anything else a failure with the ends of its
// output. With -once the agent exits 0 when nothing is left.
func TestEveryTaskRunOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.admin("PUT", "/v1/admin/clients/7", map[string]any{"max_in_flight": 3})
	ok := s.task("7", map[string]any{"exit": 0}, nil)
	failing := s.task("7", map[string]any{"exit": 3}, nil)
	out := t.TempDir()
	script := `read params; echo "$TASKD_TASK_ID $TASKD_KIND $TASKD_ATTEMPT $params" >> ` + out + `/seen
echo to stdout; echo to stderr >&2
exit $(printf '%s' "$params" | sed 's/.*"exit":\([0-9]*\).*/\1/')`
	cmd := s.agentCmd("7", "-once", "-concurrency", "3", "--", "/bin/sh", "-c", script)
	if err := cmd.Run(); err != nil {
		t.Fatalf("taskd-agent run -once: %v", err)
	}
	seen, _ := os.ReadFile(filepath.Join(out, "seen"))
	lines := strings.Split(strings.TrimSpace(string(seen)), "\n")
	if len(lines) != 2 {
		t.Fatalf("the command ran %d times, want once per task:\n%s", len(lines), seen)
	}
	for _, d := range s.dispatches("7") {
		switch d["task_id"] {
		case ok:
			if d["state"] != "done" || d["result"] != "success" {
				t.Errorf("the task that exited 0: %v", d)
			}
		case failing:
			detail, _ := d["detail"].(map[string]any)
			if d["result"] != "failure" || detail["exit_code"] != float64(3) || detail["stdout_tail"] != "to stdout\n" || detail["stderr_tail"] != "to stderr\n" {
				t.Errorf("the task that exited 3: %v", d)
			}
		}
	}
}

// A command that runs past its task's lease keeps the task: the agent extends the
// lease while it runs.
func TestLeaseExtendedWhileTheCommandRuns(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.task("8", map[string]any{}, map[string]any{"lease_seconds": 2})
	cmd := s.agentCmd("8", "-once", "--", "/bin/sh", "-c", "sleep 5")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	ds := s.dispatches("8")
	if len(ds) != 1 || ds[0]["state"] != "done" || ds[0]["result"] != "success" || ds[0]["attempt"] != float64(1) {
		t.Fatalf("a 5 s command on a 2 s lease: %v, want one dispatch, done", ds)
	}
}

// SIGTERM to the agent: it takes nothing more, lets the running command finish within
// the shutdown grace, completes it, and exits 0.
func TestSIGTERMCompletesTheRunningCommand(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.task("9", map[string]any{}, nil)
	started := filepath.Join(t.TempDir(), "started")
	cmd := s.agentCmd("9", "-shutdown-grace", "20s", "--", "/bin/sh", "-c", "touch "+started+"; sleep 2; echo finished")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the command started", func() bool { _, err := os.Stat(started); return err == nil })
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("taskd-agent after SIGTERM: %v, want exit 0", err)
	}
	ds := s.dispatches("9")
	if len(ds) != 1 || ds[0]["result"] != "success" || ds[0]["detail"].(map[string]any)["stdout_tail"] != "finished\n" {
		t.Fatalf("the command running at SIGTERM: %v, want it finished and completed", ds)
	}
}

// A command past -timeout is stopped with its whole process group, and the task fails
// with "timeout": true.
func TestTimeoutKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.task("10", map[string]any{}, nil)
	pidFile := filepath.Join(t.TempDir(), "child")
	cmd := s.agentCmd("10", "-once", "-timeout", "500ms", "-kill-grace", "200ms", "--", "/bin/sh", "-c",
		"(trap '' TERM; sleep 300) & echo $! > "+pidFile+"; trap '' TERM; sleep 300")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	ds := s.dispatches("10")
	if len(ds) != 1 || ds[0]["result"] != "failure" || ds[0]["detail"].(map[string]any)["timeout"] != true {
		t.Fatalf("a command past its timeout: %v", ds)
	}
	b, _ := os.ReadFile(pidFile)
	var child int
	fmt.Sscan(string(b), &child)
	waitFor(t, "the command's background child is gone", func() bool { return child > 0 && syscall.Kill(child, 0) != nil })
}

// The guide's command line and shell command (docs/AGENTS.md), run as pasted: the
// line's flags as written, but for what names the reader's site (the server's URL,
// the enroll secret's and the key's files), and -once so that it ends; count.sh saves
// a checkpoint after each step through `taskd-agent progress` (with taskd-agent not
// installed in the PATH) and reports its result in $TASKD_RESULT; the labels and
// version of the line reach the fleet view.
func TestGuideShellCommand(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatal("jq is needed by the guide's command: apt install jq")
	}
	guide, err := os.ReadFile("../../docs/AGENTS.md")
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(guide, []byte("```sh\n#!/bin/sh\n"))
	if start < 0 {
		t.Fatal("docs/AGENTS.md has no shell command")
	}
	script := guide[start+len("```sh\n"):]
	script = script[:bytes.Index(script, []byte("```"))]
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "count.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	args := guideCommandLine(t, guide)
	s := newServer(t)
	secretFile, keyFile := filepath.Join(dir, "enroll-secret"), filepath.Join(dir, "key")
	os.WriteFile(secretFile, []byte(newServerEnrollSecret+"\n"), 0o600)
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "-url":
			args[i+1] = s.url
		case "-enroll-secret-file":
			args[i+1] = secretFile
		case "-key-file":
			args[i+1] = keyFile
		}
	}
	if args[0] != "taskd-agent" || args[1] != "run" || !slices.Contains(args, "./count.sh") {
		t.Fatalf("the guide's command line: %q, want taskd-agent run ... -- ./count.sh", args)
	}
	uid := args[slices.Index(args, "-uid")+1]
	s.task(uid, map[string]any{"to": 4}, nil)
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"run", "-once"}, args[2:]...)...)
	cmd.Dir = dir
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Run(); err != nil {
		t.Fatalf("the guide's command line: %v\n%s", err, logs.String())
	}
	// Checkpoints go at most one every 2 s, the latest always before a failure's result;
	// after a success the occurrence is over and the last one need not go.
	ds := s.dispatches(uid)
	cp, _ := ds[0]["checkpoint"].(map[string]any)
	if len(ds) != 1 || ds[0]["result"] != "success" || fmt.Sprint(ds[0]["detail"]) != "map[steps:4]" ||
		cp["n"] == nil || cp["n"].(float64) < 1 || cp["n"].(float64) > 4 {
		t.Fatalf("the guide's command: %v, want success with 4 steps and a checkpoint it saved\n%s", ds, logs.String())
	}
	host, _ := os.Hostname()
	waitFor(t, "the fleet view shows the guide's version and labels", func() bool {
		return fleetMatches(s, map[string]string{uid: "1.0.0 " + host + " map[role:counter site:ams1]"})
	})
}

// guideCommandLine is the guide's taskd-agent command line (the indented block that
// starts with it), split into words as the shell does for it.
func guideCommandLine(t *testing.T, guide []byte) []string {
	t.Helper()
	i := bytes.Index(guide, []byte("\n    taskd-agent run "))
	if i < 0 {
		t.Fatal("docs/AGENTS.md has no taskd-agent command line")
	}
	var line strings.Builder
	for _, l := range strings.Split(string(guide[i+1:]), "\n") {
		if !strings.HasPrefix(l, "    ") {
			break
		}
		line.WriteString(strings.TrimSuffix(strings.TrimSpace(l), "\\") + " ")
	}
	if strings.ContainsAny(line.String(), "'\"$`*?") {
		t.Fatalf("the guide's command line has quotes or expansions this test does not split: %s", line.String())
	}
	return strings.Fields(line.String())
}

// A command that prints its environment does not put the agent's credentials into
// its task's detail (issue 42: the fleet's enroll secret was in a stdout_tail).
func TestCredentialsNotInACommandsOutput(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.task("12", map[string]any{}, nil)
	cmd := s.agentCmd("12", "-once", "--", "/bin/sh", "-c", "env")
	cmd.Env = append(cmd.Env, "TASKD_ENROLL_SECRET=the-fleets-enroll-secret", "TASKD_UID=12")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	ds := s.dispatches("12")
	if len(ds) != 1 {
		t.Fatalf("dispatches: %v", ds)
	}
	out, _ := ds[0]["detail"].(map[string]any)["stdout_tail"].(string)
	if !strings.Contains(out, "TASKD_LOG_ID=") || strings.Contains(out, "the-fleets-enroll-secret") || strings.Contains(out, "TASKD_KEY=") {
		t.Fatalf("the command's environment, as it printed it:\n%s", out)
	}
}
