package app_test

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

func errCode(out map[string]any) string {
	if e, ok := out["error"].(map[string]any); ok {
		s, _ := e["code"].(string)
		return s
	}
	return ""
}

// expect sends an admin request and checks status and error code ("" for success).
func (e *env) expect(method, path string, body any, status int, code string) map[string]any {
	e.t.Helper()
	got, out := e.do(0, method, path, adminToken, body)
	if got != status || errCode(out) != code {
		e.t.Errorf("%s %s %v: %d %q, want %d %q (%v)", method, path, body, got, errCode(out), status, code, out)
	}
	return out
}

func TestTemplatesEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.expect("POST", "/v1/admin/templates", `{"name": "x", "schema": {"type": 5}}`, 400, "invalid_argument")
	e.expect("POST", "/v1/admin/templates", `{"name": "x", "schema": [1]}`, 400, "invalid_argument")
	e.expect("POST", "/v1/admin/templates", `{"schema": {}}`, 400, "invalid_argument")
	e.expect("POST", "/v1/admin/templates", `{"name": "x", "schema": {}, "id": 9}`, 400, "invalid_argument")
	e.expect("POST", "/v1/admin/templates", `{"name": "x", "schema": {`, 400, "malformed_json")
	if n := e.count("SELECT COUNT(*) FROM task_params_template"); n != 0 {
		t.Fatalf("refused templates were written: %d", n)
	}
	out := e.expect("POST", "/v1/admin/templates", `{"name": "crawl", "schema": {"type": "object", "required": ["url"]}}`, 201, "")
	id := fmt.Sprint(out["id"])
	if got := e.expect("GET", "/v1/admin/templates/"+id, nil, 200, ""); got["name"] != "crawl" {
		t.Fatalf("get template: %v", got)
	}
	if got := e.expect("GET", "/v1/admin/templates", nil, 200, ""); len(got["templates"].([]any)) != 1 {
		t.Fatalf("list templates: %v", got)
	}
	e.expect("GET", "/v1/admin/templates/999", nil, 404, "not_found")
	e.expect("GET", "/v1/admin/templates/abc", nil, 404, "not_found")
	task := e.expect("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_1", "start_time": ts(t0),
		"template_id": out["id"], "params": map[string]any{"url": "u"}}, 201, "")
	e.expect("DELETE", "/v1/admin/templates/"+id, nil, 409, "conflict")
	e.expect("DELETE", "/v1/admin/tasks/once/"+fmt.Sprint(task["id"]), nil, 204, "")
	e.expect("DELETE", "/v1/admin/templates/"+id, nil, 204, "")
	e.expect("DELETE", "/v1/admin/templates/"+id, nil, 404, "not_found")
	e.expect("GET", "/v1/admin/templates/"+id, nil, 404, "not_found")
}

func TestTaskValidationWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	out := e.expect("POST", "/v1/admin/templates", `{"name": "crawl", "schema": {"type": "object",
		"properties": {"url": {"type": "string"}}, "required": ["url"]}}`, 201, "")
	tpl := out["id"]
	base := func(kv ...any) map[string]any {
		m := map[string]any{"executor": "gid_ops", "start_time": ts(t0), "template_id": tpl, "params": map[string]any{"url": "u"}}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
			} else {
				m[kv[i].(string)] = kv[i+1]
			}
		}
		return m
	}
	auditBefore := e.count("SELECT COUNT(*) FROM audit_log")
	for _, c := range []struct {
		kind   string
		body   map[string]any
		status int
		code   string
	}{
		{"once", base("executor", "ops"), 400, "invalid_argument"},
		{"once", base("executor", "uid_a b"), 400, "invalid_argument"},
		{"once", base("start_time", nil), 400, "invalid_argument"},
		{"once", base("start_time", "tomorrow"), 400, "invalid_argument"},
		{"once", base("start_time", "0001-01-01T00:00:00Z"), 400, "invalid_argument"},
		{"once", base("start_time", "9999-12-31T00:00:00Z"), 400, "invalid_argument"},
		{"rotate", base("space_minutes", 200000000), 400, "invalid_argument"},
		{"once", base("template_id", nil), 400, "invalid_argument"},
		{"once", base("template_id", 999), 400, "invalid_argument"},
		{"once", base("dispatch_times", 0), 400, "invalid_argument"},
		{"once", base("dispatch_times", -2), 400, "invalid_argument"},
		{"once", base("mode", "sometimes"), 400, "invalid_argument"},
		{"once", base("priority", 0), 400, "invalid_argument"},
		{"once", base("priority", 10), 400, "invalid_argument"},
		{"once", base("status", "deleted"), 400, "invalid_argument"},
		{"once", base("lease_seconds", -1), 400, "invalid_argument"},
		{"once", base("max_attempts", 0), 400, "invalid_argument"},
		{"once", base("space_minutes", 5), 400, "invalid_argument"},
		{"once", base("claimed", 3), 400, "invalid_argument"},
		{"once", base("id", 3), 400, "invalid_argument"},
		{"once", base("created_at", ts(t0)), 400, "invalid_argument"},
		{"once", base("priority", "high"), 400, "invalid_argument"},
		{"once", base("params", map[string]any{"url": 5}), 422, "params_invalid"},
		{"once", base("params", map[string]any{}), 422, "params_invalid"},
		{"rotate", base(), 400, "invalid_argument"},
		{"rotate", base("space_minutes", 0), 400, "invalid_argument"},
		{"rotate", base("space_minutes", 5, "end_time", ts(t0)), 400, "invalid_argument"},
		{"weekly", base(), 404, "not_found"},
	} {
		e.expect("POST", "/v1/admin/tasks/"+c.kind, c.body, c.status, c.code)
	}
	out = e.expect("POST", "/v1/admin/tasks/once", base("params", map[string]any{"url": 5}), 422, "params_invalid")
	if !strings.Contains(fmt.Sprint(out["error"].(map[string]any)["details"]), "/url") {
		t.Errorf("params_invalid details do not point at /url: %v", out)
	}
	if n := e.count("SELECT (SELECT COUNT(*) FROM task_once) + (SELECT COUNT(*) FROM task_rotate)"); n != 0 {
		t.Fatalf("refused tasks were written: %d", n)
	}
	if n := e.count("SELECT COUNT(*) FROM audit_log"); n != auditBefore {
		t.Fatalf("refused requests were audited: %d entries, want %d", n, auditBefore)
	}

	created := e.expect("POST", "/v1/admin/tasks/rotate", base("space_minutes", 60, "end_time", ts(t0.Add(time.Hour*24)),
		"dispatch_times", -1, "mode", "until_exhausted", "priority", 9, "lease_seconds", 30, "max_attempts", 3), 201, "")
	path := "/v1/admin/tasks/rotate/" + fmt.Sprint(created["id"])
	got := e.expect("GET", path, nil, 200, "")
	for k, want := range map[string]any{"task_id": "rotate:1", "kind": "rotate", "executor": "gid_ops", "space_minutes": 60.0,
		"dispatch_times": -1.0, "mode": "until_exhausted", "priority": 9.0, "status": "active", "lease_seconds": 30.0, "max_attempts": 3.0} {
		if got[k] != want {
			t.Errorf("task %s = %v, want %v", k, got[k], want)
		}
	}
	e.expect("PUT", path, base("space_minutes", 0), 400, "invalid_argument")
	e.expect("PUT", path, base("space_minutes", 30, "params", map[string]any{}), 422, "params_invalid")
	e.expect("PUT", "/v1/admin/tasks/rotate/99", base("space_minutes", 30), 404, "not_found")
	if e.expect("GET", path, nil, 200, "")["space_minutes"] != 60.0 {
		t.Fatal("a refused PUT changed the task")
	}
	put := e.expect("PUT", path, base("space_minutes", 30, "status", "paused"), 200, "")
	if put["status"] != "paused" || put["space_minutes"] != 30.0 || put["dispatch_times"] != 1.0 {
		t.Fatalf("PUT replaces the editable fields (absent ones to defaults): %v", put)
	}
	e.expect("DELETE", path, nil, 204, "")
	e.expect("GET", path, nil, 404, "not_found")
	e.expect("DELETE", path, nil, 404, "not_found")
	e.expect("GET", "/v1/admin/tasks/once/0", nil, 400, "invalid_argument") // an id out of range
}

func TestListTasksFiltersAndPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	var want []string
	for i := 0; i < 7; i++ {
		want = append(want, e.task("once", map[string]any{"executor": "gid_ops", "start_time": ts(t0)}))
	}
	for i := 0; i < 5; i++ {
		want = append(want, e.task("rotate", map[string]any{"executor": "gid_ops", "start_time": ts(t0), "space_minutes": 5}))
	}
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0), "status": "paused"})
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		out := e.expect("GET", "/v1/admin/tasks?executor=gid_ops&limit=5&cursor="+url.QueryEscape(cursor), nil, 200, "")
		for _, tk := range out["tasks"].([]any) {
			got = append(got, tk.(map[string]any)["task_id"].(string))
		}
		cursor = out["next_cursor"].(string)
		if cursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("paged list\n got %v\nwant %v", got, want)
	}
	for q, n := range map[string]int{"kind=rotate": 5, "status=paused": 1, "executor=uid_1": 1, "executor=uid_1&status=active": 0, "": 13} {
		if out := e.expect("GET", "/v1/admin/tasks?"+q, nil, 200, ""); len(out["tasks"].([]any)) != n {
			t.Errorf("%q: %d tasks, want %d", q, len(out["tasks"].([]any)), n)
		}
	}
	for _, q := range []string{"kind=weekly", "status=gone", "limit=0", "limit=5000", "cursor=@@", "executor=ops", "colour=red"} {
		e.expect("GET", "/v1/admin/tasks?"+q, nil, 400, "invalid_argument")
	}
}

func TestGroupsAndKeysEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.expect("PUT", "/v1/admin/groups/ops/members", `{"uids": ["1", "2", "3"]}`, 200, "")
	e.expect("POST", "/v1/admin/groups/ops/members", `{"uids": ["3", "4"]}`, 200, "")
	e.expect("DELETE", "/v1/admin/groups/ops/members/2", nil, 204, "")
	e.expect("DELETE", "/v1/admin/groups/ops/members/2", nil, 404, "not_found")
	out := e.expect("GET", "/v1/admin/groups/ops/members", nil, 200, "")
	if fmt.Sprint(out["uids"]) != "[1 3 4]" {
		t.Fatalf("members: %v", out["uids"])
	}
	e.expect("PUT", "/v1/admin/groups/ops/members", `{"uids": ["ok", "not ok"]}`, 400, "invalid_argument")
	e.expect("PUT", "/v1/admin/groups/ops/members", `{}`, 400, "invalid_argument")
	e.expect("POST", "/v1/admin/groups/ops/members", `{"uids": "1"}`, 400, "invalid_argument")
	if fmt.Sprint(e.expect("GET", "/v1/admin/groups/ops/members", nil, 200, "")["uids"]) != "[1 3 4]" {
		t.Fatal("a refused membership change was written")
	}
	e.expect("POST", "/v1/admin/clients/a%20b/keys", nil, 400, "invalid_argument")
	k := e.expect("POST", "/v1/admin/clients/7/keys", nil, 201, "")["client_key"].(string)
	if code, _ := e.do(0, "POST", "/v1/fetch", k, nil); code != 200 {
		t.Fatalf("fetch with issued key: %d", code)
	}
	if out := e.expect("DELETE", "/v1/admin/clients/7/keys", nil, 200, ""); out["revoked"] != 1.0 {
		t.Fatalf("revoke: %v", out)
	}
}

func TestAuditRecordsEveryChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0)})
	e.admin("DELETE", "/v1/admin/tasks/once/"+id[len("once:"):], nil)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1"}})
	e.key("1")
	var actions []string
	cursor := ""
	for {
		out := e.expect("GET", "/v1/admin/audit?limit=2&cursor="+cursor, nil, 200, "")
		for _, en := range out["entries"].([]any) {
			m := en.(map[string]any)
			if m["actor"] != "admin" {
				t.Errorf("actor %v, want admin", m["actor"])
			}
			actions = append(actions, m["action"].(string)+" "+m["target"].(string))
			if m["action"] == "task.delete" && (m["before"] == nil || m["after"] != nil) {
				t.Errorf("task.delete keeps before, no after: %v", m)
			}
		}
		if cursor = out["next_cursor"].(string); cursor == "" {
			break
		}
	}
	want := []string{"client_key.create user:1", "group.replace_members group:g", "task.delete " + id,
		"task.create " + id, "template.create template:1"}
	if strings.Join(actions, ",") != strings.Join(want, ",") {
		t.Fatalf("audit, newest first\n got %v\nwant %v", actions, want)
	}
	e.expect("GET", "/v1/admin/audit?from=2026-13-01", nil, 400, "invalid_argument")
}

// The schedule preview agrees with what fetch delivers to the same user over a
// simulated day.
func TestScheduleAgreesWithFetchOverADay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1"}})
	day := t0.Add(24 * time.Hour)
	e.task("rotate", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-3 * time.Hour)), "space_minutes": 90, "priority": 7})
	e.task("rotate", map[string]any{"executor": "uid_1", "start_time": ts(t0), "space_minutes": 180, "end_time": ts(t0.Add(12 * time.Hour))})
	for i := 0; i < 6; i++ {
		e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(time.Duration(i*4+1) * time.Hour)), "dispatch_times": 5})
	}
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(3 * time.Hour)), "priority": 9}) // tie with a rotation
	e.task("once", map[string]any{"executor": "uid_2", "start_time": ts(t0.Add(2 * time.Hour))})                // someone else's
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(day.Add(time.Minute))})                 // after the day

	out := e.expect("GET", "/v1/admin/schedule?executor=uid_1&from="+ts(t0)+"&to="+ts(day), nil, 200, "")
	var planned []string
	for _, o := range out["occurrences"].([]any) {
		m := o.(map[string]any)
		planned = append(planned, m["task_id"].(string)+"@"+m["due_at"].(string))
		if m["task_id"] == "once:1" && m["remaining"] != 5.0 {
			t.Errorf("remaining of once:1 before the day: %v", m["remaining"])
		}
	}
	k := e.key("1")
	var delivered []string
	for e.clock.Now().Before(day) {
		r := e.fetch(0, k)
		if r.Task != nil {
			delivered = append(delivered, r.Task.TaskID+"@"+ts(r.Task.DueAt))
			e.mustComplete(k, r.Task.LogID)
			continue
		}
		if r.NextDueAt == nil || !r.NextDueAt.Before(day) {
			break
		}
		e.clock.Set(*r.NextDueAt)
	}
	if len(planned) < 20 || strings.Join(planned, " ") != strings.Join(delivered, " ") {
		t.Fatalf("schedule and fetch disagree\nplanned   %v\ndelivered %v", planned, delivered)
	}
	after := e.expect("GET", "/v1/admin/schedule?executor=gid_g&from="+ts(t0)+"&to="+ts(day), nil, 200, "")
	for _, o := range after["occurrences"].([]any) {
		m := o.(map[string]any)
		if strings.HasPrefix(m["task_id"].(string), "once:") && (m["claimed"] != 1.0 || m["remaining"] != 4.0) {
			t.Errorf("group schedule after the day: %v", m)
		}
		if strings.HasPrefix(m["task_id"].(string), "rotate:") && m["claimed"] != 1.0 {
			t.Errorf("rotation claimed: %v", m)
		}
	}
	e.expect("GET", "/v1/admin/schedule", nil, 400, "invalid_argument")
	e.expect("GET", "/v1/admin/schedule?executor=uid_1&from="+ts(day)+"&to="+ts(t0), nil, 400, "invalid_argument")
}

func TestEventsAndStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	a := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "dispatch_times": 2, "lease_seconds": 60})
	b := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-30 * time.Second)), "max_attempts": 2})
	k := e.key("1")
	d1 := mustFetch(t, e, k) // a, then expires
	e.fetch(0, k)            // redo
	e.clock.Advance(2 * time.Minute)
	d2 := mustFetch(t, e, k) // a again, after the expiry
	e.clock.Advance(3 * time.Second)
	e.mustComplete(k, d2.LogID)
	d3 := mustFetch(t, e, k) // b
	e.clock.Advance(time.Second)
	if code, _ := e.complete(0, k, d3.LogID, "failure"); code != 200 {
		t.Fatal("failure complete")
	}

	out := e.expect("GET", "/v1/admin/events?uid=1&limit=100", nil, 200, "")
	var types []string
	for _, ev := range out["events"].([]any) {
		m := ev.(map[string]any)
		types = append(types, m["type"].(string)+":"+m["task_id"].(string))
	}
	want := []string{"complete:" + b, "dispatch:" + b, "complete:" + a, "dispatch:" + a, "expire:" + a, "redo:" + a, "dispatch:" + a}
	if strings.Join(types, " ") != strings.Join(want, " ") {
		t.Fatalf("events newest first\n got %v\nwant %v", types, want)
	}
	// pages of 2 give the same list
	var paged []string
	cursor := ""
	for {
		out := e.expect("GET", "/v1/admin/events?limit=2&cursor="+cursor, nil, 200, "")
		for _, ev := range out["events"].([]any) {
			m := ev.(map[string]any)
			paged = append(paged, m["type"].(string)+":"+m["task_id"].(string))
		}
		if cursor = out["next_cursor"].(string); cursor == "" {
			break
		}
	}
	if strings.Join(paged, " ") != strings.Join(want, " ") {
		t.Fatalf("paged events %v", paged)
	}
	if out := e.expect("GET", "/v1/admin/events?type=expire&task_id="+a, nil, 200, ""); len(out["events"].([]any)) != 1 ||
		out["events"].([]any)[0].(map[string]any)["log_id"] != d1.LogID {
		t.Fatalf("expire events of %s: %v", a, out)
	}
	e.expect("GET", "/v1/admin/events?type=bogus", nil, 400, "invalid_argument")
	e.expect("GET", "/v1/admin/events?task_id=once", nil, 400, "invalid_argument")

	stats := e.expect("GET", "/v1/admin/stats?from="+ts(t0.Add(-time.Hour))+"&to="+ts(t0.Add(time.Hour)), nil, 200, "")
	byTask := map[string]map[string]any{}
	for _, s := range stats["tasks"].([]any) {
		m := s.(map[string]any)
		byTask[m["task_id"].(string)] = m
	}
	sa, sb := byTask[a], byTask[b]
	if sa == nil || sa["dispatched"] != 2.0 || sa["completed"] != 1.0 || sa["expired"] != 1.0 || sa["redo"] != 1.0 ||
		sa["claimed"] != 1.0 || sa["remaining"] != 1.0 || sa["latency_ms_p50"] != 3000.0 {
		t.Fatalf("stats of %s: %v", a, sa)
	}
	if sb == nil || sb["dispatched"] != 1.0 || sb["failed"] != 1.0 || sb["completed"] != 0.0 || sb["latency_ms_p95"] != 1000.0 {
		t.Fatalf("stats of %s: %v", b, sb)
	}
}

// 1000 admin edits racing with fetches leave no stale heap at rest: every user's cached
// heap equals one rebuilt from MySQL.
func TestEditsRacingWithFetchesLeaveNoStaleCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	uids, keys := e.groupOf("g", 20)
	tpl := e.template()
	var ids []string
	for i := 0; i < 10; i++ {
		exec := "gid_g"
		if i%3 == 0 {
			exec = "uid_" + uids[i]
		}
		ids = append(ids, e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": exec,
			"start_time": ts(t0.Add(time.Duration(i+1) * time.Hour)), "template_id": tpl})["task_id"].(string))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					e.fetch(i%2, k)
				}
			}
		}()
	}
	var edits sync.WaitGroup
	for w := 0; w < 4; w++ {
		edits.Add(1)
		go func() {
			defer edits.Done()
			for i := w; i < 1000; i += 4 {
				id := ids[i%len(ids)]
				exec := "gid_g"
				if (i/len(ids))%2 == 1 {
					exec = "uid_" + uids[i%len(uids)]
				}
				status := []string{"active", "paused"}[(i/7)%2]
				code, out := e.do(i%2, "PUT", "/v1/admin/tasks/once/"+id[len("once:"):], adminToken, map[string]any{
					"executor": exec, "start_time": ts(t0.Add(time.Duration(i%50+1) * time.Hour)), "template_id": tpl, "status": status})
				if code != 200 {
					t.Errorf("edit: %d %v", code, out)
				}
				if i%100 == 0 {
					e.do(i%2, "DELETE", "/v1/admin/groups/g/members/"+uids[i%len(uids)], adminToken, nil)
					e.do(i%2, "POST", "/v1/admin/groups/g/members", adminToken, map[string]any{"uids": []string{uids[i%len(uids)]}})
				}
			}
		}()
	}
	edits.Wait()
	close(stop)
	wg.Wait()

	heap := func(uid string) string {
		members, err := e.rdb.ZRangeWithScores(t.Context(), e.apps[0].Cache.Keys().Heap(uid), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, m := range members {
			s = append(s, fmt.Sprintf("%v@%v", m.Member, m.Score))
		}
		sort.Strings(s)
		return strings.Join(s, " ")
	}
	for i, u := range uids {
		e.fetch(i%2, keys[i]) // at rest: whatever the cache holds is what this fetch uses
		cached := heap(u)
		if err := e.apps[0].Cache.Rebuild(t.Context(), u); err != nil {
			t.Fatal(err)
		}
		if fresh := heap(u); fresh != cached {
			t.Errorf("user %s: stale heap at rest\ncached %s\nfresh  %s", u, cached, fresh)
		}
	}
}

func TestQuotaCutKeepsClaimsAndOpenDispatchSurvivesLeavingTheGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	uids, keys := e.groupOf("g", 5)
	tpl := e.template()
	body := map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-time.Minute)), "template_id": tpl, "dispatch_times": 5}
	id := e.admin("POST", "/v1/admin/tasks/once", body)["task_id"].(string)
	var open []*task
	for _, k := range keys[:3] {
		open = append(open, mustFetch(t, e, k))
	}
	body["dispatch_times"] = 2
	e.admin("PUT", "/v1/admin/tasks/once/"+id[len("once:"):], body)
	if r := e.fetch(0, keys[3]); r.Task != nil {
		t.Fatalf("quota cut to 2 below 3 claimed, yet dispatched: %+v", r.Task)
	}
	if n := e.count("SELECT claimed FROM occurrence_claim"); n != 3 {
		t.Fatalf("claims after the cut: %d, want 3 kept", n)
	}
	e.admin("DELETE", "/v1/admin/groups/g/members/"+uids[0], nil)
	e.mustComplete(keys[0], open[0].LogID) // an open dispatch may still be completed
	e.checkClaims()
}

// GET /v1/admin/tasks?template_id= lists the tasks of one template (an addition to the
// contract), of both kinds; a value that is not a template id is a 400.
func TestTaskListByTemplate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	t1, t2 := e.template(), e.template()
	start := ts(t0.Add(time.Hour))
	want := []any{
		e.task("once", map[string]any{"executor": "uid_1", "start_time": start, "template_id": t1}),
		e.task("rotate", map[string]any{"executor": "gid_g", "start_time": start, "template_id": t1, "space_minutes": 5}),
	}
	e.task("once", map[string]any{"executor": "uid_1", "start_time": start, "template_id": t2})
	var got []any
	for _, task := range e.admin("GET", fmt.Sprintf("/v1/admin/tasks?template_id=%d", t1), nil)["tasks"].([]any) {
		got = append(got, task.(map[string]any)["task_id"])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tasks of template %d: %v, want %v", t1, got, want)
	}
	for _, bad := range []string{"abc", "0", "-3"} {
		if code, out := e.do(0, "GET", "/v1/admin/tasks?template_id="+bad, adminToken, nil); code != 400 {
			t.Errorf("template_id=%s: %d %v, want 400", bad, code, out)
		}
	}
}

// GET /v1/admin/overview (an addition) counts the active tasks due in the last and the
// next hour, and the open dispatches as they open and close; without Kafka no event
// waits in the outbox.
func TestOverview(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	e.task("once", map[string]any{"executor": "uid_2", "start_time": ts(t0.Add(30 * time.Minute))})
	e.task("once", map[string]any{"executor": "uid_2", "start_time": ts(t0.Add(-2 * time.Hour))})                       // past the hour
	e.task("once", map[string]any{"executor": "uid_2", "start_time": ts(t0.Add(10 * time.Minute)), "status": "paused"}) // not active
	// Every 50 minutes from 170 minutes ago: 20 minutes ago, and in 30 minutes.
	e.task("rotate", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-3*time.Hour + 10*time.Minute)), "space_minutes": 50})
	// Every 2 hours from 90 minutes ago: none in the last hour, one in 30 minutes.
	e.task("rotate", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-90 * time.Minute)), "space_minutes": 120})
	// Ended 10 minutes ago: one in the last hour, none after.
	e.task("rotate", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-30 * time.Minute)), "space_minutes": 15,
		"end_time": ts(t0.Add(-10 * time.Minute))})
	overview := func() map[string]any { return e.admin("GET", "/v1/admin/overview", nil) }
	if o := overview(); o["due_now"] != 3.0 || o["due_next_hour"] != 3.0 {
		t.Fatalf("due now %v, in the next hour %v; want 3 and 3", o["due_now"], o["due_next_hour"])
	}
	if o := overview(); o["open_dispatches"] != 0.0 || o["outbox_pending"] != 0.0 || o["outbox_oldest_at"] != nil {
		t.Fatalf("before any dispatch: %v", o)
	}
	k := e.key("1")
	r := mustFetch(t, e, k)
	if o := overview(); o["open_dispatches"] != 1.0 || o["dead"] != 0.0 || o["retry_waiting"] != 0.0 {
		t.Fatalf("with one dispatch open: %v", o)
	}
	e.mustComplete(k, r.LogID)
	if o := overview(); o["open_dispatches"] != 0.0 {
		t.Fatalf("after the complete: %v", o)
	}
	if code, _ := e.do(0, "GET", "/v1/admin/overview?x=1", adminToken, nil); code != 400 {
		t.Fatalf("an unknown parameter: %d, want 400", code)
	}
}
