package archtest

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/taskpull/taskd"

type pkg struct {
	ImportPath string
	Name       string
	Imports    []string // direct, non-test
	Deps       []string // transitive, non-test
}

// packages lists the module's packages with their imports, as go list sees them.
func packages(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	return pkgs
}

// The layers: the domain (taskd, schedule) at the bottom, doing no I/O; the MySQL
// package (internal/store) and the Redis package (queue) beside each other, neither
// knowing the other; the services (dispatch, admin, clientkey) above, each depending
// on interfaces it owns, not on the MySQL or Redis package, and not on each other
// (admin uses clientkey); internal/app wiring them; the binaries on top, imported by
// nothing.
func TestImportRules(t *testing.T) {
	pkgs := packages(t)
	p := func(rel string) pkg {
		path := module
		if rel != "" {
			path += "/" + rel
		}
		got, ok := pkgs[path]
		if !ok {
			t.Fatalf("package %s not found", path)
		}
		return got
	}
	// must not lists what a package may not depend on, even indirectly.
	mustNot := func(rel string, forbidden ...string) {
		for _, dep := range p(rel).Deps {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") || (!strings.Contains(f, ".") && dep == module+"/"+f) {
					t.Errorf("%s depends on %s", p(rel).ImportPath, dep)
				}
			}
		}
	}
	// The standard library's I/O packages are checked among direct imports (fmt, say,
	// imports os itself); the drivers and clients anywhere below.
	stdIO := []string{"database/sql", "net", "net/http", "os", "os/exec", "io/fs"}
	clients := []string{"github.com/redis/go-redis", "github.com/go-sql-driver/mysql", "github.com/segmentio/kafka-go",
		"github.com/elastic/go-elasticsearch"}
	for _, domain := range []string{"", "schedule"} {
		mustNot(domain, clients...)
		for _, imp := range p(domain).Imports {
			if slices.Contains(stdIO, imp) {
				t.Errorf("domain package %s imports %s", p(domain).ImportPath, imp)
			}
		}
		for _, dep := range p(domain).Deps {
			if strings.HasPrefix(dep, module) && dep != module {
				t.Errorf("domain package %s depends on %s", p(domain).ImportPath, dep)
			}
		}
	}
	mustNot("internal/store", module+"/queue")
	mustNot("queue", module+"/internal/store")
	mustNot("dispatch", module+"/admin", module+"/internal/store", module+"/queue")
	mustNot("admin", module+"/dispatch", module+"/internal/store", module+"/queue")
	mustNot("campaign", module+"/admin", module+"/dispatch", module+"/internal/store")
	mustNot("clientkey", module+"/admin", module+"/dispatch", module+"/internal/store", module+"/queue")
	// The agent SDK is a library users import: it speaks the HTTP API and depends on no
	// package of the server, nor on a database or cache client. Of the module's other
	// packages it uses only sdkShared: what it shares with the server so that both
	// decide alike (one JSON depth scanner), each of the standard library alone.
	sdkShared := []string{"internal/jsondepth"}
	for _, sdk := range []string{"agent", "agent/agenttest"} {
		for _, dep := range p(sdk).Deps {
			inSDK := dep == module+"/agent" || strings.HasPrefix(dep, module+"/agent/")
			if strings.HasPrefix(dep, module) && !inSDK && !slices.Contains(sdkShared, strings.TrimPrefix(dep, module+"/")) {
				t.Errorf("%s depends on the server's %s", p(sdk).ImportPath, dep)
			}
		}
		mustNot(sdk, clients...)
	}
	// The admin API's Go client is one too: it speaks the HTTP API alone, and depends
	// on no package of the module.
	for _, dep := range p("client").Deps {
		if strings.HasPrefix(dep, module) {
			t.Errorf("%s depends on the server's %s", p("client").ImportPath, dep)
		}
	}
	mustNot("client", clients...)
	for _, shared := range sdkShared {
		for _, dep := range p(shared).Deps {
			if first, _, _ := strings.Cut(dep, "/"); strings.Contains(first, ".") {
				t.Errorf("%s, which the agent SDK uses, depends on %s: it may use the standard library only", p(shared).ImportPath, dep)
			}
		}
	}

	for _, q := range pkgs {
		for _, imp := range q.Imports {
			if dep, ok := pkgs[imp]; ok && dep.Name == "main" {
				t.Errorf("%s imports the command %s", q.ImportPath, imp)
			}
		}
	}
}

// The rules above would pass vacuously if the packages they name stopped importing
// anything; make sure they are looked at.
func TestImportRulesSeeTheLayers(t *testing.T) {
	pkgs := packages(t)
	app := pkgs[module+"/internal/app"]
	for _, want := range []string{"dispatch", "admin", "clientkey", "internal/store", "queue"} {
		if !slices.Contains(app.Imports, module+"/"+want) {
			t.Errorf("internal/app does not import %s: the wiring moved, update the rules", want)
		}
	}
	// The SDK and its fake speak one wire, and they and the server bound a body's
	// nesting with one scanner (the SDK's allowance above is for it).
	for _, c := range []struct{ pkg, dep string }{
		{"agent", "agent/internal/wire"}, {"agent/agenttest", "agent/internal/wire"},
		{"agent", "internal/jsondepth"}, {"agent/agenttest", "internal/jsondepth"}, {"internal/web", "internal/jsondepth"},
	} {
		if !slices.Contains(pkgs[module+"/"+c.pkg].Imports, module+"/"+c.dep) {
			t.Errorf("%s does not import %s: the shared code moved, update the rules", c.pkg, c.dep)
		}
	}
}
