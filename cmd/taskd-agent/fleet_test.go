package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/taskpull/taskd/agent"
)

// A fleet of taskd-agents and SDK agents, each told its version and labels the way its
// users tell it (flags, the environment, a label file, Config), fills the fleet view
// and the stats by version with no agent object written by hand (issue 37).
func TestFleetDescribesItself(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for _, uid := range []string{"f1", "f2", "f3", "f4"} {
		s.task(uid, map[string]any{"secret": "a-param-the-log-must-not-hold"}, nil)
	}
	labelFile := filepath.Join(t.TempDir(), "labels")
	os.WriteFile(labelFile, []byte("rack=r1\n"), 0o644)

	// f1 runs until stopped, its labels from flags and a file; f2 takes what is due,
	// its labels from the environment.
	f1 := s.agentCmd("f1", "-agent-version", "2.0.0", "-label", "site=ams1", "-label-file", labelFile, "--", "true")
	if err := f1.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f1.Process.Kill(); f1.Wait() })
	f2 := s.agentCmd("f2", "-once", "--", "true")
	f2.Env = append(f2.Env, "TASKD_LABELS=site=fra2,tier=gold", "TASKD_AGENT_VERSION=2.0.1", "TASKD_HOSTNAME=f2.example")
	if err := f2.Run(); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"f3", "f4"} {
		a, err := agent.New(agent.Config{URL: s.url, Key: s.admin("POST", "/v1/admin/clients/"+uid+"/keys", nil)["client_key"].(string),
			Version: "1.4.0", Labels: map[string]string{"site": "ams1", "role": "sdk"}, Once: true, StartupJitter: -1,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Run(t.Context(), agent.HandlerFunc(func(ctx context.Context, t *agent.Task) agent.Outcome { return agent.Done(nil) })); err != nil {
			t.Fatal(err)
		}
	}

	host, _ := os.Hostname()
	want := map[string]string{
		"f1": fmt.Sprintf("2.0.0 %s map[rack:r1 site:ams1]", host),
		"f2": "2.0.1 f2.example map[site:fra2 tier:gold]",
		"f3": fmt.Sprintf("1.4.0 %s map[role:sdk site:ams1]", host),
		"f4": fmt.Sprintf("1.4.0 %s map[role:sdk site:ams1]", host),
	}
	waitFor(t, "the fleet view shows every agent", func() bool { return fleetMatches(s, want) })
	for uid, a := range s.fleet() {
		if l := a.labels; l["taskd.dev/os"] != runtime.GOOS || l["taskd.dev/arch"] != runtime.GOARCH || l["taskd.dev/sdk-version"] == "" {
			t.Errorf("%s: labels %v, want the SDK's own", uid, l)
		}
	}

	// The operator edits the label file and sends SIGHUP: the next fetch reports it.
	os.WriteFile(labelFile, []byte("# moved\nrack=r2\n"), 0o644)
	f1.Process.Signal(syscall.SIGHUP)
	want["f1"] = fmt.Sprintf("2.0.0 %s map[rack:r2 site:ams1]", host)
	waitFor(t, "the fleet view shows the label file's new rack", func() bool { return fleetMatches(s, want) })

	// f1 may still be running its task when the fleet view shows its new labels: the
	// fetch that reported them is the one that handed it the task.
	wantStats := map[string]string{"2.0.0": "clients 1 dispatched 1 completed 1", "2.0.1": "clients 1 dispatched 1 completed 1",
		"1.4.0": "clients 2 dispatched 2 completed 2"}
	statsMatch := func() bool {
		stats := map[string]string{}
		for _, v := range s.admin("GET", "/v1/admin/stats/agents", nil)["versions"].([]any) {
			v := v.(map[string]any)
			stats[v["version"].(string)] = fmt.Sprintf("clients %v dispatched %v completed %v", v["clients"], v["dispatched"], v["completed"])
		}
		return maps.Equal(stats, wantStats)
	}
	waitFor(t, "stats/agents counts every task by version", statsMatch)

	f1.Process.Signal(syscall.SIGTERM)
	f1.Wait()
	for name, out := range map[string]*bytes.Buffer{"f1": f1.Stderr.(*bytes.Buffer), "f2": f2.Stderr.(*bytes.Buffer)} {
		logs := out.String()
		if n := strings.Count(logs, `msg="task finished"`); n != 1 || !strings.Contains(logs, "exit_code=0") ||
			!strings.Contains(logs, "attempt=1") || strings.Contains(logs, "a-param-the-log-must-not-hold") {
			t.Errorf("%s's log: want one line for its task (exit code, attempt), without its params:\n%s", name, logs)
		}
	}
	if logs := f1.Stderr.(*bytes.Buffer).String(); !strings.Contains(logs, "SIGHUP: labels read again") {
		t.Errorf("f1's log does not say it read its labels again:\n%s", logs)
	}
}

// fleetAgent is an agent as GET /v1/admin/clients shows it.
type fleetAgent struct {
	version, hostname string
	labels            map[string]string
}

// fleet is the agents GET /v1/admin/clients shows, by uid.
func (s *server) fleet() map[string]fleetAgent {
	s.t.Helper()
	out := map[string]fleetAgent{}
	for _, c := range s.admin("GET", "/v1/admin/clients", nil)["clients"].([]any) {
		c := c.(map[string]any)
		a, ok := c["agent"].(map[string]any)
		if !ok {
			continue
		}
		fa := fleetAgent{version: a["version"].(string), hostname: a["hostname"].(string), labels: map[string]string{}}
		for k, v := range a["labels"].(map[string]any) {
			fa.labels[k] = v.(string)
		}
		out[c["uid"].(string)] = fa
	}
	return out
}

// fleetMatches says whether the fleet view shows, for each uid of want, "version
// hostname labels" (the labels less the SDK's own).
func fleetMatches(s *server, want map[string]string) bool {
	got := s.fleet()
	for uid, w := range want {
		a := got[uid]
		mine := map[string]string{}
		for k, v := range a.labels {
			if !strings.HasPrefix(k, "taskd.dev/") {
				mine[k] = v
			}
		}
		if fmt.Sprintf("%s %s %v", a.version, a.hostname, mine) != w {
			return false
		}
	}
	return true
}
