package api_test

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/taskpull/taskd/api"
)

var update = flag.Bool("update", false, "rewrite docs/API.md from openapi.json")

// TestMarkdownIsTheDocument: docs/API.md is the OpenAPI document rendered, so the two
// state one contract.
func TestMarkdownIsTheDocument(t *testing.T) {
	want, err := api.Markdown()
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	const path = "../docs/API.md"
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./api -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/API.md is not api/openapi.json rendered: run go test ./api -update and commit both")
	}
}
