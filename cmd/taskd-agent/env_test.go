package main

import (
	"strings"
	"testing"
)

// The agent's credentials, given to it in its environment, do not reach the command;
// the task's variables do.
func TestCommandEnvironmentHoldsNoAgentCredentials(t *testing.T) {
	// Not parallel: it sets the process's environment, which the command inherits.
	secrets := map[string]string{
		"TASKD_KEY":                "key-that-must-not-leak",
		"TASKD_ENROLL_SECRET":      "enroll-secret-that-must-not-leak",
		"TASKD_KEY_FILE":           "/key/file/that/must/not/leak",
		"TASKD_ENROLL_SECRET_FILE": "/secret/file/that/must/not/leak",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	res := sh(t, `env`, 0, nil)
	for k, v := range secrets {
		if strings.Contains(res.stdoutTail, v) || strings.Contains(res.stdoutTail, k+"=") {
			t.Errorf("the command's environment holds the agent's %s", k)
		}
	}
	if !strings.Contains(res.stdoutTail, "TASKD_LOG_ID=log-1\n") || !strings.Contains(res.stdoutTail, "TASKD_RESULT=") {
		t.Errorf("the command's environment lacks the task's variables:\n%s", res.stdoutTail)
	}
}
