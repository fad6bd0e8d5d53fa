package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/admin"
	"github.com/taskpull/taskd/api"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/internal/web"
)

// auth says which credentials a route takes.
type auth int

const (
	authNone auth = iota
	authClient
	authAdmin
	authDDI
)

// endpoint is one route of the contract (../shared/API.md) and what the contract says
// about it.
type endpoint struct {
	method, path string
	auth         auth
	body         bool  // the route takes a JSON body: 400 and 413 apply
	pathIDs      bool  // the path names a resource: 404 applies
	codes        []int // the statuses API.md names for this route
}

// contract is every route API.md lists, with the statuses it names for each. The
// general rules of API.md's status table are applied on top by expectedCodes: 401 on
// authenticated routes, 403 on admin routes, 400 and 413 where there is a body, 404
// where the path names a resource.
var contract = []endpoint{
	// Operations.
	{"GET", "/healthz", authNone, false, false, []int{200}},
	{"GET", "/readyz", authNone, false, false, []int{200, 503}},
	{"GET", "/metrics", authNone, false, false, []int{200}},

	// Client agents.
	{"POST", "/v1/enroll", authNone, true, false, []int{200}},
	{"POST", "/v1/fetch", authClient, true, false, []int{200}},
	{"POST", "/v1/complete", authClient, true, false, []int{200, 409}},

	// Templates.
	{"POST", "/v1/admin/templates", authAdmin, true, false, []int{201}},
	{"GET", "/v1/admin/templates", authAdmin, false, false, []int{200}},
	{"GET", "/v1/admin/templates/{id}", authAdmin, false, true, []int{200}},
	{"DELETE", "/v1/admin/templates/{id}", authAdmin, false, true, []int{409}},

	// Tasks.
	{"POST", "/v1/admin/tasks/{kind}", authAdmin, true, false, []int{201, 422}},
	{"GET", "/v1/admin/tasks/{kind}/{id}", authAdmin, false, true, []int{200}},
	{"PUT", "/v1/admin/tasks/{kind}/{id}", authAdmin, true, true, []int{200, 422}},
	{"PATCH", "/v1/admin/tasks/{kind}/{id}", authAdmin, true, true, []int{200, 422}}, // round 2
	{"DELETE", "/v1/admin/tasks/{kind}/{id}", authAdmin, false, true, nil},
	{"GET", "/v1/admin/tasks", authAdmin, false, false, []int{200}},
	{"GET", "/v1/admin/schedule", authAdmin, false, false, []int{200}},

	// Groups.
	{"PUT", "/v1/admin/groups/{gid}/members", authAdmin, true, false, []int{200}},
	{"POST", "/v1/admin/groups/{gid}/members", authAdmin, true, false, []int{200}},
	{"DELETE", "/v1/admin/groups/{gid}/members/{uid}", authAdmin, false, true, nil},
	{"GET", "/v1/admin/groups/{gid}/members", authAdmin, false, false, []int{200}},

	// Clients.
	{"POST", "/v1/admin/clients/{uid}/keys", authAdmin, false, false, []int{201}},
	{"DELETE", "/v1/admin/clients/{uid}/keys", authAdmin, false, false, nil},

	// Events, statistics, audit.
	{"GET", "/v1/admin/events", authAdmin, false, false, []int{200}},
	{"GET", "/v1/admin/stats", authAdmin, false, false, []int{200}},
	{"GET", "/v1/admin/audit", authAdmin, false, false, []int{200}},
}

// additions are routes the document may describe beyond API.md (which welcomes new
// endpoints).
var additions = []endpoint{
	{"GET", "/openapi.json", authNone, false, false, []int{200}},
	{"GET", "/v1/admin/overview", authAdmin, false, false, []int{200, 400, 500, 503}},
	{"GET", "/v1/admin/clients/{uid}", authAdmin, false, false, []int{200}},
}

// round2 are the routes of API.md's "Additions of round 2" that have landed.
var round2 = []endpoint{
	{"POST", "/v1/progress", authClient, true, false, []int{200, 409}},
	{"PATCH", "/v1/admin/templates/{id}", authAdmin, true, true, []int{200}},
	{"GET", "/v1/dispatches", authClient, false, false, []int{200}},
	{"GET", "/v1/admin/dispatches", authAdmin, false, false, []int{200}},
	{"POST", "/v1/admin/dispatches/{log_id}/expire", authAdmin, false, true, []int{200, 409}},
	{"POST", "/v1/admin/dispatches/{log_id}/retry", authAdmin, false, true, []int{200, 409}},
	{"POST", "/v1/admin/dispatches/{log_id}/cancel", authAdmin, false, true, []int{200, 409}},
	{"PUT", "/v1/admin/clients/{uid}", authAdmin, true, false, []int{200}},
	{"GET", "/v1/admin/nodes", authAdmin, false, false, []int{200}},
	{"POST", "/v1/admin/campaigns", authAdmin, true, false, []int{201, 422}},
	{"GET", "/v1/admin/campaigns", authAdmin, false, false, []int{200}},
	{"GET", "/v1/admin/campaigns/{id}", authAdmin, false, true, []int{200}},
	{"POST", "/v1/admin/campaigns/{id}/items", authAdmin, true, true, []int{200, 409}},
	{"POST", "/v1/admin/campaigns/{id}/{move}", authAdmin, false, true, []int{200, 409}},
}

// round4 are the routes of API.md's "Additions of round 4" that have landed, and the
// additions that came with them.
var round4 = []endpoint{
	{"GET", "/v1/admin/clients", authAdmin, false, false, []int{200}},
	{"GET", "/v1/admin/groups", authAdmin, false, false, []int{200}},
	{"GET", "/v1/admin/stats/agents", authAdmin, false, false, []int{200}},
	{"POST", "/v1/admin/tasks/{kind}/preview", authAdmin, true, false, []int{200, 422}},
	{"GET", "/v1/admin/campaigns/{id}/failures", authAdmin, false, true, []int{200}},
	{"GET", "/v1/admin/tasks/{kind}/{id}/rollout", authAdmin, false, true, []int{200}},
	{"POST", "/v1/admin/tasks/{kind}/{id}/rollout/{move}", authAdmin, false, true, []int{200, 409}},
	{"GET", "/v1/admin/rollouts", authAdmin, false, false, []int{200}},
}

// round5 are the routes of API.md's "Additions of round 5" that have landed.
var round5 = []endpoint{
	{"PUT", "/v1/admin/groups/{gid}", authAdmin, true, false, []int{200, 409}},
	{"GET", "/v1/admin/groups/{gid}", authAdmin, false, true, []int{200}},
	{"DELETE", "/v1/admin/groups/{gid}", authAdmin, false, true, []int{204, 409}},
}

// artifacts are the admin routes of software artifacts (API.md's DDI addition names
// the upload), and the additions that came with them.
var artifacts = []endpoint{
	{"POST", "/v1/admin/artifacts", authAdmin, true, false, []int{201, 409, 422, 503}},
	{"GET", "/v1/admin/artifacts", authAdmin, false, false, []int{200}},
	{"GET", "/v1/admin/artifacts/{id}", authAdmin, false, true, []int{200}},
	{"DELETE", "/v1/admin/artifacts/{id}", authAdmin, false, true, []int{204, 409}},
}

// producers are the routes a producer's client (issue 39) needs beyond the others.
var producers = []endpoint{
	{"GET", "/v1/admin/tasks/{kind}/{id}/results", authAdmin, false, true, []int{200, 400, 503}},
}

// ddi are the hawkBit DDI paths (API.md's round 5 names them).
var ddi = []endpoint{
	{"GET", "/ddi/{tenant}/controller/v1/{controllerId}", authDDI, false, true, []int{200}},
	{"GET", "/ddi/{tenant}/controller/v1/{controllerId}/deploymentBase/{actionId}", authDDI, false, true, []int{200, 410}},
	{"POST", "/ddi/{tenant}/controller/v1/{controllerId}/deploymentBase/{actionId}/feedback", authDDI, true, true, []int{200, 410}},
	{"GET", "/ddi/{tenant}/controller/v1/{controllerId}/cancelAction/{actionId}", authDDI, false, true, []int{200, 410}},
	{"POST", "/ddi/{tenant}/controller/v1/{controllerId}/cancelAction/{actionId}/feedback", authDDI, true, true, []int{200, 410}},
	{"PUT", "/ddi/{tenant}/controller/v1/{controllerId}/configData", authDDI, true, true, []int{200}},
	{"GET", "/ddi/{tenant}/controller/v1/{controllerId}/installedBase/{actionId}", authDDI, false, true, []int{200}},
	{"GET", "/ddi/{tenant}/controller/v1/{controllerId}/softwaremodules/{moduleId}/artifacts/{filename}", authDDI, false, true, []int{200, 206}},
	{"HEAD", "/ddi/{tenant}/controller/v1/{controllerId}/softwaremodules/{moduleId}/artifacts/{filename}", authDDI, false, true, []int{200}},
}

func expectedCodes(e endpoint) []int {
	codes := slices.Clone(e.codes)
	switch e.auth {
	case authClient:
		codes = append(codes, 401)
	case authAdmin, authDDI:
		codes = append(codes, 401, 403)
	}
	if e.body {
		codes = append(codes, 400, 413)
	}
	if e.pathIDs {
		codes = append(codes, 404)
	}
	slices.Sort(codes)
	return slices.Compact(codes)
}

// contractFields are the field names API.md gives for each schema: every one must be a
// property of that component (following allOf and $ref).
var contractFields = map[string][]string{
	"Error":             {"error"},
	"EnrollRequest":     {"uid", "enroll_secret"},
	"ClientKeyResponse": {"client_key"},
	"FetchRequest":      {"wait_ms", "max", "template_ids", "complete", "agent"},
	"AgentInfo":         {"version", "hostname", "labels"},
	"ClientList":        {"clients", "next_cursor"},
	"Client":            {"uid", "last_seen", "keys", "open", "max_in_flight", "agent"},
	"GroupList":         {"groups"},
	"GroupSummary":      {"gid", "members"},
	"Warning":           {"code", "message"},
	"TaskPreview":       {"uids", "occurrences"},
	"FetchResult":       {"task", "tasks", "next_due_at"},
	"Assignment": {"log_id", "task_id", "kind", "due_at", "template_id", "params", "redo", "attempt",
		"lease_expires_at"},
	"CompleteRequest": {"log_id", "result", "detail", "retry"},
	"ProgressRequest": {"log_id", "checkpoint", "extend_lease"},
	"ProgressResult":  {"ok", "lease_expires_at"},
	"TemplatePatch": {"name", "lease_seconds", "max_attempts", "retry_backoff_seconds", "retry_multiplier",
		"retry_max_seconds", "dispatch_rate_per_minute", "confirm_seconds", "stages"},
	"OK":              {"ok"},
	"TemplateRequest": {"name", "schema"},
	"TemplateList":    {"templates"},
	"OnceTaskRequest": {"executor", "start_time", "template_id", "params", "dispatch_times", "mode", "priority",
		"status", "lease_seconds", "max_attempts"},
	"RotateTaskRequest": {"executor", "start_time", "template_id", "params", "dispatch_times", "mode", "priority",
		"status", "lease_seconds", "max_attempts", "space_minutes", "end_time"},
	"Task": {"task_id", "id", "kind", "executor", "start_time", "template_id", "params", "dispatch_times",
		"mode", "priority", "status", "lease_seconds", "max_attempts", "space_minutes", "end_time",
		"created_at", "updated_at", "confirm_seconds"},
	"TaskList":       {"tasks", "next_cursor"},
	"Schedule":       {"occurrences"},
	"Occurrence":     {"task_id", "due_at", "priority", "claimed", "remaining"},
	"Members":        {"uids"},
	"MembersRequest": {"uids"},
	"EventList":      {"events", "next_cursor"},
	"Event":          {"event_id", "type", "log_id", "uid", "task_id", "due_at", "attempt", "result", "at"},
	"Stats":          {"tasks"},
	"TaskStats": {"task_id", "dispatched", "completed", "failed", "expired", "redo", "latency_ms_p50",
		"latency_ms_p95", "claimed", "remaining", "dead"},
	"TaskPatch": {"executor", "start_time", "template_id", "params", "dispatch_times", "mode", "priority",
		"status", "lease_seconds", "max_attempts", "retry_backoff_seconds", "space_minutes", "end_time", "confirm_seconds"},
	"AuditList":            {"entries", "next_cursor"},
	"DispatchList":         {"dispatches", "next_cursor"},
	"TaskResults":          {"task_id", "results", "next_cursor", "done"},
	"ClientSettingRequest": {"max_in_flight"},
	"NodeList":             {"nodes"},
	"Node":                 {"node", "started_at", "last_seen", "roles"},
	"DispatchRecord": {"log_id", "uid", "task_id", "due_at", "attempt", "state", "result", "detail", "checkpoint",
		"stage", "dispatched_at", "finished_at"},
	"AuditEntry":     {"at", "actor", "action", "target", "before", "after"},
	"Artifact":       {"id", "filename", "size", "hashes"},
	"ArtifactHashes": {"sha1", "md5", "sha256"},
}

// contractBodies is the schema API.md's request or success body of an operation must be.
var contractBodies = map[string]struct{ request, response string }{
	"POST /v1/enroll":                             {"EnrollRequest", "ClientKeyResponse"},
	"POST /v1/fetch":                              {"FetchRequest", "FetchResult"},
	"POST /v1/complete":                           {"CompleteRequest", "OK"},
	"POST /v1/progress":                           {"ProgressRequest", "ProgressResult"},
	"PATCH /v1/admin/templates/{id}":              {"TemplatePatch", "Template"},
	"POST /v1/admin/templates":                    {"TemplateRequest", "Template"},
	"GET /v1/admin/templates":                     {"", "TemplateList"},
	"GET /v1/admin/templates/{id}":                {"", "Template"},
	"POST /v1/admin/tasks/{kind}":                 {"TaskRequest", "Task"},
	"GET /v1/admin/tasks/{kind}/{id}":             {"", "Task"},
	"PUT /v1/admin/tasks/{kind}/{id}":             {"TaskRequest", "Task"},
	"PATCH /v1/admin/tasks/{kind}/{id}":           {"TaskPatch", "Task"},
	"GET /v1/admin/tasks":                         {"", "TaskList"},
	"GET /v1/admin/schedule":                      {"", "Schedule"},
	"PUT /v1/admin/groups/{gid}/members":          {"MembersRequest", "Members"},
	"POST /v1/admin/groups/{gid}/members":         {"MembersRequest", "Members"},
	"GET /v1/admin/groups/{gid}/members":          {"", "Members"},
	"POST /v1/admin/clients/{uid}/keys":           {"", "ClientKeyResponse"},
	"GET /v1/admin/events":                        {"", "EventList"},
	"GET /v1/admin/stats":                         {"", "Stats"},
	"GET /v1/admin/audit":                         {"", "AuditList"},
	"GET /v1/dispatches":                          {"", "DispatchList"},
	"GET /v1/admin/dispatches":                    {"", "DispatchList"},
	"POST /v1/admin/dispatches/{log_id}/expire":   {"", "DispatchRecord"},
	"POST /v1/admin/dispatches/{log_id}/retry":    {"", "DispatchRecord"},
	"POST /v1/admin/dispatches/{log_id}/cancel":   {"", "DispatchRecord"},
	"PUT /v1/admin/clients/{uid}":                 {"ClientSettingRequest", "ClientSetting"},
	"GET /v1/admin/clients/{uid}":                 {"", "ClientSetting"},
	"GET /v1/admin/nodes":                         {"", "NodeList"},
	"GET /healthz":                                {"", "Health"},
	"GET /readyz":                                 {"", "Ready"},
	"DELETE /v1/admin/templates/{id}":             {"", ""},
	"DELETE /v1/admin/tasks/{kind}/{id}":          {"", ""},
	"DELETE /v1/admin/clients/{uid}/keys":         {"", "Revoked"},
	"DELETE /v1/admin/groups/{gid}/members/{uid}": {"", ""},
	"GET /v1/admin/clients":                       {"", "ClientList"},
	"GET /v1/admin/groups":                        {"", "GroupList"},
	"POST /v1/admin/artifacts":                    {"", "Artifact"}, // the body is the file's bytes
	"GET /v1/admin/artifacts":                     {"", "ArtifactList"},
	"GET /v1/admin/artifacts/{id}":                {"", "Artifact"},
	"GET /v1/admin/tasks/{kind}/{id}/results":     {"", "TaskResults"},
	"DELETE /v1/admin/artifacts/{id}":             {"", ""},
}

// contractQuery is the query parameters API.md lists for each list route.
var contractQuery = map[string][]string{
	"GET /v1/admin/tasks":                     {"executor", "kind", "status", "limit", "cursor", "template_id" /* an addition */},
	"GET /v1/admin/schedule":                  {"executor", "from", "to"},
	"GET /v1/admin/events":                    {"uid", "task_id", "type", "from", "to", "limit", "cursor"},
	"GET /v1/admin/stats":                     {"from", "to"},
	"GET /v1/admin/audit":                     {"from", "to", "limit", "cursor"},
	"GET /v1/dispatches":                      {"state", "limit", "cursor"},
	"GET /v1/admin/dispatches":                {"uid", "task_id", "state", "from", "to", "limit", "cursor"},
	"GET /v1/admin/clients":                   {"group", "label", "selector", "agent_version", "seen_before", "seen_after", "limit", "cursor"},
	"GET /v1/admin/groups":                    {"limit", "cursor"},
	"GET /v1/admin/stats/agents":              {"from", "to"},
	"POST /v1/admin/artifacts":                {"filename"},
	"GET /v1/admin/artifacts":                 {"limit", "cursor"},
	"GET /v1/admin/tasks/{kind}/{id}/results": {"wait", "cursor", "limit"},
}

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func load(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(api.Document))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("openapi.json is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("openapi.json: trailing data after the document")
	}
	return doc
}

func obj(t *testing.T, v any, where string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: want an object, got %T", where, v)
	}
	return m
}

// resolve follows a local JSON pointer ("#/components/schemas/Task") in doc.
func resolve(doc map[string]any, ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, errors.New("not a local reference")
	}
	var cur any = doc
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, errors.New("no " + tok)
		}
		if cur, ok = m[tok]; !ok {
			return nil, errors.New("no " + tok)
		}
	}
	return cur, nil
}

// deref resolves v while it is a {"$ref": ...} object.
func deref(t *testing.T, doc map[string]any, v any) map[string]any {
	t.Helper()
	for range 10 {
		m := obj(t, v, "deref")
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var err error
		if v, err = resolve(doc, ref); err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
	}
	t.Fatal("deref: too many hops")
	return nil
}

// operations returns every operation of the document by "METHOD path".
func operations(t *testing.T, doc map[string]any) map[string]map[string]any {
	t.Helper()
	ops := map[string]map[string]any{}
	for path, item := range obj(t, doc["paths"], "paths") {
		for _, m := range methods {
			if op, ok := obj(t, item, path)[m]; ok {
				ops[strings.ToUpper(m)+" "+path] = obj(t, op, m+" "+path)
			}
		}
	}
	return ops
}

func TestDocumentIsOpenAPI31(t *testing.T) {
	doc := load(t)
	v, _ := doc["openapi"].(string)
	if !regexp.MustCompile(`^3\.1\.\d+$`).MatchString(v) {
		t.Errorf("openapi = %q, want 3.1.x", v)
	}
	info := obj(t, doc["info"], "info")
	if info["title"] == nil || info["version"] == nil {
		t.Errorf("info: title and version are required")
	}
	if !json.Valid(api.Document) {
		t.Errorf("openapi.json is not valid JSON")
	}
}

func TestEveryContractRouteIsDocumented(t *testing.T) {
	doc := load(t)
	ops := operations(t, doc)
	known := map[string]bool{}
	for _, e := range slices.Concat(contract, additions, round2, round4, round5, artifacts, producers, ddi) {
		key := e.method + " " + e.path
		known[key] = true
		op, ok := ops[key]
		if !ok {
			t.Errorf("%s: not documented", key)
			continue
		}
		resps, _ := op["responses"].(map[string]any)
		for _, code := range expectedCodes(e) {
			if _, ok := resps[itoa(code)]; !ok {
				t.Errorf("%s: status %d (API.md) is not among its responses", key, code)
			}
		}
		// Security as the contract says.
		sec, ok := op["security"].([]any)
		if !ok {
			t.Errorf("%s: no security (use [] for none)", key)
			continue
		}
		var schemes []string
		for _, s := range sec {
			for name := range obj(t, s, key+" security") {
				schemes = append(schemes, name)
			}
		}
		want := map[auth][]string{authNone: nil, authClient: {"clientKey"}, authAdmin: {"adminToken"}, authDDI: {"ddiToken"}}[e.auth]
		if !slices.Equal(schemes, want) {
			t.Errorf("%s: security %v, want %v", key, schemes, want)
		}
	}
	for key := range ops {
		if !known[key] {
			t.Errorf("%s: documented but neither in API.md nor in the additions list of this test", key)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestOperationsAreComplete(t *testing.T) {
	doc := load(t)
	ids := map[string]string{}
	pathParam := regexp.MustCompile(`\{([^}]+)\}`)
	for key, op := range operations(t, doc) {
		resps, ok := op["responses"].(map[string]any)
		if !ok || len(resps) == 0 {
			t.Errorf("%s: no responses", key)
		}
		for code, r := range resps {
			if !regexp.MustCompile(`^[1-5][0-9][0-9]$`).MatchString(code) {
				t.Errorf("%s: response key %q is not a status code", key, code)
			}
			if d, _ := deref(t, doc, r)["description"].(string); d == "" {
				t.Errorf("%s %s: no description", key, code)
			}
		}
		id, _ := op["operationId"].(string)
		if id == "" {
			t.Errorf("%s: no operationId", key)
		} else if other, dup := ids[id]; dup {
			t.Errorf("%s: operationId %q also on %s", key, id, other)
		}
		ids[id] = key

		// Every {name} in the path is declared as a path parameter, and no other.
		path := strings.SplitN(key, " ", 2)[1]
		item := obj(t, obj(t, doc["paths"], "paths")[path], path)
		declared := map[string]bool{}
		params, _ := item["parameters"].([]any)
		opParams, _ := op["parameters"].([]any)
		for _, p := range slices.Concat(params, opParams) {
			pm := deref(t, doc, p)
			if pm["in"] == "path" {
				declared[pm["name"].(string)] = true
				if pm["required"] != true {
					t.Errorf("%s: path parameter %v must be required", key, pm["name"])
				}
			}
		}
		var want []string
		for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
			want = append(want, m[1])
			if !declared[m[1]] {
				t.Errorf("%s: path parameter {%s} is not declared", key, m[1])
			}
		}
		if len(declared) != len(want) {
			t.Errorf("%s: declares path parameters %v, path has %v", key, declared, want)
		}
	}
}

func TestBodiesAndQueryMatchContract(t *testing.T) {
	doc := load(t)
	ops := operations(t, doc)
	schemaOf := func(content any) string {
		m, _ := content.(map[string]any)
		js, _ := m["application/json"].(map[string]any)
		s, _ := js["schema"].(map[string]any)
		ref, _ := s["$ref"].(string)
		return strings.TrimPrefix(ref, "#/components/schemas/")
	}
	for key, want := range contractBodies {
		op, ok := ops[key]
		if !ok {
			t.Errorf("%s: not documented", key)
			continue
		}
		var gotReq string
		if rb, ok := op["requestBody"].(map[string]any); ok {
			gotReq = schemaOf(rb["content"])
		}
		if gotReq != want.request {
			t.Errorf("%s: request body schema %q, want %q", key, gotReq, want.request)
		}
		var gotResp string
		for code, r := range op["responses"].(map[string]any) {
			if strings.HasPrefix(code, "2") {
				gotResp = schemaOf(deref(t, doc, r)["content"])
			}
		}
		if gotResp != want.response {
			t.Errorf("%s: success body schema %q, want %q", key, gotResp, want.response)
		}
	}
	for key, want := range contractQuery {
		var got []string
		params, _ := ops[key]["parameters"].([]any)
		for _, p := range params {
			if pm := deref(t, doc, p); pm["in"] == "query" {
				got = append(got, pm["name"].(string))
			}
		}
		sort.Strings(got)
		want = slices.Sorted(slices.Values(want))
		if !slices.Equal(got, want) {
			t.Errorf("%s: query parameters %v, want %v", key, got, want)
		}
	}
}

// properties collects the property names of a schema, following $ref and allOf.
func properties(t *testing.T, doc map[string]any, v any, out map[string]bool) {
	s := deref(t, doc, v)
	props, _ := s["properties"].(map[string]any)
	for name := range props {
		out[name] = true
	}
	if all, ok := s["allOf"].([]any); ok {
		for _, sub := range all {
			if m, _ := sub.(map[string]any); m["$ref"] != nil || m["properties"] != nil || m["allOf"] != nil {
				properties(t, doc, sub, out)
			}
		}
	}
}

func TestSchemasHaveContractFields(t *testing.T) {
	doc := load(t)
	schemas := obj(t, obj(t, doc["components"], "components")["schemas"], "schemas")
	for name, fields := range contractFields {
		s, ok := schemas[name]
		if !ok {
			t.Errorf("schema %s: missing", name)
			continue
		}
		props := map[string]bool{}
		properties(t, doc, s, props)
		for _, f := range fields {
			if !props[f] {
				t.Errorf("schema %s: no field %q (API.md)", name, f)
			}
		}
	}
}

func TestRefsResolve(t *testing.T) {
	doc := load(t)
	n := 0
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				n++
				if !strings.HasPrefix(ref, "#/components/") {
					t.Errorf("%s: $ref %q is not to a component", where, ref)
				} else if _, err := resolve(doc, ref); err != nil {
					t.Errorf("%s: $ref %q does not resolve: %v", where, ref, err)
				}
			}
			for k, sub := range v {
				walk(where+"/"+k, sub)
			}
		case []any:
			for i, sub := range v {
				walk(where+"/"+itoa(i), sub)
			}
		}
	}
	walk("#", doc)
	if n == 0 {
		t.Error("no $ref at all")
	}
}

// compiler compiles schemas inside the document (OpenAPI 3.1 schemas are JSON Schema
// 2020-12), asserting formats.
type compiler struct {
	c *jsonschema.Compiler
}

func newCompiler(t *testing.T) compiler {
	t.Helper()
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(api.Document))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("https://taskd.invalid/openapi.json", raw); err != nil {
		t.Fatal(err)
	}
	return compiler{c}
}

func (c compiler) schema(t *testing.T, pointer string) *jsonschema.Schema {
	t.Helper()
	s, err := c.c.Compile("https://taskd.invalid/openapi.json#" + pointer)
	if err != nil {
		t.Fatalf("compile %s: %v", pointer, err)
	}
	return s
}

func instance(t *testing.T, v any) any {
	t.Helper()
	var b []byte
	switch v := v.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("instance %s: %v", b, err)
	}
	return inst
}

func TestComponentSchemasCompile(t *testing.T) {
	doc := load(t)
	c := newCompiler(t)
	for name := range obj(t, obj(t, doc["components"], "components")["schemas"], "schemas") {
		c.schema(t, "/components/schemas/"+name)
	}
}

// escape makes a JSON pointer token.
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// TestExamplesMatchSchemas validates every media-type example against its schema.
func TestExamplesMatchSchemas(t *testing.T) {
	doc := load(t)
	c := newCompiler(t)
	n := 0
	check := func(where string, content any) {
		cm, _ := content.(map[string]any)
		for mt, media := range cm {
			m := obj(t, media, where)
			ex, ok := m["example"]
			if !ok {
				continue
			}
			n++
			ptr := where + "/content/" + escape(mt) + "/schema"
			if err := c.schema(t, ptr).Validate(instance(t, ex)); err != nil {
				t.Errorf("%s: example does not match the schema: %v", ptr, err)
			}
		}
	}
	for path, item := range obj(t, doc["paths"], "paths") {
		for _, m := range methods {
			op, ok := obj(t, item, path)[m].(map[string]any)
			if !ok {
				continue
			}
			base := "/paths/" + escape(path) + "/" + m
			if rb, ok := op["requestBody"].(map[string]any); ok {
				check(base+"/requestBody", rb["content"])
			}
			for code, r := range op["responses"].(map[string]any) {
				check(base+"/responses/"+code, obj(t, r, code)["content"])
			}
		}
	}
	for name, r := range obj(t, obj(t, doc["components"], "components")["responses"], "responses") {
		check("/components/responses/"+name, obj(t, r, name)["content"])
	}
	if n == 0 {
		t.Error("no examples checked")
	}
}

// TestCodeOutputMatchesSchemas validates what the code actually writes against the
// document's schemas.
func TestCodeOutputMatchesSchemas(t *testing.T) {
	c := newCompiler(t)
	valid := func(schema string, v any) {
		t.Helper()
		if err := c.schema(t, "/components/schemas/"+schema).Validate(instance(t, v)); err != nil {
			t.Errorf("%s: %s does not match: %v", schema, instanceText(v), err)
		}
	}
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	later := now.Add(time.Minute)
	valid("FetchResult", dispatch.FetchResult{})
	valid("FetchResult", dispatch.FetchResult{NextDueAt: &later, Task: &dispatch.Assignment{
		LogID: "01JD8Z6W3Q9V2K7M4N5P6R8S0T", TaskID: "rotate:3", Kind: "rotate", DueAt: now, TemplateID: 3,
		Params: json.RawMessage(`{"url":"x"}`), Attempt: 2, LeaseExpiresAt: &later}})
	valid("Template", taskd.Template{ID: 1, Name: "crawl", Schema: json.RawMessage(`{"type":"object"}`), Stages: []string{},
		CreatedAt: now, UpdatedAt: now})
	lease, mult := 30, 1.5
	valid("Template", taskd.Template{ID: 2, Name: "staged", Schema: json.RawMessage(`{}`), Stages: []string{"a", "b"},
		Settings: taskd.Settings{LeaseSeconds: &lease, RetryMultiplier: &mult}, CreatedAt: now, UpdatedAt: now})
	valid("Event", taskd.StoredEvent{EventID: "l1/complete", Type: taskd.EventComplete, LogID: "l1", UID: "42",
		TaskID: "once:12", DueAt: now, Attempt: 1, Result: "success", At: later})
	valid("Event", taskd.StoredEvent{EventID: "l2/dead", Type: taskd.EventDead, LogID: "l2", UID: "42",
		TaskID: "once:12", DueAt: now, Attempt: 1, Final: true, At: later})
	valid("Event", taskd.StoredEvent{EventID: "l1/redo", Type: taskd.EventRedo, LogID: "l1", UID: "42",
		TaskID: "rotate:3", DueAt: now, Attempt: 2, At: later})
	lat := int64(1200)
	valid("Event", taskd.Event{EventID: "e1", Type: taskd.EventComplete, LogID: "l1", UID: "42", TaskID: "once:12",
		Kind: "once", DueAt: now, Attempt: 1, Result: "failure", LatencyMS: &lat, Final: true, Node: "n1", At: later})
	left := 3
	valid("Occurrence", admin.ScheduledOccurrence{TaskID: "once:12", DueAt: now, Priority: 5, Claimed: 2, Remaining: &left})
	valid("Occurrence", admin.ScheduledOccurrence{TaskID: "rotate:3", DueAt: now, Priority: 9})
	valid("TaskStats", taskd.TaskStats{TaskID: "once:12", Dispatched: 4, Completed: 2, Failed: 1, Expired: 1,
		LatencyMSP50: &lat, LatencyMSP95: &lat, Claimed: 4, Remaining: &left})
	valid("TaskStats", taskd.TaskStats{TaskID: "rotate:3"})
	valid("ClientList", map[string]any{"next_cursor": "", "clients": []taskd.Client{
		{UID: "42", LastSeen: &now, Keys: 1, Open: 1, MaxInFlight: 4,
			Agent: &taskd.AgentInfo{Version: "1.2.0", Hostname: "h", Labels: map[string]string{"region": "eu"}}},
		{UID: "43", MaxInFlight: 1}}})
	valid("GroupList", map[string]any{"next_cursor": "", "groups": []taskd.GroupSummary{{GID: "ops", Members: 3, Tasks: 1}}})
	valid("VersionStatsList", map[string]any{"versions": []taskd.VersionStats{{Version: "1.2.0", Clients: 2, Dispatched: 3, Failed: 1}, {}}})
	valid("Artifact", taskd.Artifact{ID: 12, Filename: "rootfs.swu", Size: 3, CreatedAt: now, Backend: "dir", Key: "k",
		Hashes: taskd.Hashes{SHA1: strings.Repeat("a", 40), MD5: strings.Repeat("b", 32), SHA256: strings.Repeat("c", 64)}})
	valid("ArtifactList", map[string]any{"next_cursor": "", "artifacts": []taskd.Artifact{}})
	result := "failure"
	valid("TaskResults", map[string]any{"task_id": "once:12", "done": false,
		"next_cursor": taskd.ResultsCursor{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: 12}, Seq: 3}.Encode(),
		"results": []taskd.DispatchRecord{{LogID: "l1", UID: "42", TaskID: "once:12", DueAt: now, Attempt: 1, State: "retry_wait",
			Result: &result, DispatchedAt: now, RetryAt: &later, FinishedAt: &later}}})
	valid("TaskResults", map[string]any{"task_id": "rotate:3", "done": true, "results": []taskd.DispatchRecord{},
		"next_cursor": taskd.ResultsCursor{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 3}}.Encode()})
	valid("AuditEntry", taskd.AuditEntry{At: now, Actor: "admin", Action: "task.create", Target: "once:12",
		Before: json.RawMessage("null"), After: json.RawMessage(`{"priority":5}`)})

	// A task view as admin/http.go builds it: the task's fields plus the key, kind, mode
	// and status as strings.
	view := func(kind taskd.Kind, task taskd.Task) map[string]any {
		b, _ := json.Marshal(task)
		var m map[string]any
		json.Unmarshal(b, &m)
		m["task_id"], m["id"], m["kind"] = taskd.TaskKey{Kind: kind, ID: 7}.String(), 7, kind.String()
		m["mode"], m["status"] = task.Mode.String(), task.Status.String()
		return m
	}
	once := taskd.Task{Executor: "uid_42", StartTime: now, TemplateID: 3, Params: json.RawMessage(`{}`),
		DispatchTimes: taskd.Unlimited, Mode: taskd.ModeOncePerUser, Priority: 5, Status: taskd.StatusActive,
		CreatedAt: now, UpdatedAt: now}
	once.Effective, once.Inherited = taskd.Resolve(taskd.Settings{}, taskd.Settings{LeaseSeconds: &lease})
	valid("Task", view(taskd.KindOnce, once))
	rot := once
	rot.Executor, rot.SpaceMinutes, rot.EndTime = "gid_ops", 60, &later
	rot.Mode, rot.Status = taskd.ModeUntilExhausted, taskd.StatusDeleted
	valid("Task", view(taskd.KindRotate, rot))
	warned := view(taskd.KindOnce, once)
	warned["warnings"] = []admin.Warning{{Code: admin.WarnEmptyGroup, Message: "gid_x has no members"}}
	valid("Task", warned)
	valid("TaskPreview", admin.Preview{UIDs: []string{"42"}, Occurrences: []admin.PreviewOccurrence{{DueAt: now, Recipients: 1}},
		Warnings: []admin.Warning{}})

	// Every error code, as internal/web writes it.
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, code := range []taskd.Code{taskd.CodeInvalid, taskd.CodeMalformedJSON, taskd.CodeUnauthenticated,
		taskd.CodePermission, taskd.CodeNotFound, taskd.CodeStaleLease, taskd.CodeConflict, taskd.CodeTooLarge,
		taskd.CodeParamsInvalid, taskd.CodeRateLimited, taskd.CodeUnavailable, taskd.CodeInternal} {
		w := httptest.NewRecorder()
		e := taskd.Errorf(code, "message")
		if code == taskd.CodeParamsInvalid {
			e.Details = map[string]any{"valid": false}
		}
		web.Error(w, httptest.NewRequest("GET", "/", nil), log, e)
		valid("Error", w.Body.Bytes())
	}
}

func instanceText(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestRequestSchemas checks that the request schemas accept what the handlers accept
// and refuse what they refuse (validation rules of admin/http.go and dispatch/http.go).
func TestRequestSchemas(t *testing.T) {
	c := newCompiler(t)
	cases := []struct {
		schema, body string
		ok           bool
	}{
		{"TaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3}`, true},
		{"TaskRequest", `{"executor":"gid_ops","start_time":"2026-11-21T10:00:00Z","template_id":3,"space_minutes":60,"end_time":"2026-12-21T10:00:00Z"}`, true},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"params":{"a":1},"dispatch_times":-1,"mode":"until_exhausted","priority":9,"status":"paused","lease_seconds":0,"max_attempts":100,"retry_backoff_seconds":5}`, true},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"space_minutes":5}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"task_id":"once:1"}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"created_at":"2026-11-21T10:00:00Z"}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"bogus":1}`, false},
		{"OnceTaskRequest", `{"executor":"42","start_time":"2026-11-21T10:00:00Z","template_id":3}`, false},
		{"OnceTaskRequest", `{"executor":"uid_a b","start_time":"2026-11-21T10:00:00Z","template_id":3}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","template_id":3}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"tomorrow","template_id":3}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":0}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"dispatch_times":0}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"dispatch_times":-2}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"priority":0}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"priority":10}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"mode":"sometimes"}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"status":"deleted"}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"lease_seconds":-1}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"max_attempts":101}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":9223372036854775807,"dispatch_times":2147483647,"lease_seconds":31536000,"retry_backoff_seconds":86400}`, true},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"dispatch_times":2147483648}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"lease_seconds":31536001}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"retry_backoff_seconds":86401}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":9223372036854775808}`, false},
		{"OnceTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"priority":1.5}`, false},
		{"TaskPatch", `{"priority":7}`, true},
		{"TaskPatch", `{"end_time":null,"max_attempts":null,"params":{"a":null,"b":{"c":1}}}`, true},
		{"TaskPatch", `{}`, true},
		{"TaskPatch", `{"priority":10}`, false},
		{"TaskPatch", `{"dispatch_times":4294967296}`, false},
		{"TaskPatch", `{"start_time":"tomorrow"}`, false},
		{"TaskPatch", `{"start_time":null}`, false},
		{"TaskPatch", `{"id":3}`, false},
		{"TaskPatch", `{"updated_at":null}`, false},
		{"TaskPatch", `{"params":[1]}`, false},
		{"TaskPatch", `[]`, false},
		{"RotateTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3}`, false},
		{"RotateTaskRequest", `{"executor":"uid_42","start_time":"2026-11-21T10:00:00Z","template_id":3,"space_minutes":0}`, false},
		{"TemplateRequest", `{"name":"crawl","schema":{"type":"object"}}`, true},
		{"TemplateRequest", `{"name":"","schema":{}}`, false},
		{"TemplateRequest", `{"name":"crawl","schema":true}`, false},
		{"TemplateRequest", `{"name":"crawl","schema":{},"id":3}`, false},
		{"TemplateRequest", `{"name":"` + strings.Repeat("😀", 128) + `","schema":{}}`, true},
		{"TemplateRequest", `{"name":"` + strings.Repeat("😀", 129) + `","schema":{}}`, false},
		{"EnrollRequest", `{"uid":"42","enroll_secret":"s"}`, true},
		{"EnrollRequest", `{"uid":"a b","enroll_secret":"s"}`, false},
		{"EnrollRequest", `{"uid":"42","enroll_secret":"s","admin":true}`, false},
		{"FetchRequest", `{}`, true},
		{"FetchRequest", `{"wait_ms":20000}`, true},
		{"FetchRequest", `{"wait_ms":-1}`, false},
		{"FetchRequest", `{"uid":"2"}`, false},
		{"FetchRequest", `{"agent":{"version":"1.2.0","hostname":"h","labels":{"region":"eu","k8s.io/zone":"a"}}}`, true},
		{"FetchRequest", `{"agent":{}}`, true},
		{"FetchRequest", `{"agent":{"labels":{"a b":"c"}}}`, false},
		{"FetchRequest", `{"agent":{"labels":{"a":1}}}`, false},
		{"FetchRequest", `{"agent":{"os":"linux"}}`, false},
		{"CompleteRequest", `{"log_id":"x","result":"success","detail":{"n":1}}`, true},
		{"CompleteRequest", `{"log_id":"x","result":"failure","detail":null}`, true},
		{"CompleteRequest", `{"log_id":"x","result":"failure","retry":false}`, true},
		{"CompleteRequest", `{"log_id":"x","result":"success","retry":true}`, true},
		{"CompleteRequest", `{"log_id":"x","result":"failure","retry":"no"}`, false},
		{"CompleteRequest", `{"log_id":"x","result":"maybe"}`, false},
		{"CompleteRequest", `{"result":"success"}`, false},
		{"CompleteRequest", `{"log_id":"x","result":"success","detail":[1]}`, false},
		{"CompleteRequest", `{"log_id":"` + strings.Repeat("x", 65) + `","result":"success"}`, false},
		{"MembersRequest", `{"uids":["42","43"]}`, true},
		{"MembersRequest", `{"uids":["a b"]}`, false},
		{"MembersRequest", `{}`, false},
	}
	for _, tc := range cases {
		err := c.schema(t, "/components/schemas/"+tc.schema).Validate(instance(t, tc.body))
		if (err == nil) != tc.ok {
			t.Errorf("%s %s: valid = %v, want %v (%v)", tc.schema, tc.body, err == nil, tc.ok, err)
		}
	}
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET: status %d", res.StatusCode)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET: Content-Type %q", ct)
	}
	if !bytes.Equal(body, api.Document) {
		t.Errorf("GET: body is not the document")
	}
	res, err = http.Post(srv.URL+"/openapi.json", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: status %d, want 405", res.StatusCode)
	}
}
