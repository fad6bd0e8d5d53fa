package app_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fetchAs fetches on instance i as key, reporting agent, completes what it was handed
// and returns its task ("" for none).
func (e *env) fetchAs(i int, key string, agent map[string]any) string {
	e.t.Helper()
	code, out := e.do(i, "POST", "/v1/fetch", key, map[string]any{"agent": agent})
	if code != 200 {
		e.t.Fatalf("fetch: %d %v", code, out)
	}
	t, ok := out["task"].(map[string]any)
	if !ok {
		return ""
	}
	if code, out := e.complete(i, key, t["log_id"].(string), "success"); code != 200 {
		e.t.Fatalf("complete: %d %v", code, out)
	}
	return t["task_id"].(string)
}

// A dynamic group's task reaches exactly the agents whose report matches its rule, in
// the very fetch that reports it, across two instances, with the quota exact; a report
// that stops matching takes nothing new of the group; the members are the server's.
func TestDynamicGroupFollowsReports(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	k1, k2, k3, k4 := e.key("d1"), e.key("d2"), e.key("d3"), e.key("d4")
	out := e.expect("PUT", "/v1/admin/groups/prod", map[string]any{"selector": "env=prod,!canary", "agent_version": ">=1.4.0 <2"}, 200, "")
	if out["dynamic"] != true || out["members"] != float64(0) || out["selector"] != "env=prod,!canary" {
		t.Fatalf("PUT: %v", out)
	}
	if w, _ := out["warnings"].([]any); len(w) != 1 || w[0].(map[string]any)["code"] != "empty_group" {
		t.Fatalf("a rule that matches nobody: warnings %v", out["warnings"])
	}
	conforms(t, "Group", out)
	first := e.task("once", map[string]any{"executor": "gid_prod", "start_time": ts(t0), "dispatch_times": 2})

	prod := map[string]any{"version": "1.5.0", "labels": map[string]string{"env": "prod"}}
	if got := e.fetchAs(0, k1, prod); got != first {
		t.Fatalf("a matching agent's first fetch: %q, want %s", got, first)
	}
	if got := e.fetchAs(1, k2, map[string]any{"version": "1.5.0", "labels": map[string]string{"env": "dev"}}); got != "" {
		t.Fatalf("a dev agent: %q", got)
	}
	if got := e.fetchAs(1, k3, map[string]any{"version": "2.0.0", "labels": map[string]string{"env": "prod"}}); got != "" {
		t.Fatalf("an agent of another major version: %q", got)
	}
	if got := e.fetchAs(1, k4, map[string]any{"version": "1.4.0", "labels": map[string]string{"env": "prod", "tier": "db"}}); got != first {
		t.Fatalf("a second matching agent, on the other instance: %q, want %s", got, first)
	}
	g := e.expect("GET", "/v1/admin/groups/prod", nil, 200, "")
	if g["members"] != float64(2) {
		t.Fatalf("GET: %v", g)
	}
	conforms(t, "Group", g)
	// The quota of 2 is spent: a third match joins, and gets nothing of it.
	if got := e.fetchAs(0, k2, prod); got != "" {
		t.Fatalf("a third match, quota 2: %q", got)
	}
	if g := e.expect("GET", "/v1/admin/groups/prod", nil, 200, ""); g["members"] != float64(3) {
		t.Fatalf("after the third match: %v", g)
	}

	// d1 becomes a canary: from its next fetch on, nothing new of the group.
	second := e.task("once", map[string]any{"executor": "gid_prod", "start_time": ts(t0.Add(time.Minute))})
	e.clock.Advance(2 * time.Minute)
	if got := e.fetchAs(0, k1, map[string]any{"version": "1.5.0", "labels": map[string]string{"env": "prod", "canary": "yes"}}); got != "" {
		t.Fatalf("an agent that stopped matching: %q", got)
	}
	if got := e.fetchAs(1, k4, nil); got != second {
		t.Fatalf("a member's next fetch, without a report: %q, want %s", got, second)
	}

	// Its members are the server's to keep; its rule is the admin's.
	e.expect("POST", "/v1/admin/groups/prod/members", map[string]any{"uids": []string{"d1"}}, 409, "conflict")
	e.expect("PUT", "/v1/admin/groups/prod/members", map[string]any{"uids": []string{"d1"}}, 409, "conflict")
	e.expect("DELETE", "/v1/admin/groups/prod/members/d4", nil, 409, "conflict")
	e.expect("PUT", "/v1/admin/groups/prod", map[string]any{"selector": "env in (prod"}, 400, "invalid_argument")
	e.expect("PUT", "/v1/admin/groups/prod", map[string]any{}, 400, "invalid_argument")
	e.expect("PUT", "/v1/admin/groups/prod", map[string]any{"agent_version": ">=2"}, 200, "")
	if g := e.expect("GET", "/v1/admin/groups/prod", nil, 200, ""); g["members"] != float64(1) || g["selector"] != nil {
		t.Fatalf("after a new rule (d3 only): %v", g)
	}
	// A group that tasks target is not deleted under them.
	e.expectMsg("DELETE", "/v1/admin/groups/prod", nil, 409, "conflict", "2 active or paused task(s)")
	for _, id := range []string{first, second} {
		e.expect("DELETE", "/v1/admin/tasks/once/"+strings.TrimPrefix(id, "once:"), nil, 204, "")
	}
	e.expect("DELETE", "/v1/admin/groups/prod", nil, 204, "")
	e.expect("GET", "/v1/admin/groups/prod", nil, 404, "not_found")
}

// A task for a dynamic group is warned about as one: nobody matches yet, and its
// member count says nothing of the quota.
func TestDynamicGroupTaskWarnings(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.expect("PUT", "/v1/admin/groups/dw", map[string]any{"selector": "env=prod"}, 200, "")
	out := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"template_id": e.template(), "params": map[string]any{},
		"executor": "gid_dw", "start_time": ts(t0), "dispatch_times": 5})
	w, _ := out["warnings"].([]any)
	if len(w) != 1 || w[0].(map[string]any)["code"] != "empty_group" || !strings.Contains(w[0].(map[string]any)["message"].(string), "dynamic") {
		t.Fatalf("a task for an empty dynamic group: %v", out["warnings"])
	}
	e.fetchAs(0, e.key("dw1"), map[string]any{"version": "1", "labels": map[string]string{"env": "prod"}})
	out = e.admin("POST", "/v1/admin/tasks/once", map[string]any{"template_id": e.template(), "params": map[string]any{},
		"executor": "gid_dw", "start_time": ts(t0), "dispatch_times": 5})
	if out["warnings"] != nil {
		t.Fatalf("a quota above a dynamic group's members today: %v", out["warnings"])
	}
}

// The clients list filters by a rule as a dynamic group does.
func TestClientsBySelector(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	for uid, agent := range map[string]map[string]any{
		"s1": {"version": "1.5.0", "labels": map[string]string{"env": "prod"}},
		"s2": {"version": "2.0.0", "labels": map[string]string{"env": "prod", "canary": "yes"}},
		"s3": {"version": "1.0.0", "labels": map[string]string{"env": "dev"}},
	} {
		e.fetchAs(0, e.key(uid), agent)
	}
	e.key("s4") // never reported
	for query, want := range map[string][]string{
		"selector=env%3Dprod":                           {"s1", "s2"},
		"selector=env%3Dprod,!canary":                   {"s1"},
		"agent_version=%3C2":                            {"s1", "s3"},
		"selector=env+notin+(prod)&agent_version=1.0.0": {"s3"},
	} {
		if got := uidsOf(t, e.admin("GET", "/v1/admin/clients?limit=1&"+query, nil)); len(got) != 1 || got[0] != want[0] {
			t.Errorf("%s, first page of one: %v, want %v", query, got, want[:1])
		}
		if got := uidsOf(t, e.admin("GET", "/v1/admin/clients?"+query, nil)); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", query, got, want)
		}
	}
	e.expect("GET", "/v1/admin/clients?selector=env+in+(prod", nil, 400, "invalid_argument")
	e.expect("GET", "/v1/admin/clients?agent_version=newest", nil, 400, "invalid_argument")
}

// The groups list shows a dynamic group, members or not, with its rule.
func TestGroupsListShowsRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.expect("PUT", "/v1/admin/groups/gl", map[string]any{"selector": "env=prod"}, 200, "")
	out := e.admin("GET", "/v1/admin/groups", nil)
	gs := out["groups"].([]any)
	if len(gs) != 1 {
		t.Fatalf("groups: %v", out)
	}
	g := gs[0].(map[string]any)
	if g["gid"] != "gl" || g["dynamic"] != true || g["selector"] != "env=prod" || g["members"] != float64(0) {
		t.Fatalf("a dynamic group without members: %v", g)
	}
	conforms(t, "GroupSummary", g)
}

// Agents that report at once, through two instances, join a dynamic group in the
// fetches that report: its task's quota, and a rollout's phase cap on another, are
// exact, and only matching agents get either.
func TestDynamicGroupQuotaAndRolloutUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	e.expect("PUT", "/v1/admin/groups/cc", map[string]any{"selector": "env=prod"}, 200, "")
	quota := e.task("once", map[string]any{"executor": "gid_cc", "start_time": ts(t0.Add(-time.Minute)), "dispatch_times": 6})
	phased := e.task("once", map[string]any{"executor": "gid_cc", "start_time": ts(t0.Add(-time.Minute)), "dispatch_times": 20,
		"rollout": map[string]any{"phases": []any{map[string]any{"count": 2}, map[string]any{"percent": 100}}, "advance": "manual"}})
	const n = 30
	keys := make([]string, n)
	for i := range keys {
		k, err := e.apps[0].Keys.Issue(t.Context(), "test", uidN(i))
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = k
	}
	env := func(i int) string { // every third agent is in dev
		if i%3 == 0 {
			return "dev"
		}
		return "prod"
	}
	var mu sync.Mutex
	got := map[string][]int{}
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			agent := map[string]any{"version": "1.0.0", "labels": map[string]string{"env": env(i)}}
			for range 3 { // a fetch may hand out the one task; the next ones the other
				code, out := e.do(i%2, "POST", "/v1/fetch", k, map[string]any{"agent": agent, "max": 2})
				if code != 200 {
					t.Errorf("fetch %d: %d %v", i, code, out)
					return
				}
				for _, tk := range out["tasks"].([]any) {
					tm := tk.(map[string]any)
					mu.Lock()
					got[tm["task_id"].(string)] = append(got[tm["task_id"].(string)], i)
					mu.Unlock()
					e.complete(i%2, k, tm["log_id"].(string), "success")
				}
			}
		})
	}
	wg.Wait()
	if len(got[quota]) != 6 || len(got[phased]) != 2 {
		t.Fatalf("dispatched: %d of the quota's 6, %d of the phase's 2 (%v)", len(got[quota]), len(got[phased]), got)
	}
	for task, who := range got {
		for _, i := range who {
			if env(i) != "prod" {
				t.Errorf("%s went to agent %d, in dev", task, i)
			}
		}
	}
	e.checkClaims()
}

// A report needs the uid's valid key: a forged one writes nothing.
func TestReportNeedsTheKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.expect("PUT", "/v1/admin/groups/rk", map[string]any{"selector": "env=prod"}, 200, "")
	real := e.key("victim")
	forged := real[:len(real)-4] + strings.Map(func(r rune) rune { // the same shape, another secret
		if r == 'a' {
			return 'b'
		}
		return 'a'
	}, real[len(real)-4:])
	code, _ := e.do(0, "POST", "/v1/fetch", forged, map[string]any{"agent": map[string]any{"version": "1", "labels": map[string]string{"env": "prod"}}})
	if code != 401 {
		t.Fatalf("a forged key with a report: %d, want 401", code)
	}
	if n := e.count("SELECT COUNT(*) FROM client_agent"); n != 0 {
		t.Fatalf("a forged report wrote %d client_agent rows", n)
	}
	if g := e.expect("GET", "/v1/admin/groups/rk", nil, 200, ""); g["members"] != float64(0) {
		t.Fatalf("a forged report joined a group: %v", g)
	}
}

// An agent that goes back to an earlier report through another instance leaves the
// group its later report had joined: the stored report, not a node's memory, is what a
// report is compared with.
func TestReportBackToAnEarlierOneAcrossInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	e.expect("PUT", "/v1/admin/groups/new", map[string]any{"agent_version": ">=1.6"}, 200, "")
	k := e.key("rb")
	v15 := map[string]any{"version": "1.5.0"}
	e.fetchAs(0, k, v15)
	e.fetchAs(1, k, map[string]any{"version": "1.6.0"})
	if g := e.expect("GET", "/v1/admin/groups/new", nil, 200, ""); g["members"] != float64(1) {
		t.Fatalf("after the upgrade: %v", g)
	}
	e.fetchAs(0, k, v15) // the rollback, on the instance that saw 1.5.0 first
	if g := e.expect("GET", "/v1/admin/groups/new", nil, 200, ""); g["members"] != float64(0) {
		t.Fatalf("after the rollback: %v", g)
	}
}

// A group's id compares without case, as every id does: a rule set as "eu" and
// changed as "EU" is one group, and its members follow reports either way.
func TestDynamicGroupIDCase(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.expect("PUT", "/v1/admin/groups/eu", map[string]any{"selector": "region=nowhere"}, 200, "")
	e.expect("PUT", "/v1/admin/groups/EU", map[string]any{"selector": "region=eu"}, 200, "")
	k := e.key("gc")
	e.fetchAs(0, k, map[string]any{"version": "1", "labels": map[string]string{"region": "eu"}})
	if g := e.expect("GET", "/v1/admin/groups/eu", nil, 200, ""); g["members"] != float64(1) {
		t.Fatalf("joined: %v", g)
	}
	e.fetchAs(0, k, map[string]any{"version": "1", "labels": map[string]string{"region": "us"}})
	if g := e.expect("GET", "/v1/admin/groups/Eu", nil, 200, ""); g["members"] != float64(0) {
		t.Fatalf("left: %v", g)
	}
}
