// Command taskd-agent is a client agent that runs a command once per task:
//
//	taskd-agent run [flags] -- COMMAND [ARGS...]
//	taskd-agent progress '{"checkpoint": {...}}'
//
// It is built on the Go SDK (package agent): one fetch loop, leases extended while a
// command runs, results never lost, Retry-After obeyed, a staged shutdown. The command
// reads the task's params as JSON on stdin and the task from its environment
// (TASKD_LOG_ID, TASKD_TASK_ID, TASKD_KIND, TASKD_ATTEMPT, TASKD_DUE_AT,
// TASKD_TEMPLATE_ID, TASKD_STAGE, TASKD_CONTEXT, TASKD_CHECKPOINT,
// TASKD_LEASE_EXPIRES_AT, TASKD_RESULT, TASKD_AGENT_SOCKET, TASKD_RUN_TOKEN,
// TASKD_AGENT_BIN), not the agent's credentials; its PATH starts with a directory
// holding the agent as taskd-agent. Exit 0 is success, any other exit a failure with
// {"exit_code", "stdout_tail", "stderr_tail"} as the detail, unless the command wrote
// its result to $TASKD_RESULT. The agent logs one line per task it ran, and reports
// its version and labels (-agent-version, -label, -label-file) to the server.
// docs/AGENTS.md is the guide.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/internal/secretfile"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "taskd-agent:", err)
		}
		os.Exit(exitCode(err))
	}
}

// usageError is a command line that cannot be run (exit 2).
type usageError struct{ error }

func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}

const usage = `Usage:
  taskd-agent run [flags] -- COMMAND [ARGS...]   run COMMAND once per task
  taskd-agent progress '{"checkpoint": {...}}'   (from a command) save a checkpoint

Flags of run (environment variables in brackets):
`

// run is the whole program: main only gives it the process's arguments, environment
// and streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{errors.New("a subcommand is required: run or progress")}
	}
	switch args[0] {
	case "progress":
		if len(args) != 2 {
			return usageError{errors.New(`progress takes one argument, {"checkpoint": {...}}`)}
		}
		return sendProgress(args[1], getenv)
	case "run":
		cfg, err := parseRun(args[1:], getenv, stderr)
		if err != nil {
			return err
		}
		return runAgent(ctx, cfg, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		newRunFlags(&runConfig{}, getenv, stdout).PrintDefaults()
		return nil
	}
	return usageError{fmt.Errorf("unknown subcommand %q: run or progress", args[0])}
}

// runConfig is taskd-agent run's settings.
type runConfig struct {
	url, key, uid, enrollSecret, keyFile string
	enrollSecretFile                     string
	concurrency                          int
	templates                            string
	// finalExitCode is the exit code that makes a command's failure final ("retry":
	// false): 0 for none (exit 0 is a success).
	finalExitCode                     int
	timeout, shutdownGrace, killGrace time.Duration
	once                              bool
	metricsAddr                       string
	agentVersion, hostname, labelFile string
	labels                            labelFlag
	command                           []string
}

func newRunFlags(c *runConfig, getenv func(string) string, out io.Writer) *flag.FlagSet {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("taskd-agent run", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.url, "url", env("TASKD_URL", "http://localhost:8080"), "the server's base URL [TASKD_URL]")
	fs.StringVar(&c.key, "key", env("TASKD_KEY", ""), "the client key [TASKD_KEY]; or -key-file, or -uid and -enroll-secret-file (on the command line, visible to other users: prefer the environment or a file)")
	fs.StringVar(&c.uid, "uid", env("TASKD_UID", ""), "the uid to enroll as [TASKD_UID]")
	fs.StringVar(&c.enrollSecret, "enroll-secret", env("TASKD_ENROLL_SECRET", ""), "the server's enroll secret [TASKD_ENROLL_SECRET] (on the command line, visible to other users: prefer -enroll-secret-file)")
	fs.StringVar(&c.enrollSecretFile, "enroll-secret-file", env("TASKD_ENROLL_SECRET_FILE", ""), "a file that holds the server's enroll secret [TASKD_ENROLL_SECRET_FILE]")
	fs.StringVar(&c.keyFile, "key-file", env("TASKD_KEY_FILE", ""), "where the enrolled key is kept (mode 0600) [TASKD_KEY_FILE]")
	fs.IntVar(&c.concurrency, "concurrency", 1, "how many commands run at once (the uid's max_in_flight bounds it too)")
	fs.StringVar(&c.templates, "templates", "", "fetch only tasks of these template ids, comma-separated")
	if v := getenv("TASKD_FINAL_EXIT_CODE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			n = -1 // refused by parseRun, unless the flag replaces it
		}
		c.finalExitCode = n
	}
	fs.IntVar(&c.finalExitCode, "final-exit-code", c.finalExitCode, "a command exiting with this `code` fails for good: the server does not retry the task, whatever attempts are left (1..255; 0: none) [TASKD_FINAL_EXIT_CODE]")
	fs.DurationVar(&c.timeout, "timeout", 0, "a command's time limit (0: none); past it: SIGTERM to its process group, -kill-grace, SIGKILL, a failure with \"timeout\": true")
	fs.DurationVar(&c.shutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM or SIGINT, how long running commands may take to finish before they are stopped")
	fs.DurationVar(&c.killGrace, "kill-grace", 5*time.Second, "between the SIGTERM and the SIGKILL that stop a command")
	fs.BoolVar(&c.once, "once", false, "take what is due now, run it, and exit 0 when nothing is left")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address (e.g. 127.0.0.1:9102; empty: none)")
	c.labels = labelFlag{env: getenv("TASKD_LABELS")}
	fs.Var(&c.labels, "label", "a label the server shows for this agent, `key=value`; repeat for more [TASKD_LABELS=\"k=v,k2=v2\"] (the flags replace the environment's)")
	fs.StringVar(&c.labelFile, "label-file", env("TASKD_LABEL_FILE", ""), "a `file` of labels, key=value a line (# comments), added to -label's; read again on SIGHUP [TASKD_LABEL_FILE]")
	fs.StringVar(&c.agentVersion, "agent-version", env("TASKD_AGENT_VERSION", ""), "the `version` the server shows for this agent, e.g. of what its command runs [TASKD_AGENT_VERSION]")
	fs.StringVar(&c.hostname, "hostname", env("TASKD_HOSTNAME", ""), "the hostname the server shows (default: the machine's; - for none) [TASKD_HOSTNAME]")
	return fs
}

// parseRun reads run's flags and the command after them (after "--", or the first
// argument that is not a flag).
func parseRun(args []string, getenv func(string) string, stderr io.Writer) (runConfig, error) {
	var c runConfig
	fs := newRunFlags(&c, getenv, stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, usageError{err}
	}
	c.command = fs.Args()
	var onCommandLine []string
	fs.Visit(func(f *flag.Flag) {
		if (f.Name == "key" || f.Name == "enroll-secret") && f.Value.String() != "" {
			onCommandLine = append(onCommandLine, "-"+f.Name)
		}
	})
	if len(onCommandLine) > 0 {
		fmt.Fprintf(stderr, "taskd-agent: warning: %s on the command line: any user of this machine can read it (ps); "+
			"use -key-file, -enroll-secret-file, or the environment (TASKD_KEY, TASKD_ENROLL_SECRET)\n", strings.Join(onCommandLine, " and "))
	}
	if _, err := c.labels.parse(); err != nil {
		return c, usageError{err}
	}
	if c.enrollSecretFile != "" {
		if c.enrollSecret != "" {
			return c, usageError{errors.New("run: -enroll-secret and -enroll-secret-file (TASKD_ENROLL_SECRET, TASKD_ENROLL_SECRET_FILE): give one")}
		}
		secret, err := secretfile.Read(c.enrollSecretFile)
		if err != nil {
			return c, usageError{fmt.Errorf("run: -enroll-secret-file: %w", err)}
		}
		c.enrollSecret = secret
	}
	switch {
	case len(c.command) == 0:
		return c, usageError{errors.New("run: no command: taskd-agent run [flags] -- COMMAND [ARGS...]")}
	case c.key == "" && (c.uid == "" || c.enrollSecret == "") && c.keyFile == "":
		return c, usageError{errors.New("run: a client key is required: TASKD_KEY (or -key-file), or -uid and -enroll-secret-file (TASKD_UID, TASKD_ENROLL_SECRET_FILE or TASKD_ENROLL_SECRET)")}
	case c.concurrency < 1 || c.concurrency > 100:
		return c, usageError{fmt.Errorf("run: -concurrency must be 1..100, got %d", c.concurrency)}
	case c.finalExitCode < 0 || c.finalExitCode > 255:
		return c, usageError{fmt.Errorf("run: -final-exit-code (TASKD_FINAL_EXIT_CODE) must be an exit code 1..255, or 0 for none; got %q",
			finalExitCodeText(fs, getenv))}
	case c.timeout < 0 || c.shutdownGrace < 0 || c.killGrace < 0:
		return c, usageError{errors.New("run: -timeout, -shutdown-grace and -kill-grace must not be negative")}
	}
	return c, nil
}

// finalExitCodeText is -final-exit-code as given: the flag's value, else the
// environment's, for a message refusing it.
func finalExitCodeText(fs *flag.FlagSet, getenv func(string) string) string {
	given := getenv("TASKD_FINAL_EXIT_CODE")
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "final-exit-code" {
			given = f.Value.String()
		}
	})
	return given
}

// templateIDs reads -templates.
func templateIDs(s string) ([]int64, error) {
	var ids []int64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil || id < 1 {
			return nil, usageError{fmt.Errorf("run: -templates: %q is not a template id", f)}
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// runAgent runs the agent until ctx ends (SIGTERM, SIGINT) or, with -once, until
// nothing is left to do.
func runAgent(ctx context.Context, c runConfig, stderr io.Writer) error {
	templates, err := templateIDs(c.templates)
	if err != nil {
		return err
	}
	labels, err := allLabels(c)
	if err != nil {
		return usageError{fmt.Errorf("run: %w", err)}
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	metrics := agent.NewMetrics()
	a, err := agent.New(agent.Config{URL: c.url, Key: c.key, UID: c.uid, EnrollSecret: c.enrollSecret, KeyFile: c.keyFile,
		Concurrency: c.concurrency, Templates: templates, ShutdownGrace: c.shutdownGrace, Once: c.once,
		Version: c.agentVersion, Hostname: c.hostname, Labels: labels, Logger: log, Metrics: metrics})
	if err != nil {
		return usageError{errors.New(flagNames.Replace(err.Error()))}
	}
	if c.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics)
		ln, err := net.Listen("tcp", c.metricsAddr)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
	}
	r := &runner{command: c.command, timeout: c.timeout, killGrace: c.killGrace, finalExitCode: c.finalExitCode, log: log,
		running: map[string]*commandRun{}}
	progress, err := listenProgress(r.checkpoint)
	if err != nil {
		return fmt.Errorf("progress socket: %w", err)
	}
	defer progress.close()
	r.socket, r.bin = progress.path, progress.bin
	if c.labelFile != "" {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go reloadLabels(ctx, hup, a, c, log)
	}
	return a.Run(ctx, agent.HandlerFunc(r.work))
}

// flagNames names the SDK's settings, in New's errors, as the flags that set them.
var flagNames = strings.NewReplacer("agent: Labels", "run: -label (TASKD_LABELS, -label-file)",
	"agent: Version", "run: -agent-version (TASKD_AGENT_VERSION)", "agent: Hostname", "run: -hostname (TASKD_HOSTNAME)")

// reloadLabels reads the labels again on each SIGHUP: the agent reports them on its
// next fetch. Labels it cannot take are logged, and those in use stay.
func reloadLabels(ctx context.Context, hup <-chan os.Signal, a *agent.Agent, c runConfig, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		labels, err := allLabels(c)
		if err == nil {
			err = a.SetLabels(labels)
		}
		if err != nil {
			log.Error("SIGHUP: labels not changed", "component", "taskd-agent", "label_file", c.labelFile,
				"err", flagNames.Replace(err.Error()))
			continue
		}
		log.Info("SIGHUP: labels read again", "component", "taskd-agent", "label_file", c.labelFile, "labels", len(labels))
	}
}
