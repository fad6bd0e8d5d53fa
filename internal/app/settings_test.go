package app_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Task-type settings (seed 004): a template gives defaults, a task's own value wins,
// replies show the effective values and which were inherited, and a template edit
// reaches the next dispatch.

func inheritedOf(task map[string]any) []string {
	var out []string
	for _, v := range task["inherited"].([]any) {
		out = append(out, v.(string))
	}
	return out
}

func TestTemplateDefaultsAreInheritedAndEditable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "crawl", "schema": map[string]any{"type": "object"},
		"lease_seconds": 30, "max_attempts": 5, "retry_backoff_seconds": 7, "retry_multiplier": 1.5, "stages": []string{"a", "b"}})
	if tpl["lease_seconds"] != 30.0 || tpl["retry_multiplier"] != 1.5 || tpl["retry_max_seconds"] != nil ||
		fmt.Sprint(tpl["stages"]) != "[a b]" {
		t.Fatalf("template: %v", tpl)
	}
	id := int64(tpl["id"].(float64))
	path := fmt.Sprintf("/v1/admin/templates/%d", id)

	inheriting := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_1", "start_time": ts(t0),
		"template_id": id, "dispatch_times": -1, "mode": "until_exhausted"})
	own := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_2", "start_time": ts(t0),
		"template_id": id, "lease_seconds": 10, "max_attempts": 2})
	if inheriting["lease_seconds"] != 30.0 || inheriting["max_attempts"] != 5.0 || inheriting["retry_multiplier"] != 1.5 ||
		inheriting["retry_max_seconds"] != 86400.0 ||
		strings.Join(inheritedOf(inheriting), ",") != "lease_seconds,max_attempts,retry_backoff_seconds,retry_multiplier" {
		t.Fatalf("inheriting task: %v", inheriting)
	}
	if own["lease_seconds"] != 10.0 || own["max_attempts"] != 2.0 ||
		strings.Join(inheritedOf(own), ",") != "retry_backoff_seconds,retry_multiplier" {
		t.Fatalf("task with its own lease: %v", own)
	}

	k1, k2 := e.key("1"), e.key("2")
	d := mustFetch(t, e, k1)
	if d.LeaseExp == nil || !d.LeaseExp.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("inherited lease: dispatch expires at %v, want %v", d.LeaseExp, t0.Add(30*time.Second))
	}
	if d2 := mustFetch(t, e, k2); d2.LeaseExp == nil || !d2.LeaseExp.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("own lease: dispatch expires at %v", d2.LeaseExp)
	}
	e.mustComplete(k1, d.LogID)

	// The edit reaches the next dispatch; the task shows it; the audit has it.
	patched := e.admin("PATCH", path, map[string]any{"lease_seconds": 90, "retry_multiplier": nil, "name": "crawl2"})
	if patched["lease_seconds"] != 90.0 || patched["retry_multiplier"] != nil || patched["name"] != "crawl2" ||
		patched["max_attempts"] != 5.0 || patched["schema"] == nil {
		t.Fatalf("patched template: %v", patched)
	}
	again := mustFetch(t, e, k1) // until_exhausted: the same user takes it again
	if again.LeaseExp == nil || !again.LeaseExp.Equal(t0.Add(90*time.Second)) {
		t.Fatalf("after the template edit: dispatch expires at %v, want %v", again.LeaseExp, t0.Add(90*time.Second))
	}
	shown := e.admin("GET", "/v1/admin/tasks/once/"+fmt.Sprint(inheriting["id"]), nil)
	if shown["lease_seconds"] != 90.0 || shown["retry_multiplier"] != 2.0 || slices.Contains(inheritedOf(shown), "retry_multiplier") {
		t.Fatalf("task after the template edit: %v", shown)
	}
	entries := e.admin("GET", "/v1/admin/audit", nil)["entries"].([]any)
	if top := entries[0].(map[string]any); top["action"] != "template.update" ||
		top["before"].(map[string]any)["lease_seconds"] != 30.0 || top["after"].(map[string]any)["lease_seconds"] != 90.0 {
		t.Fatalf("audit: %v", top)
	}

	// A task's null takes its own value back: inherited again.
	ownKey := "once/" + fmt.Sprint(own["id"])
	back := e.admin("PATCH", "/v1/admin/tasks/"+ownKey, map[string]any{"lease_seconds": nil})
	if back["lease_seconds"] != 90.0 || back["max_attempts"] != 2.0 || !slices.Contains(inheritedOf(back), "lease_seconds") {
		t.Fatalf("task after lease_seconds: null: %v", back)
	}
}

func TestTemplatePatchRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.template()
	path := fmt.Sprintf("/v1/admin/templates/%d", id)
	for _, tc := range []struct {
		body any
		code int
		want string
	}{
		{map[string]any{"schema": map[string]any{}}, 400, "schema: not editable"},
		{map[string]any{"id": 5}, 400, "id: set by the server"},
		{map[string]any{"colour": "red"}, 400, `unknown field "colour"`},
		{map[string]any{"lease_seconds": -1}, 400, "lease_seconds: must be"},
		{map[string]any{"retry_multiplier": 11}, 400, "retry_multiplier: must be"},
		{map[string]any{"retry_multiplier": "2"}, 400, "retry_multiplier"},
		{map[string]any{"dispatch_rate_per_minute": 1e12}, 400, "dispatch_rate_per_minute: must be"},
		{map[string]any{"stages": []string{"a", "a"}}, 400, `stages[1]: "a" is listed twice`},
		{map[string]any{"stages": []string{"has space"}}, 400, "stages[0]: must be"},
		{map[string]any{"name": ""}, 400, "name: required"},
		{[]int{1}, 400, "merge patch must be a JSON object"},
	} {
		code, out := e.do(0, "PATCH", path, adminToken, tc.body)
		msg := fmt.Sprint(out["error"])
		if code != tc.code || !strings.Contains(msg, tc.want) {
			t.Errorf("PATCH %v: %d %s, want %d with %q", tc.body, code, msg, tc.code, tc.want)
		}
	}
	if code, _ := e.do(0, "PATCH", "/v1/admin/templates/999999", adminToken, map[string]any{"max_attempts": 2}); code != 404 {
		t.Errorf("PATCH of a missing template: %d", code)
	}
	if got := e.admin("GET", path, nil); got["max_attempts"] != nil || got["name"] != "t" {
		t.Fatalf("refused patches changed the template: %v", got)
	}
	if code, out := e.do(0, "POST", "/v1/admin/templates", adminToken, map[string]any{"name": "x",
		"schema": map[string]any{}, "max_attempts": 0}); code != 400 || !strings.Contains(fmt.Sprint(out), "max_attempts") {
		t.Fatalf("create with max_attempts 0: %d %v", code, out)
	}
}
