package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Labels come from -label (repeatable), else TASKD_LABELS, plus a label file; a
// malformed one stops the agent at start with exit 2 and a message naming where it
// came from.
func TestLabels(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "labels")
	os.WriteFile(file, []byte("# where this machine is\nrack = r17\n\nrole=\n"), 0o644)
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want map[string]string
	}{
		{"flags", []string{"-label", "site=ams1", "-label", "tier = gold"}, nil, map[string]string{"site": "ams1", "tier": "gold"}},
		{"environment", nil, map[string]string{"TASKD_LABELS": "site=ams1, tier=gold"}, map[string]string{"site": "ams1", "tier": "gold"}},
		{"flags replace the environment", []string{"-label", "site=fra2"}, map[string]string{"TASKD_LABELS": "site=ams1,tier=gold"},
			map[string]string{"site": "fra2"}},
		{"file", []string{"-label", "site=ams1", "-label-file", file}, nil, map[string]string{"site": "ams1", "rack": "r17", "role": ""}},
		{"file from the environment", nil, map[string]string{"TASKD_LABEL_FILE": file}, map[string]string{"rack": "r17", "role": ""}},
	} {
		cfg, err := parseRun(append(append([]string{"-key-file", "k"}, c.args...), "--", "true"), envOf(c.env), &bytes.Buffer{})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got, err := allLabels(cfg)
		if err != nil || !maps.Equal(got, c.want) {
			t.Errorf("%s: %v %v, want %v", c.name, got, err, c.want)
		}
	}

	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-label", "site"}, nil, "-label"},
		{[]string{"-label", "=ams1"}, nil, "-label"},
		{nil, map[string]string{"TASKD_LABELS": "site=ams1,,"}, "TASKD_LABELS"},
		{[]string{"-label", "site=a", "-label", "site=b"}, nil, "twice"},
		{[]string{"-label", "bad key=v"}, nil, "-label"},
		{[]string{"-label", "taskd.dev/os=plan9"}, nil, "taskd.dev/"},
		{[]string{"-label", "rack=r1", "-label-file", file}, nil, "-label-file"},
		{[]string{"-label-file", filepath.Join(t.TempDir(), "none")}, nil, "-label-file"},
		{[]string{"-agent-version", "1.0\x01"}, nil, "-agent-version"},
	} {
		var stderr bytes.Buffer
		args := append(append([]string{"run", "-key", "k", "-url", "http://127.0.0.1:1"}, c.args...), "--", "true")
		err := run(t.Context(), args, envOf(c.env), &stderr, &stderr)
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error()+stderr.String(), c.want) {
			t.Errorf("%q %v: %v (exit %d), want exit 2 naming %s", c.args, c.env, err, exitCode(err), c.want)
		}
	}
}
