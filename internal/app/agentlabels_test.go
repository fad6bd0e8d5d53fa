package app_test

import "testing"

// Issue 42, client_agent: labels are stored as JSON without HTML escaping (a "<" is one
// byte, not the six of \u003c), and read back as sent.
func TestAgentLabelsStoredUnescaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	k := e.key("1")
	agent := map[string]any{"version": "1.0", "hostname": "h", "labels": map[string]string{"note": "a<b>&c"}}
	if code, out := e.do(0, "POST", "/v1/fetch", k, map[string]any{"agent": agent}); code != 200 {
		t.Fatalf("fetch: %d %v", code, out)
	}
	e.flush()
	if n := e.count(`SELECT COUNT(*) FROM client_agent WHERE uid = '1' AND labels = '{"note":"a<b>&c"}'`); n != 1 {
		var got string
		e.store.DB().QueryRow("SELECT labels FROM client_agent WHERE uid = '1'").Scan(&got)
		t.Fatalf("labels stored as %s, want {\"note\":\"a<b>&c\"}", got)
	}
	out := e.admin("GET", "/v1/admin/clients", nil)
	labels := out["clients"].([]any)[0].(map[string]any)["agent"].(map[string]any)["labels"].(map[string]any)
	if labels["note"] != "a<b>&c" {
		t.Fatalf("labels read back: %v", labels)
	}
}
