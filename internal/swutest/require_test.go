package swutest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// verdictTB records a Skipf or Fatalf instead of ending the test.
type verdictTB struct {
	testing.TB
	skip, fatal string
}

func (v *verdictTB) Helper() {}
func (v *verdictTB) Skipf(format string, args ...any) {
	v.skip = fmt.Sprintf(format, args...)
}
func (v *verdictTB) Fatalf(format string, args ...any) {
	v.fatal = fmt.Sprintf(format, args...)
}

func TestRequireSkipsUnlessRequired(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "swupdate")
	env := func(v string) func(string) string {
		return func(name string) string {
			if name == requireEnv {
				return v
			}
			return ""
		}
	}

	var dev verdictTB
	require(&dev, env(""), missing)
	if dev.fatal != "" || !strings.Contains(dev.skip, missing) {
		t.Errorf("without %s: skip %q, fatal %q; want a skip naming %s", requireEnv, dev.skip, dev.fatal, missing)
	}
	var ci verdictTB
	require(&ci, env("1"), missing)
	if ci.skip != "" || !strings.Contains(ci.fatal, missing) || !strings.Contains(ci.fatal, requireEnv) {
		t.Errorf("with %s=1: skip %q, fatal %q; want a failure naming %s and %s", requireEnv, ci.skip, ci.fatal, missing, requireEnv)
	}
	var present verdictTB
	require(&present, env("1"), t.TempDir())
	if present.skip != "" || present.fatal != "" {
		t.Errorf("present: skip %q, fatal %q", present.skip, present.fatal)
	}
}
