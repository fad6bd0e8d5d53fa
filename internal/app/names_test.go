package app_test

import (
	"strings"
	"testing"
)

// Every name an admin gives (templates, campaigns) is refused with a 400 naming the
// field when it holds characters that are not shown as themselves: NUL and other
// control characters, bidirectional overrides, zero-width characters.
func TestNamesRefuseInvisibleCharacters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.template()
	for _, name := range []string{"nul\x00name", "gpj.\u202eexe", "zero\u200bwidth", "bom\ufeff", "esc\x1b[2J"} {
		code, out := e.do(0, "POST", "/v1/admin/templates", adminToken, map[string]any{"name": name, "schema": map[string]any{}})
		if code != 400 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "name:") {
			t.Errorf("template named %q: %d %v, want 400 naming name", name, code, out)
		}
		code, out = e.do(0, "POST", "/v1/admin/campaigns", adminToken, map[string]any{"name": name, "template_id": tpl,
			"params": map[string]any{}, "executor": "gid_g", "items": map[string]any{"count": 1}})
		if code != 400 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "name:") {
			t.Errorf("campaign named %q: %d %v, want 400 naming name", name, code, out)
		}
	}
	if n := e.count("SELECT COUNT(*) FROM campaign"); n != 0 {
		t.Errorf("%d campaigns stored from refused names", n)
	}
}
