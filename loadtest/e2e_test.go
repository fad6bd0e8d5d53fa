package loadtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/testenv"
)

const testAdminToken = "loadtest-admin-token"

// startServer starts a real dispatchd (app.New over a fresh database and Redis
// prefix, on a loopback httptest server) and returns its URL and database.
func startServer(t *testing.T) (string, *sql.DB) {
	t.Helper()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	cfg := app.Config{RedisPrefix: prefix, CatchUp: time.Hour, AdminTokens: []string{testAdminToken},
		MaxWait: time.Second, SweepInterval: time.Second, Node: "loadtest"}
	a := app.New(cfg, app.Deps{Store: st, Redis: rdb, Clock: clock.Real{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return srv.URL, st.DB()
}

// tinyConfig is a run small enough for the test suite, bounded in cycles and time.
func tinyConfig(url string) Config {
	c := DefaultConfig()
	c.URL, c.AdminToken = url, testAdminToken
	c.Size = Size{Users: 30, Groups: 3, Templates: 2, Once: 12, Rotate: 3, Agents: 4, Duration: 30 * time.Second}
	c.Cycles = 150
	c.FailRate = 0.2
	c.Progress = 0
	c.SetupConcurrency = 4
	return c
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

func TestEndToEndRunThenPlantedViolation(t *testing.T) {
	t.Parallel()
	url, db := startServer(t)
	cfg := tinyConfig(url)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	rep, err := Run(ctx, cfg, Progress{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	w, r := rep.Warmup, rep.Run
	if w == nil || w.Fetches != int64(cfg.Size.Users) {
		t.Fatalf("warm-up: %+v, want one fetch per user", w)
	}
	if r.Fetches == 0 || r.Fetches > cfg.Cycles || r.Errors != 0 || r.Latency[EndpointFetch].Count != r.Fetches {
		t.Errorf("run: %+v", r)
	}
	if w.Dispatched+r.Dispatched == 0 || w.Cycles+r.Cycles == 0 || r.Failures+w.Failures == 0 {
		t.Errorf("no dispatch cycles or no failures reported: warm-up %+v run %+v", w, r)
	}
	c := rep.Check
	if c == nil || !c.OK() || !rep.Passed {
		t.Fatalf("check of a clean run: %+v", c)
	}
	if c.Tasks != cfg.Size.Once+cfg.Size.Rotate || c.DispatchEvents == 0 || c.CompleteEvents == 0 {
		t.Errorf("check read too little: %+v", c)
	}
	if int64(c.AgentCompleted) != w.Cycles+r.Cycles || c.UnseenDispatches != 0 {
		t.Errorf("cross-check: agents completed %d, phases say %d; unseen dispatches %d",
			c.AgentCompleted, w.Cycles+r.Cycles, c.UnseenDispatches)
	}

	task := plantViolation(t, db)
	cli := NewClient(url, testAdminToken, 4, 10*time.Second)
	defer cli.Close()
	now := time.Now()
	res, err := CheckServer(ctx, cli, CheckTarget{RunID: rep.RunID, ClaimsFrom: now.Add(-3 * time.Hour),
		ClaimsTo: now.Add(time.Minute), MaxEvents: 1_000_000}, &Observed{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{ViolationQuota, ViolationTwice, ViolationClaimed} {
		if res.ByKind[kind] != 1 {
			t.Errorf("%s: found %d, want 1 (violations %v)", kind, res.ByKind[kind], res.Violations)
		}
	}
	for _, v := range res.Violations {
		if v.TaskID != task {
			t.Errorf("violation on %s, planted on %s: %v", v.TaskID, task, v)
		}
	}
	rep.Check = res
	if err := verdict(rep); !errors.Is(err, ErrViolations) || rep.Passed {
		t.Errorf("verdict: %v passed %v, want ErrViolations", err, rep.Passed)
	}
}

// An open-model run keeps to its schedule's count and passes its check.
func TestEndToEndOpenModel(t *testing.T) {
	t.Parallel()
	url, _ := startServer(t)
	cfg := tinyConfig(url)
	cfg.Workload, cfg.Warmup, cfg.Rate, cfg.Cycles, cfg.Think = WorkloadEmpty, false, 2000, 100, time.Millisecond
	rep, err := Run(t.Context(), cfg, Progress{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if rep.Run.Fetches != 100 || rep.Run.Empty != 100 || rep.Run.EmptyRatio != 1 || !rep.Passed {
		t.Errorf("open model: %+v", rep.Run)
	}
}
