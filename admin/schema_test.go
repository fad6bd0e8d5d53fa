package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/queue"
)

// refused checks that compiling schema is refused as invalid_argument with a message
// that contains every one of want and none of the server-side strings in leak.
func refused(t *testing.T, schema string, want []string, leak ...string) {
	t.Helper()
	_, err := compileSchema(json.RawMessage(schema))
	if taskd.ErrorCode(err) != taskd.CodeInvalid {
		t.Fatalf("schema %.80s: err = %v, want invalid_argument", schema, err)
	}
	msg := err.(*taskd.Error).Message
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("schema %.80s: message %q does not contain %q", schema, msg, w)
		}
	}
	for _, l := range leak {
		if l != "" && strings.Contains(msg, l) {
			t.Errorf("schema %.80s: message %q leaks %q", schema, msg, l)
		}
	}
}

func accepted(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	sch, err := compileSchema(json.RawMessage(schema))
	if err != nil {
		t.Fatalf("schema %.80s: %v", schema, err)
	}
	return sch
}

func validates(t *testing.T, sch *jsonschema.Schema, instance string) bool {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(instance))
	if err != nil {
		t.Fatal(err)
	}
	return sch.Validate(inst) == nil
}

// nested is a schema whose JSON nests depth levels deep.
func nested(depth int) string {
	return strings.Repeat(`{"items":`, depth-1) + `{}` + strings.Repeat(`}`, depth-1)
}

func TestSchemaDepthIsBounded(t *testing.T) {
	t.Parallel()
	accepted(t, nested(32))
	for _, depth := range []int{33, 1000, 5000} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			refused(t, nested(depth), []string{"32 levels"})
		})
	}
	// Arrays count as levels too.
	refused(t, `{"allOf":`+strings.Repeat(`[`, 40)+strings.Repeat(`]`, 40)+`}`, []string{"32 levels"})
}

func TestSchemaSizeIsBounded(t *testing.T) {
	t.Parallel()
	// sized is a schema whose compact encoding is n bytes.
	sized := func(n int) string {
		s := `{"description":"` + strings.Repeat("x", n-len(`{"description":""}`)) + `"}`
		if len(s) != n {
			t.Fatalf("sized(%d) is %d bytes", n, len(s))
		}
		return s
	}
	accepted(t, sized(64<<10))
	refused(t, sized(64<<10+1), []string{"64 KiB"})
	// What counts is the compact encoding: indentation is free.
	var pretty bytes.Buffer
	json.Indent(&pretty, []byte(sized(64<<10)), "", "        ")
	accepted(t, pretty.String())
}

func TestSchemaRefsStayInsideTheSchema(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	valid := filepath.Join(dir, "valid.json")
	if err := os.WriteFile(valid, []byte(`{"$defs": {"n": {"type": "string"}}, "type": "object"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Write([]byte(`{"type": "object"}`))
	}))
	defer srv.Close()
	cwd, _ := os.Getwd()

	limit := []string{"$ref", "inside the schema"}
	for _, ref := range []string{
		"file:///etc/passwd",
		"file://" + valid,
		"file://" + valid + "#/$defs/n",
		srv.URL + "/s.json",
		"valid.json",
		"../../etc/passwd",
		"",
	} {
		for _, keyword := range []string{"$ref", "$dynamicRef", "$recursiveRef"} {
			refused(t, `{"type": "object", "properties": {"a": {"`+keyword+`": "`+ref+`"}}}`,
				[]string{keyword, "inside the schema", "/properties/a"}, valid, dir, cwd, "root:")
		}
		// at the top too, and under a base made a file or a server by $id
		refused(t, `{"$ref": "`+ref+`"}`, limit, valid, dir, cwd)
		refused(t, `{"$id": "file://`+dir+`/", "properties": {"a": {"$ref": "`+ref+`"}}}`, limit, valid, cwd)
		refused(t, `{"$id": "`+srv.URL+`/", "properties": {"a": {"$ref": "`+ref+`"}}}`, limit, valid, cwd)
	}
	// A meta-schema that is not one of the drafts is not loaded either.
	refused(t, `{"$schema": "`+srv.URL+`/meta.json", "type": "object"}`, []string{"$schema"}, cwd)
	refused(t, `{"$schema": "file://`+valid+`", "type": "object"}`, []string{"$schema"}, valid, cwd)
	if n := requests.Load(); n != 0 {
		t.Fatalf("the server was asked %d times", n)
	}

	// $id naming a file only names the embedded resource: refs inside it resolve inside
	// the schema, never to the file (which says "string" where the schema says "integer").
	sch := accepted(t, `{"$id": "file://`+valid+`", "type": "object",
		"properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "#"}}, "$defs": {"n": {"type": "integer"}}}`)
	if !validates(t, sch, `{"a": 1}`) || validates(t, sch, `{"a": "x"}`) {
		t.Error("refs under a file $id did not resolve inside the schema")
	}
}

func TestSchemaRefToFIFOIsRefusedWithoutOpeningIt(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// Opening a FIFO for reading blocks until a writer comes: a compiler that tried would
	// hang here (the test's own deadline ends it).
	refused(t, `{"$ref": "file://`+fifo+`"}`, []string{"$ref", "inside the schema"}, fifo)
	refused(t, `{"$schema": "file://`+fifo+`"}`, []string{"$schema"}, fifo)
}

func TestSchemaInternalRefsAndDrafts(t *testing.T) {
	t.Parallel()
	sch := accepted(t, `{"type": "object", "properties": {"url": {"$ref": "#/$defs/url"},
		"tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}}},
		"$defs": {"url": {"type": "string", "minLength": 1}, "tag": {"$anchor": "tag", "type": "string"}},
		"required": ["url"]}`)
	if !validates(t, sch, `{"url": "u", "tags": ["a"]}`) || validates(t, sch, `{"url": ""}`) || validates(t, sch, `{"url": "u", "tags": [1]}`) {
		t.Error("internal $defs refs do not validate as they should")
	}
	sch = accepted(t, `{"$ref": "#tree", "$defs": {"tree": {"$anchor": "tree", "type": "object",
		"properties": {"kids": {"type": "array", "items": {"$ref": "#tree"}}}}}}`)
	if !validates(t, sch, `{"kids": [{"kids": []}]}`) || validates(t, sch, `{"kids": [{"kids": [1]}]}`) {
		t.Error("recursive anchor refs do not validate as they should")
	}
	for _, draft := range []string{
		"https://json-schema.org/draft/2020-12/schema",
		"https://json-schema.org/draft/2019-09/schema",
		"http://json-schema.org/draft-07/schema#",
		"http://json-schema.org/draft-06/schema#",
		"http://json-schema.org/draft-04/schema#",
	} {
		defs := "$defs"
		if strings.Contains(draft, "draft-0") {
			defs = "definitions"
		}
		sch := accepted(t, `{"$schema": "`+draft+`", "type": "object", "properties": {"n": {"$ref": "#/`+defs+`/n"}},
			"`+defs+`": {"n": {"type": "integer", "maximum": 3}}}`)
		if !validates(t, sch, `{"n": 3}`) || validates(t, sch, `{"n": 4}`) {
			t.Errorf("%s: does not validate as it should", draft)
		}
	}
	// An invalid schema says why without naming anything of the server's.
	cwd, _ := os.Getwd()
	refused(t, `{"type": 5}`, []string{"schema"}, cwd, "file://")
}

// newTestService is a Service over a test database and Redis prefix of t's own.
func newTestService(t *testing.T) *Service {
	t.Helper()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	cache := queue.NewCache(rdb, st, clk, queue.Config{Prefix: prefix})
	return NewService(st, cache, nil, clk, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// A template's schema is compiled once, not on every task create or replace.
func TestCompiledSchemaIsReused(t *testing.T) {
	t.Parallel()
	svc := newTestService(t)
	var compiles atomic.Int64
	svc.compile = func(raw json.RawMessage) (*jsonschema.Schema, error) {
		compiles.Add(1)
		return compileSchema(raw)
	}
	ctx := WithActor(context.Background(), "test")
	tpl, err := svc.CreateTemplate(ctx, taskd.Template{Name: "crawl", Schema: json.RawMessage(`{"type": "object", "required": ["url"]}`)})
	if err != nil {
		t.Fatal(err)
	}
	afterTemplate := compiles.Load()
	task := taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: "uid_1", StartTime: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC),
		TemplateID: tpl.ID, Params: json.RawMessage(`{"url": "u"}`), DispatchTimes: 1, Mode: taskd.ModeOncePerUser,
		Priority: 5, Status: taskd.StatusActive}
	var last taskd.Task
	for range 5 {
		if last, err = svc.CreateTask(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	last.Params = json.RawMessage(`{}`)
	if _, err := svc.ReplaceTask(ctx, last, nil); taskd.ErrorCode(err) != taskd.CodeParamsInvalid {
		t.Fatalf("replace with params the schema refuses: %v, want params_invalid", err)
	}
	if n := compiles.Load(); n > 1 {
		t.Fatalf("%d compiles for one template (%d at its creation), want at most 1", n, afterTemplate)
	}
}
