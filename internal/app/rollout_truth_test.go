package app_test

import (
	"slices"
	"strings"
	"testing"
)

// A rollout whose gate can never pass under advance auto is refused at create, PUT
// and PATCH (400 invalid_argument, details reason gate_unreachable); one whose gate
// passes only on later events (an admin's advance, slots left by earlier phases, new
// members) is stored with a gate_unreachable warning (issue 37).
func TestRolloutGateUnreachable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.template()
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"a", "b", "c", "d", "e", "f", "g", "h"}})
	body := func(rollout map[string]any) map[string]any {
		return map[string]any{"executor": "gid_g", "start_time": ts(t0), "template_id": tpl, "params": map[string]any{},
			"dispatch_times": 8, "rollout": rollout}
	}
	phases := func(counts ...int) []any {
		var out []any
		for _, c := range counts {
			out = append(out, map[string]any{"count": c})
		}
		return append(out, map[string]any{"percent": 100})
	}
	stuck := map[string]any{"phases": phases(2), "gate": map[string]any{"min_finished": 3}}
	out := e.expectMsg("POST", "/v1/admin/tasks/once", body(stuck), 400, "invalid_argument", "rollout.phases[0]", "never advance")
	if d, _ := out["error"].(map[string]any)["details"].(map[string]any); d["reason"] != "gate_unreachable" || d["phase"] != 1.0 {
		t.Errorf("details of the refusal: %v", out["error"])
	}

	for _, tc := range []struct {
		name    string
		rollout map[string]any
		want    []string
	}{
		{"fits", map[string]any{"phases": phases(3), "gate": map[string]any{"min_finished": 3}}, nil},
		{"manual", map[string]any{"phases": phases(2), "gate": map[string]any{"min_finished": 3}, "advance": "manual"},
			[]string{"gate_unreachable"}},
		{"few new slots", map[string]any{"phases": phases(3, 4), "gate": map[string]any{"min_finished": 3}},
			[]string{"gate_unreachable"}},
	} {
		code, out := e.do(0, "POST", "/v1/admin/tasks/once", adminToken, body(tc.rollout))
		if code != 201 {
			t.Fatalf("%s: %d %v", tc.name, code, out)
		}
		if got := codesOf(out); !slices.Equal(got, tc.want) {
			t.Errorf("%s: warnings %v, want %v", tc.name, got, tc.want)
		}
	}

	id := e.task("once", body(map[string]any{"phases": phases(3), "gate": map[string]any{"min_finished": 3}}))
	e.expectMsg("PATCH", "/v1/admin/tasks/"+taskPath(id), map[string]any{"rollout": map[string]any{"gate": map[string]any{"min_finished": 5}}},
		400, "invalid_argument", "rollout.phases[0]")
	e.expectMsg("PUT", "/v1/admin/tasks/"+taskPath(id), body(stuck), 400, "invalid_argument", "rollout.phases[0]")
	// A quota cut that shrinks a percentage phase below the gate is refused too.
	pid := e.task("once", body(map[string]any{"phases": []any{map[string]any{"percent": 50}, map[string]any{"percent": 100}},
		"gate": map[string]any{"min_finished": 3}}))
	e.expectMsg("PATCH", "/v1/admin/tasks/"+taskPath(pid), map[string]any{"dispatch_times": 4}, 400, "invalid_argument", "rollout.phases[0]")
	// A smaller group than the gate waits for: warned (members may join).
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"a", "b"}})
	out = e.admin("PATCH", "/v1/admin/tasks/"+taskPath(id), map[string]any{"priority": 6})
	if got := codesOf(out); !slices.Contains(got, "gate_unreachable") {
		t.Errorf("a group of 2 for a gate of 3: warnings %v", got)
	}
}

// The rollouts list marks a rollout whose gate ahead cannot be met (the dashboard
// shows it): here a manual one, stored with a warning.
func TestRolloutListMarksAnUnreachableGate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"a", "b", "c", "d"}})
	fine := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0), "dispatch_times": 4,
		"rollout": map[string]any{"phases": []any{map[string]any{"count": 2}, map[string]any{"percent": 100}}}})
	stuck := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0), "dispatch_times": 4, "rollout": map[string]any{
		"phases": []any{map[string]any{"count": 1}, map[string]any{"percent": 100}}, "gate": map[string]any{"min_finished": 2}, "advance": "manual"}})
	got := map[string]string{}
	for _, r := range e.admin("GET", "/v1/admin/rollouts", nil)["rollouts"].([]any) {
		m := r.(map[string]any)
		s, _ := m["gate_unreachable"].(string)
		got[m["task_id"].(string)] = s
	}
	if got[fine] != "" || got[stuck] == "" {
		t.Fatalf("gate_unreachable in the list: %q", got)
	}
}

// An edit that makes a gate unreachable under auto is refused; one of a task whose
// rollout was stuck already (stored before the rule) is let through, and warned of:
// refusing it would keep an admin from even pausing the task.
func TestRolloutEditOfAStuckRollout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"a", "b", "c"}})
	id := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0), "dispatch_times": 3, "rollout": map[string]any{
		"phases": []any{map[string]any{"count": 1}, map[string]any{"percent": 100}}, "gate": map[string]any{"min_finished": 2}, "advance": "manual"}})
	e.expectMsg("PATCH", "/v1/admin/tasks/"+taskPath(id), map[string]any{"rollout": map[string]any{"advance": "auto"}},
		400, "invalid_argument", "rollout.phases[0]")
	// As a rollout stored before the rule would be: auto, and stuck.
	if _, err := e.store.DB().Exec("UPDATE task_once SET rollout = REPLACE(rollout, '\"manual\"', '\"auto\"') WHERE id = ?",
		strings.TrimPrefix(id, "once:")); err != nil {
		t.Fatal(err)
	}
	if r := e.admin("GET", "/v1/admin/tasks/"+taskPath(id), nil)["rollout"].(map[string]any); r["advance"] != "auto" {
		t.Fatalf("the stored rollout: %v", r)
	}
	out := e.admin("PATCH", "/v1/admin/tasks/"+taskPath(id), map[string]any{"status": "paused"})
	if out["status"] != "paused" || !slices.Contains(codesOf(out), "gate_unreachable") {
		t.Fatalf("a pause of a stuck rollout's task: %v", out)
	}
}
