package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/client"
)

// A task's life from the command line: created from a JSON file, shown, listed,
// paused and resumed, its results listed after an agent ran it, deleted.
func TestTasks(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	tmpl := s.template(t)
	start := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	file := filepath.Join(t.TempDir(), "task.json")
	body := fmt.Sprintf(`{"executor": "uid_s1", "template_id": %d, "start_time": %q, "params": {"store": 1}, "priority": 7}`,
		tmpl, start.Format(time.RFC3339))
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}

	// Created from the file: a table of one row, and the server's warning.
	r := s.run(t, "", "tasks", "create", "-kind", "once", "-f", file)
	if r.code != 0 || r.stderr != "taskctl: warning: unknown_uid: uid_s1 has no client key and has never polled: "+
		"nobody takes this task until that user enrolls (or an admin issues a key)\n" {
		t.Fatalf("tasks create: exit %d, stderr %q", r.code, r.stderr)
	}
	rows := table(t, r.stdout)
	if len(rows) != 1 || !strings.HasPrefix(rows[0]["TASK_ID"], "once:") || rows[0]["EXECUTOR"] != "uid_s1" ||
		rows[0]["PRIORITY"] != "7" || rows[0]["STATUS"] != "active" || rows[0]["TEMPLATE"] != strconv.FormatInt(tmpl, 10) ||
		rows[0]["START"] != start.Format(time.RFC3339) || rows[0]["SCHEDULE"] != "once" {
		t.Fatalf("created: %v", rows)
	}
	id := rows[0]["TASK_ID"]

	// Shown: key: value lines, and JSON that decodes into a client.Task.
	show := fields(s.ok(t, "tasks", "show", id))
	if show["task_id"] != id || show["kind"] != "once" || show["executor"] != "uid_s1" || show["priority"] != "7" ||
		show["params"] != `{"store":1}` || show["status"] != "active" || show["version"] == "" {
		t.Errorf("tasks show %s: %v", id, show)
	}
	var task client.Task
	if err := json.Unmarshal([]byte(s.ok(t, "tasks", "show", id, "-o", "json")), &task); err != nil {
		t.Fatal(err)
	}
	var params bytes.Buffer
	json.Compact(&params, task.Params)
	if task.TaskID != id || task.TemplateID != tmpl || !task.StartTime.Equal(start) || params.String() != `{"store":1}` {
		t.Errorf("tasks show -o json: %+v", task)
	}

	// A second task, a rotating one, from stdin and with the global flags before the
	// command; the kind from the file.
	r = s.run(t, fmt.Sprintf(`{"kind": "rotate", "executor": "uid_s2", "template_id": %d, "start_time": %q, "space_minutes": 30, "status": "paused"}`,
		tmpl, start.Add(time.Hour).Format(time.RFC3339)), "-o", "json", "tasks", "create", "-f", "-", "-idempotency-key", "second")
	var rot client.Task
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rot) != nil || rot.Kind != "rotate" || rot.SpaceMinutes != 30 {
		t.Fatalf("tasks create -f -: exit %d, %q %s: %+v", r.code, r.stdout, r.stderr, rot)
	}

	// Listed: both, by kind then id; filtered; as JSON.
	rows = table(t, s.ok(t, "tasks", "list"))
	if len(rows) != 2 || rows[0]["TASK_ID"] != id || rows[1]["TASK_ID"] != rot.TaskID || rows[1]["SCHEDULE"] != "every 30m" {
		t.Errorf("tasks list: %v", rows)
	}
	rows = table(t, s.ok(t, "tasks", "list", "-status", "paused"))
	if len(rows) != 1 || rows[0]["TASK_ID"] != rot.TaskID {
		t.Errorf("tasks list -status paused: %v", rows)
	}
	var tasks []client.Task
	if err := json.Unmarshal([]byte(s.ok(t, "tasks", "list", "-o", "json", "-executor", "uid_s1")), &tasks); err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1 || tasks[0].TaskID != id {
		t.Errorf("tasks list -executor uid_s1 -o json: %+v", tasks)
	}
	r = s.run(t, "", "tasks", "list", "-limit", "1")
	if rows := table(t, r.stdout); r.code != 0 || len(rows) != 1 || !strings.Contains(r.stderr, "-limit 0") {
		t.Errorf("tasks list -limit 1: exit %d, %v, stderr %q", r.code, rows, r.stderr)
	}
	if out := s.ok(t, "tasks", "list", "-kind", "once", "-status", "paused", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("an empty list as JSON: %q", out)
	}

	// Paused and resumed, as tasks show says.
	if rows := table(t, s.ok(t, "tasks", "pause", id)); rows[0]["STATUS"] != "paused" {
		t.Errorf("tasks pause: %v", rows)
	}
	if got := fields(s.ok(t, "tasks", "show", id))["status"]; got != "paused" {
		t.Errorf("after tasks pause: status %q", got)
	}
	version := fields(s.ok(t, "tasks", "show", id))["version"]
	s.ok(t, "tasks", "resume", id, "-if-match", version)
	if got := fields(s.ok(t, "tasks", "show", id))["status"]; got != "active" {
		t.Errorf("after tasks resume: status %q", got)
	}
	r = s.run(t, "", "tasks", "pause", id, "-if-match", version)
	if r.code != 1 || !strings.Contains(r.stderr, "412 precondition_failed") || !strings.Contains(r.stderr, "version") {
		t.Errorf("tasks pause -if-match with a stale version: exit %d, stderr %q", r.code, r.stderr)
	}

	// Its results, once an agent ran it.
	if rows := table(t, s.ok(t, "tasks", "results", id)); len(rows) != 0 {
		t.Errorf("results before the agent ran: %v", rows)
	}
	s.runAgent(t, "s1", map[string]int{"rows": 3})
	rows = table(t, s.ok(t, "tasks", "results", id))
	if len(rows) != 1 || rows[0]["UID"] != "s1" || rows[0]["STATE"] != "done" || rows[0]["RESULT"] != "success" ||
		rows[0]["DETAIL"] != `{"rows":3}` || rows[0]["FINISHED"] == "-" {
		t.Errorf("tasks results: %v", rows)
	}
	var ds []client.Dispatch
	if err := json.Unmarshal([]byte(s.ok(t, "-o", "json", "dispatches", "list", "-uid", "s1")), &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].TaskID != id || ds[0].State != "done" {
		t.Errorf("dispatches list -uid s1: %+v", ds)
	}
	rows = table(t, s.ok(t, "templates", "list"))
	if len(rows) != 1 || rows[0]["ID"] != strconv.FormatInt(tmpl, 10) || rows[0]["NAME"] != "report" {
		t.Errorf("templates list: %v", rows)
	}

	// Deleted.
	if out := s.ok(t, "tasks", "delete", rot.TaskID); out != "deleted "+rot.TaskID+"\n" {
		t.Errorf("tasks delete: %q", out)
	}
	if r := s.run(t, "", "tasks", "show", rot.TaskID); r.code != 1 || !strings.Contains(r.stderr, "404 not_found") {
		t.Errorf("tasks show of a deleted task: exit %d, stderr %q", r.code, r.stderr)
	}
}

// The server's errors exit 1 with its code on stderr; a command line taskctl cannot
// run exits 2 naming what is wrong; the token is never a flag.
func TestErrors(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr []string // what stderr holds
	}{
		{[]string{"tasks", "show", "once:999"}, 1, []string{"taskctl: GET /v1/admin/tasks/once/999: 404 not_found: "}},
		{[]string{"tasks", "pause", "rotate:999"}, 1, []string{"taskctl: PATCH /v1/admin/tasks/rotate/999: 404 not_found: "}},
		{[]string{"rollout", "status", "once:999"}, 1, []string{"404 not_found"}},
		{[]string{"events", "tail", "-type", "nonsense"}, 1, []string{"400 invalid_argument", "type"}},
		{[]string{"tasks", "list", "-bogus"}, 2, []string{"-bogus", "usage: taskctl tasks list"}},
		{[]string{"tasks", "list", "-limit", "many"}, 2, []string{"-limit", "usage: taskctl tasks list"}},
		{[]string{"-o", "yaml", "tasks", "list"}, 2, []string{"-o", "yaml"}},
		{[]string{"tasks", "show"}, 2, []string{"missing TASK_ID"}},
		{[]string{"tasks", "create", "-kind", "once"}, 2, []string{"-f: required"}},
		{[]string{"tasks", "create", "-kind", "weekly", "-f", "-"}, 2, []string{"-kind", "weekly"}},
		{[]string{"events", "tail", "-interval", "0s"}, 2, []string{"-interval"}},
		{[]string{"tasks", "frobnicate"}, 2, []string{"unknown command", "list, show"}},
		{[]string{"-token", "s3cret", "tasks", "list"}, 2, []string{"-token: no such flag", "TASKD_ADMIN_TOKEN"}},
		{[]string{"tasks", "list", "-token=s3cret"}, 2, []string{"-token: no such flag", "-token-file"}},
	} {
		r := s.run(t, "{}", tc.args...)
		if r.code != tc.code {
			t.Errorf("taskctl %s: exit %d, want %d; stderr %q", strings.Join(tc.args, " "), r.code, tc.code, r.stderr)
		}
		for _, want := range tc.stderr {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("taskctl %s: stderr %q, want %q in it", strings.Join(tc.args, " "), r.stderr, want)
			}
		}
		if strings.Contains(r.stderr, "s3cret") {
			t.Errorf("taskctl %s: stderr shows the token given as a flag: %q", strings.Join(tc.args, " "), r.stderr)
		}
	}

	// -h shows a command's flags and exits 0.
	if out := s.ok(t, "tasks", "create", "-h"); !strings.Contains(out, "-idempotency-key") || !strings.Contains(out, "-token-file") {
		t.Errorf("tasks create -h: %q", out)
	}
	if out := s.ok(t, "-h"); !strings.Contains(out, "events tail") || !strings.Contains(out, "TASKD_ADMIN_TOKEN") {
		t.Errorf("taskctl -h: %q", out)
	}

	// Without a token: exit 2 saying where one comes from. With it in a file: fine,
	// and a wrong one is the server's 401.
	cmd := s.command(t, "tasks", "list")
	cmd.Env = []string{"TASKD_URL=" + s.URL}
	if r := runCmd(t, cmd, ""); r.code != 2 || !strings.Contains(r.stderr, "TASKD_ADMIN_TOKEN") {
		t.Errorf("no token: exit %d, stderr %q", r.code, r.stderr)
	}
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte(adminToken+"\n"), 0o600)
	os.WriteFile(bad, []byte("not-the-token"), 0o600)
	cmd = s.command(t, "-url", s.URL, "-token-file", good, "tasks", "list")
	cmd.Env = []string{} // nothing from the environment: the flags say it all
	if r := runCmd(t, cmd, ""); r.code != 0 {
		t.Errorf("-token-file: exit %d, stderr %q", r.code, r.stderr)
	}
	cmd = s.command(t, "tasks", "list", "-token-file", bad)
	if r := runCmd(t, cmd, ""); r.code != 1 || !strings.Contains(r.stderr, "401") || strings.Contains(r.stderr, "not-the-token") {
		t.Errorf("a wrong token: exit %d, stderr %q", r.code, r.stderr)
	}
}
