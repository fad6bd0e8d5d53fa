// Command taskctl is a command-line client of taskd's admin API, for operators who
// script: tasks, rollouts, events, templates and dispatches, as aligned tables for
// people (-o table, the default) or JSON for scripts (-o json).
//
//	taskctl tasks list -status paused
//	taskctl tasks create -kind once -f task.json
//	taskctl -o json tasks show once:12 | jq .version
//	taskctl events tail -task once:12 -follow
//
// It is built on the Go client (package client): the server's errors are printed as
// "taskctl: METHOD /path: status code: message" and exit 1; a command line it cannot
// run exits 2. The admin token comes from the environment (TASKD_ADMIN_TOKEN) or a
// file (-token-file), never from a flag: any user of the machine can read a
// process's flags (ps).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/taskpull/taskd/client"
	"github.com/taskpull/taskd/internal/secretfile"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	os.Exit(report(err, os.Stderr))
}

// command is one subcommand: its two-word name, what it takes, and what runs it.
type command struct {
	name     string // "tasks list"
	synopsis string // its arguments, after the name
	summary  string
	// run parses args (the command line after the name) and does the work.
	run func(ctx context.Context, e *env, args []string) error
}

// commands is the command table, in the order the usage lists them.
func commands() []command {
	return []command{
		{"tasks list", "[-executor E] [-kind K] [-status S] [-template N] [-limit N]", "list the tasks, by kind then id", tasksList},
		{"tasks show", "TASK_ID", "show a task (e.g. once:12)", tasksShow},
		{"tasks create", "-kind once|rotate -f FILE [-idempotency-key K]", "create a task from a JSON file of its fields (-f - for stdin)", tasksCreate},
		{"tasks pause", "TASK_ID [-if-match V]", "pause a task", tasksPause},
		{"tasks resume", "TASK_ID [-if-match V]", "resume a paused task", tasksResume},
		{"tasks delete", "TASK_ID [-if-match V]", "delete a task (its open dispatches are cancelled)", tasksDelete},
		{"tasks results", "TASK_ID [-wait]", "list a task's finished dispatches; -wait: wait for its final outcomes", tasksResults},
		{"rollout status", "TASK_ID", "show where a task's rollout stands", rolloutStatus},
		{"rollout advance", "TASK_ID [-if-match V]", "open the rollout's next phase", rolloutMove("advance")},
		{"rollout pause", "TASK_ID [-if-match V]", "pause the rollout", rolloutMove("pause")},
		{"rollout resume", "TASK_ID [-if-match V]", "resume the rollout", rolloutMove("resume")},
		{"rollout abort", "TASK_ID [-if-match V]", "abort the rollout", rolloutMove("abort")},
		{"events tail", "[-task T] [-uid U] [-type X] [-n N] [-follow] [-interval D]", "print the newest events, oldest first; -follow: then new ones as they come", eventsTail},
		{"dispatches list", "[-task T] [-uid U] [-state S] [-limit N]", "list dispatch records, newest first", dispatchesList},
		{"templates list", "", "list the templates", templatesList},
	}
}

// env is what a command runs with: the process's streams and environment, and the
// global settings.
type env struct {
	getenv         func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer

	url, tokenFile, output string
	cmd                    command // the command running
}

// run is the whole program: main only gives it the process's arguments, environment
// and streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	e := newEnv(getenv)
	e.stdin, e.stdout, e.stderr = stdin, stdout, stderr
	fs := flag.NewFlagSet("taskctl", flag.ContinueOnError)
	e.globalFlags(fs)
	rest, err := parseFlags(fs, args, true)
	switch {
	case errors.Is(err, flag.ErrHelp):
		e.usage(stdout)
		return err
	case err != nil:
		return usageError{err, "taskctl [global flags] COMMAND [flags] (taskctl -h lists the commands)"}
	case len(rest) == 0:
		e.usage(stderr)
		return usageError{errors.New("a command is required"), ""}
	}
	name := rest[0]
	if len(rest) > 1 {
		name += " " + rest[1]
	}
	var verbs []string // of the area rest[0] names
	for _, c := range commands() {
		if c.name == name {
			e.cmd = c
			return c.run(ctx, e, rest[2:])
		}
		if area, verb, _ := strings.Cut(c.name, " "); area == rest[0] {
			verbs = append(verbs, verb)
		}
	}
	if len(verbs) > 0 && len(rest) > 1 && slices.Contains([]string{"-h", "-help", "--help"}, rest[1]) {
		e.usage(stdout)
		return flag.ErrHelp
	}
	if len(verbs) > 0 {
		what := fmt.Sprintf("unknown command %q", name)
		if len(rest) == 1 {
			what = rest[0] + ": a command is required"
		}
		return usageError{fmt.Errorf("%s: %s takes %s", what, rest[0], strings.Join(verbs, ", ")),
			"taskctl " + rest[0] + " " + strings.Join(verbs, "|") + " ..."}
	}
	return usageError{fmt.Errorf("unknown command %q", name), "taskctl [global flags] COMMAND [flags] (taskctl -h lists the commands)"}
}

// newEnv is an env with the global settings' defaults: the environment's, else
// the built-in ones.
func newEnv(getenv func(string) string) *env {
	e := &env{getenv: getenv, url: getenv("TASKD_URL"), tokenFile: getenv("TASKD_ADMIN_TOKEN_FILE"), output: "table"}
	if e.url == "" {
		e.url = "http://localhost:8080"
	}
	return e
}

// globalFlags defines the flags every command takes on fs, before the command or
// among its own flags, defaulting to their values so far.
func (e *env) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&e.url, "url", e.url, "the server's base `URL` [TASKD_URL]")
	fs.StringVar(&e.tokenFile, "token-file", e.tokenFile, "a `file` holding the admin token [TASKD_ADMIN_TOKEN_FILE]; "+
		"else the token is TASKD_ADMIN_TOKEN's (no flag takes the token itself: other users see flags in ps)")
	fs.StringVar(&e.output, "o", e.output, "output `format`: table (aligned columns) or json (a list as one array; events tail one object a line)")
}

// usage prints the program's usage: its commands and global flags.
func (e *env) usage(w io.Writer) {
	fmt.Fprint(w, "Usage: taskctl [global flags] COMMAND [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-16s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\n'taskctl COMMAND -h' shows a command's flags.\n\nGlobal flags (before the command or among its flags):\n")
	fs := flag.NewFlagSet("taskctl", flag.ContinueOnError)
	fs.SetOutput(w)
	newEnv(e.getenv).globalFlags(fs)
	fs.PrintDefaults()
	fmt.Fprint(w, "\nThe admin token is read from TASKD_ADMIN_TOKEN, or from -token-file: never from a flag,\n"+
		"since any user of the machine can read a process's command line.\n")
}

// flags is a flag set for the running command, holding the global flags too.
func (e *env) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("taskctl "+e.cmd.name, flag.ContinueOnError)
	e.globalFlags(fs)
	return fs
}

// parse reads the running command's flags from args, before and after its
// positional arguments, and answers exactly nargs of those. -h prints the
// command's help.
func (e *env) parse(fs *flag.FlagSet, args []string, nargs int) ([]string, error) {
	pos, err := parseFlags(fs, args, false)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(e.stdout, "Usage: %s\n\n%s.\n\nFlags:\n", strings.TrimSpace("taskctl "+e.cmd.name+" "+e.cmd.synopsis), capitalize(e.cmd.summary))
		fs.SetOutput(e.stdout)
		fs.PrintDefaults()
		return nil, err
	}
	if err == nil && e.output != "table" && e.output != "json" {
		err = fmt.Errorf("-o %q: want table or json", e.output)
	}
	if err == nil && len(pos) != nargs {
		switch {
		case nargs == 0:
			err = fmt.Errorf("unexpected argument %q", pos[0])
		case len(pos) < nargs:
			err = errors.New("missing " + strings.Fields(e.cmd.synopsis)[len(pos)])
		default:
			err = fmt.Errorf("unexpected argument %q", pos[nargs])
		}
	}
	if err != nil {
		return nil, e.usageError(err)
	}
	return pos, nil
}

// parseFlags parses fs from args and answers the other arguments. Unless first, a
// flag may follow them (tasks show once:12 -o json); with first, parsing stops at
// the first argument that is not a flag (the command). A -token flag is refused
// with the reason.
func parseFlags(fs *flag.FlagSet, args []string, first bool) ([]string, error) {
	fs.SetOutput(io.Discard) // the caller prints the help, or the error and a usage line
	fs.Usage = func() {}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if msg := err.Error(); strings.HasSuffix(msg, "not defined: -token") || strings.HasSuffix(msg, "not defined: --token") {
				return nil, errors.New("-token: no such flag: a token on the command line is visible to every user of the machine (ps); " +
					"set TASKD_ADMIN_TOKEN or give -token-file")
			}
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 || first {
			return append(pos, rest...), nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageError is err, a bad command line of the running command, with its usage line.
func (e *env) usageError(err error) error {
	return usageError{fmt.Errorf("%s: %w", e.cmd.name, err), strings.TrimSpace("taskctl " + e.cmd.name + " " + e.cmd.synopsis)}
}

// start parses a command's flags and nargs arguments, and makes its client.
func (e *env) start(fs *flag.FlagSet, args []string, nargs int) ([]string, *client.Client, error) {
	pos, err := e.parse(fs, args, nargs)
	if err != nil {
		return nil, nil, err
	}
	c, err := e.client()
	return pos, c, err
}

// client is a client of the server the global flags name, with the admin token
// from -token-file or TASKD_ADMIN_TOKEN.
func (e *env) client() (*client.Client, error) {
	token := e.getenv("TASKD_ADMIN_TOKEN")
	if e.tokenFile != "" {
		var err error
		if token, err = secretfile.Read(e.tokenFile); err != nil {
			return nil, usageError{fmt.Errorf("-token-file: %w", err), ""}
		}
	}
	if token == "" {
		return nil, usageError{errors.New("no admin token: set TASKD_ADMIN_TOKEN or give -token-file (TASKD_ADMIN_TOKEN_FILE)"), ""}
	}
	c, err := client.New(client.Config{URL: e.url, Token: token})
	if err != nil {
		return nil, usageError{fmt.Errorf("-url: %w", err), ""}
	}
	return c, nil
}

// usageError is a command line that cannot be run (exit 2); usage, if set, is the
// usage line to print after it.
type usageError struct {
	error
	usage string
}

// report prints err on stderr as the program's last word and answers the exit code:
// 0 for none (or -h), 2 for a usage error, 1 for any other.
func report(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "taskctl:", err)
	var u usageError
	if errors.As(err, &u) {
		if u.usage != "" {
			fmt.Fprintln(stderr, "usage:", u.usage)
		}
		return 2
	}
	var ce *client.Error
	if errors.As(err, &ce) && ce.Current != "" {
		fmt.Fprintf(stderr, "taskctl: the record is at version %s now\n", ce.Current)
	}
	return 1
}

// capitalize is s with its first letter in upper case.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// oneOf checks a flag's value against the values it may take ("" is always fine).
func oneOf(flagName, v string, allowed ...string) error {
	if v == "" || slices.Contains(allowed, v) {
		return nil
	}
	return fmt.Errorf("-%s %q: want %s", flagName, v, strings.Join(allowed, ", "))
}
