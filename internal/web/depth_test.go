package web_test

import (
	"strings"
	"testing"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/web"
)

func nested(depth int, open, close string) string {
	return strings.Repeat(open, depth) + strings.Repeat(close, depth)
}

// The scanning is jsondepth's (tested there); CheckDepth's part is the bound and the
// refusal's words.
func TestCheckDepth(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body, field string // field "": accepted
	}{
		{`{"a": ` + nested(63, "[", "]") + `}`, ""},
		{`{"a": ` + nested(64, "[", "]") + `}`, "a"},
		{nested(65, "[", "]"), "request body"},
		{`["x", ` + nested(65, "[", "]") + `]`, "request body"},
	} {
		err := web.CheckDepth([]byte(c.body))
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%.40s…: %v, want accepted", c.body, err)
		case c.field != "" && (taskd.ErrorCode(err) != taskd.CodeInvalid || !strings.HasPrefix(err.Error(), "invalid_argument: "+c.field+": nested deeper than 64 levels")):
			t.Errorf("%.40s…: %v, want invalid_argument naming %s", c.body, err, c.field)
		}
	}
}

func BenchmarkCheckDepth(b *testing.B) {
	body := []byte(`{"log_id": "0190c6a2-7d7e-7b4e-9b1e-3f2a1c0d9e8f", "result": "success", "detail": {"rows": 1200, "url": "https://example.com/a/b?c=d", "tags": ["x", "y"]}}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := web.CheckDepth(body); err != nil {
			b.Fatal(err)
		}
	}
}

// A value of the wrong JSON kind is named by the kind the field takes, never by a Go
// type.
func TestWrongKindNamesNoGoType(t *testing.T) {
	t.Parallel()
	var v struct {
		Items *struct {
			Count *int `json:"count"`
		} `json:"items"`
		Tags []string `json:"tags"`
	}
	for body, want := range map[string]string{
		`{"items": 5}`:              "items: must be an object, got number",
		`{"items": "x"}`:            "items: must be an object, got string",
		`{"tags": {}}`:              "tags: must be an array, got object",
		`{"items": {"count": "x"}}`: "items.count: must be an integer, got string",
	} {
		err := web.DecodeBytes([]byte(body), &v)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "struct") || strings.Contains(err.Error(), "*") {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}
