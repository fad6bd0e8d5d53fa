package app_test

import (
	"testing"
	"time"
)

// A preview counts what agents will really get (issue 37): the occurrences already
// due that a catch-up hands out at once (to each user whose cursor is not past them),
// each bounded by the quota and the rollout's first cap, and a summary of them all.
func TestPreviewCountsCatchUpAndCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.template()
	e.admin("PUT", "/v1/admin/groups/ops/members", map[string]any{"uids": []string{"1", "2", "3"}})
	// User 3 completed something due 30 minutes ago: its offer starts there.
	if _, err := e.store.DB().Exec("INSERT INTO user_state (uid, cursor_at, exclude_keys, updated_at) VALUES ('3', ?, '[]', ?)",
		t0.Add(-30*time.Minute), t0); err != nil {
		t.Fatal(err)
	}
	body := func(kind string, fields map[string]any) map[string]any {
		b := map[string]any{"executor": "gid_ops", "template_id": tpl, "params": map[string]any{}}
		for k, v := range fields {
			b[k] = v
		}
		return e.admin("POST", "/v1/admin/tasks/"+kind+"/preview", b)
	}
	recipients := func(out map[string]any) []int {
		var n []int
		for _, o := range out["occurrences"].([]any) {
			n = append(n, int(o.(map[string]any)["recipients"].(float64)))
		}
		return n
	}
	summary := func(out map[string]any) (int, int) {
		s := out["summary"].(map[string]any)
		return int(s["total_dispatches"].(float64)), int(s["uids"].(float64))
	}

	// Every 5 minutes since two hours ago, unlimited: the last hour's 12 occurrences are
	// due (users 1 and 2 get all 12, user 3 the 6 from its cursor on), then 288 ahead.
	out := body("rotate", map[string]any{"start_time": ts(t0.Add(-2 * time.Hour)), "space_minutes": 5, "dispatch_times": -1})
	got := recipients(out)
	if len(got) != 12+288 {
		t.Fatalf("%d occurrences, want 300", len(got))
	}
	due := out["occurrences"].([]any)[0].(map[string]any)["due_at"]
	if due != ts(t0.Add(-time.Hour)) || got[0] != 2 || got[5] != 2 || got[6] != 3 || got[12] != 3 {
		t.Fatalf("the catch-up's occurrences: first due %v, recipients %v", due, got[:13])
	}
	if total, uids := summary(out); total != 12*2+6+288*3 || uids != 3 {
		t.Fatalf("summary: %d dispatches to %d uids", total, uids)
	}

	// A once task due 10 minutes ago: handed out now to all three; one due before the
	// catch-up window: to nobody.
	if out := body("once", map[string]any{"start_time": ts(t0.Add(-10 * time.Minute)), "dispatch_times": 5}); len(recipients(out)) != 1 || recipients(out)[0] != 3 {
		t.Fatalf("once, due 10 min ago: %v", out)
	}
	if out := body("once", map[string]any{"start_time": ts(t0.Add(-2 * time.Hour))}); len(recipients(out)) != 0 {
		t.Fatalf("once, due before the catch-up window: %v", out)
	}

	// A rollout's first phase caps each occurrence.
	out = body("once", map[string]any{"start_time": ts(t0), "dispatch_times": 3,
		"rollout": map[string]any{"phases": []any{map[string]any{"count": 1}, map[string]any{"percent": 100}}, "advance": "manual"}})
	if got := recipients(out); len(got) != 1 || got[0] != 1 {
		t.Fatalf("rollout cap 1: recipients %v", got)
	}
	if total, uids := summary(out); total != 1 || uids != 1 {
		t.Fatalf("rollout cap 1: summary %d dispatches to %d uids", total, uids)
	}
}
