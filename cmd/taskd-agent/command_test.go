package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func sh(t *testing.T, script string, timeout time.Duration, stop <-chan struct{}) execResult {
	t.Helper()
	res, err := execute(stop, execSpec{argv: []string{"/bin/sh", "-c", script}, stdin: []byte(`{"n": 1}`),
		env: []string{"TASKD_LOG_ID=log-1"}, dir: t.TempDir(), timeout: timeout, grace: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestCommandExitAndOutput(t *testing.T) {
	t.Parallel()
	res := sh(t, `cat; echo " $TASKD_LOG_ID"; echo oops >&2; exit 0`, 0, nil)
	if !res.succeeded() || res.stdoutTail != "{\"n\": 1} log-1\n" || res.stderrTail != "oops\n" {
		t.Fatalf("%+v", res)
	}
	res = sh(t, `head -c 10000 /dev/zero | tr '\0' a; echo END; exit 3`, 0, nil)
	if res.succeeded() || res.exitCode != 3 || len(res.stdoutTail) != tailBytes || !strings.HasSuffix(res.stdoutTail, "aEND\n") {
		t.Fatalf("exit 3 with 10 KB of output: code %d, tail %d bytes", res.exitCode, len(res.stdoutTail))
	}
	if d := res.detail(); d["exit_code"] != 3 || d["timeout"] != nil {
		t.Fatalf("detail %v", d)
	}
}

// pidAlive reports whether a process of that id still runs (and is not a zombie of
// ours: the test's own children are reaped by execute).
func pidAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// On its timeout a command's whole process group is stopped: SIGTERM, then SIGKILL for
// what ignores it, the background children too.
func TestCommandTimeoutKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	res := sh(t, `(trap '' TERM; sleep 300) & echo $! > `+pidFile+`; trap '' TERM; sleep 300`, 300*time.Millisecond, nil)
	if !res.timedOut || res.succeeded() || res.signal != "killed" || res.detail()["timeout"] != true {
		t.Fatalf("a command past its timeout that ignores SIGTERM: %+v", res)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	for deadline := time.Now().Add(5 * time.Second); pidAlive(child); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command's background child %d outlived its timeout", child)
		}
	}
}

// The agent's stop sends SIGTERM; a command that handles it ends as it chooses.
func TestCommandStoppedBySIGTERM(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	time.AfterFunc(200*time.Millisecond, func() { close(stop) })
	res := sh(t, `trap 'echo cleaning up; exit 7' TERM; while :; do sleep 0.05; done`, 0, stop)
	if !res.stopped || res.exitCode != 7 || !strings.Contains(res.stdoutTail, "cleaning up") || res.succeeded() {
		t.Fatalf("%+v", res)
	}
}

func TestCommandResultFile(t *testing.T) {
	t.Parallel()
	res := sh(t, `echo '{"result": "success", "detail": {"rows": 3}, "next_stage": "verify", "context": {"a": 1}, "delay_seconds": 2}' > "$TASKD_RESULT"; exit 1`, 0, nil)
	if res.result == nil || res.result.Result != "success" || string(res.result.Detail) != `{"rows": 3}` || res.result.NextStage != "verify" || res.result.DelaySeconds != 2 {
		t.Fatalf("%+v %v", res.result, res.resultErr)
	}
	res = sh(t, `echo '{"result": "maybe"}' > "$TASKD_RESULT"`, 0, nil)
	if res.result != nil || res.resultErr == nil || res.succeeded() || res.detail()["result_error"] == nil {
		t.Fatalf("a result file naming no result: %+v", res)
	}
}
