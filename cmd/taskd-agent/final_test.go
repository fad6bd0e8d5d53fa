package main

import (
	"bytes"
	"strings"
	"testing"
)

// -final-exit-code: a command exiting with that code completes as a final failure
// ("retry": false): its task is dead at once with attempts left, the detail says
// final, and the command ran once. Another failing exit waits for its retry as before.
func TestFinalExitCode(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.admin("PUT", "/v1/admin/clients/8", map[string]any{"max_in_flight": 2})
	final := s.task("8", map[string]any{"exit": 3}, map[string]any{"max_attempts": 3, "retry_backoff_seconds": 0})
	other := s.task("8", map[string]any{"exit": 4}, map[string]any{"max_attempts": 3, "retry_backoff_seconds": 3600})
	script := `read params; echo "$TASKD_TASK_ID" >> "$SEEN"
exit $(printf '%s' "$params" | sed 's/.*"exit":\([0-9]*\).*/\1/')`
	seen := t.TempDir() + "/seen"
	cmd := s.agentCmd("8", "-once", "-concurrency", "2", "-final-exit-code", "3", "--", "/bin/sh", "-c", script)
	cmd.Env = append(cmd.Env, "SEEN="+seen)
	if err := cmd.Run(); err != nil {
		t.Fatalf("taskd-agent run -once: %v", err)
	}
	runs := map[string]int{}
	for _, d := range s.dispatches("8") {
		id := d["task_id"].(string)
		runs[id]++
		detail, _ := d["detail"].(map[string]any)
		switch id {
		case final:
			if d["state"] != "dead" || d["final"] != true || d["attempt"] != float64(1) || detail["final"] != true ||
				detail["exit_code"] != float64(3) {
				t.Errorf("the task that exited 3: %v", d)
			}
		case other:
			if d["state"] != "retry_wait" || d["final"] != nil || detail["final"] != nil {
				t.Errorf("the task that exited 4: %v", d)
			}
		}
	}
	if runs[final] != 1 || runs[other] != 1 {
		t.Errorf("dispatches: %v, want one of each", runs)
	}
}

// -final-exit-code takes 1..255, or 0 for none, from the flag or TASKD_FINAL_EXIT_CODE
// (the flag wins); anything else stops the agent at start, naming both.
func TestFinalExitCodeSetting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		env  map[string]string
		want int
	}{
		{nil, nil, 0},
		{[]string{"-final-exit-code", "3"}, nil, 3},
		{nil, map[string]string{"TASKD_FINAL_EXIT_CODE": "75"}, 75},
		{[]string{"-final-exit-code", "0"}, map[string]string{"TASKD_FINAL_EXIT_CODE": "75"}, 0},
		{[]string{"-final-exit-code", "9"}, map[string]string{"TASKD_FINAL_EXIT_CODE": "x"}, 9},
	} {
		cfg, err := parseRun(append(append([]string{"-key-file", "k"}, c.args...), "--", "true"), envOf(c.env), &bytes.Buffer{})
		if err != nil || cfg.finalExitCode != c.want {
			t.Errorf("%v %v: %d %v, want %d", c.args, c.env, cfg.finalExitCode, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"-final-exit-code", "256"}, nil},
		{[]string{"-final-exit-code", "-1"}, nil},
		{nil, map[string]string{"TASKD_FINAL_EXIT_CODE": "three"}},
		{nil, map[string]string{"TASKD_FINAL_EXIT_CODE": "300"}},
	} {
		var stderr bytes.Buffer
		args := append(append([]string{"run", "-key", "k", "-url", "http://127.0.0.1:1"}, c.args...), "--", "true")
		err := run(t.Context(), args, envOf(c.env), &stderr, &stderr)
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "-final-exit-code (TASKD_FINAL_EXIT_CODE)") {
			t.Errorf("%v %v: %v (exit %d), want exit 2 naming -final-exit-code", c.args, c.env, err, exitCode(err))
		}
	}
}
