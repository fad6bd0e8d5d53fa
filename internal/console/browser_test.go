package console_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/testenv"
)

// The console in a real browser: e2e/console.test.mjs drives Debian's chromium with
// playwright-core against a server of the test's own (sign in, templates, a task
// through the form with a 422 at its field and <script> params shown as text, an
// agent's dispatch in the events, pause and its audit entry, a campaign created, started,
// worked by an agent and paused, one paused by its error budget on the dashboard and its
// page with the failures, an artifact uploaded (and one over the limit refused), a DDI
// template and task, a fake DDI controller's feedback on the task's page, the artifact's
// delete refused while the task names it, CSRF, paging through 250
// tasks, 390 px, an unknown session, sign out and the old cookie refused). It fails, never skips, when the browser,
// node or playwright-core is missing: make test installs playwright-core (npm ci),
// .ci/run installs chromium and node. TASKD_CONSOLE_SHOTS=<dir> keeps the screenshots
// (docs/console holds the README's).
// artifactMaxBytes is the test server's largest artifact: the browser uploads one over it.
const artifactMaxBytes = 1 << 20

func TestConsoleInChromium(t *testing.T) {
	t.Parallel()
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("no browser at %s: install Debian's chromium (apt install chromium; .ci/run does), or set CHROMIUM", chromium)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node not found: install Node.js (apt install nodejs npm; .ci/run does)")
	}
	if _, err := os.Stat("e2e/node_modules/playwright-core"); err != nil {
		t.Fatal("playwright-core is not installed: run npm ci --prefix internal/console/e2e (make test does)")
	}

	rdb, prefix := testenv.Redis(t)
	const token = "console-test-token"
	cfg := app.Config{RedisPrefix: prefix, CatchUp: time.Hour, AdminTokens: []string{"ops=" + token},
		MaxWait: time.Second, SweepInterval: time.Second, Node: "console-test", RequestTimeout: time.Minute,
		NodeTimeout: time.Hour, // one beat keeps the node on the dashboard for the whole run
		ArtifactDir: t.TempDir(), ArtifactMaxBytes: artifactMaxBytes}
	a := app.New(cfg, app.Deps{Store: testenv.Store(t), Redis: rdb, Clock: clock.Real{},
		Log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))})
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	if err := a.Members.Beat(t.Context()); err != nil { // the dashboard lists the node
		t.Fatal(err)
	}
	// Polls reach the fleet pages through the nodes' batches: flushed often here.
	flushing, stopFlushing := context.WithCancel(t.Context())
	flushed := make(chan struct{})
	go func() { a.Fleet.Run(flushing, 50*time.Millisecond, 5*time.Second); close(flushed) }()
	defer func() { stopFlushing(); <-flushed }()

	shots := os.Getenv("TASKD_CONSOLE_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if shots, err = filepath.Abs(shots); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), node, "console.test.mjs")
	cmd.Dir = "e2e"
	cmd.Env = append(os.Environ(), "BASE_URL="+srv.URL, "TOKEN="+token, "SHOTS="+shots, "CHROMIUM="+chromium,
		"ARTIFACT_MAX_BYTES="+strconv.Itoa(artifactMaxBytes))
	out, err := cmd.CombinedOutput()
	t.Logf("console.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("browser tests failed (%v); a screenshot of the failing page is %s", err, filepath.Join(shots, "failed.png"))
	}
}
