package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/agent/agenttest"
)

// A command cannot save a checkpoint for another run: the socket wants the run's own
// token with its log id.
func TestProgressForAnotherRunRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logIDFile, release := filepath.Join(dir, "log-id"), filepath.Join(dir, "release")
	// The victim saves nothing itself: it shows its log id and waits.
	r := testRunner(t, `echo "$TASKD_LOG_ID" > `+logIDFile+`.tmp; mv `+logIDFile+`.tmp `+logIDFile+`
i=0; while [ ! -e `+release+` ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done`)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done := make(chan agenttest.Completion, 1)
	go func() {
		c, err := agenttest.Do(ctx, agent.HandlerFunc(r.work), agenttest.Task{})
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	var victim string
	for victim == "" {
		b, _ := os.ReadFile(logIDFile)
		victim = strings.TrimSpace(string(b))
		if victim == "" {
			select {
			case <-ctx.Done():
				t.Fatal("the victim's command did not start")
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	// Another command of the agent: its own token (or none), the victim's log id.
	for _, token := range []string{"", "another-runs-token"} {
		env := map[string]string{"TASKD_AGENT_SOCKET": r.socket, "TASKD_LOG_ID": victim, "TASKD_RUN_TOKEN": token}
		err := sendProgress(`{"checkpoint": {"forged": true}}`, func(k string) string { return env[k] })
		if err == nil {
			t.Errorf("a checkpoint for run %s with token %q was taken", victim, token)
		}
	}
	os.WriteFile(release, nil, 0o600)
	c := <-done
	for _, cp := range c.Checkpoints {
		if strings.Contains(string(cp), "forged") {
			t.Errorf("the victim's task got a forged checkpoint: %s", cp)
		}
	}
}
