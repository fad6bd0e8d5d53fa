package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/testenv"
)

// The verdict printed (the table's last line, the JSON's "passed") and the exit status
// (run's error) agree on every path: a clean run, a run whose check finds violations,
// and a run whose check cannot be completed, in table and JSON output.
func TestPrintedVerdictMatchesExitStatus(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	cfg := app.Config{RedisPrefix: prefix, CatchUp: time.Hour, AdminTokens: []string{"cmd-admin-token"},
		MaxWait: time.Second, SweepInterval: time.Second, Node: "loadtest"}
	h := app.New(cfg, app.Deps{Store: st, Redis: rdb, Clock: clock.Real{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()
	good := httptest.NewServer(h)
	t.Cleanup(good.Close)
	// The same server, except that reading events fails: the check cannot complete.
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/admin/events") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":{"code":"internal","message":"internal error"}}`)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(broken.Close)

	tiny := []string{"-users", "20", "-groups", "2", "-templates", "1", "-once", "10", "-rotate", "2",
		"-agents", "3", "-cycles", "100", "-duration", "30s", "-progress", "0"}
	type outcome struct {
		printed string // PASS or FAIL
		err     error
		out     string
	}
	do := func(url string, json bool, args ...string) outcome {
		t.Helper()
		env := map[string]string{"LOADTEST_URL": url, "LOADTEST_ADMIN_TOKEN": "cmd-admin-token"}
		if json {
			args = append(args, "-json")
		}
		var out bytes.Buffer
		err := run(t.Context(), args, func(k string) string { return env[k] }, &out, io.Discard)
		return outcome{printed: printedVerdict(t, out.String(), json), err: err, out: out.String()}
	}
	check := func(name string, o outcome, wantPass bool) {
		t.Helper()
		want := map[bool]string{true: "PASS", false: "FAIL"}[wantPass]
		if o.printed != want || (o.err == nil) != wantPass {
			t.Errorf("%s: printed %q, run returned %v (exit %d); want %s and a matching exit status\n%s",
				name, o.printed, o.err, exitStatus(o.err), want, o.out)
		}
	}

	clean := do(good.URL, true, tiny...)
	check("clean run, json", clean, true)
	check("clean run, table", do(good.URL, false, tiny...), true)
	check("check error, table", do(broken.URL, false, tiny...), false)
	check("check error, json", do(broken.URL, true, tiny...), false)

	var rep struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(clean.out), &rep); err != nil || rep.RunID == "" {
		t.Fatalf("clean run report: %v\n%s", err, clean.out)
	}
	check("check-only error, table", do(broken.URL, false, "-check-only", "-run-id", rep.RunID), false)
	check("check-only error, json", do(broken.URL, true, "-check-only", "-run-id", rep.RunID), false)
	check("check-only clean, table", do(good.URL, false, "-check-only", "-run-id", rep.RunID), true)
	testenv.PlantQuotaViolation(t, st.DB())
	check("violations, table", do(good.URL, false, "-check-only", "-run-id", rep.RunID), false)
	check("violations, json", do(good.URL, true, "-check-only", "-run-id", rep.RunID), false)
}

// printedVerdict is the verdict a report shows: the table's last line, or PASS or FAIL
// from the JSON's "passed"; "" when no report was printed.
func printedVerdict(t *testing.T, out string, isJSON bool) string {
	t.Helper()
	if strings.TrimSpace(out) == "" {
		return ""
	}
	if isJSON {
		var rep struct {
			Passed *bool `json:"passed"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Passed == nil {
			t.Errorf("report is not JSON with passed: %v\n%s", err, out)
			return ""
		}
		return map[bool]string{true: "PASS", false: "FAIL"}[*rep.Passed]
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.Fields(lines[len(lines)-1])[0]
}

// exitStatus is the status main exits with for run's error.
func exitStatus(err error) int {
	if err != nil {
		return 1
	}
	return 0
}
