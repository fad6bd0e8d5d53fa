package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/taskpull/taskd/agent"
)

// runner is the agent's handler: one run of the command per task.
type runner struct {
	command   []string
	timeout   time.Duration
	killGrace time.Duration
	// finalExitCode makes a command's failure final (FailPermanent); 0: none.
	finalExitCode int
	socket        string
	bin           string // the agent's binary, linked as taskd-agent in a directory of its own
	log           *slog.Logger

	mu      sync.Mutex
	running map[string]*commandRun // by log id: whose checkpoints the socket takes
}

// commandRun is a task whose command runs. token, in the command's TASKD_RUN_TOKEN,
// is the run's own: the socket takes a checkpoint for the task only with it, so that
// a command cannot save one for another task of the agent with its log id.
type commandRun struct {
	task  *agent.Task
	token string
}

// work runs the command for t and makes its end the task's outcome.
func (r *runner) work(ctx context.Context, t *agent.Task) agent.Outcome {
	dir, err := os.MkdirTemp("", "taskd-task-")
	if err != nil {
		return agent.Fail(fmt.Errorf("a directory for the run: %w", err))
	}
	defer os.RemoveAll(dir)
	token := rand.Text()
	r.mu.Lock()
	r.running[t.LogID] = &commandRun{task: t, token: token}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.running, t.LogID)
		r.mu.Unlock()
	}()
	started := time.Now()
	res, err := execute(ctx.Done(), execSpec{argv: r.command, stdin: t.Params, env: r.environment(t, token), dir: dir,
		timeout: r.timeout, grace: r.killGrace})
	if err != nil {
		r.log.Error("task not run: the command did not start", "component", "taskd-agent", "task_id", t.TaskID,
			"log_id", t.LogID, "attempt", t.Attempt, "err", err)
		return agent.FailPermanent(err).WithDetail(map[string]any{"error": err.Error()})
	}
	out, result := outcomeOf(res, r.finalExitCode)
	if res.stopped {
		// The agent stops (past its shutdown grace) or lost the task's lease.
		cause := context.Cause(ctx)
		detail := res.detail()
		if cause != nil {
			detail["cause"] = cause.Error()
		}
		out, result = agent.Fail(fmt.Errorf("stopped: %v", cause)).WithDetail(detail), "stopped"
	}
	// One line per task, for the operator: what ran and how it ended, never its
	// params nor its output (they may hold what is not the log's to keep).
	attrs := []any{"component", "taskd-agent", "task_id", t.TaskID, "log_id", t.LogID, "attempt", t.Attempt,
		"result", result, "exit_code", res.exitCode, "duration", time.Since(started).Round(time.Millisecond)}
	if t.Stage != "" {
		attrs = append(attrs, "stage", t.Stage)
	}
	if res.signal != "" {
		attrs = append(attrs, "signal", res.signal)
	}
	if res.timedOut {
		attrs = append(attrs, "timeout", true)
	}
	if res.resultErr != nil {
		attrs = append(attrs, "result_error", res.resultErr.Error())
	}
	r.log.Info("task finished", attrs...)
	return out
}

// outcomeOf is the outcome of a finished run, and its result as the log says it
// (success, failure, final_failure, next_stage): what it wrote to $TASKD_RESULT, else
// its exit. An exit with finalExit (not 0) is a final failure: the server does not
// retry the task (the detail says "final": true).
func outcomeOf(res execResult, finalExit int) (agent.Outcome, string) {
	if f := res.result; f != nil && !res.timedOut {
		var detail any
		if len(f.Detail) > 0 {
			detail = f.Detail
		}
		switch {
		case f.Result == "failure":
			return agent.Fail(errors.New("the command reported a failure")).WithDetail(detail), "failure"
		case f.NextStage != "":
			var sctx any
			if len(f.Context) > 0 {
				sctx = f.Context
			}
			return agent.NextStage(f.NextStage, sctx, time.Duration(f.DelaySeconds*float64(time.Second))).WithDetail(detail), "next_stage"
		}
		return agent.Done(detail), "success"
	}
	if res.succeeded() {
		return agent.Done(res.detail()), "success"
	}
	why := fmt.Errorf("exit code %d", res.exitCode)
	if finalExit != 0 && res.exitCode == finalExit && !res.timedOut && !res.stopped && res.resultErr == nil && res.signal == "" {
		detail := res.detail()
		detail["final"] = true
		return agent.FailPermanent(why).WithDetail(detail), "final_failure"
	}
	switch {
	case res.timedOut:
		why = errors.New("timed out")
	case res.resultErr != nil:
		why = res.resultErr
	case res.signal != "":
		why = fmt.Errorf("ended by signal %s", res.signal)
	}
	return agent.Fail(why).WithDetail(res.detail()), "failure"
}

// environment is the task as the command's environment gives it.
func (r *runner) environment(t *agent.Task, token string) []string {
	env := []string{
		"TASKD_LOG_ID=" + t.LogID,
		"TASKD_TASK_ID=" + t.TaskID,
		"TASKD_KIND=" + t.Kind,
		"TASKD_ATTEMPT=" + strconv.Itoa(t.Attempt),
		"TASKD_DUE_AT=" + t.DueAt.UTC().Format(time.RFC3339),
		"TASKD_TEMPLATE_ID=" + strconv.FormatInt(t.TemplateID, 10),
		"TASKD_STAGE=" + t.Stage,
		"TASKD_AGENT_SOCKET=" + r.socket,
		"TASKD_RUN_TOKEN=" + token,
	}
	if r.bin != "" {
		// `taskd-agent progress` in a command is this agent, installed or not.
		path := filepath.Dir(r.bin)
		if p := os.Getenv("PATH"); p != "" {
			path += string(os.PathListSeparator) + p
		}
		env = append(env, "TASKD_AGENT_BIN="+r.bin, "PATH="+path)
	}
	if len(t.StageContext) > 0 {
		env = append(env, "TASKD_CONTEXT="+string(t.StageContext))
	}
	if len(t.LastCheckpoint) > 0 {
		env = append(env, "TASKD_CHECKPOINT="+string(t.LastCheckpoint))
	}
	lease := ""
	if t.LeaseExpiresAt != nil {
		lease = t.LeaseExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	return append(env, "TASKD_LEASE_EXPIRES_AT="+lease)
}

// checkpoint saves a checkpoint a command sent through the socket, with its run's
// log id and token.
func (r *runner) checkpoint(logID, token string, checkpoint json.RawMessage) error {
	r.mu.Lock()
	run := r.running[logID]
	r.mu.Unlock()
	if run == nil || subtle.ConstantTimeCompare([]byte(token), []byte(run.token)) != 1 {
		// One answer for both: a command learns nothing of other runs.
		return fmt.Errorf("no task %s with this TASKD_RUN_TOKEN runs in this agent", logID)
	}
	return run.task.Checkpoint(checkpoint)
}
