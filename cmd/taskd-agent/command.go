package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A task's command: started in a process group of its own, with the params on stdin
// and the task in its environment; stopped, when its time is up or the agent stops, by
// SIGTERM to the whole group, then SIGKILL after a grace.

// tailBytes is how much of the end of a command's stdout and stderr a result keeps.
const tailBytes = 4 << 10

// execSpec is one run of the command.
type execSpec struct {
	argv    []string
	stdin   []byte
	env     []string      // added to the agent's own, less its credentials (commandEnviron)
	dir     string        // where TASKD_RESULT is written (a directory of the run's own)
	timeout time.Duration // 0: none
	grace   time.Duration // from SIGTERM to SIGKILL
}

// execResult is how a run ended.
type execResult struct {
	exitCode   int    // -1 when a signal ended it
	signal     string // the signal that ended it, if one did
	stdoutTail string
	stderrTail string
	timedOut   bool // ended by the timeout
	stopped    bool // ended because the agent stopped
	// result is what the command wrote to $TASKD_RESULT (nil: nothing), and
	// resultErr why it could not be read.
	result    *resultFile
	resultErr error
}

// resultFile is what a command may write to $TASKD_RESULT.
type resultFile struct {
	Result       string          `json:"result"`
	Detail       json.RawMessage `json:"detail"`
	NextStage    string          `json:"next_stage"`
	Context      json.RawMessage `json:"context"`
	DelaySeconds float64         `json:"delay_seconds"`
}

// tail keeps the last tailBytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.ToValidUTF8(t.buf, []byte("\uFFFD")))
}

// agentOnly are the agent's own variables, which a command does not inherit: its
// credentials (a command that prints its environment would put the fleet's enroll
// secret into its task's detail), and the task variables of a run of an agent that
// runs this one, which the run's own replace.
var agentOnly = map[string]bool{
	"TASKD_KEY": true, "TASKD_KEY_FILE": true, "TASKD_ENROLL_SECRET": true, "TASKD_ENROLL_SECRET_FILE": true,
	"TASKD_LOG_ID": true, "TASKD_TASK_ID": true, "TASKD_KIND": true, "TASKD_ATTEMPT": true, "TASKD_DUE_AT": true,
	"TASKD_TEMPLATE_ID": true, "TASKD_STAGE": true, "TASKD_CONTEXT": true, "TASKD_CHECKPOINT": true,
	"TASKD_LEASE_EXPIRES_AT": true, "TASKD_RESULT": true, "TASKD_AGENT_SOCKET": true, "TASKD_RUN_TOKEN": true,
	"TASKD_AGENT_BIN": true,
}

// commandEnviron is the agent's environment as its commands inherit it: without
// agentOnly's variables.
func commandEnviron(environ []string) []string {
	var env []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !agentOnly[name] {
			env = append(env, kv)
		}
	}
	return env
}

// execute runs spec to its end. It returns early with an error only when the command
// could not be started. stop ends the run as the agent's shutdown does (SIGTERM, the
// grace, SIGKILL); so does the timeout.
func execute(stop <-chan struct{}, spec execSpec) (execResult, error) {
	var out, errOut tail
	resultPath := filepath.Join(spec.dir, "result.json")
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Stdin = bytes.NewReader(spec.stdin)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Env = append(append(commandEnviron(os.Environ()), spec.env...), "TASKD_RESULT="+resultPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A process the command left behind may hold its stdout open: the run ends with
	// the command, and its output is what came until then.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return execResult{}, fmt.Errorf("start %s: %w", spec.argv[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timeout <-chan time.Time
	if spec.timeout > 0 {
		t := time.NewTimer(spec.timeout)
		defer t.Stop()
		timeout = t.C
	}
	var res execResult
	var err error
	select {
	case err = <-done:
	case <-timeout:
		res.timedOut = true
		err = terminate(cmd.Process.Pid, spec.grace, done)
	case <-stop:
		res.stopped = true
		err = terminate(cmd.Process.Pid, spec.grace, done)
	}
	res.exitCode = cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.signal = ws.Signal().String()
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && !errors.Is(err, exec.ErrWaitDelay) {
		return res, err
	}
	res.stdoutTail, res.stderrTail = out.String(), errOut.String()
	res.result, res.resultErr = readResult(resultPath)
	return res, nil
}

// terminate sends SIGTERM to the process group pgid, and SIGKILL after grace if its
// leader has not ended by then; it returns the leader's Wait error.
func terminate(pgid int, grace time.Duration, done <-chan error) error {
	syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		syscall.Kill(-pgid, syscall.SIGKILL) // what the leader left behind
		return err
	case <-t.C:
		syscall.Kill(-pgid, syscall.SIGKILL)
		return <-done
	}
}

// maxResultBytes bounds what is read of $TASKD_RESULT: the server takes a request
// body of 64 KiB at most, so a larger result could not be sent anyway.
const maxResultBytes = 64 << 10

// resultReadTimeout bounds reading $TASKD_RESULT (a regular file of at most
// maxResultBytes: only a stuck file system takes longer).
const resultReadTimeout = 10 * time.Second

// readResult reads $TASKD_RESULT: nil when the command wrote nothing there. The
// command owns the path, so nothing in it is trusted: a link is not followed (one to
// /dev/zero would grow the agent without bound), the open does not block (a FIFO
// would hang the task for ever), only a regular file is read, and at most
// maxResultBytes of it, within resultReadTimeout.
func readResult(path string) (*resultFile, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case errors.Is(err, syscall.ELOOP):
		return nil, errors.New("$TASKD_RESULT: a symbolic link; the result must be a regular file")
	case err != nil:
		return nil, fmt.Errorf("$TASKD_RESULT: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("$TASKD_RESULT: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("$TASKD_RESULT: a %s; the result must be a regular file", fileKind(fi.Mode()))
	}
	if fi.Size() > maxResultBytes {
		return nil, fmt.Errorf("$TASKD_RESULT: %d bytes, over the limit of %d", fi.Size(), maxResultBytes)
	}
	type read struct {
		b   []byte
		err error
	}
	got := make(chan read, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(f, maxResultBytes+1))
		got <- read{b, err}
	}()
	timer := time.NewTimer(resultReadTimeout)
	defer timer.Stop()
	var b []byte
	select {
	case r := <-got:
		b, err = r.b, r.err
	case <-timer.C:
		return nil, fmt.Errorf("$TASKD_RESULT: not read within %s", resultReadTimeout)
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("$TASKD_RESULT: %w", err)
	case len(b) > maxResultBytes: // it grew after the stat
		return nil, fmt.Errorf("$TASKD_RESULT: over the limit of %d bytes", maxResultBytes)
	case len(bytes.TrimSpace(b)) == 0:
		return nil, nil
	}
	var r resultFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("$TASKD_RESULT: %w", err)
	}
	switch {
	case r.Result != "success" && r.Result != "failure":
		return nil, fmt.Errorf(`$TASKD_RESULT: "result" must be "success" or "failure", got %q`, r.Result)
	case r.NextStage != "" && r.Result != "success":
		return nil, fmt.Errorf(`$TASKD_RESULT: "next_stage" goes with "result": "success"`)
	case r.DelaySeconds < 0:
		return nil, fmt.Errorf(`$TASKD_RESULT: "delay_seconds" must not be negative`)
	}
	return &r, nil
}

// fileKind names a mode that is not a regular file's.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m.IsDir():
		return "directory"
	case m&os.ModeDevice != 0:
		return "device"
	case m&os.ModeSocket != 0:
		return "socket"
	}
	return "file that is not a regular file"
}

// detail is the complete's detail of a run without a result file (or with one that
// names none): its exit, and the ends of its output.
func (r execResult) detail() map[string]any {
	d := map[string]any{"exit_code": r.exitCode, "stdout_tail": r.stdoutTail, "stderr_tail": r.stderrTail}
	if r.signal != "" {
		d["signal"] = r.signal
	}
	if r.timedOut {
		d["timeout"] = true
	}
	if r.stopped {
		d["stopped"] = true
	}
	if r.resultErr != nil {
		d["result_error"] = r.resultErr.Error()
	}
	return d
}

// succeeded says whether a run without a readable result file succeeded: it exited 0,
// and neither the timeout nor the agent's stop ended it.
func (r execResult) succeeded() bool {
	return r.exitCode == 0 && !r.timedOut && !r.stopped && r.resultErr == nil
}
