package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
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
	if err := run(t.Context(), []string{"-h"}, func(string) string { return "" }, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// The command runs a tiny scenario against a real server and passes; after a quota
// violation is planted in the database, -check-only on that run fails (exit status 1).
func TestRunThenCheckOnlyFindsPlantedViolation(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	cfg := app.Config{RedisPrefix: prefix, CatchUp: time.Hour, AdminTokens: []string{"cmd-admin-token"},
		MaxWait: time.Second, SweepInterval: time.Second, Node: "loadtest"}
	a := app.New(cfg, app.Deps{Store: st, Redis: rdb, Clock: clock.Real{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	env := map[string]string{"LOADTEST_URL": srv.URL, "LOADTEST_ADMIN_TOKEN": "cmd-admin-token"}
	getenv := func(k string) string { return env[k] }

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

	plantViolation(t, st.DB())

	out.Reset()
	err := run(t.Context(), []string{"-check-only", "-run-id", rep.RunID}, getenv, &out, io.Discard)
	if !errors.Is(err, loadtest.ErrViolations) {
		t.Fatalf("check-only after planting: %v, want ErrViolations (exit 1)\n%s", err, out.String())
	}
	if s := out.String(); !strings.Contains(s, "VIOLATIONS") || !strings.Contains(s, loadtest.ViolationQuota) || !strings.Contains(s, "FAIL") {
		t.Errorf("table does not show the violation:\n%s", s)
	}
}

// plantViolation inserts dispatch records, straight into the database, for an
// occurrence of a once_per_user task with a limited quota that the run dispatched: one
// more for the same user, and quota-1 for made-up users. The occurrence is then over
// its quota, its user holds it twice and the task's claimed counter no longer agrees.
func plantViolation(t *testing.T, db *sql.DB) (taskID string) {
	t.Helper()
	var logID string
	var kind, id int64
	var quota int
	err := db.QueryRow(`SELECT d.log_id, d.task_kind, d.task_id, t.dispatch_times FROM dispatch d
		JOIN (SELECT 1 AS kind, id, dispatch_times, mode FROM task_once
		      UNION ALL SELECT 2, id, dispatch_times, mode FROM task_rotate) t
		  ON t.kind = d.task_kind AND t.id = d.task_id
		WHERE t.dispatch_times > 0 AND t.mode = 1 AND d.attempt = 1 AND d.state <> 4
		ORDER BY t.dispatch_times, d.log_id LIMIT 1`).Scan(&logID, &kind, &id, &quota)
	if err != nil {
		t.Fatalf("find a dispatched occurrence with a quota to plant on: %v", err)
	}
	for i := 0; i < quota; i++ {
		uid := "uid" // i == 0: the same user again
		if i > 0 {
			uid = fmt.Sprintf("'planted-%d'", i)
		}
		_, err = db.Exec(`INSERT INTO dispatch (log_id, uid, task_kind, task_id, due_at, mode, attempt, state, result,
			template_id, params, dispatched_at, finished_at)
			SELECT ?, `+uid+`, task_kind, task_id, due_at, mode, 1, 3, 1, template_id, params, NOW(6), NOW(6)
			FROM dispatch WHERE log_id = ?`, fmt.Sprintf("planted-%d", i), logID)
		if err != nil {
			t.Fatalf("plant: %v", err)
		}
	}
	return map[int64]string{1: "once:", 2: "rotate:"}[kind] + strconv.FormatInt(id, 10)
}
