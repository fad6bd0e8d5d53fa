package app_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// Rollouts over HTTP, two instances, real MySQL and Redis.

// rolloutFleet makes n members of group g with a key each, and a once task for g due
// now with quota and rollout; it returns the keys and the task id.
func rolloutFleet(e *env, n, quota int, rollout map[string]any, extra map[string]any) ([]string, string) {
	e.t.Helper()
	uids := make([]string, n)
	keys := make([]string, n)
	for i := range uids {
		uids[i] = uidN(i)
	}
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": uids})
	for i, u := range uids {
		keys[i] = e.key(u)
	}
	fields := map[string]any{"executor": "gid_g", "start_time": ts(t0), "dispatch_times": quota, "rollout": rollout}
	for k, v := range extra {
		fields[k] = v
	}
	return keys, e.task("once", fields)
}

func (e *env) rollout(taskID string) map[string]any {
	e.t.Helper()
	return e.admin("GET", "/v1/admin/tasks/"+taskPath(taskID)+"/rollout", nil)
}

// taskPath is "once/12" for "once:12".
func taskPath(taskID string) string {
	for i := range taskID {
		if taskID[i] == ':' {
			return taskID[:i] + "/" + taskID[i+1:]
		}
	}
	return taskID
}

// fetchAll fetches once for every key at once, across the instances, and returns the
// log ids handed out by key index.
func (e *env) fetchAll(keys []string) map[int]string {
	var mu sync.Mutex
	got := map[int]string{}
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			if r := e.fetch(i%len(e.apps), k); r.Task != nil {
				mu.Lock()
				got[i] = r.Task.LogID
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return got
}

// Twenty members fetch at once through two instances: exactly the phase's cap (25% of
// 20 = 5) get the task; the rest are told nothing is due; after the phase advances the
// next cap's worth do, and no more.
func TestRolloutPhaseCapIsExactAcrossNodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	keys, id := rolloutFleet(e, 20, 20, map[string]any{
		"phases": []any{map[string]any{"percent": 25}, map[string]any{"percent": 60}, map[string]any{"percent": 100}},
		"gate":   map[string]any{"min_finished": 5, "success_ratio": 0.8}, "advance": "manual"}, nil)
	got := e.fetchAll(keys)
	if len(got) != 5 {
		t.Fatalf("phase 1 (cap 5): %d dispatched", len(got))
	}
	r := e.rollout(id)
	if r["state"] != "running" || num(r["phase"]) != 1 || num(r["cap"]) != 5 || num(r["claimed"]) != 5 {
		t.Fatalf("rollout after phase 1's claims: %v", r)
	}
	// A refused member is told nothing is due (the phase's cap is not a due time).
	for i, k := range keys {
		if _, ok := got[i]; !ok {
			if f := e.fetch(0, k); f.Task != nil || f.NextDueAt != nil {
				t.Fatalf("a member past the cap: %+v", f)
			}
			break
		}
	}
	// Four of five finished: too few for the gate (min_finished 5).
	n := 0
	for i, logID := range got {
		if n == 4 {
			break
		}
		e.mustComplete(keys[i], logID)
		n++
	}
	if r := e.rollout(id); r["state"] != "running" || num(r["finished"]) != 4 || r["gate"] != "pending" {
		t.Fatalf("four of five finished: %v", r)
	}
	for i, logID := range got {
		e.complete(0, keys[i], logID, "success") // the fifth; repeats change nothing
	}
	if r := e.rollout(id); r["state"] != "waiting" || num(r["finished"]) != 5 || num(r["succeeded"]) != 5 || r["gate"] != "passed" {
		t.Fatalf("five of five succeeded, a manual gate: %v", r)
	}
	code, out := e.do(0, "POST", "/v1/admin/tasks/"+taskPath(id)+"/rollout/resume", adminToken, nil)
	if code != 409 || out["error"] == nil {
		t.Fatalf("resume of a waiting rollout: %d %v", code, out)
	}
	if code, out := e.do(1, "POST", "/v1/admin/tasks/"+taskPath(id)+"/rollout/advance", adminToken, nil); code != 200 || num(out["phase"]) != 2 || num(out["cap"]) != 12 {
		t.Fatalf("advance: %d %v", code, out)
	}
	more := e.fetchAll(keys)
	if len(more) != 7 {
		t.Fatalf("phase 2 (cap 12, 5 claimed): %d more dispatched", len(more))
	}
	for i := range more {
		if _, again := got[i]; again {
			t.Errorf("member %d got the once_per_user task twice", i)
		}
	}
	if n := e.count("SELECT COUNT(*) FROM dispatch WHERE rollout_phase = 2"); n != 7 {
		t.Errorf("%d dispatches counted in phase 2, want 7", n)
	}
}

// An auto gate: passed, it bakes, then the next phase opens by itself; failed, the
// rollout aborts, the task is paused and nothing more is dispatched.
func TestRolloutAdvancesAfterBakeAndAbortsOnFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	keys, id := rolloutFleet(e, 10, 10, map[string]any{
		"phases": []any{map[string]any{"count": 2}, map[string]any{"count": 6}, map[string]any{"percent": 100}},
		"gate":   map[string]any{"min_finished": 2, "success_ratio": 1, "failure_ratio": 0.5}, "bake_seconds": 60}, nil)
	got := e.fetchAll(keys)
	if len(got) != 2 {
		t.Fatalf("phase 1 (count 2): %d dispatched", len(got))
	}
	for i, logID := range got {
		e.mustComplete(keys[i], logID)
	}
	r := e.rollout(id)
	if r["state"] != "baking" || r["may_advance_at"] == nil {
		t.Fatalf("passed with a bake: %v", r)
	}
	e.clock.Advance(59 * time.Second)
	if r := e.rollout(id); r["state"] != "baking" {
		t.Fatalf("mid-bake: %v", r)
	}
	if n := len(e.fetchAll(keys)); n != 0 {
		t.Fatalf("during the bake: %d dispatched", n)
	}
	e.clock.Advance(time.Second)
	// The server's own step (every node runs it) opens the next phase; here, as any
	// GET does, through the rollout's read.
	r = e.rollout(id)
	if r["state"] != "running" || num(r["phase"]) != 2 || num(r["cap"]) != 6 {
		t.Fatalf("after the bake: %v", r)
	}
	if h := r["history"].([]any); len(h) != 1 || h[0].(map[string]any)["event"] != "rollout.phase" ||
		num(h[0].(map[string]any)["finished"]) != 2 || num(h[0].(map[string]any)["phase"]) != 1 {
		t.Fatalf("the history after phase 1: %v", r["history"])
	}
	second := e.fetchAll(keys)
	if len(second) != 4 {
		t.Fatalf("phase 2 (count 6, 2 claimed): %d dispatched", len(second))
	}
	n := 0
	for i, logID := range second {
		result := "success"
		if n < 2 {
			result = "failure"
		}
		if code, out := e.complete(0, keys[i], logID, result); code != 200 {
			t.Fatalf("complete: %d %v", code, out)
		}
		n++
		if n == 2 {
			break
		}
	}
	r = e.rollout(id)
	if r["state"] != "aborted" || !r["gate_failed"].(bool) || num(r["failed"]) != 2 {
		t.Fatalf("two failures of two: %v", r)
	}
	// The automatic abort's record names the figures that failed the gate (issue 37).
	h := r["history"].([]any)
	if last := h[len(h)-1].(map[string]any); last["event"] != "rollout.aborted" || last["actor"] != nil ||
		last["reason"] != "gate failed: 2 of 2 finished failed (100%), at or above failure_ratio 0.5; 0 succeeded" {
		t.Fatalf("the abort's record: %v", last)
	}
	task := e.admin("GET", "/v1/admin/tasks/"+taskPath(id), nil)
	if task["status"] != "paused" {
		t.Fatalf("an aborted rollout's task: %v", task["status"])
	}
	if n := len(e.fetchAll(keys)); n != 0 {
		t.Fatalf("after the abort: %d dispatched", n)
	}
	for _, move := range []string{"advance", "resume", "abort"} {
		if code, _ := e.do(0, "POST", "/v1/admin/tasks/"+taskPath(id)+"/rollout/"+move, adminToken, nil); code != 409 {
			t.Errorf("%s of an aborted rollout: %d, want 409", move, code)
		}
	}
	if n := e.count("SELECT COUNT(*) FROM audit_log WHERE action LIKE 'task.rollout.%'"); n != 0 {
		t.Errorf("the server's own moves are not an admin's: %d audited", n)
	}
	// Resumed by hand, the task stays held by its aborted rollout; without the rollout
	// its whole quota is released.
	// (The two dispatches the abort kept come back to their users, as a paused task's
	// do on its resume; nothing new is claimed.)
	e.admin("PATCH", "/v1/admin/tasks/"+taskPath(id), map[string]any{"status": "active"})
	kept := e.fetchAll(keys)
	for i, logID := range kept {
		if second[i] != logID {
			t.Fatalf("resumed under an aborted rollout: member %d got %s, not a dispatch the abort kept", i, logID)
		}
	}
	if len(kept) != 2 {
		t.Fatalf("resumed under an aborted rollout: %d of the 2 kept dispatches handed out again", len(kept))
	}
	e.admin("PATCH", "/v1/admin/tasks/"+taskPath(id), map[string]any{"rollout": nil})
	if code, _ := e.do(0, "GET", "/v1/admin/tasks/"+taskPath(id)+"/rollout", adminToken, nil); code != 404 {
		t.Errorf("the removed rollout: %d, want 404", code)
	}
	fresh := 0
	for i := range e.fetchAll(keys) {
		if _, had := got[i]; !had && second[i] == "" {
			fresh++
		}
	}
	if fresh != 4 {
		t.Errorf("the rollout removed: %d new members dispatched, want the 4 left of the quota", fresh)
	}
	e.admin("DELETE", "/v1/admin/tasks/"+taskPath(id), nil)
}

// A rollout declared without a gate does not advance on failures (issue 42): its gate
// needs successes (success_ratio 1, shown in the task), and a phase whose only dispatch
// failed stays where it is. (Before, it moved to phase 2.)
func TestRolloutWithoutGateHoldsOnFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	keys, id := rolloutFleet(e, 2, 2, map[string]any{"phases": []any{map[string]any{"count": 1}, map[string]any{"percent": 100}}}, nil)
	got := e.fetchAll(keys)
	if len(got) != 1 {
		t.Fatalf("phase 1 (count 1): %d dispatched", len(got))
	}
	for i, logID := range got {
		if code, out := e.complete(0, keys[i], logID, "failure"); code != 200 {
			t.Fatalf("complete: %d %v", code, out)
		}
	}
	if r := e.rollout(id); num(r["phase"]) != 1 || r["state"] != "running" || r["gate"] == "passed" || num(r["failed"]) != 1 {
		t.Fatalf("phase 1's only dispatch failed, no gate declared: %v", r)
	}
	gate := e.admin("GET", "/v1/admin/tasks/"+taskPath(id), nil)["rollout"].(map[string]any)["gate"].(map[string]any)
	if num(gate["success_ratio"]) != 1 || num(gate["min_finished"]) != 1 {
		t.Fatalf("the task shows the default gate as %v, want min_finished 1 and success_ratio 1", gate)
	}
}

// A gate's min_finished is bounded (issue 42): 2^63-1 was taken, read back as a float,
// and a PATCH of the task then refused its own value.
func TestRolloutMinFinishedBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	phases := []any{map[string]any{"count": 1}, map[string]any{"percent": 100}}
	for _, n := range []any{json.Number("9223372036854775807"), 1_000_001} {
		e.expectMsg("POST", "/v1/admin/tasks/once", map[string]any{"executor": "gid_g", "start_time": ts(t0), "dispatch_times": 2,
			"template_id": e.template(), "params": map[string]any{},
			"rollout": map[string]any{"phases": phases, "gate": map[string]any{"min_finished": n}}}, 400, "invalid_argument",
			"gate.min_finished", "1000000")
	}
	// Manual: a gate no phase of a quota of 2 can pass is warned of, not refused.
	id := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0), "dispatch_times": 2,
		"rollout": map[string]any{"phases": phases, "gate": map[string]any{"min_finished": 1_000_000}, "advance": "manual"}})
	e.admin("PATCH", "/v1/admin/tasks/"+taskPath(id), map[string]any{"priority": 7})
}

// A deleted task's rollout ends with it: nothing steps or lists it any more.
func TestRolloutEndsWithItsTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	_, id := rolloutFleet(e, 2, 2, map[string]any{"phases": []any{map[string]any{"count": 1}, map[string]any{"percent": 100}}}, nil)
	e.admin("DELETE", "/v1/admin/tasks/"+taskPath(id), nil)
	if n := e.count("SELECT COUNT(*) FROM task_rollout"); n != 0 {
		t.Errorf("%d rollout rows after the task's delete", n)
	}
	if out := e.admin("GET", "/v1/admin/rollouts", nil); len(out["rollouts"].([]any)) != 0 {
		t.Errorf("a deleted task's rollout is listed: %v", out)
	}
}

// Pause holds a rollout where it is (no automatic move); resume lets the gate decide
// again; both audited.
func TestRolloutPauseAndResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	keys, id := rolloutFleet(e, 4, 4, map[string]any{
		"phases": []any{map[string]any{"count": 1}, map[string]any{"percent": 100}},
		"gate":   map[string]any{"min_finished": 1, "success_ratio": 1}}, nil)
	got := e.fetchAll(keys)
	if len(got) != 1 {
		t.Fatalf("phase 1: %d dispatched", len(got))
	}
	if out := e.admin("POST", "/v1/admin/tasks/"+taskPath(id)+"/rollout/pause", nil); out["state"] != "paused" {
		t.Fatalf("pause: %v", out)
	}
	for i, logID := range got {
		e.mustComplete(keys[i], logID)
	}
	if r := e.rollout(id); r["state"] != "paused" || r["gate"] != "passed" {
		t.Fatalf("paused with a passed gate: %v", r)
	}
	if out := e.admin("POST", "/v1/admin/tasks/"+taskPath(id)+"/rollout/resume", nil); out["state"] != "running" {
		t.Fatalf("resume: %v", out)
	}
	// Resumed, the gate decides again: passed, the last phase opens (the whole quota),
	// and its own gate completes the rollout.
	if r := e.rollout(id); r["state"] != "running" || num(r["phase"]) != 2 || num(r["cap"]) != 4 {
		t.Fatalf("resumed with a passed gate: %v", r)
	}
	more := e.fetchAll(keys)
	if len(more) != 3 {
		t.Fatalf("the last phase: %d dispatched, want the other 3", len(more))
	}
	for i, logID := range more {
		e.mustComplete(keys[i], logID)
	}
	if r := e.rollout(id); r["state"] != "completed" || r["cap"] != nil {
		t.Fatalf("the last phase passed: %v", r)
	}
	if out := e.admin("GET", "/v1/admin/rollouts", nil); len(out["rollouts"].([]any)) != 0 {
		t.Errorf("a completed rollout is listed as active: %v", out)
	}
	if n := e.count("SELECT COUNT(*) FROM audit_log WHERE action IN ('task.rollout.pause', 'task.rollout.resume')"); n != 2 {
		t.Errorf("%d audited moves, want 2", n)
	}
	// The history keeps the pause and the resume, with their actor (issue 37).
	var moves []string
	for _, m := range e.rollout(id)["history"].([]any) {
		m := m.(map[string]any)
		moves = append(moves, fmt.Sprintf("%v phase %v by %v", m["event"], m["phase"], m["actor"]))
	}
	if want := []string{"rollout.paused phase 1 by admin", "rollout.resumed phase 1 by admin", "rollout.phase phase 1 by <nil>",
		"rollout.completed phase 2 by <nil>"}; strings.Join(moves, "; ") != strings.Join(want, "; ") {
		t.Errorf("history: %q, want %q", moves, want)
	}
}

// Latecomers: a member who joins the group while the rollout runs takes part and counts
// against the phase's cap (continuous); with snapshot targeting only the members at the
// start may claim.
func TestRolloutLatecomers(t *testing.T) {
	t.Parallel()
	for _, targeting := range []string{"continuous", "snapshot"} {
		t.Run(targeting, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 2)
			keys, id := rolloutFleet(e, 2, 10, map[string]any{
				"phases": []any{map[string]any{"count": 3}, map[string]any{"percent": 100}}, "targeting": targeting,
				"advance": "manual"}, nil)
			if n := len(e.fetchAll(keys)); n != 2 {
				t.Fatalf("the two members at the start: %d dispatched", n)
			}
			e.admin("POST", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"late1", "late2"}})
			late := []string{e.key("late1"), e.key("late2")}
			got := e.fetchAll(late)
			r := e.rollout(id)
			switch targeting {
			case "continuous":
				if len(got) != 1 || num(r["claimed"]) != 3 {
					t.Fatalf("continuous: %d latecomers dispatched, rollout %v; want 1, the cap's last slot", len(got), r)
				}
			case "snapshot":
				if len(got) != 0 || num(r["claimed"]) != 2 {
					t.Fatalf("snapshot: %d latecomers dispatched, rollout %v; want none", len(got), r)
				}
			}
		})
	}
}

// A node killed mid-phase: the phase's state is in MySQL, and the other node goes on
// from it: its cap holds exactly.
func TestRolloutSurvivesANodeMidPhase(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	keys, id := rolloutFleet(e, 12, 12, map[string]any{
		"phases": []any{map[string]any{"count": 4}, map[string]any{"percent": 100}}, "advance": "manual"}, nil)
	first := 0
	for _, k := range keys[:6] {
		if r := e.fetch(0, k); r.Task != nil {
			first++
		}
	}
	if first != 4 {
		t.Fatalf("node 0: %d dispatched, want the cap, 4", first)
	}
	e.urls[0] = "http://127.0.0.1:1" // node 0 is gone; its clients go to node 1
	for i, k := range keys[6:] {
		if r := e.fetch(1, k); r.Task != nil {
			t.Fatalf("node 1, member %d: dispatched past the cap", i+6)
		}
	}
	if code, out := e.do(1, "GET", "/v1/admin/tasks/"+taskPath(id)+"/rollout", adminToken, nil); code != 200 || num(out["claimed"]) != 4 {
		t.Fatalf("rollout through node 1: %d %v", code, out)
	}
}

// A template's result schema: a success whose detail does not validate is told 200 but
// counts as a failure (for the gate too), and its complete event says why; one that
// validates is a success.
func TestResultSchemaJudgesSuccesses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	if code, out := e.do(0, "POST", "/v1/admin/templates", adminToken, map[string]any{"name": "bad", "schema": map[string]any{"type": "object"},
		"result_schema": map[string]any{"type": "strin"}}); code != 400 || !strings.Contains(fmt.Sprint(out), "result_schema is not valid") {
		t.Fatalf("a result schema the meta-schema refuses: %d %v", code, out)
	}
	tpl := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "fw", "schema": map[string]any{"type": "object"},
		"result_schema": map[string]any{"type": "object", "required": []string{"version"},
			"properties": map[string]any{"version": map[string]any{"type": "string"}}}})
	if tpl["result_schema"] == nil {
		t.Fatalf("the template does not show its result schema: %v", tpl)
	}
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"a", "b", "c"}})
	id := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "gid_g", "start_time": ts(t0),
		"template_id": tpl["id"], "params": map[string]any{}, "dispatch_times": 3,
		"rollout": map[string]any{"phases": []any{map[string]any{"count": 2}, map[string]any{"percent": 100}},
			"gate": map[string]any{"min_finished": 2, "success_ratio": 1}, "advance": "manual"}})["task_id"].(string)
	ka, kb := e.key("a"), e.key("b")
	la, lb := e.fetch(0, ka).Task, e.fetch(0, kb).Task
	if la == nil || lb == nil {
		t.Fatal("the phase's two slots were not handed out")
	}
	if code, out := e.do(0, "POST", "/v1/complete", ka, map[string]any{"log_id": la.LogID, "result": "success",
		"detail": map[string]any{"version": 2}}); code != 200 {
		t.Fatalf("a success with a detail the result schema refuses: %d %v (want 200)", code, out)
	}
	if code, out := e.do(0, "POST", "/v1/complete", kb, map[string]any{"log_id": lb.LogID, "result": "success",
		"detail": map[string]any{"version": "2.1"}}); code != 200 {
		t.Fatalf("a valid success: %d %v", code, out)
	}
	r := e.rollout(id)
	if num(r["succeeded"]) != 1 || num(r["failed"]) != 1 || r["state"] != "running" {
		t.Fatalf("one refused, one valid success: %v", r)
	}
	evs := e.admin("GET", "/v1/admin/events?type=complete&task_id="+id, nil)["events"].([]any)
	reasons := 0
	for _, ev := range evs {
		m := ev.(map[string]any)
		if m["log_id"] == la.LogID {
			if m["result"] != "failure" || !strings.Contains(fmt.Sprint(m["reason"]), "/version") {
				t.Errorf("the refused success's event: %v", m)
			}
			reasons++
		} else if m["reason"] != nil {
			t.Errorf("a valid success's event has a reason: %v", m)
		}
	}
	if reasons != 1 {
		t.Errorf("%d complete events of the refused success, want 1: %v", reasons, evs)
	}
}

// explodingSchema doubles its validation's work at every level of {"a": {"a": ...}}: an
// anyOf whose two branches both recurse into "a" (the first then fails on required).
const explodingSchema = `{"$defs":{"n":{"anyOf":[{"required":["z"],"properties":{"a":{"$ref":"#/$defs/n"}}},` +
	`{"properties":{"a":{"$ref":"#/$defs/n"}}}]}},"$ref":"#/$defs/n"}`

// nested is {"a": {"a": ... {}}} depth levels deep.
func nested(depth int) any {
	var v any = map[string]any{}
	for range depth {
		v = map[string]any{"a": v}
	}
	return v
}

// A result schema's cost is bounded (issue 42): creating a template whose result schema
// explodes is refused naming result_schema; one already stored judges a deep detail
// under a step budget, before the complete's transaction: the complete answers 200 and
// is recorded a failure saying the budget ran out, and a complete of another task at
// the same time answers 200. (Before, the complete answered 503 after the request's
// deadline with the dispatch left open, and two of them held both group-commit lanes.)
func TestResultSchemaCostIsBounded(t *testing.T) {
	t.Parallel()
	// The request's deadline is the harness's minute, less: a complete that ran into it
	// is a 503.
	e := newEnvWith(t, 1, func(c *app.Config) { c.RequestTimeout = 10 * time.Second })
	var schema map[string]any
	if err := json.Unmarshal([]byte(explodingSchema), &schema); err != nil {
		t.Fatal(err)
	}
	e.expectMsg("POST", "/v1/admin/templates", map[string]any{"name": "boom", "schema": map[string]any{"type": "object"},
		"result_schema": schema}, 400, "invalid_argument", "result_schema")
	// One stored before the check existed.
	tpl := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "old", "schema": map[string]any{"type": "object"},
		"result_schema": map[string]any{"type": "object"}})
	if _, err := e.store.DB().Exec("UPDATE task_params_template SET result_schema = ? WHERE id = ?", explodingSchema, tpl["id"]); err != nil {
		t.Fatal(err)
	}
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"a", "b"}})
	e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0), "template_id": tpl["id"], "params": map[string]any{},
		"dispatch_times": 2})
	e.task("once", map[string]any{"executor": "uid_c", "start_time": ts(t0)})
	ka, kb, kc := e.key("a"), e.key("b"), e.key("c")
	la, lb, lc := e.fetch(0, ka).Task, e.fetch(0, kb).Task, e.fetch(0, kc).Task
	if la == nil || lb == nil || lc == nil {
		t.Fatal("the tasks were not handed out")
	}
	var wg sync.WaitGroup
	for _, c := range []struct {
		key, logID string
		detail     any
	}{{ka, la.LogID, nested(30)}, {kb, lb.LogID, nested(30)}, {kc, lc.LogID, nil}} {
		wg.Go(func() {
			if code, out := e.do(0, "POST", "/v1/complete", c.key, map[string]any{"log_id": c.logID, "result": "success",
				"detail": c.detail}); code != 200 {
				t.Errorf("complete of %s: %d %v (want 200)", c.logID, code, out)
			}
		})
	}
	wg.Wait()
	for _, l := range []string{la.LogID, lb.LogID} {
		var reason string
		if n := e.count("SELECT COUNT(*) FROM dispatch WHERE log_id = ? AND result = 2 AND reason LIKE '%result_schema%budget%'", l); n != 1 {
			e.store.DB().QueryRow("SELECT COALESCE(reason, '') FROM dispatch WHERE log_id = ?", l).Scan(&reason)
			t.Errorf("the deep detail of %s is not recorded a failure saying the budget ran out: reason %q", l, reason)
		}
	}
	if n := e.count("SELECT COUNT(*) FROM dispatch WHERE log_id = ? AND result = 1", lc.LogID); n != 1 {
		t.Errorf("the other task's complete is not recorded a success")
	}
}
