package main

// The tests run the taskctl binary as an operator would, against a real dispatchd
// started in process on its own database and Redis prefix.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/client"
	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/testenv"
)

// adminToken is the admin token of the servers under test.
const adminToken = "taskctl-test-admin-token"

// binary is the taskctl binary, built once for the package's tests.
var binary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "taskctl-bin-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "taskctl")
	out, err := exec.Command("go", "build", "-o", path, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return path, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if path, err := binary(); err == nil {
		os.RemoveAll(filepath.Dir(path))
	}
	os.Exit(code)
}

// server is a dispatchd under test, with a client of it for a test's setup.
type server struct {
	URL string
	c   *client.Client
}

// startServer starts a dispatchd on a fresh database and Redis prefix.
func startServer(t *testing.T) *server {
	t.Helper()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	cfg := app.Config{RedisPrefix: prefix, CatchUp: time.Hour, AdminTokens: []string{"operator=" + adminToken},
		MaxWait: 5 * time.Second, SweepInterval: time.Second, Node: "taskctl-test", RequestTimeout: time.Minute,
		ArtifactDir: t.TempDir()}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	a := app.New(cfg, app.Deps{Store: st, Redis: rdb, Clock: clock.Real{}, Log: log})
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	c, err := client.New(client.Config{URL: srv.URL, Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	return &server{URL: srv.URL, c: c}
}

// result is what a run of taskctl printed, and its exit code.
type result struct {
	stdout, stderr string
	code           int
}

// command is taskctl with args, set to reach s with the token in the environment.
func (s *server) command(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"TASKD_URL=" + s.URL, "TASKD_ADMIN_TOKEN=" + adminToken}
	return cmd
}

// run runs taskctl with args to its end, stdin (if not empty) on its standard input.
func (s *server) run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runCmd(t, s.command(t, args...), stdin)
}

// runCmd runs cmd to its end.
func runCmd(t *testing.T, cmd *exec.Cmd, stdin string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &stdout, &stderr, strings.NewReader(stdin)
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("taskctl %v: %v", cmd.Args[1:], err)
	}
	return r
}

// ok runs taskctl with args and answers its standard output, failing t unless it
// exits 0 with nothing on its standard error.
func (s *server) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := s.run(t, "", args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("taskctl %s: exit %d\nstderr: %s\nstdout: %s", strings.Join(args, " "), r.code, r.stderr, r.stdout)
	}
	return r.stdout
}

// table reads a table taskctl printed: a row of cells a line, each cell cut at the
// column where its header starts, so a value out of line with its header shows.
func table(t *testing.T, out string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header := lines[0]
	var names []string
	var starts []int
	for i := 0; i < len(header); {
		if header[i] == ' ' {
			i++
			continue
		}
		j := strings.IndexByte(header[i:], ' ')
		if j < 0 {
			j = len(header) - i
		}
		names, starts = append(names, header[i:i+j]), append(starts, i)
		i += j
	}
	var rows []map[string]string
	for _, line := range lines[1:] {
		row := map[string]string{}
		for k, name := range names {
			end := len(line)
			if k+1 < len(starts) {
				end = min(starts[k+1], len(line))
				if end > 0 && line[end-1] != ' ' {
					t.Errorf("column %s: line %q has no space before the next column", name, line)
				}
			}
			if starts[k] > end {
				t.Fatalf("line %q is shorter than its header %q", line, header)
			}
			row[name] = strings.TrimSpace(line[starts[k]:end])
		}
		rows = append(rows, row)
	}
	return rows
}

// fields reads "key: value" lines.
func fields(out string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(out) {
		k, v, _ := strings.Cut(line, ":")
		m[k] = strings.TrimSpace(v)
	}
	return m
}

// runAgent runs an agent for uid until nothing is due, completing each task with
// detail as a success.
func (s *server) runAgent(t *testing.T, uid string, detail any) {
	t.Helper()
	ctx := context.Background()
	key, err := s.c.IssueKey(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{URL: s.URL, Key: key, Once: true, StartupJitter: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(ctx, agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
		return agent.Done(detail)
	}))
	if err != nil {
		t.Fatalf("agent %s: %v", uid, err)
	}
}

// template creates a template for a test's tasks and answers its id.
func (s *server) template(t *testing.T) int64 {
	t.Helper()
	tmpl, err := s.c.CreateTemplate(context.Background(), client.Template{Name: "report"})
	if err != nil {
		t.Fatal(err)
	}
	return tmpl.ID
}
