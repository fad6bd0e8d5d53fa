package app_test

import (
	"slices"
	"testing"
	"time"
)

// codesOf lists a task reply's warning codes.
func codesOf(out map[string]any) []string {
	var codes []string
	ws, _ := out["warnings"].([]any)
	for _, w := range ws {
		m := w.(map[string]any)
		if m["message"] == "" {
			continue
		}
		codes = append(codes, m["code"].(string))
	}
	return codes
}

// A task that goes nowhere is accepted with warnings: a group without members, a uid
// that never had a key nor polled, a quota larger than the group, an end in the past;
// on create, replace and patch alike. A task that reaches someone has none.
func TestTaskWarnings(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.template()
	body := func(executor string, extra map[string]any) map[string]any {
		b := map[string]any{"executor": executor, "start_time": ts(t0), "template_id": tpl, "params": map[string]any{}}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	e.key("known")
	e.admin("PUT", "/v1/admin/groups/two/members", map[string]any{"uids": []string{"a", "b"}})
	for _, tc := range []struct {
		kind string
		body map[string]any
		want []string
	}{
		{"once", body("gid_nosuchgroup", nil), []string{"empty_group"}},
		{"once", body("uid_99999", nil), []string{"unknown_uid"}},
		{"once", body("uid_known", nil), nil},
		{"once", body("gid_two", map[string]any{"dispatch_times": 5}), []string{"quota_exceeds_group"}},
		{"once", body("gid_two", map[string]any{"dispatch_times": 5, "mode": "until_exhausted"}), nil},
		{"once", body("gid_two", map[string]any{"dispatch_times": 2}), nil},
		{"once", body("uid_known", map[string]any{"start_time": ts(t0.Add(-59 * time.Minute))}), nil},
		{"once", body("uid_known", map[string]any{"start_time": ts(t0.Add(-3 * time.Hour))}), []string{"before_catch_up"}},
		{"rotate", body("uid_known", map[string]any{"space_minutes": 5, "start_time": ts(t0.Add(-48 * time.Hour)),
			"end_time": ts(t0.Add(-time.Hour))}), []string{"ended"}},
	} {
		code, out := e.do(0, "POST", "/v1/admin/tasks/"+tc.kind, adminToken, tc.body)
		if code != 201 {
			t.Fatalf("create %v: %d %v", tc.body, code, out)
		}
		if got := codesOf(out); !slices.Equal(got, tc.want) {
			t.Errorf("create %v: warnings %v, want %v", tc.body, got, tc.want)
		}
		if tc.want == nil {
			if _, ok := out["warnings"]; ok {
				t.Errorf("create %v: a warnings field without warnings: %v", tc.body, out)
			}
		}
	}
	id := e.task("once", map[string]any{"executor": "uid_known", "start_time": ts(t0)})
	path := "/v1/admin/tasks/once/" + id[len("once:"):]
	if got := codesOf(e.admin("PATCH", path, map[string]any{"executor": "gid_nosuchgroup"})); !slices.Equal(got, []string{"empty_group"}) {
		t.Errorf("patch to an empty group: %v", got)
	}
	if got := codesOf(e.admin("PUT", path, body("uid_nobody", nil))); !slices.Equal(got, []string{"unknown_uid"}) {
		t.Errorf("replace with an unknown uid: %v", got)
	}
	if out := e.admin("GET", path, nil); out["warnings"] != nil {
		t.Errorf("GET carries warnings: %v", out)
	}
}

// POST /v1/admin/tasks/{kind}/preview takes a create's body, stores nothing, and says
// who would get the task in the next 24 h: the audience and each occurrence's
// recipients under the quota.
func TestTaskPreview(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.template()
	e.admin("PUT", "/v1/admin/groups/ops/members", map[string]any{"uids": []string{"1", "2", "3"}})
	before := e.count("SELECT COUNT(*) FROM task_rotate") + e.count("SELECT COUNT(*) FROM task_once")

	out := e.admin("POST", "/v1/admin/tasks/rotate/preview", map[string]any{"executor": "gid_ops", "template_id": tpl,
		"params": map[string]any{}, "start_time": ts(t0.Add(-7 * time.Minute)), "space_minutes": 60, "dispatch_times": 2})
	conforms(t, "TaskPreview", out)
	uids := []string{}
	for _, u := range out["uids"].([]any) {
		uids = append(uids, u.(string))
	}
	slices.Sort(uids)
	if !slices.Equal(uids, []string{"1", "2", "3"}) {
		t.Fatalf("uids: %v", out)
	}
	occ := out["occurrences"].([]any)
	if len(occ) != 25 {
		t.Fatalf("hourly for 24 h, and the one due 7 min ago: %d occurrences, want 25: %v", len(occ), out)
	}
	// The occurrence due 7 minutes ago is within the catch-up window: handed out at once.
	first := occ[0].(map[string]any)
	if first["due_at"] != ts(t0.Add(-7*time.Minute)) || first["recipients"] != float64(2) {
		t.Fatalf("first occurrence: %v", first)
	}
	if sum := out["summary"].(map[string]any); sum["total_dispatches"] != float64(50) || sum["uids"] != float64(3) {
		t.Fatalf("summary: %v", sum)
	}

	out = e.admin("POST", "/v1/admin/tasks/once/preview", map[string]any{"executor": "gid_nosuchgroup", "template_id": tpl,
		"params": map[string]any{}, "start_time": ts(t0.Add(time.Hour))})
	if len(out["uids"].([]any)) != 0 || !slices.Equal(codesOf(out), []string{"empty_group"}) {
		t.Fatalf("preview of an empty group: %v", out)
	}
	if o := out["occurrences"].([]any); len(o) != 1 || o[0].(map[string]any)["recipients"] != float64(0) {
		t.Fatalf("preview of an empty group: %v", out)
	}
	out = e.admin("POST", "/v1/admin/tasks/once/preview", map[string]any{"executor": "uid_1", "template_id": tpl,
		"params": map[string]any{}, "start_time": ts(t0.Add(25 * time.Hour))})
	if len(out["occurrences"].([]any)) != 0 {
		t.Fatalf("a task due in 25 h: %v", out)
	}
	// Checked as a create is, and nothing stored.
	if code, _ := e.do(0, "POST", "/v1/admin/tasks/once/preview", adminToken, map[string]any{"executor": "uid_1"}); code != 400 {
		t.Fatalf("preview without start_time: %d", code)
	}
	if after := e.count("SELECT COUNT(*) FROM task_rotate") + e.count("SELECT COUNT(*) FROM task_once"); after != before {
		t.Fatalf("a preview stored tasks: %d, then %d", before, after)
	}
}
