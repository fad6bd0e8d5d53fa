package jsondepth_test

import (
	"strings"
	"testing"

	"github.com/taskpull/taskd/internal/jsondepth"
)

func nested(depth int, open, close string) string {
	return strings.Repeat(open, depth) + strings.Repeat(close, depth)
}

func TestOver(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body   string
		max    int
		over   bool
		member string
	}{
		{`{"a": ` + nested(63, "[", "]") + `}`, 64, false, ""},
		{`{"a": ` + nested(64, "[", "]") + `}`, 64, true, "a"},
		{`{"a": ` + nested(62, "[", "]") + `}`, 63, false, ""},
		{`{"a": ` + nested(63, "[", "]") + `}`, 63, true, "a"},
		{`{"log_id": "x", "checkpoint": ` + nested(7000, `{"k":`, "}") + `}`, 64, true, "checkpoint"},
		{`{"s": "[[[[{{{{` + strings.Repeat("[", 100) + `", "t": 1}`, 64, false, ""}, // brackets in strings do not count
		{`{"a\"{": 1, "detail": ` + nested(70, "[", "]") + `}`, 64, true, "detail"},
		{nested(65, "[", "]"), 64, true, ""},
		// A top-level array has no members: its strings are not names.
		{`["x", "y", ` + nested(65, "[", "]") + `]`, 64, true, ""},
		{`{"": ` + nested(65, "[", "]") + `}`, 64, true, ""},
		{`{"params": {"deep": ` + nested(80, `{"x":`, "}") + `}}`, 64, true, "params"},
		{`{"` + strings.Repeat("n", 100) + `": ` + nested(65, "[", "]") + `}`, 64, true, strings.Repeat("n", 64)},
	} {
		member, over := jsondepth.Over([]byte(c.body), c.max)
		if over != c.over || member != c.member {
			t.Errorf("%.40s… (max %d): %q, %v; want %q, %v", c.body, c.max, member, over, c.member, c.over)
		}
	}
}
