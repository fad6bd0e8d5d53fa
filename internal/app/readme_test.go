package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/testenv"
)

// readmeSection is one "## " section of the README and the shell blocks of it that
// talk to the server.
type readmeSection struct {
	title  string
	blocks []string
}

// readmeWalkthroughs returns the README's sections that have walkthrough blocks: a
// top-level indented block that calls the server (localhost:8080) or sets a shell variable, in
// the order they appear.
func readmeWalkthroughs(t *testing.T) []readmeSection {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	assign := regexp.MustCompile(`(?m)^[A-Z][A-Z0-9_]*=`)
	var sections []readmeSection
	var cur *readmeSection
	var block []string
	prevBlank := true
	flush := func() {
		text := strings.TrimSpace(strings.Join(block, "\n"))
		block = nil
		if cur != nil && (strings.Contains(text, "localhost:8080") || assign.MatchString(text)) {
			cur.blocks = append(cur.blocks, text)
		}
	}
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		// A block at the top level: one indented further is a list item's (such as the
		// agent's command line, which runs until stopped), not a walkthrough.
		case strings.HasPrefix(line, "    ") && (block != nil || prevBlank && line[4] != ' '):
			block = append(block, line[4:])
		case strings.TrimSpace(line) == "" && block != nil:
			block = append(block, "")
		default:
			if block != nil {
				flush()
			}
			if strings.HasPrefix(line, "## ") {
				sections = append(sections, readmeSection{title: strings.TrimPrefix(line, "## ")})
				cur = &sections[len(sections)-1]
			}
		}
		prevBlank = strings.TrimSpace(line) == ""
	}
	if block != nil {
		flush()
	}
	var out []readmeSection
	for _, s := range sections {
		if len(s.blocks) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// TestREADMEWalkthroughs runs the README's walkthroughs as a reader pastes them: each
// section's blocks in a fresh bash (so each section stands on its own), in order,
// against one real server with `make run`'s admin token and enroll secret. Every reply
// must be a 2xx except those a comment in the block announces ("# 409: ..."), in that
// order, and nothing may write to stderr.
func TestREADMEWalkthroughs(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the README's walkthroughs need %s on PATH: %v", tool, err)
		}
	}
	sections := readmeWalkthroughs(t)
	// What each walkthrough the README tells of must show (substrings of its output).
	want := map[string][]string{
		"The two commands": {`"task_id":"rotate:1"`, `{"ok":true}`},
		"Task lifecycle: checkpoints, task-type defaults, stages, batches, interventions": {
			`"inherited": [`, `{"attempt":2,"checkpoint":{"rows_done":5000}}`,
			`"stage":"parse","context":{"blob":"s3://b/1"}`, `"max_in_flight":4`,
			`"state":"expired"`, `"state":"cancelled"`},
		"Campaigns":  {`{"id":1,"state":"running"}`, `"task_id":"campaign:1"`, `"params":{"url":"https://example.com"}`},
		"Operations": {`"nodes"`},
		"Rollouts": {`"task":null`, `{"state":"waiting","phase":1,"cap":1,"claimed":1,"finished":1,"succeeded":1,"gate":"passed"}`,
			`{"state":"running","phase":2,"cap":2}`, `"rotate:`},
		"Devices over hawkBit DDI, and software artifacts": {`{"filename":"rootfs-2.4.1.swu","size":4096}`,
			`{"state":"done","result":"success"}`},
	}
	for _, s := range sections {
		if _, ok := want[s.title]; !ok {
			t.Errorf("README section %q has walkthrough blocks this test does not know: add what it must show", s.title)
		}
	}
	for title := range want {
		found := false
		for _, s := range sections {
			found = found || s.title == title
		}
		if !found {
			t.Errorf("README section %q has no walkthrough blocks any more", title)
		}
	}

	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	// make run's settings: the defaults, its admin token and enroll secret.
	env := map[string]string{"DISPATCH_ADMIN_TOKEN": "dev-admin-token",
		"DISPATCH_ENROLL_SECRET": "dev-enroll-secret", "DISPATCH_NODE": "readme"}
	cfg, err := app.LoadConfig(nil, func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisPrefix = prefix
	cfg.ArtifactDir = t.TempDir() // make run's is ./artifacts
	a := app.New(cfg, app.Deps{Store: st, Redis: rdb, Clock: clock.Real{}, Log: log})
	if err := a.PrepareArtifacts(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); a.RunBackground(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	status := regexp.MustCompile(`^HTTP (\d{3}) (.*)$`)
	announced := regexp.MustCompile(`#\s*(\d{3})\b`)
	for _, s := range sections {
		script := strings.Join(s.blocks, "\n")
		var wantCodes []string
		for _, m := range announced.FindAllStringSubmatch(script, -1) {
			wantCodes = append(wantCodes, m[1])
		}
		// curl reports each reply's status on stderr, beside what the reader sees.
		prelude := "set -euo pipefail\ncurl() { command curl -w '%{stderr}HTTP %{http_code} %{method} %{url_effective}\\n' \"$@\"; }\n"
		cmd := exec.CommandContext(t.Context(), "bash", "-c", prelude+strings.ReplaceAll(script, "localhost:8080", host))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var codes, other []string
		for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			if m := status.FindStringSubmatch(line); m != nil {
				if m[1][0] != '2' {
					codes = append(codes, m[1])
					other = append(other, line)
				}
			} else if line != "" {
				other = append(other, line)
			}
		}
		if err != nil || strings.Join(codes, ",") != strings.Join(wantCodes, ",") || len(other) != len(codes) {
			t.Errorf("README section %q: %v; replies other than 2xx %v, announced %v; stderr:\n%s\nstdout:\n%s",
				s.title, err, codes, wantCodes, strings.Join(other, "\n"), stdout.String())
			continue
		}
		for _, w := range want[s.title] {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("README section %q: output lacks %s:\n%s", s.title, w, stdout.String())
			}
		}
	}
}
