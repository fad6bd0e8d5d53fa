package docs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The Go agent in AGENTS.md compiles against the SDK as it is: a guide whose example
// does not build teaches nothing.
func TestAgentsGuideGoExampleBuilds(t *testing.T) {
	guide, err := os.ReadFile("AGENTS.md")
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(guide, []byte("```go\n"))
	if start < 0 {
		t.Fatal("AGENTS.md has no Go example")
	}
	src := guide[start+len("```go\n"):]
	src = src[:bytes.Index(src, []byte("```"))]
	if n := bytes.Count(src, []byte("\n")); n >= 40 {
		t.Errorf("the guide's agent is %d lines; the guide promises one in under 40", n)
	}
	// Inside the module, so that the SDK's import path resolves to this checkout.
	dir, err := os.MkdirTemp(".", "agentexample-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "vet", "./"+filepath.Base(dir))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the guide's Go agent does not build: %v\n%s", err, out)
	}
}

// The guide's shell examples are run as pasted by cmd/taskd-agent's
// TestGuideShellCommand: the taskd-agent command line (an indented block) and count.sh
// (the one sh block). An example added beside them is run by no test; this says so.
func TestAgentsGuideShellExamplesAreRun(t *testing.T) {
	guide, err := os.ReadFile("AGENTS.md")
	if err != nil {
		t.Fatal(err)
	}
	var fenced, indented int
	inFence := false
	prevBlank := true
	for _, line := range strings.Split(string(guide), "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			if !inFence && line != "```go" {
				fenced++
			}
			inFence = !inFence
		case !inFence && prevBlank && strings.HasPrefix(line, "    ") && strings.TrimSpace(line) != "":
			indented++
		}
		prevBlank = strings.TrimSpace(line) == ""
	}
	if fenced != 1 || indented != 1 {
		t.Errorf("AGENTS.md has %d fenced blocks besides Go and %d indented ones; TestGuideShellCommand runs one of each "+
			"(count.sh and the taskd-agent command line): have a test run a new example as pasted", fenced, indented)
	}
}
