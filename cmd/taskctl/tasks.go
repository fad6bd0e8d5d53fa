package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/taskpull/taskd/client"
)

// defaultLimit is how many dispatches a list shows unless -limit says otherwise:
// a screenful, the newest.
const defaultLimit = 50

// tasksList is "tasks list": the tasks, by kind then id, as the server lists them
// (all of them unless -limit: the oldest come first).
func tasksList(ctx context.Context, e *env, args []string) error {
	var f client.Filter
	fs := e.flags()
	fs.StringVar(&f.Executor, "executor", "", "only the tasks of this `executor` (uid_<id> or gid_<id>)")
	fs.StringVar(&f.Kind, "kind", "", "only the tasks of this `kind`: once or rotate")
	fs.StringVar(&f.Status, "status", "", "only the tasks in this `status`: active or paused")
	fs.Int64Var(&f.TemplateID, "template", 0, "only the tasks of this template `id`")
	limit := fs.Int("limit", 0, "show at most `n` tasks (0: all)")
	_, c, err := e.start(fs, args, 0)
	if err != nil {
		return err
	}
	f.PageSize = pageSize(*limit)
	tasks, more, err := collect(c.Tasks(ctx, f), *limit)
	if err != nil {
		return err
	}
	if err := printTasks(e, tasks); err != nil {
		return err
	}
	noteMore(e, more, *limit)
	return nil
}

// printTasks writes tasks as a list, a row each.
func printTasks(e *env, tasks []client.Task) error {
	return printList(e, tasks, []string{"TASK_ID", "EXECUTOR", "TEMPLATE", "STATUS", "PRIORITY", "QUOTA", "START", "SCHEDULE", "OUTCOME"},
		func(t client.Task) []string {
			return []string{t.TaskID, t.Executor, strconv.FormatInt(t.TemplateID, 10), t.Status, strconv.Itoa(t.Priority),
				quota(t.DispatchTimes), when(t.StartTime), schedule(t), t.Outcome}
		})
}

// quota is a task's dispatch_times as a table shows it.
func quota(n int) string {
	if n < 0 {
		return "unlimited"
	}
	return strconv.Itoa(n)
}

// schedule is when a task recurs: "once", "every 30m" or its cron and time zone.
func schedule(t client.Task) string {
	switch {
	case t.Kind == "once":
		return "once"
	case t.Cron != "" && t.TimeZone != "":
		return t.Cron + " (" + t.TimeZone + ")"
	case t.Cron != "":
		return t.Cron
	case t.SpaceMinutes > 0:
		return fmt.Sprintf("every %dm", t.SpaceMinutes)
	}
	return ""
}

// printTask writes one task: as a JSON object, or its fields as "key: value" lines,
// the ones an operator looks for first.
func printTask(e *env, t client.Task) error {
	if e.output == "json" {
		return printJSON(e.stdout, t)
	}
	return printFields(e.stdout, t, "task_id", "kind", "executor", "template_id", "status", "outcome", "priority",
		"dispatch_times", "mode", "start_time", "end_time", "space_minutes", "cron", "time_zone", "misfire", "params")
}

// tasksShow is "tasks show TASK_ID".
func tasksShow(ctx context.Context, e *env, args []string) error {
	pos, c, err := e.start(e.flags(), args, 1)
	if err != nil {
		return err
	}
	t, err := c.Task(ctx, pos[0])
	if err != nil {
		return err
	}
	return printTask(e, t)
}

// tasksCreate is "tasks create -kind K -f FILE": the file holds the task's fields as
// the API takes them (what "tasks show -o json" prints will do: the fields the
// server sets are not sent).
func tasksCreate(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	kind := fs.String("kind", "", "the task's `kind`: once or rotate (default: the file's \"kind\")")
	file := fs.String("f", "", "the JSON `file` of the task's fields, as the API takes them (- for stdin)")
	key := fs.String("idempotency-key", "", "the create's Idempotency-Key: the same `key` and file again within 24 hours create nothing more (default: a random one)")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if *file == "" {
		return e.usageError(errors.New("-f: required: the task's JSON file, or - for stdin"))
	}
	t, err := readTask(e, *file)
	if err != nil {
		return err
	}
	switch {
	case *kind != "" && t.Kind != "" && t.Kind != *kind:
		return e.usageError(fmt.Errorf("-kind %s: the file says %q", *kind, t.Kind))
	case *kind != "":
		t.Kind = *kind
	case t.Kind == "":
		return e.usageError(errors.New("-kind: required (once or rotate), unless the file has \"kind\""))
	}
	if err := oneOf("kind", t.Kind, "once", "rotate"); err != nil {
		return e.usageError(err)
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	var opts []client.Option
	if *key != "" {
		opts = append(opts, client.IdempotencyKey(*key))
	}
	created, err := c.CreateTask(ctx, t, opts...)
	if err != nil {
		return err
	}
	if e.output == "json" {
		return printJSON(e.stdout, created)
	}
	for _, w := range created.Warnings {
		fmt.Fprintf(e.stderr, "taskctl: warning: %s: %s\n", w.Code, w.Message)
	}
	return printTasks(e, []client.Task{created})
}

// readTask reads a task's fields from the JSON file path ("-": stdin). A field the
// API does not know is an error, not ignored: it is likely a typo.
func readTask(e *env, path string) (client.Task, error) {
	var r io.Reader = e.stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return client.Task{}, err
		}
		defer f.Close()
		r = f
	} else {
		path = "stdin"
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return client.Task{}, fmt.Errorf("%s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var t client.Task
	if err := dec.Decode(&t); err != nil {
		return client.Task{}, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ifMatch defines -if-match on fs; its options are the write's options.
func ifMatch(fs *flag.FlagSet) func() []client.Option {
	var v string
	fs.StringVar(&v, "if-match", "", "make the write conditional: only if the record is still at this `version` (exit 1 with precondition_failed if not)")
	return func() []client.Option {
		if v == "" {
			return nil
		}
		return []client.Option{client.IfMatch(client.Version(v))}
	}
}

// tasksPause is "tasks pause TASK_ID".
func tasksPause(ctx context.Context, e *env, args []string) error {
	return setStatus(ctx, e, args, "paused")
}

// tasksResume is "tasks resume TASK_ID".
func tasksResume(ctx context.Context, e *env, args []string) error {
	return setStatus(ctx, e, args, "active")
}

// setStatus sets the status of the task args name, and prints it.
func setStatus(ctx context.Context, e *env, args []string, status string) error {
	fs := e.flags()
	opts := ifMatch(fs)
	pos, c, err := e.start(fs, args, 1)
	if err != nil {
		return err
	}
	t, err := c.UpdateTask(ctx, pos[0], map[string]any{"status": status}, opts()...)
	if err != nil {
		return err
	}
	if e.output == "json" {
		return printJSON(e.stdout, t)
	}
	return printTasks(e, []client.Task{t})
}

// tasksDelete is "tasks delete TASK_ID".
func tasksDelete(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	opts := ifMatch(fs)
	pos, c, err := e.start(fs, args, 1)
	if err != nil {
		return err
	}
	if err := c.DeleteTask(ctx, pos[0], opts()...); err != nil {
		return err
	}
	if e.output == "table" {
		fmt.Fprintln(e.stdout, "deleted", pos[0])
	}
	return nil
}

// tasksResults is "tasks results TASK_ID": the task's dispatches that ended, the
// first to end first; with -wait, once the task has no more to give (a rotating
// task's never comes: until SIGINT), its dispatches' final outcomes.
func tasksResults(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	wait := fs.Bool("wait", false, "wait until the task has no more results to give, then list the final ones")
	pos, c, err := e.start(fs, args, 1)
	if err != nil {
		return err
	}
	var ds []client.Dispatch
	if *wait {
		ds, err = c.Wait(ctx, pos[0])
	} else {
		ds, err = finished(ctx, c, pos[0])
	}
	if err != nil {
		return err
	}
	return printDispatches(e, ds)
}

// finished is a task's dispatches that ended (done, failed, retry_wait, expired,
// dead, cancelled), oldest first.
func finished(ctx context.Context, c *client.Client, taskID string) ([]client.Dispatch, error) {
	all, err := client.Collect(c.Dispatches(ctx, client.Filter{TaskID: taskID}))
	if err != nil {
		return nil, err
	}
	all = slices.DeleteFunc(all, func(d client.Dispatch) bool {
		return d.State == "open" || d.State == "staged" || d.State == "unconfirmed"
	})
	slices.Reverse(all) // the server lists the newest first
	return all, nil
}

// templatesList is "templates list".
func templatesList(ctx context.Context, e *env, args []string) error {
	_, c, err := e.start(e.flags(), args, 0)
	if err != nil {
		return err
	}
	ts, err := c.Templates(ctx)
	if err != nil {
		return err
	}
	return printList(e, ts, []string{"ID", "NAME", "LEASE_SECONDS", "MAX_ATTEMPTS", "STAGES", "CREATED"},
		func(t client.Template) []string {
			return []string{strconv.FormatInt(t.ID, 10), t.Name, orDefault(t.LeaseSeconds), orDefault(t.MaxAttempts),
				strings.Join(t.Stages, ","), when(t.CreatedAt)}
		})
}

// orDefault is a template's setting as a table shows it: "default" for unset.
func orDefault(n int) string {
	if n == 0 {
		return "default"
	}
	return strconv.Itoa(n)
}
