package admin_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/clientkey"
)

// Every admin edit reaches the affected agents on their next fetch (DESIGN.md
// section 1 and 4): each test first lets the agents' heaps be cached, then edits, then
// fetches through the dispatch service in the bundle.

func TestCreateTaskReachesTheNextFetch(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	a := b.agent("1")
	nextDue(t, "before", b.poll(a), nil)

	task := b.once("uid_1", t0.Add(-time.Minute))
	task.Params = json.RawMessage(`{"n":42}`)
	created := b.create(svc, task)

	if created.Key.ID == 0 || !created.CreatedAt.Equal(t0) {
		t.Fatalf("created: %+v", created)
	}
	d := got(t, "after create", b.poll(a), created.Key)
	var p struct{ N int }
	if err := json.Unmarshal(d.Params, &p); err != nil || p.N != 42 {
		t.Fatalf("params %s, want n 42", d.Params)
	}
	if stored, err := svc.GetTask(b.ctx, created.Key); err != nil || stored.Executor != "uid_1" || !stored.StartTime.Equal(t0.Add(-time.Minute)) {
		t.Fatalf("get task: %+v, %v", stored, err)
	}
}

func TestReplaceTaskReachesOldAndNewExecutor(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	u1, u2 := b.agent("1"), b.agent("2")
	task := b.create(svc, b.once("uid_1", t0.Add(time.Hour)))
	nextDue(t, "user 1 before", b.poll(u1), at(t0.Add(time.Hour)))
	nextDue(t, "user 2 before", b.poll(u2), nil)

	// Due now, with other params: user 1's next fetch has it as it is now.
	task.StartTime, task.Params = t0.Add(-time.Minute), json.RawMessage(`{"n":2}`)
	after, err := svc.ReplaceTask(b.ctx, task, nil)
	if err != nil || !after.StartTime.Equal(task.StartTime) {
		t.Fatalf("replace: %+v, %v", after, err)
	}
	d := got(t, "user 1 after replace", b.poll(u1), task.Key)
	var p struct{ N int }
	if err := json.Unmarshal(d.Params, &p); err != nil || p.N != 2 || !d.DueAt.Equal(t0.Add(-time.Minute)) {
		t.Fatalf("dispatched as before the replace: %+v", d)
	}
	b.done(u1, d.LogID)

	// Moved from user 1 to user 2: it leaves user 1's offer and reaches user 2's.
	moved := b.create(svc, b.once("uid_1", t0.Add(30*time.Minute)))
	nextDue(t, "user 1 with the second task", b.poll(u1), at(t0.Add(30*time.Minute)))
	moved.Executor, moved.StartTime = "uid_2", t0.Add(-30*time.Second)
	if _, err := svc.ReplaceTask(b.ctx, moved, nil); err != nil {
		t.Fatalf("move: %v", err)
	}
	nextDue(t, "user 1 after the move", b.poll(u1), nil)
	got(t, "user 2 after the move", b.poll(u2), moved.Key)
}

func TestPatchTaskReachesTheNextFetch(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	a := b.agent("1")
	task := b.create(svc, b.once("uid_1", t0.Add(10*time.Minute)))
	nextDue(t, "before", b.poll(a), at(t0.Add(10*time.Minute)))
	path := "/tasks/once/" + strings.TrimPrefix(task.Key.String(), "once:")
	patch := func(body string) (int, map[string]any) {
		return b.serve(b.http.PatchTask(), http.MethodPatch, "/tasks/{kind}/{id}", path, body)
	}

	for _, c := range []struct{ body, field string }{
		{`{"priority":10}`, "priority"},
		{`{"id":5}`, "id"},
		{`{"colour":"red"}`, "colour"},
		{`{"start_time":"soon"}`, "start_time"},
	} {
		code, out := patch(c.body)
		msg, _ := out["error"].(map[string]any)["message"].(string)
		if code != http.StatusBadRequest || !strings.Contains(msg, c.field) {
			t.Errorf("patch %s: %d %v, want 400 naming %s", c.body, code, out, c.field)
		}
	}
	if code, out := patch(`{"params":{"n":"x"}}`); code != http.StatusUnprocessableEntity {
		t.Errorf("params against the template: %d %v, want 422", code, out)
	}
	nextDue(t, "after refused patches", b.poll(a), at(t0.Add(10*time.Minute)))

	// A merge patch: start_time replaced, params merged member by member, the rest kept.
	code, out := patch(`{"start_time":"` + t0.Add(-time.Minute).Format(time.RFC3339) + `","params":{"m":3}}`)
	if code != http.StatusOK || out["priority"] != 5.0 || out["task_id"] != task.Key.String() {
		t.Fatalf("patch: %d %v", code, out)
	}
	d := got(t, "after patch", b.poll(a), task.Key)
	var p map[string]int
	if err := json.Unmarshal(d.Params, &p); err != nil || p["n"] != 1 || p["m"] != 3 || !d.DueAt.Equal(t0.Add(-time.Minute)) {
		t.Fatalf("dispatched: due %v params %s, want due %v params n=1 m=3", d.DueAt, d.Params, t0.Add(-time.Minute))
	}

	// Paused by a patch: the open dispatch is parked, nothing is handed out.
	b.done(a, d.LogID)
	paused := b.create(svc, b.once("uid_1", t0.Add(-30*time.Second)))
	path = "/tasks/once/" + strings.TrimPrefix(paused.Key.String(), "once:")
	if code, out := patch(`{"status":"paused"}`); code != http.StatusOK || out["status"] != "paused" {
		t.Fatalf("pause: %d %v", code, out)
	}
	nextDue(t, "paused", b.poll(a), nil)
	if code, out := patch(`{"status":"active"}`); code != http.StatusOK {
		t.Fatalf("resume: %d %v", code, out)
	}
	got(t, "resumed", b.poll(a), paused.Key)
}

func TestDeleteTaskCancelsAndLeavesTheOffer(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	a := b.agent("1")
	open := b.create(svc, b.once("uid_1", t0.Add(-time.Minute)))
	later := b.create(svc, b.once("uid_1", t0.Add(time.Hour)))
	d := got(t, "before", b.poll(a), open.Key)

	for _, k := range []taskd.TaskKey{open.Key, later.Key} {
		if err := svc.DeleteTask(b.ctx, k, nil); err != nil {
			t.Fatalf("delete %s: %v", k, err)
		}
	}

	// The open dispatch is cancelled, not redone; the later one is no longer due.
	nextDue(t, "after delete", b.poll(a), nil)
	err := b.dispatch.Complete(b.ctx, a.uid, a.hash, d.LogID, taskd.ResultSuccess, nil)
	wantCode(t, "complete of the cancelled dispatch", err, taskd.CodeStaleLease)
	_, err = svc.GetTask(b.ctx, open.Key)
	wantCode(t, "get a deleted task", err, taskd.CodeNotFound)
	wantCode(t, "delete twice", svc.DeleteTask(b.ctx, open.Key, nil), taskd.CodeNotFound)
	deleted, _, err := svc.ListTasks(b.ctx, taskd.TaskFilter{Status: taskd.StatusDeleted}, taskd.TaskKey{}, 10)
	if err != nil || len(deleted) != 2 {
		t.Fatalf("deleted tasks: %v, %v", deleted, err)
	}
	if live, _, err := svc.ListTasks(b.ctx, taskd.TaskFilter{}, taskd.TaskKey{}, 10); err != nil || len(live) != 0 {
		t.Fatalf("live tasks: %v, %v", live, err)
	}
}

func TestGroupMembershipReachesTheNextFetch(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	task := b.once("gid_g", t0.Add(-time.Minute))
	task.DispatchTimes = taskd.Unlimited
	now := b.create(svc, task)
	later := b.create(svc, b.once("gid_g", t0.Add(time.Hour)))
	u1, u2, u3 := b.agent("1"), b.agent("2"), b.agent("3")
	nextDue(t, "user 1 before joining", b.poll(u1), nil)

	if err := svc.AddMembers(b.ctx, "g", []string{"1", "2"}); err != nil {
		t.Fatalf("add: %v", err)
	}
	for _, a := range []agent{u1, u2} {
		b.done(a, got(t, "member "+a.uid, b.poll(a), now.Key).LogID)
		nextDue(t, "member "+a.uid+" after its task", b.poll(a), at(later.StartTime))
	}

	if err := svc.RemoveMember(b.ctx, "g", "1"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	nextDue(t, "user 1 after leaving", b.poll(u1), nil)
	wantCode(t, "remove a non-member", svc.RemoveMember(b.ctx, "g", "1"), taskd.CodeNotFound)

	if err := svc.ReplaceMembers(b.ctx, "g", []string{"3"}); err != nil {
		t.Fatalf("replace: %v", err)
	}
	if m, err := svc.Members(b.ctx, "g"); err != nil || !slices.Equal(m, []string{"3"}) {
		t.Fatalf("members: %v, %v", m, err)
	}
	nextDue(t, "user 2 after being replaced", b.poll(u2), nil)
	got(t, "user 3 after joining", b.poll(u3), now.Key)
}

func TestTemplateAndTaskValidationNameTheField(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	tpl := func(body string) (int, map[string]any) {
		return b.serve(b.http.CreateTemplate(), http.MethodPost, "/templates", "/templates", body)
	}
	task := func(body string) (int, map[string]any) {
		return b.serve(b.http.CreateTask(), http.MethodPost, "/tasks/{kind}", "/tasks/once", body)
	}
	start := `"start_time":"` + t0.Format(time.RFC3339) + `"`
	withTemplate := `"template_id":` + strconv.FormatInt(b.template, 10)
	for _, c := range []struct {
		name  string
		send  func(string) (int, map[string]any)
		body  string
		code  int
		field string
	}{
		{"empty name", tpl, `{"name":"","schema":{"type":"object"}}`, 400, "name"},
		{"name not a string", tpl, `{"name":5,"schema":{"type":"object"}}`, 400, "name"},
		{"no schema", tpl, `{"name":"x"}`, 400, "schema"},
		{"schema not an object", tpl, `{"name":"x","schema":[1]}`, 400, "schema"},
		{"schema not JSON Schema", tpl, `{"name":"x","schema":{"type":12}}`, 400, "schema"},
		{"schema refers outside", tpl, `{"name":"x","schema":{"$ref":"https://example.com/s.json"}}`, 400, "$ref"},
		{"no executor", task, `{` + start + `,` + withTemplate + `}`, 400, "executor"},
		{"no template", task, `{"executor":"uid_1",` + start + `}`, 400, "template_id"},
		{"unknown template", task, `{"executor":"uid_1",` + start + `,"template_id":999999}`, 400, "template_id"},
		{"priority out of range", task, `{"executor":"uid_1",` + start + `,` + withTemplate + `,"priority":0}`, 400, "priority"},
		{"bad mode", task, `{"executor":"uid_1",` + start + `,` + withTemplate + `,"mode":"sometimes"}`, 400, "mode"},
		{"params against the template", task, `{"executor":"uid_1",` + start + `,` + withTemplate + `,"params":{"n":"seven"}}`, 422, "/n"},
	} {
		code, out := c.send(c.body)
		e, _ := out["error"].(map[string]any)
		text, _ := json.Marshal(e) // message and details
		if code != c.code || !strings.Contains(string(text), c.field) {
			t.Errorf("%s: %d %s, want %d naming %s", c.name, code, text, c.code, c.field)
		}
	}

	// Through the service: refused params store nothing; a valid schema is stored.
	bad := b.once("uid_1", t0)
	bad.Params = json.RawMessage(`{"n":1.5}`)
	_, err := svc.CreateTask(b.ctx, bad)
	wantCode(t, "params against the template", err, taskd.CodeParamsInvalid)
	if tasks, _, err := svc.ListTasks(b.ctx, taskd.TaskFilter{}, taskd.TaskKey{}, 10); err != nil || len(tasks) != 0 {
		t.Fatalf("tasks after refused creates: %v, %v", tasks, err)
	}
	_, err = svc.CreateTemplate(b.ctx, taskd.Template{Name: "bad", Schema: json.RawMessage(`{"properties":{"n":{"minimum":"one"}}}`)})
	wantCode(t, "invalid schema", err, taskd.CodeInvalid)
	if tpls, err := svc.ListTemplates(b.ctx); err != nil || len(tpls) != 1 || tpls[0].ID != b.template {
		t.Fatalf("templates: %v, %v", tpls, err)
	}
}

func TestIssueAndRevokeKeys(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	task := b.create(svc, b.once("uid_1", t0.Add(-time.Minute)))

	var hashes []string
	for range 2 {
		key, err := svc.IssueKey(b.ctx, "1")
		uid, hash, ok := clientkey.Parse(key)
		if err != nil || !ok || uid != "1" {
			t.Fatalf("issue: %q, %v", key, err)
		}
		hashes = append(hashes, hash)
	}
	for _, h := range hashes {
		got(t, "with an issued key", b.poll(agent{"1", h}), task.Key)
	}

	n, err := svc.RevokeKeys(b.ctx, "1")
	if err != nil || n != 2 {
		t.Fatalf("revoke: %d, %v", n, err)
	}
	for _, h := range hashes {
		_, err := b.dispatch.Fetch(b.ctx, "1", h, 0)
		wantCode(t, "fetch with a revoked key", err, taskd.CodeUnauthenticated)
	}
	_, err = svc.IssueKey(b.ctx, "uid_1")
	wantCode(t, "issue for an executor string", err, taskd.CodeInvalid)

	entries, err := svc.AuditPage(b.ctx, t0.Add(-time.Hour), t0.Add(time.Hour), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range entries {
		if strings.HasPrefix(e.Action, "client_key.") && e.Actor == actor && e.Target == "user:1" {
			actions = append(actions, e.Action)
		}
	}
	// newest first
	if !slices.Equal(actions, []string{"client_key.revoke_all", "client_key.create", "client_key.create"}) {
		t.Fatalf("audited key changes by %s: %v", actor, actions)
	}
}

func TestScheduleEventsAndStats(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	if err := svc.AddMembers(b.ctx, "g", []string{"1"}); err != nil {
		t.Fatal(err)
	}
	rot := b.once("uid_1", t0)
	rot.Key.Kind, rot.SpaceMinutes = taskd.KindRotate, 60
	rot = b.create(svc, rot)
	grp := b.once("gid_g", t0.Add(30*time.Minute))
	grp.DispatchTimes = 3
	grp = b.create(svc, grp)

	type row struct {
		task      string
		due       time.Time
		claimed   int
		remaining int
	}
	schedule := func(executor string) []row {
		t.Helper()
		occ, truncated, err := svc.Schedule(b.ctx, executor, t0, t0.Add(2*time.Hour))
		if err != nil || truncated {
			t.Fatalf("schedule of %s: %v (truncated %v)", executor, err, truncated)
		}
		var rows []row
		for _, o := range occ {
			r := row{task: o.TaskID, due: o.DueAt, claimed: o.Claimed, remaining: -1}
			if o.Remaining != nil {
				r.remaining = *o.Remaining
			}
			rows = append(rows, r)
		}
		return rows
	}
	want := []row{
		{rot.Key.String(), t0, 0, 1},
		{grp.Key.String(), t0.Add(30 * time.Minute), 0, 3},
		{rot.Key.String(), t0.Add(time.Hour), 0, 1},
	}
	if s := schedule("uid_1"); !slices.Equal(s, want) {
		t.Fatalf("schedule of uid_1:\n got %v\nwant %v", s, want)
	}
	if s := schedule("gid_g"); !slices.Equal(s, want[1:2]) {
		t.Fatalf("schedule of gid_g: %v, want %v", s, want[1:2])
	}

	// One dispatch, completed 5 s later.
	a := b.agent("1")
	d := got(t, "the first rotation", b.poll(a), rot.Key)
	b.clock.Advance(5 * time.Second)
	b.done(a, d.LogID)

	want[0].claimed, want[0].remaining = 1, 0
	if s := schedule("uid_1"); !slices.Equal(s, want) {
		t.Fatalf("schedule after a dispatch:\n got %v\nwant %v", s, want)
	}

	evs, err := svc.Events(b.ctx, taskd.EventFilter{UID: "1", From: t0.Add(-time.Hour), To: t0.Add(time.Hour)}, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range evs {
		if e.LogID != d.LogID || e.TaskID != rot.Key.String() || !e.DueAt.Equal(t0) {
			t.Fatalf("event %+v is not of dispatch %s", e, d.LogID)
		}
		seen = append(seen, string(e.Type)+"@"+e.At.Format("15:04:05")+":"+e.Result)
	}
	if !slices.Equal(seen, []string{"complete@10:00:05:success", "dispatch@10:00:00:"}) {
		t.Fatalf("events newest first: %v", seen)
	}
	if evs, err := svc.Events(b.ctx, taskd.EventFilter{UID: "2", From: t0.Add(-time.Hour), To: t0.Add(time.Hour)}, nil, 10); err != nil || len(evs) != 0 {
		t.Fatalf("events of user 2: %v, %v", evs, err)
	}

	stats, err := svc.Stats(b.ctx, t0.Add(-time.Hour), t0.Add(time.Hour))
	if err != nil || len(stats) != 1 {
		t.Fatalf("stats: %+v, %v", stats, err)
	}
	s := stats[0]
	if s.TaskID != rot.Key.String() || s.Dispatched != 1 || s.Completed != 1 || s.Failed != 0 ||
		s.LatencyMSP50 == nil || *s.LatencyMSP50 != 5000 {
		t.Fatalf("stats of %s: %+v", rot.Key, s)
	}
}

// The service checks what it stores itself, whoever calls it: a task or a membership
// change that the HTTP layer would have refused is refused here too, before anything
// is written.
func TestServiceRefusesWhatHTTPWouldRefuse(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	for name, edit := range map[string]func(*taskd.Task){
		"executor":      func(t *taskd.Task) { t.Executor = "bob" },
		"priority":      func(t *taskd.Task) { t.Priority = 0 },
		"quota":         func(t *taskd.Task) { t.DispatchTimes = 0 },
		"lease":         func(t *taskd.Task) { t.Own.LeaseSeconds = new(-1) },
		"max_attempts":  func(t *taskd.Task) { t.Own.MaxAttempts = new(0) },
		"start_time":    func(t *taskd.Task) { t.StartTime = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
		"space_minutes": func(t *taskd.Task) { t.SpaceMinutes = 5 }, // on a once task
	} {
		task := b.once("uid_1", t0)
		edit(&task)
		if _, err := svc.CreateTask(b.ctx, task); taskd.ErrorCode(err) != taskd.CodeInvalid {
			t.Errorf("create with a bad %s: %v", name, err)
		}
	}
	created := b.create(svc, b.once("uid_1", t0))
	bad := created
	bad.Executor = "nobody"
	if _, err := svc.ReplaceTask(b.ctx, bad, nil); taskd.ErrorCode(err) != taskd.CodeInvalid {
		t.Errorf("replace with a bad executor: %v", err)
	}
	if got, err := svc.GetTask(b.ctx, created.Key); err != nil || got.Executor != "uid_1" {
		t.Errorf("after the refused replace: %+v, %v", got, err)
	}
	var n int
	if err := b.store.DB().QueryRow("SELECT COUNT(*) FROM task_once").Scan(&n); err != nil || n != 1 {
		t.Errorf("%d once tasks stored, want only the valid one (%v)", n, err)
	}
	for name, change := range map[string]func() error{
		"add a bad uid":        func() error { return svc.AddMembers(b.ctx, "ops", []string{"ok", "no spaces"}) },
		"replace with gid_":    func() error { return svc.ReplaceMembers(b.ctx, "ops", []string{"gid_x"}) },
		"a bad group":          func() error { return svc.AddMembers(b.ctx, "uid_ops", []string{"1"}) },
		"remove from no group": func() error { return svc.RemoveMember(b.ctx, "", "1") },
	} {
		if err := change(); taskd.ErrorCode(err) != taskd.CodeInvalid {
			t.Errorf("%s: %v", name, err)
		}
	}
	if members, err := svc.Members(b.ctx, "ops"); err != nil || len(members) != 0 {
		t.Errorf("members after refused changes: %v, %v", members, err)
	}
}
