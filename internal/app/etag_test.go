package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// versioned sends an admin request with an If-Match (none when ifMatch is "") and
// returns the status, the reply's ETag and its JSON body.
func (e *env) versioned(method, path, ifMatch string, body any) (int, string, map[string]any) {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		buf, _ := json.Marshal(body)
		r = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, e.urls[0]+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			e.t.Fatalf("%s %s: reply is not JSON: %q", method, path, raw)
		}
	}
	return resp.StatusCode, resp.Header.Get("ETag"), out
}

// etag is the ETag of GET path.
func (e *env) etag(path string) string {
	e.t.Helper()
	code, tag, out := e.versioned("GET", path, "", nil)
	if code != 200 || tag == "" {
		e.t.Fatalf("GET %s: %d, ETag %q, %v", path, code, tag, out)
	}
	return tag
}

// Every record an admin edits has an ETag that changes with every accepted write; a
// write naming a version the record no longer has is refused with 412
// precondition_failed and the current ETag, and changes nothing; a write without
// If-Match (or with "*") is made as before.
func TestETagsGuardEdits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.template()
	taskID := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0)})
	_, campaign := e.campaign(nil)
	rolloutID := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0), "dispatch_times": 2,
		"rollout": map[string]any{"phases": []any{map[string]any{"count": 1}, map[string]any{"percent": 100}}}})
	rollout := "/v1/admin/tasks/once/" + rolloutID[len("once:"):] + "/rollout"
	type write struct {
		method, path string
		body         any
	}
	cases := []struct {
		name  string
		path  string // the record's GET
		edits []write
		// field is a member of the GET reply that the edits change.
		field string
	}{
		{"template", fmt.Sprintf("/v1/admin/templates/%d", tpl), []write{
			{"PATCH", "", map[string]any{"name": "a"}},
			{"PATCH", "", map[string]any{"name": "b"}},
		}, "name"},
		{"task", "/v1/admin/tasks/once/" + taskID[len("once:"):], []write{
			{"PATCH", "", map[string]any{"priority": 7}},
			{"PUT", "", map[string]any{"executor": "gid_g", "start_time": ts(t0), "template_id": tpl,
				"params": map[string]any{"n": 2}, "priority": 3}},
		}, "priority"},
		{"client settings", "/v1/admin/clients/42", []write{
			{"PUT", "", map[string]any{"max_in_flight": 2}},
			{"PUT", "", map[string]any{"max_in_flight": 3}},
		}, "max_in_flight"},
		{"campaign", campaign, []write{
			{"POST", campaign + "/start", nil},
			{"POST", campaign + "/pause", nil},
		}, "state"},
		{"rollout", rollout, []write{
			{"POST", rollout + "/pause", nil},
			{"POST", rollout + "/resume", nil},
		}, "state"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			first := e.etag(c.path)
			for _, w := range c.edits {
				if w.path == "" {
					w.path = c.path
				}
				before := e.etag(c.path)
				code, tag, out := e.versioned(w.method, w.path, before, w.body)
				if code != 200 || tag == "" || tag == before {
					t.Fatalf("%s %s If-Match %s (current): %d, ETag %q, %v; want 200 and a new ETag", w.method, w.path, before, code, tag, out)
				}
				if now := e.etag(c.path); now != tag {
					t.Fatalf("GET after the write: ETag %s, the write answered %s", now, tag)
				}
			}
			current := e.etag(c.path)
			_, _, was := e.versioned("GET", c.path, "", nil)
			w := c.edits[0]
			if w.path == "" {
				w.path = c.path
			}
			for _, stale := range []string{first, "W/" + current, `"nonsense"`} {
				code, tag, out := e.versioned(w.method, w.path, stale, w.body)
				errBody, _ := out["error"].(map[string]any)
				if code != http.StatusPreconditionFailed || errBody["code"] != "precondition_failed" || tag != current {
					t.Fatalf("%s %s If-Match %s (current %s): %d, ETag %q, %v; want 412 precondition_failed with the current ETag",
						w.method, w.path, stale, current, code, tag, out)
				}
			}
			_, _, is := e.versioned("GET", c.path, "", nil)
			if e.etag(c.path) != current || fmt.Sprint(is[c.field]) != fmt.Sprint(was[c.field]) {
				t.Fatalf("a refused write changed the record: %s %v -> %v", c.field, was[c.field], is[c.field])
			}
			if code, _, out := e.versioned(w.method, w.path, `"nonsense", `+current, w.body); code == 412 {
				t.Fatalf("If-Match listing the current ETag among others: %d %v", code, out)
			}
		})
	}
	t.Run("without If-Match or with *", func(t *testing.T) {
		path := fmt.Sprintf("/v1/admin/templates/%d", tpl)
		for _, ifMatch := range []string{"", "*"} {
			if code, _, out := e.versioned("PATCH", path, ifMatch, map[string]any{"name": "any" + ifMatch}); code != 200 {
				t.Fatalf("PATCH with If-Match %q: %d %v", ifMatch, code, out)
			}
		}
	})
	t.Run("delete", func(t *testing.T) {
		id := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0)})[len("once:"):]
		path := "/v1/admin/tasks/once/" + id
		stale := e.etag(path)
		e.admin("PATCH", path, map[string]any{"priority": 9})
		if code, tag, out := e.versioned("DELETE", path, stale, nil); code != 412 || tag != e.etag(path) {
			t.Fatalf("DELETE with a stale If-Match: %d, ETag %q, %v", code, tag, out)
		}
		if code, _, out := e.versioned("DELETE", path, e.etag(path), nil); code != 204 {
			t.Fatalf("DELETE with the current If-Match: %d %v", code, out)
		}
		tplPath := fmt.Sprintf("/v1/admin/templates/%d", e.template())
		stale = e.etag(tplPath)
		e.admin("PATCH", tplPath, map[string]any{"name": "renamed"})
		if code, _, out := e.versioned("DELETE", tplPath, stale, nil); code != 412 {
			t.Fatalf("DELETE of a template with a stale If-Match: %d %v", code, out)
		}
		if code, _, out := e.versioned("DELETE", tplPath, e.etag(tplPath), nil); code != 204 {
			t.Fatalf("DELETE of a template with the current If-Match: %d %v", code, out)
		}
	})
}

// Merge patches made at once by several admins, each to a field of its own, all
// land: a patch that met another's write between its read and its replace is merged
// again into what that write left.
func TestConcurrentPatchesKeepEveryEdit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	id := e.task("once", map[string]any{"executor": "gid_g", "start_time": ts(t0), "params": map[string]any{}})[len("once:"):]
	path := "/v1/admin/tasks/once/" + id
	const n = 12
	errs := make(chan string, n)
	for i := range n {
		go func() {
			code, _, out := e.versioned("PATCH", path, "", map[string]any{"params": map[string]any{fmt.Sprintf("k%d", i): i}})
			if code != 200 {
				errs <- fmt.Sprintf("patch %d: %d %v", i, code, out)
				return
			}
			errs <- ""
		}()
	}
	for range n {
		if err := <-errs; err != "" {
			t.Error(err)
		}
	}
	_, _, task := e.versioned("GET", path, "", nil)
	params, _ := task["params"].(map[string]any)
	for i := range n {
		if _, ok := params[fmt.Sprintf("k%d", i)]; !ok {
			t.Errorf("params.k%d, set by a patch answered 200, is lost: %v", i, params)
		}
	}
}
