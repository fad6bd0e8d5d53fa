package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/loadtest"
)

func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-preset", "giant"}, "-preset"},
		{[]string{"-agents", "0"}, "-agents"},
		{[]string{"-check-only"}, "-run-id"},
	} {
		err := run(t.Context(), c.args, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want it to name %s", c.args, err, c.want)
		}
	}
}

// -h and --help exit 0 (run returns nil) and list the settings on stdout, every
// environment variable run reads among them.
func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	var read []string
	getenv := func(k string) string { read = append(read, k); return "" }
	run(t.Context(), []string{"-agents", "0"}, getenv, io.Discard, io.Discard)
	for _, arg := range []string{"-h", "--help"} {
		var stdout bytes.Buffer
		if err := run(t.Context(), []string{arg}, getenv, &stdout, io.Discard); err != nil {
			t.Fatalf("%s: %v (exit status 1), want exit 0", arg, err)
		}
		for _, want := range append([]string{"-users", "-check-only", "-max-events"}, read...) {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("%s does not list %s:\n%s", arg, want, stdout.String())
			}
		}
	}
}

// The command runs a tiny scenario against a real server and passes; after a quota
// violation is planted in the database, -check-only on that run fails (exit status 1).
func TestRunThenCheckOnlyFindsPlantedViolation(t *testing.T) {
	t.Parallel()
	st, getenv := startServer(t)

	var out, errOut bytes.Buffer
	args := []string{"-users", "20", "-groups", "2", "-templates", "1", "-once", "10", "-rotate", "2",
		"-agents", "3", "-cycles", "150", "-duration", "30s", "-progress", "0", "-json"}
	if err := run(t.Context(), args, getenv, &out, &errOut); err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	var rep struct {
		RunID  string `json:"run_id"`
		Passed bool   `json:"passed"`
		Run    struct {
			Fetches int64 `json:"fetches"`
		} `json:"run"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out.String())
	}
	if !rep.Passed || rep.Run.Fetches == 0 || rep.RunID == "" {
		t.Fatalf("report: %s", out.String())
	}

	testenv.PlantQuotaViolation(t, st.DB())

	out.Reset()
	err := run(t.Context(), []string{"-check-only", "-run-id", rep.RunID}, getenv, &out, io.Discard)
	if !errors.Is(err, loadtest.ErrViolations) {
		t.Fatalf("check-only after planting: %v, want ErrViolations (exit 1)\n%s", err, out.String())
	}
	if s := out.String(); !strings.Contains(s, "VIOLATIONS") || !strings.Contains(s, loadtest.ViolationQuota) || !strings.Contains(s, "FAIL") {
		t.Errorf("table does not show the violation:\n%s", s)
	}
}

// With -combine each agent carries its complete on its next fetch as the same user:
// the cycles complete through fetch (at most one plain complete per agent, at the end),
// and the invariants still hold, no dispatch left open.
func TestRunCombined(t *testing.T) {
	t.Parallel()
	_, getenv := startServer(t)

	var out, errOut bytes.Buffer
	args := []string{"-workload", "cycles", "-users", "20", "-groups", "2", "-templates", "1", "-once", "10", "-rotate", "2",
		"-agents", "3", "-cycles", "200", "-duration", "30s", "-progress", "0", "-combine", "-json"}
	if err := run(t.Context(), args, getenv, &out, &errOut); err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	var rep struct {
		Passed  bool `json:"passed"`
		Combine bool `json:"combine"`
		Run     struct {
			Dispatched int64                       `json:"dispatched"`
			Cycles     int64                       `json:"cycles"`
			Latency    map[string]loadtest.Latency `json:"latency_ms"`
		} `json:"run"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out.String())
	}
	if !rep.Passed || !rep.Combine || rep.Run.Cycles < 50 || rep.Run.Cycles != rep.Run.Dispatched {
		t.Fatalf("report: %s", out.String())
	}
	if n := rep.Run.Latency[loadtest.EndpointComplete].Count; n > 3 {
		t.Fatalf("%d plain completes for %d cycles, want at most one per agent", n, rep.Run.Cycles)
	}
}

// startServer runs a dispatchd on a database and Redis prefix of the test's own, and
// returns its store and the environment that points the load tester at it.
func startServer(t *testing.T) (*store.Store, func(string) string) {
	t.Helper()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	cfg := app.Config{RedisPrefix: prefix, CatchUp: time.Hour, AdminTokens: []string{"cmd-admin-token"},
		MaxWait: time.Second, SweepInterval: time.Second, Node: "loadtest"}
	a := app.New(cfg, app.Deps{Store: st, Redis: rdb, Clock: clock.Real{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	env := map[string]string{"LOADTEST_URL": srv.URL, "LOADTEST_ADMIN_TOKEN": "cmd-admin-token"}
	return st, func(k string) string { return env[k] }
}
