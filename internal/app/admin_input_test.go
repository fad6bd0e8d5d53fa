package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// errMessage is the message of an error reply, or "".
func errMessage(out map[string]any) string {
	if e, ok := out["error"].(map[string]any); ok {
		s, _ := e["message"].(string)
		return s
	}
	return ""
}

// expectMsg is expect that also checks the error message contains every one of want.
func (e *env) expectMsg(method, path string, body any, status int, code string, want ...string) map[string]any {
	e.t.Helper()
	out := e.expect(method, path, body, status, code)
	for _, w := range want {
		if !strings.Contains(errMessage(out), w) {
			e.t.Errorf("%s %s %.100v: message %q does not contain %q", method, path, body, errMessage(out), w)
		}
	}
	return out
}

// raw sends body as it is, with contentType, and decodes the reply.
func (e *env) raw(method, path, contentType string, body []byte) (int, map[string]any) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.urls[0]+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

func TestTemplateSchemaBounds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Write([]byte(`{"type": "object"}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	valid := filepath.Join(dir, "s.json")
	os.WriteFile(valid, []byte(`{"type": "object"}`), 0o644)
	cwd, _ := os.Getwd()

	tpl := func(schema string) string { return `{"name": "x", "schema": ` + schema + `}` }
	// Deeper than any request body may nest, then deeper than a schema may.
	deep := strings.Repeat(`{"items":`, 999) + `{}` + strings.Repeat(`}`, 999)
	e.expectMsg("POST", "/v1/admin/templates", tpl(deep), 400, "invalid_argument", "schema: nested deeper than 64 levels")
	deep = strings.Repeat(`{"items":`, 40) + `{}` + strings.Repeat(`}`, 40)
	e.expectMsg("POST", "/v1/admin/templates", tpl(deep), 400, "invalid_argument", "32 levels")
	big := `{"description":"` + strings.Repeat("x", 64<<10+1-len(`{"description":""}`)) + `"}`
	e.expectMsg("POST", "/v1/admin/templates", tpl(big), 400, "invalid_argument", "64 KiB")
	for _, ref := range []string{"file:///etc/passwd", "file://" + valid, srv.URL + "/s.json", "s.json"} {
		out := e.expectMsg("POST", "/v1/admin/templates", tpl(`{"properties": {"a": {"$ref": "`+ref+`"}}}`), 400,
			"invalid_argument", "$ref", "inside the schema")
		for _, leak := range []string{"root:", dir, cwd} {
			if strings.Contains(errMessage(out), leak) {
				t.Errorf("$ref %s: message %q leaks %q", ref, errMessage(out), leak)
			}
		}
	}
	e.expectMsg("POST", "/v1/admin/templates", tpl(`{"$schema": "`+srv.URL+`/m.json"}`), 400, "invalid_argument", "$schema")
	if n := requests.Load(); n != 0 {
		t.Errorf("the server was asked %d times", n)
	}
	if n := e.count("SELECT COUNT(*) FROM task_params_template"); n != 0 {
		t.Fatalf("refused templates were written: %d", n)
	}

	// Internal refs and drafts work, and a params error shows no server path.
	for _, draft := range []string{"https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-07/schema#"} {
		defs := map[bool]string{true: "definitions", false: "$defs"}[strings.Contains(draft, "draft-07")]
		out := e.expect("POST", "/v1/admin/templates", tpl(`{"$schema": "`+draft+`", "type": "object",
			"properties": {"url": {"$ref": "#/`+defs+`/url"}}, "required": ["url"], "`+defs+`": {"url": {"type": "string"}}}`), 201, "")
		body := map[string]any{"executor": "uid_1", "start_time": ts(t0), "template_id": out["id"], "params": map[string]any{"url": 5}}
		out = e.expect("POST", "/v1/admin/tasks/once", body, 422, "params_invalid")
		if details := fmt.Sprint(out["error"]); strings.Contains(details, cwd) || strings.Contains(details, "file:") ||
			!strings.Contains(details, "/url") {
			t.Errorf("%s: params error %s", draft, details)
		}
		body["params"] = map[string]any{"url": "u"}
		e.expect("POST", "/v1/admin/tasks/once", body, 201, "")
	}
}

// outOfRange are the literals of numbers no integer field of the API takes.
var outOfRange = []string{"2147483648", "4294967296", "9007199254740992", "9223372036854775808",
	"-9223372036854775808", "1e400", "1.5"}

func TestTaskNumbersOutOfRange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.template()
	body := func(kind, field, lit string) string {
		fields := map[string]string{"executor": `"uid_1"`, "start_time": `"` + ts(t0) + `"`, "template_id": fmt.Sprint(tpl)}
		if kind == "rotate" {
			fields["space_minutes"] = "60"
		}
		fields[field] = lit
		var parts []string
		for k, v := range fields {
			parts = append(parts, `"`+k+`": `+v)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	bounds := map[string]string{
		"dispatch_times":        "2147483647",
		"lease_seconds":         "31536000",
		"retry_backoff_seconds": "86400",
		"max_attempts":          "100",
		"priority":              "9",
		"template_id":           "9223372036854775807",
		"space_minutes":         "5270400",
	}
	created := e.expect("POST", "/v1/admin/tasks/rotate", body("rotate", "priority", "5"), 201, "")
	put := "/v1/admin/tasks/rotate/" + fmt.Sprint(created["id"])
	for field, bound := range bounds {
		kind := "once"
		if field == "space_minutes" {
			kind = "rotate"
		}
		for _, lit := range outOfRange {
			out := e.expectMsg("POST", "/v1/admin/tasks/"+kind, body(kind, field, lit), 400, "invalid_argument", field+":")
			if !strings.HasPrefix(errMessage(out), field+":") {
				t.Errorf("%s = %s: message %q does not start with the field", field, lit, errMessage(out))
			}
			if lit == "4294967296" && field != "template_id" && !strings.Contains(errMessage(out), bound) {
				t.Errorf("%s = %s: message %q does not say the bound %s", field, lit, errMessage(out), bound)
			}
			e.expectMsg("PUT", put, body("rotate", field, lit), 400, "invalid_argument", field+":")
		}
		// the bound itself is accepted (but for template_id, which names no template)
		if field != "template_id" {
			e.expect("POST", "/v1/admin/tasks/"+kind, body(kind, field, bound), 201, "")
		}
	}
	for field, lit := range map[string]string{"lease_seconds": "31536001", "retry_backoff_seconds": "86401",
		"dispatch_times": "0", "priority": "0", "max_attempts": "101", "template_id": "0"} {
		e.expectMsg("POST", "/v1/admin/tasks/once", body("once", field, lit), 400, "invalid_argument", field+":")
	}
	if got := e.expect("GET", put, nil, 200, ""); got["priority"] != 5.0 {
		t.Fatalf("refused PUTs changed the task: %v", got)
	}
}

func TestQueryAndPathNumbersOutOfRange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	for _, lit := range outOfRange {
		for _, path := range []string{"/v1/admin/tasks?limit=", "/v1/admin/events?limit=", "/v1/admin/audit?limit="} {
			e.expectMsg("GET", path+lit, nil, 400, "invalid_argument", "limit:")
		}
	}
	// ids are BIGINT: only what is outside 1..2^63-1 is out of range
	for _, lit := range []string{"9223372036854775808", "-9223372036854775808", "18446744073709551616", "1e400", "1.5", "0", "-1"} {
		e.expectMsg("GET", "/v1/admin/events?task_id=once:"+lit, nil, 400, "invalid_argument", "task_id:")
		for _, path := range []string{"/v1/admin/templates/", "/v1/admin/tasks/once/", "/v1/admin/tasks/rotate/"} {
			e.expectMsg("GET", path+lit, nil, 400, "invalid_argument", "id:", "9223372036854775807")
			e.expectMsg("DELETE", path+lit, nil, 400, "invalid_argument", "id:")
		}
		e.expectMsg("PUT", "/v1/admin/tasks/once/"+lit, map[string]any{}, 400, "invalid_argument", "id:")
	}
	// what is not a number at all names nothing there is
	e.expect("GET", "/v1/admin/tasks/once/abc", nil, 404, "not_found")
	e.expect("GET", "/v1/admin/tasks/once/9223372036854775807", nil, 404, "not_found")
}

func TestTemplateNameCountsCharacters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	name := strings.Repeat("😀", 127) + "é" // 128 characters, 510 bytes
	out := e.expect("POST", "/v1/admin/templates", map[string]any{"name": name, "schema": map[string]any{}}, 201, "")
	if got := e.expect("GET", "/v1/admin/templates/"+fmt.Sprint(out["id"]), nil, 200, ""); got["name"] != name {
		t.Errorf("name came back as %q", got["name"])
	}
	var stored string
	var chars int
	if err := e.store.DB().QueryRow("SELECT name, CHAR_LENGTH(name) FROM task_params_template").Scan(&stored, &chars); err != nil {
		t.Fatal(err)
	}
	if stored != name || chars != 128 {
		t.Errorf("stored %q (%d characters), want the name intact", stored, chars)
	}
	for _, body := range []string{
		`{"name": "` + strings.Repeat("😀", 129) + `", "schema": {}}`,
		`{"name": "` + strings.Repeat("a", 129) + `", "schema": {}}`,
		"{\"name\": \"a\xffb\", \"schema\": {}}",
		"{\"name\": \"a\xc3\", \"schema\": {}}",
		`{"name": "a\udc00b", "schema": {}}`,
		`{"name": "a\u0007b", "schema": {}}`,
		`{"name": "a\nb", "schema": {}}`,
		`{"name": "a\u0000", "schema": {}}`,
		`{"name": "a` + "\u0085" + `", "schema": {}}`,
		`{"name": "", "schema": {}}`,
	} {
		if code, out := e.raw("POST", "/v1/admin/templates", "application/json", []byte(body)); code != 400 ||
			errCode(out) != "invalid_argument" || !strings.HasPrefix(errMessage(out), "name:") {
			t.Errorf("%q: %d %v, want 400 invalid_argument naming name", body, code, out)
		}
	}
	if n := e.count("SELECT COUNT(*) FROM task_params_template"); n != 1 {
		t.Fatalf("%d templates, want 1", n)
	}
}

func TestPatchTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tplOut := e.expect("POST", "/v1/admin/templates", `{"name": "crawl", "schema": {"type": "object",
		"properties": {"url": {"type": "string"}, "opts": {"type": "object", "properties": {"depth": {"type": "integer"}}}},
		"required": ["url"]}}`, 201, "")
	tpl := tplOut["id"]
	end := t0.Add(48 * time.Hour)
	created := e.expect("POST", "/v1/admin/tasks/rotate", map[string]any{"executor": "gid_ops", "start_time": ts(t0),
		"template_id": tpl, "params": map[string]any{"url": "u", "opts": map[string]any{"depth": 1, "lang": "en"}},
		"space_minutes": 60, "end_time": ts(end), "lease_seconds": 30, "dispatch_times": 4}, 201, "")
	path := "/v1/admin/tasks/rotate/" + fmt.Sprint(created["id"])
	audits := func() int {
		return e.count("SELECT COUNT(*) FROM audit_log WHERE action = 'task.patch' AND target = ?", created["task_id"])
	}
	patch := func(body string, status int, code string, want ...string) map[string]any {
		t.Helper()
		got, out := e.raw("PATCH", path, "application/merge-patch+json", []byte(body))
		if got != status || errCode(out) != code {
			t.Errorf("PATCH %s: %d %q, want %d %q (%v)", body, got, errCode(out), status, code, out)
		}
		for _, w := range want {
			if !strings.Contains(errMessage(out), w) {
				t.Errorf("PATCH %s: message %q does not contain %q", body, errMessage(out), w)
			}
		}
		return out
	}
	same := func(got map[string]any, want map[string]any, fields ...string) {
		t.Helper()
		for _, f := range fields {
			if fmt.Sprint(got[f]) != fmt.Sprint(want[f]) {
				t.Errorf("%s = %v, want %v", f, got[f], want[f])
			}
		}
	}

	t.Run("one field", func(t *testing.T) {
		out := patch(`{"priority": 7}`, 200, "")
		if out["priority"] != 7.0 {
			t.Errorf("priority = %v", out["priority"])
		}
		same(out, created, "executor", "start_time", "end_time", "space_minutes", "params", "lease_seconds",
			"max_attempts", "dispatch_times", "mode", "status", "template_id", "created_at")
		same(e.expect("GET", path, nil, 200, ""), out, "priority", "params", "end_time", "updated_at")
		if audits() != 1 {
			t.Errorf("%d audit entries for the patch, want 1", audits())
		}
	})
	t.Run("application/json too", func(t *testing.T) {
		if code, out := e.raw("PATCH", path, "application/json", []byte(`{"priority": 6}`)); code != 200 || out["priority"] != 6.0 {
			t.Errorf("PATCH as application/json: %d %v", code, out)
		}
	})
	t.Run("null clears end_time", func(t *testing.T) {
		out := patch(`{"end_time": null}`, 200, "")
		if _, ok := out["end_time"]; ok {
			t.Errorf("end_time still set: %v", out["end_time"])
		}
		if got := e.expect("GET", path, nil, 200, ""); got["end_time"] != nil {
			t.Errorf("end_time still stored: %v", got["end_time"])
		}
	})
	t.Run("params merge recursively", func(t *testing.T) {
		out := patch(`{"params": {"opts": {"depth": 2, "lang": null}, "extra": [1, {"k": null}]}}`, 200, "")
		want := `{"extra":[1,{"k":null}],"opts":{"depth":2},"url":"u"}`
		if b, _ := json.Marshal(out["params"]); string(b) != want {
			t.Errorf("params = %s, want %s", b, want)
		}
	})
	t.Run("invalid results are refused as PUT refuses them", func(t *testing.T) {
		before := e.expect("GET", path, nil, 200, "")
		n := audits()
		out := patch(`{"params": {"url": null}}`, 422, "params_invalid")
		if out["error"].(map[string]any)["details"] == nil {
			t.Errorf("params_invalid without details: %v", out)
		}
		patch(`{"params": {"opts": {"depth": "deep"}}}`, 422, "params_invalid")
		full := map[string]any{"executor": "gid_ops", "start_time": ts(t0), "template_id": tpl, "space_minutes": 60,
			"params": map[string]any{"url": "u"}}
		for field, bad := range map[string]any{"priority": 10, "space_minutes": 0, "start_time": "tomorrow",
			"end_time": ts(t0), "dispatch_times": 4294967296, "executor": "ops", "mode": "sometimes", "status": "deleted"} {
			body := map[string]any{}
			for k, v := range full {
				body[k] = v
			}
			body[field] = bad
			putOut := e.expect("PUT", path, body, 400, "invalid_argument")
			b, _ := json.Marshal(map[string]any{field: bad})
			if msg := errMessage(patch(string(b), 400, "invalid_argument")); msg != errMessage(putOut) {
				t.Errorf("PATCH %s: message %q, PUT says %q", b, msg, errMessage(putOut))
			}
		}
		patch(`{"executor": null}`, 400, "invalid_argument", "executor")
		patch(`{"start_time": null}`, 400, "invalid_argument", "start_time: required")
		patch(`{"space_minutes": null}`, 400, "invalid_argument", "space_minutes")
		for _, f := range []string{"id", "task_id", "kind", "created_at", "updated_at", "colour", "claimed"} {
			patch(`{"`+f+`": null}`, 400, "invalid_argument", f)
			patch(`{"priority": 3, "`+f+`": 1}`, 400, "invalid_argument", f)
		}
		for _, body := range []string{`[]`, `null`, `"x"`, `5`, ``} {
			patch(body, 400, "invalid_argument")
		}
		patch(`{"priority": 3} {}`, 400, "malformed_json")
		patch(`{"priority":`, 400, "malformed_json")
		if code, _ := e.raw("PATCH", path, "application/json-patch+json", []byte(`[{"op": "remove", "path": "/priority"}]`)); code != 400 {
			t.Errorf("a JSON Patch: %d, want 400", code)
		}
		same(e.expect("GET", path, nil, 200, ""), before, "priority", "params", "start_time", "end_time", "space_minutes",
			"executor", "updated_at", "dispatch_times", "mode", "status")
		if audits() != n {
			t.Errorf("refused patches were audited: %d entries, want %d", audits(), n)
		}
	})
	t.Run("missing task", func(t *testing.T) {
		patch := func(path string) {
			if code, out := e.raw("PATCH", path, "application/merge-patch+json", []byte(`{"priority": 3}`)); code != 404 || errCode(out) != "not_found" {
				t.Errorf("PATCH %s: %d %v, want 404", path, code, out)
			}
		}
		patch("/v1/admin/tasks/rotate/999")
		patch("/v1/admin/tasks/once/" + fmt.Sprint(created["id"]))
		patch("/v1/admin/tasks/weekly/1")
		e.expect("DELETE", "/v1/admin/tasks/rotate/"+fmt.Sprint(e.expect("POST", "/v1/admin/tasks/rotate",
			map[string]any{"executor": "uid_1", "start_time": ts(t0), "template_id": tpl, "params": map[string]any{"url": "u"},
				"space_minutes": 5}, 201, "")["id"]), nil, 204, "")
		patch("/v1/admin/tasks/rotate/" + fmt.Sprint(created["id"].(float64)+1))
	})
	t.Run("audited as a replace", func(t *testing.T) {
		n := audits()
		patch(`{"dispatch_times": 9}`, 200, "")
		if audits() != n+1 {
			t.Fatalf("%d audit entries, want %d", audits(), n+1)
		}
		var actor, before, after string
		if err := e.store.DB().QueryRow(`SELECT actor, before_json, after_json FROM audit_log WHERE target = ?
			ORDER BY id DESC LIMIT 1`, created["task_id"]).Scan(&actor, &before, &after); err != nil {
			t.Fatal(err)
		}
		if actor != "admin" || !strings.Contains(before, `"dispatch_times":4`) || !strings.Contains(after, `"dispatch_times":9`) {
			t.Errorf("audit entry: actor %q before %s after %s", actor, before, after)
		}
	})
	// A task that sets no max_attempts follows the default, which depends on the
	// effective lease; one it sets stays through a patch of the lease.
	t.Run("max_attempts as set, or the default when not set", func(t *testing.T) {
		once := e.expect("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_9", "start_time": ts(t0),
			"template_id": tpl, "params": map[string]any{"url": "u"}}, 201, "")
		p := "/v1/admin/tasks/once/" + fmt.Sprint(once["id"])
		if once["max_attempts"] != 1.0 {
			t.Errorf("max_attempts without a lease = %v, want 1", once["max_attempts"])
		}
		if _, out := e.raw("PATCH", p, "application/merge-patch+json", []byte(`{"lease_seconds": 60}`)); out["max_attempts"] != 3.0 {
			t.Errorf("unset max_attempts after a patch of lease_seconds = %v, want 3 (the default with a lease)", out["max_attempts"])
		}
		if _, out := e.raw("PATCH", p, "application/merge-patch+json", []byte(`{"max_attempts": 1}`)); out["max_attempts"] != 1.0 {
			t.Errorf("max_attempts set to 1 = %v", out["max_attempts"])
		}
		if _, out := e.raw("PATCH", p, "application/merge-patch+json", []byte(`{"lease_seconds": 90}`)); out["max_attempts"] != 1.0 {
			t.Errorf("max_attempts set to 1, after a patch of lease_seconds = %v, want 1 (as set)", out["max_attempts"])
		}
		if _, out := e.raw("PATCH", p, "application/merge-patch+json", []byte(`{"max_attempts": null}`)); out["max_attempts"] != 3.0 {
			t.Errorf("max_attempts cleared with a lease = %v, want 3", out["max_attempts"])
		}
	})
}

// An edit by PATCH reaches the agents on their next poll.
func TestPatchReachesAgentsOnTheirNextPoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.template()
	for _, executor := range []string{"uid_1", "gid_ops"} {
		e.admin("PUT", "/v1/admin/groups/ops/members", map[string]any{"uids": []string{"2"}})
		created := e.expect("POST", "/v1/admin/tasks/once", map[string]any{"executor": executor,
			"start_time": ts(t0.Add(time.Hour)), "template_id": tpl, "params": map[string]any{"n": 1}}, 201, "")
		uid := map[string]string{"uid_1": "1", "gid_ops": "2"}[executor]
		key := e.key(uid)
		if r := e.fetch(0, key); r.Task != nil || r.NextDueAt == nil || !r.NextDueAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("%s: before the patch: %+v", executor, r)
		}
		path := "/v1/admin/tasks/once/" + fmt.Sprint(created["id"])
		if code, out := e.raw("PATCH", path, "application/merge-patch+json",
			[]byte(`{"start_time": "`+ts(t0.Add(-time.Minute))+`", "params": {"n": 2}}`)); code != 200 {
			t.Fatalf("%s: patch: %d %v", executor, code, out)
		}
		code, out := e.do(0, "POST", "/v1/fetch", key, nil)
		got, _ := out["task"].(map[string]any)
		if code != 200 || got == nil || got["task_id"] != created["task_id"] || fmt.Sprint(got["params"]) != "map[n:2]" {
			t.Fatalf("%s: after the patch: %d %v", executor, code, out)
		}
	}
}

func TestMaxAttemptsDefaultsWithALease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.template()
	base := func(kv ...any) map[string]any {
		m := map[string]any{"executor": "uid_1", "start_time": ts(t0), "template_id": tpl}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		body map[string]any
		want float64
	}{
		{base(), 1},
		{base("lease_seconds", 0), 1},
		{base("lease_seconds", 60), 3},
		{base("lease_seconds", 60, "max_attempts", 1), 1},
		{base("lease_seconds", 60, "max_attempts", 7), 7},
	} {
		out := e.expect("POST", "/v1/admin/tasks/once", c.body, 201, "")
		if out["max_attempts"] != c.want {
			t.Errorf("create %v: max_attempts %v, want %v", c.body, out["max_attempts"], c.want)
		}
		path := "/v1/admin/tasks/once/" + fmt.Sprint(out["id"])
		if got := e.expect("PUT", path, c.body, 200, ""); got["max_attempts"] != c.want {
			t.Errorf("replace %v: max_attempts %v, want %v", c.body, got["max_attempts"], c.want)
		}
	}
}

func TestTimeErrorsNameTheFieldAndTheForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.template()
	const form = "want RFC 3339, e.g. 2026-01-02T15:04:05Z, got "
	for field, c := range map[string]struct{ kind, value, got string }{
		"start_time": {"once", `"tomorrow"`, `"tomorrow"`},
		"end_time":   {"rotate", `"2026-13-01T00:00:00Z"`, `"2026-13-01T00:00:00Z"`},
	} {
		body := fmt.Sprintf(`{"executor": "uid_1", "start_time": "%s", "template_id": %d, "space_minutes": 5, %q: %s}`,
			ts(t0), tpl, field, c.value)
		if c.kind == "once" {
			body = fmt.Sprintf(`{"executor": "uid_1", "template_id": %d, %q: %s}`, tpl, field, c.value)
		}
		out := e.expect("POST", "/v1/admin/tasks/"+c.kind, body, 400, "invalid_argument")
		if want := field + ": " + form + c.got; errMessage(out) != want {
			t.Errorf("%s: message %q, want %q", field, errMessage(out), want)
		}
	}
	out := e.expect("POST", "/v1/admin/tasks/once", fmt.Sprintf(`{"executor": "uid_1", "template_id": %d, "start_time": 5}`, tpl), 400, "invalid_argument")
	if want := "start_time: " + form + "5"; errMessage(out) != want {
		t.Errorf("message %q, want %q", errMessage(out), want)
	}
	for _, q := range []string{"/v1/admin/events?%s=yesterday", "/v1/admin/stats?%s=yesterday",
		"/v1/admin/audit?%s=yesterday", "/v1/admin/schedule?executor=uid_1&%s=yesterday"} {
		for _, field := range []string{"from", "to"} {
			out := e.expect("GET", fmt.Sprintf(q, field), nil, 400, "invalid_argument")
			if want := field + ": " + form + `"yesterday"`; errMessage(out) != want {
				t.Errorf("%s: message %q, want %q", fmt.Sprintf(q, field), errMessage(out), want)
			}
		}
	}
}

func TestPrefixedPathIDsAreRefusedWithAHint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	members := map[string]any{"uids": []string{"1"}}
	for _, c := range []struct {
		method, path string
		body         any
		hint         string
	}{
		{"GET", "/v1/admin/groups/gid_ops/members", nil, "gid: give the bare id, e.g. ops, not gid_ops"},
		{"PUT", "/v1/admin/groups/gid_ops/members", members, "gid: give the bare id, e.g. ops, not gid_ops"},
		{"POST", "/v1/admin/groups/gid_ops/members", members, "gid: give the bare id, e.g. ops, not gid_ops"},
		{"POST", "/v1/admin/groups/uid_ops/members", members, "gid: give the bare id, e.g. ops, not uid_ops"},
		{"DELETE", "/v1/admin/groups/gid_ops/members/1", nil, "gid: give the bare id, e.g. ops, not gid_ops"},
		{"DELETE", "/v1/admin/groups/ops/members/uid_42", nil, "uid: give the bare id, e.g. 42, not uid_42"},
		{"POST", "/v1/admin/clients/uid_42/keys", nil, "uid: give the bare id, e.g. 42, not uid_42"},
		{"DELETE", "/v1/admin/clients/uid_42/keys", nil, "uid: give the bare id, e.g. 42, not uid_42"},
		{"PUT", "/v1/admin/groups/ops/members", map[string]any{"uids": []string{"1", "uid_42"}}, "uids: give the bare id, e.g. 42, not uid_42"},
		{"GET", "/v1/admin/events?uid=uid_42", nil, "uid: give the bare id, e.g. 42, not uid_42"},
		{"POST", "/v1/admin/clients/a%20b/keys", nil, "uid: "},
	} {
		e.expectMsg(c.method, c.path, c.body, 400, "invalid_argument", c.hint)
	}
	for table, want := range map[string]int{"group_member": 0, "client_key": 0, "audit_log": 0} {
		if n := e.count("SELECT COUNT(*) FROM " + table); n != want {
			t.Errorf("after refused requests, %s has %d rows, want %d", table, n, want)
		}
	}
}

// The events filter takes the event types of round 2 too, and round 5's missed.
func TestEventsFilterTakesDeadAndCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	for _, typ := range []string{"dead", "cancel", "missed"} {
		e.expect("GET", "/v1/admin/events?type="+typ, nil, 200, "")
	}
	e.expectMsg("GET", "/v1/admin/events?type=gone", nil, 400, "invalid_argument", "dead, cancel or missed")
}
