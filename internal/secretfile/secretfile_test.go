package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A secret file's content is the secret, less white space; an empty, oversized or
// missing file is an error naming it.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if s, err := Read(write("ok", "  s3cret\n")); err != nil || s != "s3cret" {
		t.Errorf("Read: %q, %v; want s3cret", s, err)
	}
	for name, path := range map[string]string{
		"empty":   write("empty", " \n"),
		"too big": write("big", strings.Repeat("x", maxSize+1)),
		"missing": filepath.Join(dir, "none"),
	} {
		if _, err := Read(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming %s", name, err, path)
		}
	}
}
