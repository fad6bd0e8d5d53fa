package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// The enroll secret may come from a file (-enroll-secret-file, or
// TASKD_ENROLL_SECRET_FILE), so that it is never on a command line.
func TestEnrollSecretFromAFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("a-secret-from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"flag":        {[]string{"-uid", "u", "-enroll-secret-file", path, "--", "true"}, nil},
		"environment": {[]string{"-uid", "u", "--", "true"}, map[string]string{"TASKD_ENROLL_SECRET_FILE": path}},
	} {
		var stderr bytes.Buffer
		c, err := parseRun(tc.args, envOf(tc.env), &stderr)
		if err != nil || c.enrollSecret != "a-secret-from-a-file" {
			t.Errorf("%s: secret %q, err %v", name, c.enrollSecret, err)
		}
		if stderr.Len() != 0 {
			t.Errorf("%s: a secret from a file warned: %s", name, stderr.String())
		}
	}
	var stderr bytes.Buffer
	_, err := parseRun([]string{"-uid", "u", "-enroll-secret-file", filepath.Join(t.TempDir(), "none"), "--", "true"}, envOf(nil), &stderr)
	if err == nil || !strings.Contains(err.Error(), "-enroll-secret-file") {
		t.Errorf("a secret file that does not exist: %v, want an error naming -enroll-secret-file", err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	_, err = parseRun([]string{"-uid", "u", "-enroll-secret-file", empty, "--", "true"}, envOf(nil), &stderr)
	if err == nil || !strings.Contains(err.Error(), "-enroll-secret-file") {
		t.Errorf("an empty secret file: %v, want an error naming -enroll-secret-file", err)
	}
	_, err = parseRun([]string{"-uid", "u", "-enroll-secret", "s", "-enroll-secret-file", path, "--", "true"}, envOf(nil), &stderr)
	if err == nil {
		t.Error("-enroll-secret and -enroll-secret-file together: taken, want an error")
	}
}

// A secret given as a flag is visible to every user through ps: the agent says so,
// once; from the environment it says nothing.
func TestSecretOnTheCommandLineWarns(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	if _, err := parseRun([]string{"-key", "k", "-uid", "u", "-enroll-secret", "s", "--", "true"}, envOf(nil), &stderr); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(stderr.String(), "warning"); n != 1 || !strings.Contains(stderr.String(), "-key") ||
		!strings.Contains(stderr.String(), "-enroll-secret") || strings.Contains(stderr.String(), "k s") {
		t.Errorf("-key and -enroll-secret on the command line: stderr %q, want one warning naming both", stderr.String())
	}
	stderr.Reset()
	if _, err := parseRun([]string{"--", "true"}, envOf(map[string]string{"TASKD_KEY": "k", "TASKD_UID": "u", "TASKD_ENROLL_SECRET": "s"}), &stderr); err != nil {
		t.Fatal(err)
	}
	if stderr.Len() != 0 {
		t.Errorf("credentials from the environment warned: %q", stderr.String())
	}
}
