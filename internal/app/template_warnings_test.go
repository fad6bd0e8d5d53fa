package app_test

import (
	"strings"
	"testing"
)

// A template whose schema holds a keyword no draft defines is created, and its reply
// warns of the keyword, where it is and the one meant: "requried" requires nothing.
func TestTemplateSchemaTypoIsWarned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	out := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "crawl",
		"schema": map[string]any{"type": "object", "requried": []string{"url"}}})
	ws, _ := out["warnings"].([]any)
	if len(ws) != 1 || ws[0].(map[string]any)["code"] != "unknown_keyword" ||
		!strings.Contains(ws[0].(map[string]any)["message"].(string), `did you mean "required"?`) {
		t.Fatalf("create with \"requried\": %v", out)
	}
	if out := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "ok",
		"schema": map[string]any{"type": "object", "required": []string{"url"}}}); out["warnings"] != nil {
		t.Fatalf("a clean schema warned: %v", out["warnings"])
	}
}
