package taskd_test

import (
	"strings"
	"testing"

	"github.com/taskpull/taskd"
)

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"crawl", "Crawl the web (daily)", "抓取任务", "naïve café", "a-b_c.d", "emoji 🚀", strings.Repeat("é", 128)} {
		if err := taskd.CheckName("name", ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "   ", "a\x00b", "tab\there", "new\nline", "esc\x1b[31m", "gpj.\u202eexe", "zero\u200bwidth",
		"join\u200dme", "\ufeffbom", "soft\u00adhyphen", "line\u2028sep", "private\ue000use", "unassigned\U000e0fff", "bad\xffbyte",
		strings.Repeat("a", 129)} {
		err := taskd.CheckName("name", bad)
		if taskd.ErrorCode(err) != taskd.CodeInvalid || !strings.HasPrefix(err.Error(), "invalid_argument: name:") {
			t.Errorf("%q: %v, want invalid_argument naming the field", bad, err)
		}
	}
}
