package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/api"
	"github.com/taskpull/taskd/client"
)

// Every operation of the admin API is reached by a client call, each answering what
// the server did; the calls are made in the order an admin would make them. The
// routes the server answered are checked against the OpenAPI document's operations.
func TestEveryOperation(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := newClient(t, s.URL, client.Config{})
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Templates.
	tmpl, err := c.CreateTemplate(ctx, client.Template{Name: name("report"),
		Schema: json.RawMessage(`{"type":"object","properties":{"store":{"type":"integer"}}}`), MaxAttempts: 2,
		Windows: []client.Window{{Cron: "0 * * * *", Minutes: 60}}})
	must(err)
	if tmpl.ID == 0 || tmpl.MaxAttempts != 2 || tmpl.Version == "" || tmpl.CreatedAt.IsZero() || len(tmpl.Windows) != 1 {
		t.Errorf("created template %+v", tmpl)
	}
	all, err := c.Templates(ctx)
	must(err)
	if len(all) != 1 || all[0].ID != tmpl.ID {
		t.Errorf("Templates: %+v", all)
	}
	tmpl, err = c.UpdateTemplate(ctx, tmpl.ID, map[string]any{"lease_seconds": 90}, client.IfMatch(tmpl.Version))
	must(err)
	if got, err := c.Template(ctx, tmpl.ID); err != nil || got.LeaseSeconds != 90 || got.Version != tmpl.Version {
		t.Errorf("Template after the edit: %+v, %v", got, err)
	}

	// Tasks.
	task, err := c.CreateTask(ctx, client.Task{Kind: "once", Executor: "uid_s1", TemplateID: tmpl.ID,
		StartTime: time.Now().Add(-time.Minute), Params: json.RawMessage(`{"store":1}`), Priority: 7})
	must(err)
	if task.TaskID == "" || task.Kind != "once" || task.Priority != 7 || !slices.Contains(task.Inherited, "lease_seconds") {
		t.Errorf("created task %+v", task)
	}
	rot, err := c.CreateTask(ctx, client.Task{Kind: "rotate", Executor: "gid_stores", TemplateID: tmpl.ID,
		StartTime: time.Now().Add(time.Hour), Cron: "30 2 * * *", TimeZone: "Europe/Amsterdam", Status: "paused",
		DispatchTimes: -1, Params: json.RawMessage(`{"store":0}`)})
	must(err)
	if rot.Cron != "30 2 * * *" || rot.Status != "paused" || rot.DispatchTimes != -1 {
		t.Errorf("created rotating task %+v", rot)
	}
	preview, err := c.PreviewTask(ctx, client.Task{Kind: "once", Executor: "uid_s9", TemplateID: tmpl.ID,
		StartTime: time.Now(), Params: json.RawMessage(`{}`)})
	must(err)
	if len(preview.UIDs) != 1 || preview.UIDs[0] != "s9" || preview.Summary.TotalDispatches != 1 {
		t.Errorf("preview %+v", preview)
	}
	paused, err := client.Collect(c.Tasks(ctx, client.Filter{Status: "paused"}))
	must(err)
	if len(paused) != 1 || paused[0].TaskID != rot.TaskID {
		t.Errorf("paused tasks: %+v", paused)
	}
	rot, err = c.UpdateTask(ctx, rot.TaskID, map[string]any{"status": "active"}, client.IfMatch(rot.Version))
	must(err)
	rot.Priority = 9
	rot, err = c.ReplaceTask(ctx, rot, client.IfMatch(rot.Version))
	must(err)
	if got, err := c.Task(ctx, rot.TaskID); err != nil || got.Priority != 9 || got.Status != "active" {
		t.Errorf("Task after replace: %+v, %v", got, err)
	}
	sched, err := c.Schedule(ctx, time.Now().Add(-time.Hour), time.Now().Add(48*time.Hour), "gid_stores")
	must(err)
	if len(sched.Occurrences) == 0 {
		t.Errorf("schedule: %+v", sched)
	}

	// Groups: hand-kept, then a dynamic one.
	uids, err := c.SetGroupMembers(ctx, "stores", []string{"s1", "s2"})
	must(err)
	uids, err = c.AddGroupMembers(ctx, "stores", []string{"s3"})
	must(err)
	must(c.RemoveGroupMember(ctx, "stores", "s2"))
	if uids, err = c.GroupMembers(ctx, "stores"); err != nil || !slices.Equal(uids, []string{"s1", "s3"}) {
		t.Errorf("members: %v, %v", uids, err)
	}
	if run, err := c.Run(ctx, "ping", "gid_stores", nil); err != nil || run.DispatchTimes != 2 || run.Kind != "once" {
		t.Errorf("Run for a group of two: %+v, %v; want a once task, dispatch_times 2", run, err)
	}
	if _, err := c.Run(ctx, "ping", "gid_nobody", nil); err == nil {
		t.Error("Run for a group without members: no error")
	}
	dyn, err := c.SetGroupRule(ctx, "ams", "site=ams1", ">= 1.0.0")
	must(err)
	if !dyn.Dynamic || dyn.Selector != "site=ams1" {
		t.Errorf("dynamic group %+v", dyn)
	}
	if g, err := c.Group(ctx, "stores"); err != nil || g.Members != 2 || g.Dynamic {
		t.Errorf("Group stores: %+v, %v", g, err)
	}
	groups, err := client.Collect(c.Groups(ctx))
	must(err)
	if len(groups) != 2 {
		t.Errorf("groups: %+v", groups)
	}
	must(c.DeleteGroup(ctx, "ams"))

	// Clients, keys, and an agent doing the work.
	info, err := c.SetMaxInFlight(ctx, "s1", 2)
	must(err)
	if info.MaxInFlight != 2 || info.Version == "" {
		t.Errorf("client settings %+v", info)
	}
	runAgent(t, c, s.URL, "s1", func(task *agent.Task) agent.Outcome { return agent.Done(map[string]int{"rows": 3}) })
	if info, err = c.ClientInfo(ctx, "s1"); err != nil || info.Keys != 1 || info.Agent == nil {
		t.Errorf("ClientInfo: %+v, %v", info, err)
	}
	fleet, err := client.Collect(c.Clients(ctx, client.Filter{Group: "stores"}))
	must(err)
	if len(fleet) != 1 || fleet[0].UID != "s1" {
		t.Errorf("fleet of stores: %+v", fleet)
	}
	if n, err := c.RevokeKeys(ctx, "s1"); err != nil || n != 1 {
		t.Errorf("RevokeKeys: %d, %v", n, err)
	}
	results, err := c.Wait(ctx, task.TaskID)
	must(err)
	if len(results) != 1 || results[0].State != "done" || results[0].Result != "success" || string(results[0].Detail) != `{"rows":3}` {
		t.Errorf("Wait: %+v", results)
	}

	// Dispatch records, interventions, events and stats.
	recs, err := client.Collect(c.Dispatches(ctx, client.Filter{TaskID: task.TaskID}))
	must(err)
	if len(recs) != 1 || recs[0].State != "done" {
		t.Fatalf("dispatches: %+v", recs)
	}
	if _, err := c.CancelDispatch(ctx, recs[0].LogID); !errors.Is(err, client.ErrConflict) {
		t.Errorf("cancelling a finished dispatch: %v, want ErrConflict", err)
	}
	hold, err := c.CreateTask(ctx, client.Task{Kind: "once", Executor: "uid_s3", TemplateID: tmpl.ID,
		StartTime: time.Now().Add(-time.Minute), Params: json.RawMessage(`{}`), LeaseSeconds: 300})
	must(err)
	runAgent(t, c, s.URL, "s3", func(task *agent.Task) agent.Outcome { return agent.FailPermanent(errors.New("disk full")) })
	dead, err := client.Collect(c.Dispatches(ctx, client.Filter{TaskID: hold.TaskID, State: "dead"}))
	must(err)
	if len(dead) != 1 {
		t.Fatalf("dead dispatches: %+v", dead)
	}
	retried, err := c.RetryDispatch(ctx, dead[0].LogID)
	must(err)
	if retried.RetriedAt.IsZero() {
		t.Errorf("retried dispatch %+v", retried)
	}
	open, err := fetchOne(t, c, s.URL, "s3")
	must(err)
	if expired, err := c.ExpireDispatch(ctx, open); err != nil || expired.State == "open" {
		t.Errorf("ExpireDispatch: %+v, %v", expired, err)
	}
	events, err := client.Collect(c.Events(ctx, client.Filter{TaskID: task.TaskID}))
	must(err)
	if types := eventTypes(events); !slices.Equal(types, []string{"complete", "dispatch"}) {
		t.Errorf("events of %s: %v", task.TaskID, types)
	}
	stats, err := c.Stats(ctx, time.Time{}, time.Time{})
	must(err)
	if len(stats) == 0 {
		t.Errorf("stats: %+v", stats)
	}
	_, err = c.AgentStats(ctx, time.Now().Add(-time.Hour), time.Time{})
	must(err)
	_, err = c.Overview(ctx)
	must(err)
	_, err = c.Nodes(ctx)
	must(err)
	audit, err := client.Collect(c.Audit(ctx, client.Filter{PageSize: 2}))
	must(err)
	if len(audit) < 5 || audit[0].Actor != "producer" {
		t.Errorf("audit (%d entries): %+v", len(audit), audit[:min(len(audit), 2)])
	}

	// A rollout.
	ro, err := c.CreateTask(ctx, client.Task{Kind: "once", Executor: "gid_stores", TemplateID: tmpl.ID,
		StartTime: time.Now().Add(-time.Minute), Params: json.RawMessage(`{}`), DispatchTimes: 2,
		Rollout: &client.Rollout{Phases: []client.Phase{{Count: 1}, {Percent: 100}}, Advance: "manual"}})
	must(err)
	state, err := c.Rollout(ctx, ro.TaskID)
	must(err)
	if state.Phase != 1 || state.Version == "" {
		t.Errorf("rollout %+v", state)
	}
	rollouts, err := c.Rollouts(ctx)
	must(err)
	if len(rollouts) != 1 {
		t.Errorf("rollouts: %+v", rollouts)
	}
	if state, err = c.MoveRollout(ctx, ro.TaskID, "pause", client.IfMatch(state.Version)); err != nil || state.State != "paused" {
		t.Errorf("pause: %+v, %v", state, err)
	}

	// Campaigns.
	spec := client.CampaignSpec{Name: name("sweep"), TemplateID: tmpl.ID, Executor: "uid_s1", RatePerSecond: 5}
	spec.Items.UIDs = []string{}
	camp, err := c.CreateCampaign(ctx, spec)
	must(err)
	camp, err = c.UploadCampaignItems(ctx, camp.ID, "text/csv", strings.NewReader("uid\ns1\ns3\n"))
	must(err)
	if camp.Total != 2 || camp.State != "created" {
		t.Errorf("campaign after the upload: %+v", camp)
	}
	got, err := c.Campaign(ctx, camp.ID)
	must(err)
	camp, err = c.MoveCampaign(ctx, camp.ID, "start", client.IfMatch(got.Version))
	must(err)
	if camp.State != "running" {
		t.Errorf("started campaign %+v", camp)
	}
	camps, err := client.Collect(c.Campaigns(ctx, client.Filter{State: "running"}))
	must(err)
	if len(camps) != 1 {
		t.Errorf("running campaigns: %+v", camps)
	}
	if f, err := c.CampaignFailures(ctx, camp.ID); err != nil || f.CampaignID != camp.ID {
		t.Errorf("failures: %+v, %v", f, err)
	}

	// Artifacts.
	art, err := c.UploadArtifact(ctx, "fw.bin", bytes.NewReader([]byte("firmware")))
	must(err)
	if art.Size != 8 || art.Hashes.SHA256 == "" {
		t.Errorf("artifact %+v", art)
	}
	arts, err := client.Collect(c.Artifacts(ctx))
	must(err)
	if len(arts) != 1 {
		t.Errorf("artifacts: %+v", arts)
	}
	if _, err := c.Artifact(ctx, art.ID); err != nil {
		t.Error(err)
	}
	must(c.DeleteArtifact(ctx, art.ID))
	if _, err := c.Artifact(ctx, art.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a deleted artifact: %v, want ErrNotFound", err)
	}

	// Deletes.
	must(c.DeleteTask(ctx, rot.TaskID))
	if err := c.DeleteTemplate(ctx, tmpl.ID); !errors.Is(err, client.ErrConflict) {
		t.Errorf("deleting a template in use: %v, want ErrConflict", err)
	}
	spare, err := c.CreateTemplate(ctx, client.Template{Name: name("spare")})
	must(err)
	must(c.DeleteTemplate(ctx, spare.ID, client.IfMatch(spare.Version)))

	checkEveryOperation(t, s)
}

// checkEveryOperation fails t for each admin operation of the OpenAPI document that
// no request reached.
func checkEveryOperation(t *testing.T, s *server) {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.Document, &doc); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for path, ops := range doc.Paths {
		if !strings.HasPrefix(path, "/v1/admin/") {
			continue
		}
		for method := range ops {
			if method == "parameters" {
				continue
			}
			n++
			if route := strings.ToUpper(method) + " " + path; s.routes[route] == 0 {
				t.Errorf("no client call reached %s", route)
			}
		}
	}
	if n < 40 {
		t.Errorf("the document has %d admin operations: is it read right?", n)
	}
}

func eventTypes(events []client.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Type)
	}
	return out
}

// fetchOne fetches one task for uid as an agent would and leaves it open; it answers
// its log id.
func fetchOne(t *testing.T, c *client.Client, url, uid string) (string, error) {
	t.Helper()
	key, err := c.IssueKey(t.Context(), uid)
	if err != nil {
		return "", err
	}
	a, err := agent.New(agent.Config{URL: url, Key: key, Once: true, StartupJitter: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := make(chan string, 1)
	go a.Run(ctx, agent.HandlerFunc(func(ctx context.Context, task *agent.Task) agent.Outcome {
		got <- task.LogID
		<-ctx.Done()
		return agent.GiveBack("test over")
	}))
	select {
	case id := <-got:
		return id, nil
	case <-time.After(time.Minute):
		return "", errors.New("no task fetched in a minute")
	}
}
