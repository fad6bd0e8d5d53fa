package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/client"
)

// A manual rollout read and moved from the command line, its version guarding the
// moves.
func TestRollout(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := context.Background()
	if _, err := s.c.SetGroupMembers(ctx, "stores", []string{"s1", "s2"}); err != nil {
		t.Fatal(err)
	}
	task, err := s.c.CreateTask(ctx, client.Task{Kind: "once", Executor: "gid_stores", TemplateID: s.template(t),
		StartTime: time.Now().Add(-time.Minute), Params: json.RawMessage(`{}`), DispatchTimes: 2,
		Rollout: &client.Rollout{Phases: []client.Phase{{Count: 1}, {Percent: 100}}, Advance: "manual"}})
	if err != nil {
		t.Fatal(err)
	}

	status := fields(s.ok(t, "rollout", "status", task.TaskID))
	if status["task_id"] != task.TaskID || status["state"] != "running" || status["phase"] != "1 of 2" ||
		status["advance"] != "manual" || status["cap"] != "1" || status["version"] == "" {
		t.Errorf("rollout status: %v", status)
	}
	var st struct {
		client.RolloutState
		Version client.Version `json:"version"`
	}
	if err := json.Unmarshal([]byte(s.ok(t, "rollout", "status", task.TaskID, "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.TaskID != task.TaskID || st.Phase != 1 || st.Phases != 2 || st.Rollout.Advance != "manual" || st.Version != client.Version(status["version"]) {
		t.Errorf("rollout status -o json: %+v", st)
	}

	advanced := fields(s.ok(t, "rollout", "advance", task.TaskID, "-if-match", string(st.Version)))
	if advanced["phase"] != "2 of 2" || advanced["state"] != "running" || advanced["cap"] != "2" {
		t.Errorf("rollout advance: %v", advanced)
	}
	if !strings.Contains(advanced["history"], "by operator") {
		t.Errorf("rollout advance: history %q, want the admin's move by its token's name", advanced["history"])
	}
	r := s.run(t, "", "rollout", "pause", task.TaskID, "-if-match", string(st.Version))
	if r.code != 1 || !strings.Contains(r.stderr, "412 precondition_failed") || !strings.Contains(r.stderr, "at version "+advanced["version"]) {
		t.Errorf("rollout pause with the version before the advance: exit %d, stderr %q (now at %s)", r.code, r.stderr, advanced["version"])
	}
	if got, err := s.c.Rollout(ctx, task.TaskID); err != nil || got.Phase != 2 || got.State != "running" {
		t.Errorf("the rollout after the advance: %+v, %v", got, err)
	}
}
