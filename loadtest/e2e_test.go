package loadtest

import (
	"context"
	"database/sql"
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
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.RunBackground(ctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
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
	if c == nil || !c.OK() || !rep.Passed() {
		t.Fatalf("check of a clean run: %+v", c)
	}
	if c.Tasks != cfg.Size.Once+cfg.Size.Rotate || c.DispatchEvents == 0 || c.CompleteEvents == 0 {
		t.Errorf("check read too little: %+v", c)
	}
	if int64(c.AgentCompleted) != w.Cycles+r.Cycles || c.UnseenDispatches != 0 {
		t.Errorf("cross-check: agents completed %d, phases say %d; unseen dispatches %d",
			c.AgentCompleted, w.Cycles+r.Cycles, c.UnseenDispatches)
	}

	task := testenv.PlantQuotaViolation(t, db)
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
	if err := rep.Verdict(); !errors.Is(err, ErrViolations) || rep.Passed() {
		t.Errorf("verdict: %v passed %v, want ErrViolations", err, rep.Passed())
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
	if rep.Run.Fetches != 100 || rep.Run.Empty != 100 || rep.Run.EmptyRatio != 1 || !rep.Passed() {
		t.Errorf("open model: %+v", rep.Run)
	}
}

// A batch run (fetch with max 10, every user's max_in_flight 10) dispatches several
// tasks per fetch, completes them all, and passes its check (no quota over-dispatched,
// no occurrence twice to a user, every dispatch seen by an agent).
func TestEndToEndBatch(t *testing.T) {
	t.Parallel()
	url, db := startServer(t)
	cfg := tinyConfig(url)
	cfg.Workload, cfg.Batch, cfg.Warmup = WorkloadCycles, 10, false
	rep, err := Run(t.Context(), cfg, Progress{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	r := rep.Run
	if r.Errors != 0 || r.Fetches == 0 || r.Dispatched <= r.Fetches || !rep.Passed() {
		t.Fatalf("batch run: %+v (check %+v)", r, rep.Check)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM client_setting WHERE max_in_flight = 10").Scan(&n); err != nil || n != cfg.Size.Users {
		t.Fatalf("max_in_flight set for %d users (%v), want %d", n, err, cfg.Size.Users)
	}
	if int64(rep.Check.AgentCompleted) != r.Cycles || rep.Check.UnseenDispatches != 0 {
		t.Errorf("cross-check: agents completed %d, run says %d; unseen dispatches %d",
			rep.Check.AgentCompleted, r.Cycles, rep.Check.UnseenDispatches)
	}
}

// A campaign run: a campaign per group, started after the warm-up, worked by the
// agents through fetch (a fifth of the items failed once or more and retried) until
// every item is finished, which ends the run; the check passes (counts add up, every item acknowledged
// done counted once, handouts within the rate) and the report says how fast.
func TestEndToEndCampaign(t *testing.T) {
	t.Parallel()
	url, _ := startServer(t)
	cfg := tinyConfig(url)
	cfg.Workload, cfg.Cycles = WorkloadCampaign, 0
	cfg.Size.Items, cfg.Size.ItemRate, cfg.Size.Duration = 300, 300, 2*time.Minute // ends once all finished
	rep, err := Run(t.Context(), cfg, Progress{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	cs, r := rep.Campaigns, rep.Run
	if cs == nil || cs.Campaigns != 3 || cs.Items != 300 || cs.RateAsked != 300 {
		t.Fatalf("campaigns: %+v", cs)
	}
	if cs.Finished != 3 || cs.Done+cs.Failed != 300 || cs.InFlight != 0 || cs.Done < 270 || cs.ItemsPerSec <= 0 {
		t.Errorf("not every item finished: %+v", cs)
	}
	if r.Seconds >= cfg.Size.Duration.Seconds() {
		t.Errorf("the run went on for %.1fs after every campaign finished", r.Seconds)
	}
	if r.Items == 0 || r.Items != r.Dispatched+r.Redos || cs.Handouts < cs.Done+cs.Failed || rep.Warmup.Items != 0 {
		t.Errorf("items fetched: run %+v, warm-up %+v, campaigns %+v", r, rep.Warmup, cs)
	}
	if c := rep.Check; c == nil || !c.OK() || c.Campaigns != 3 || !rep.Passed() {
		t.Fatalf("check: %+v", c)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "items/s finished") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
}

// Where the rate binds (more items than the rate hands out in the run), the handouts
// keep to it and the check, which bounds them by the rate plus a bucket, passes; at
// the end the run stops what did not finish.
func TestEndToEndCampaignAtItsRate(t *testing.T) {
	t.Parallel()
	url, _ := startServer(t)
	cfg := tinyConfig(url)
	cfg.Workload, cfg.Cycles, cfg.Warmup = WorkloadCampaign, 0, false
	cfg.Size.Items, cfg.Size.ItemRate, cfg.Size.Duration = 3000, 150, 2*time.Second
	rep, err := Run(t.Context(), cfg, Progress{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	cs := rep.Campaigns
	if cs == nil || cs.Finished != 0 || cs.Handouts == 0 || !rep.Passed() {
		t.Fatalf("campaigns %+v, check %+v", cs, rep.Check)
	}
	cli := NewClient(url, testAdminToken, 1, 10*time.Second)
	defer cli.Close()
	all, err := cli.Campaigns(t.Context(), 1)
	if err != nil || len(all) != 3 {
		t.Fatalf("campaigns after the run: %v %v", all, err)
	}
	for _, c := range all {
		if c.State != "stopping" && c.State != "stopped" {
			t.Errorf("campaign %d left %s after the run", c.ID, c.State)
		}
	}
}

// A run whose agents are the Go SDK's: they take tasks and complete them through the
// SDK's one fetch loop each, and the check passes (no quota exceeded, every result the
// agents finished arrived, every dispatch seen).
func TestEndToEndSDK(t *testing.T) {
	t.Parallel()
	url, _ := startServer(t)
	cfg := tinyConfig(url)
	cfg.Workload, cfg.SDK, cfg.Cycles, cfg.Warmup = WorkloadCycles, true, 0, false
	cfg.Size.Duration = 5 * time.Second
	rep, err := Run(t.Context(), cfg, Progress{})
	if err != nil {
		t.Fatalf("run: %v (check %+v)", err, rep)
	}
	r := rep.Run
	if r.Errors != 0 || r.Cycles == 0 || r.Fetches < r.Cycles || !rep.Passed() || !rep.SDK {
		t.Fatalf("sdk run: %+v (check %+v)", r, rep.Check)
	}
	if int64(rep.Check.AgentCompleted) != r.Cycles || rep.Check.UnseenDispatches != 0 {
		t.Errorf("cross-check: agents completed %d, run says %d; unseen dispatches %d",
			rep.Check.AgentCompleted, r.Cycles, rep.Check.UnseenDispatches)
	}
}

// A rollout run: the cycles workload's group tasks released in phases with auto gates;
// the check reads every rolled-out task's records and history and finds no phase's cap
// exceeded and no gate passed early, and at least one rollout moved on.
func TestEndToEndRollout(t *testing.T) {
	t.Parallel()
	url, _ := startServer(t)
	cfg := tinyConfig(url)
	cfg.Workload, cfg.Cycles = WorkloadRollout, 400
	cfg.FailRate = 0.05
	rep, err := Run(t.Context(), cfg, Progress{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	c := rep.Check
	if c == nil || !rep.Passed() || c.Rollouts == 0 {
		t.Fatalf("rollout run: passed %v, check %+v", rep.Passed(), c)
	}
	moved := false
	for _, p := range c.RolloutPhases {
		moved = moved || !strings.HasSuffix(p, "running, phase 1")
	}
	if !moved {
		t.Errorf("no rollout left its first phase: %v", c.RolloutPhases)
	}
}

// A DDI run: the users are DDI controllers taking deployments of DDI tasks with quotas
// (base poll, deploymentBase, proceeding, closed; a fifth closed as failures). The
// report counts the polls, deployments and feedbacks; the check passes, every action
// tied to its dispatch record and every closing to its complete event. Then the
// checker is shown to fail where it should: an over-dispatch planted in MySQL (quota,
// once_per_user, claimed counter), and a closing whose record lost it or says another
// result.
func TestEndToEndDDIThenPlantedViolations(t *testing.T) {
	t.Parallel()
	url, db := startServer(t)
	cfg := tinyConfig(url)
	cfg.Workload = WorkloadDDI
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	rep, err := Run(ctx, cfg, Progress{})
	if err != nil {
		t.Fatalf("run: %v (check %+v)", err, rep)
	}
	w, r := rep.Warmup, rep.Run
	if w == nil || w.DDI == nil || r.DDI == nil {
		t.Fatalf("no DDI counts: warm-up %+v, run %+v", w, r)
	}
	if w.Fetches != int64(cfg.Size.Users) || w.DDI.Polls != w.Fetches {
		t.Errorf("warm-up: %+v %+v, want one base poll per controller", w, w.DDI)
	}
	var deployments, feedbacks, closed, failures, dispatched int64
	for _, p := range []*Phase{w, r} {
		if p.Errors != 0 || p.Latency[EndpointDDIPoll].Count != p.Fetches || p.Latency[EndpointFetch].Count != 0 {
			t.Errorf("phase: %+v", p)
		}
		// No step failed: every deployment read was reported on and closed.
		if d := p.DDI; d.Deployments != p.Dispatched+p.Redos || d.Feedbacks != 2*d.Closed || d.Closed != d.Deployments || p.Cycles != d.Closed {
			t.Errorf("phase: %+v, DDI %+v", p, d)
		}
		deployments, feedbacks, closed = deployments+p.DDI.Deployments, feedbacks+p.DDI.Feedbacks, closed+p.DDI.Closed
		failures, dispatched = failures+p.Failures, dispatched+p.Dispatched
	}
	if deployments == 0 || failures == 0 || failures == closed {
		t.Errorf("deployments %d, closed %d, of them failures %d: want both results", deployments, closed, failures)
	}
	c := rep.Check
	if c == nil || !c.OK() || !rep.Passed() {
		t.Fatalf("check of a clean DDI run: %+v", c)
	}
	if c.DDIActions != int(dispatched) || c.DDIUntied != 0 || c.DDIFeedbacks != int(feedbacks) ||
		c.AgentReceived != c.DDIActions || c.AgentCompleted != int(closed) || c.UnseenDispatches != 0 || c.DispatchEvents != c.DDIActions {
		t.Errorf("cross-check: %+v; the phases say %d actions, %d feedbacks, %d closed", c, dispatched, feedbacks, closed)
	}
	var actions, open int
	if err := db.QueryRow("SELECT COUNT(*), COUNT(*) - COUNT(closed_at) FROM ddi_action").Scan(&actions, &open); err != nil ||
		actions != c.DDIActions || open != 0 {
		t.Errorf("ddi_action: %d actions, %d open (%v); the controllers received %d and closed them all", actions, open, err, c.DDIActions)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "deployments read") ||
		!strings.Contains(table.String(), "and DDI: every feedback acknowledged") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
	var js strings.Builder
	var back struct {
		Run struct {
			DDI DDIPhase `json:"ddi"`
		} `json:"run"`
		Check struct {
			Actions int `json:"ddi_actions"`
		} `json:"check"`
	}
	if err := rep.WriteJSON(&js); err != nil || json.Unmarshal([]byte(js.String()), &back) != nil ||
		back.Run.DDI != *r.DDI || back.Check.Actions != c.DDIActions {
		t.Errorf("json: %v\n%s", err, js.String())
	}

	// The controllers' observations rebuilt from ddi_action (every action was closed,
	// with its record's result), then two closings undone in MySQL: one record's
	// detail and checkpoint lose the action's tag, another's result flips.
	obs := &Observed{}
	rows, err := db.Query("SELECT a.action_id, a.uid, d.result FROM ddi_action a JOIN dispatch d ON d.log_id = a.log_id ORDER BY a.action_id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a ActionRef
		var result int
		if err := rows.Scan(&a.ID, &a.UID, &result); err != nil {
			t.Fatal(err)
		}
		obs.Actions = append(obs.Actions, a)
		obs.Feedbacks = append(obs.Feedbacks, FeedbackRef{a, "closed", map[int]string{1: "success", 2: "failure"}[result]})
	}
	rows.Close()
	if len(obs.Actions) < 2 {
		t.Fatalf("%d actions: too few to plant on", len(obs.Actions))
	}
	first, second := obs.Actions[0].ID, obs.Actions[1].ID
	for _, q := range []string{
		"UPDATE dispatch SET detail = JSON_OBJECT('details', JSON_ARRAY('untagged')), checkpoint = NULL WHERE log_id = (SELECT log_id FROM ddi_action WHERE action_id = ?)",
		"UPDATE dispatch SET result = 3 - result WHERE log_id = (SELECT log_id FROM ddi_action WHERE action_id = ?)",
	} {
		id := first
		if strings.Contains(q, "result =") {
			id = second
		}
		if _, err := db.Exec(q, id); err != nil {
			t.Fatal(err)
		}
	}
	task := testenv.PlantQuotaViolation(t, db)
	cli := NewClient(url, testAdminToken, 4, 10*time.Second)
	defer cli.Close()
	now := time.Now()
	res, err := CheckServer(ctx, cli, CheckTarget{RunID: rep.RunID, ClaimsFrom: now.Add(-3 * time.Hour),
		ClaimsTo: now.Add(time.Minute), MaxEvents: 1_000_000}, obs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{ViolationQuota: 1, ViolationTwice: 1, ViolationClaimed: 1, ViolationFeedbackLost: 1, ViolationFeedbackMisapplied: 1}
	for kind, n := range want {
		if res.ByKind[kind] != n {
			t.Errorf("%s: found %d, want %d (violations %v)", kind, res.ByKind[kind], n, res.Violations)
		}
	}
	for _, v := range res.Violations {
		if v.TaskID != "" && v.TaskID != task {
			t.Errorf("violation on %s, planted on %s: %v", v.TaskID, task, v)
		}
	}
	if res.ViolationCount != 5 {
		t.Errorf("%d violations, want 5: %v", res.ViolationCount, res.Violations)
	}
	rep.Check = res
	if err := rep.Verdict(); !errors.Is(err, ErrViolations) || rep.Passed() {
		t.Errorf("verdict: %v passed %v, want ErrViolations", err, rep.Passed())
	}
}
