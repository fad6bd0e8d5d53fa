package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// ddi sends a DDI request to instance i with the Authorization header auth ("" for
// none) and decodes the JSON reply, if any.
func (e *env) ddi(i int, method, path, auth string, body any) (int, map[string]any) {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		buf, _ := json.Marshal(body)
		r = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, e.urls[i]+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			e.t.Fatalf("%s %s: reply is not JSON: %q", method, path, raw)
		}
	}
	return resp.StatusCode, out
}

// ddiTemplate creates a DDI template and returns its id.
func (e *env) ddiTemplate(name string) int64 {
	e.t.Helper()
	out := e.admin("POST", "/v1/admin/templates", map[string]any{"name": name, "ddi": true})
	return int64(out["id"].(float64))
}

// deploymentParams is a deployment of one chunk with one artifact by URL.
func deploymentParams(version string) map[string]any {
	return map[string]any{"chunks": []any{map[string]any{"part": "os", "name": "app", "version": version,
		"artifacts": []any{map[string]any{"filename": "app.swu", "size": 2560, "url": "http://files.example/app.swu",
			"hashes": map[string]any{"sha1": strings.Repeat("a", 40), "sha256": strings.Repeat("b", 64)}}}}}}
}

// link returns the href of the poll reply's link rel, "" for none.
func link(poll map[string]any, rel string) string {
	l, _ := poll["_links"].(map[string]any)[rel].(map[string]any)
	if l == nil {
		return ""
	}
	return l["href"].(string)
}

// feedback is a DDI feedback body as SWUpdate sends it (with its legacy id and time).
func feedback(id int, execution, finished string, details ...string) map[string]any {
	return map[string]any{"id": id, "time": "20261126T153410", "status": map[string]any{
		"execution": execution, "result": map[string]any{"finished": finished, "progress": map[string]any{"cnt": 1, "of": 1}},
		"details": details}}
}

// A DDI controller takes a deployment through the hawkBit paths (issue 38): the base
// poll claims it and shows it again (the same action, its lease renewed) until the
// controller closes it; fetch agents of the same uid never see it, and the controller
// never sees their tasks; feedback checkpoints and completes it; what is not the
// controller's is refused as hawkBit refuses it.
func TestDDIDeploymentThroughTheHawkBitPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	ddiTpl := e.ddiTemplate("firmware")
	dep := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_dev01", "start_time": ts(t0),
		"template_id": ddiTpl, "params": deploymentParams("1.0.1"), "lease_seconds": 600})
	other := e.task("once", map[string]any{"executor": "uid_dev01", "start_time": ts(t0)})
	key := e.key("dev01")
	target := "TargetToken " + key
	base := "/ddi/DEFAULT/controller/v1/dev01"

	// The fetch agent gets its own task, never the deployment.
	if d := mustFetch(t, e, key); d.TaskID != other {
		t.Fatalf("fetch: %s, want the agent's task %s", d.TaskID, other)
	} else {
		e.mustComplete(key, d.LogID)
	}
	if r := e.fetch(0, key); r.Task != nil {
		t.Fatalf("fetch after the agent's task: %+v, want nothing (the deployment is the controller's)", r.Task)
	}

	code, poll := e.ddi(0, "GET", base, target, nil)
	href := link(poll, "deploymentBase")
	if code != 200 || href == "" || link(poll, "configData") == "" {
		t.Fatalf("base poll: %d %v", code, poll)
	}
	if sleep := poll["config"].(map[string]any)["polling"].(map[string]any)["sleep"]; sleep != "00:03:20" {
		t.Fatalf("sleep while holding a 600 s lease: %v, want a third of it", sleep)
	}
	id := href[strings.LastIndex(href, "/")+1:]
	var n int
	if _, err := fmt.Sscan(id, &n); err != nil || n <= 0 {
		t.Fatalf("action id %q: not a positive integer", id)
	}
	// Idempotent, on either instance: the same action.
	e.clock.Advance(time.Minute)
	if _, again := e.ddi(1, "GET", base, target, nil); link(again, "deploymentBase") != strings.Replace(href, e.urls[0], e.urls[1], 1) {
		t.Fatalf("second poll: %v, want the same action", again)
	}
	if r := e.fetch(1, key); r.Task != nil || r.NextDueAt == nil || !r.NextDueAt.Equal(t0.Add(11*time.Minute)) {
		t.Fatalf("fetch while the controller holds its deployment: %+v next %v, want nothing until its lease's end", r.Task, r.NextDueAt)
	}
	recs, _ := e.records(adminToken, "/v1/admin/dispatches?uid=dev01&state=open")
	if len(recs) != 1 || recs[0]["task_id"] != dep["task_id"] || recs[0]["lease_expires_at"] != ts(t0.Add(11*time.Minute)) {
		t.Fatalf("open records after the second poll: %v (the poll renews the lease)", recs)
	}

	code, body := e.ddi(0, "GET", strings.TrimPrefix(href, e.urls[0]), target, nil)
	chunks := body["deployment"].(map[string]any)["chunks"].([]any)
	art := chunks[0].(map[string]any)["artifacts"].([]any)[0].(map[string]any)
	if code != 200 || body["id"] != id || body["deployment"].(map[string]any)["update"] != "forced" ||
		art["filename"] != "app.swu" || art["size"] != 2560.0 || art["hashes"].(map[string]any)["sha1"] != strings.Repeat("a", 40) ||
		art["_links"].(map[string]any)["download-http"].(map[string]any)["href"] != "http://files.example/app.swu" {
		t.Fatalf("deploymentBase: %d %v", code, body)
	}

	// Refusals: no key, another uid's key, another tenant, an unknown or foreign action.
	e.key("dev02")
	for _, c := range []struct {
		path, auth string
		code       int
	}{
		{base, "", 401},
		{base, "Bearer " + key, 401},
		{base, "TargetToken " + e.key("dev02"), 403},
		{"/ddi/OTHER/controller/v1/dev01", target, 404},
		{"/ddi/DEFAULT/controller/v1/DEV01", target, 403}, // ids are compared as spelled
		{base + "/deploymentBase/999999", target, 404},
		{"/ddi/DEFAULT/controller/v1/dev02/deploymentBase/" + id, "TargetToken " + e.key("dev02"), 404},
		{base + "/deploymentBase/abc", target, 404},
	} {
		if code, out := e.ddi(0, "GET", c.path, c.auth, nil); code != c.code {
			t.Errorf("GET %s with %q: %d %v, want %d", c.path, c.auth, code, out, c.code)
		}
	}

	// proceeding: a checkpoint; then closed + success completes it.
	if code, out := e.ddi(0, "POST", base+"/deploymentBase/"+id+"/feedback", target,
		feedback(n, "proceeding", "none", "All Chunks Installed.")); code != 200 {
		t.Fatalf("proceeding: %d %v", code, out)
	}
	recs, _ = e.records(adminToken, "/v1/admin/dispatches?uid=dev01&state=open")
	if cp, _ := json.Marshal(recs[0]["checkpoint"]); !strings.Contains(string(cp), "All Chunks Installed.") {
		t.Fatalf("checkpoint after proceeding: %s", cp)
	}
	if code, out := e.ddi(1, "POST", base+"/deploymentBase/"+id+"/feedback", target,
		feedback(n, "closed", "success", "Update succeeded")); code != 200 {
		t.Fatalf("closed: %d %v", code, out)
	}
	recs, _ = e.records(adminToken, "/v1/admin/dispatches?uid=dev01&task_id="+dep["task_id"].(string))
	if len(recs) != 1 || recs[0]["state"] != "done" || recs[0]["result"] != "success" {
		t.Fatalf("record after closed: %v", recs)
	}
	if code, out := e.ddi(0, "POST", base+"/deploymentBase/"+id+"/feedback", target,
		feedback(n, "closed", "success")); code != 410 || out["error"].(map[string]any)["code"] != "gone" {
		t.Fatalf("feedback on a closed action: %d %v, want 410 gone", code, out)
	}
	if _, poll := e.ddi(0, "GET", base, target, nil); link(poll, "deploymentBase") != "" {
		t.Fatalf("poll after closing: %v, want no deployment", poll)
	}
	if code, out := e.ddi(0, "GET", base+"/installedBase/"+id, target, nil); code != 200 || out["id"] != id {
		t.Fatalf("installedBase: %d %v", code, out)
	}
	evs := e.events("?uid=dev01&type=complete")
	if len(evs) != 2 {
		t.Fatalf("complete events: %v, want the agent's and the controller's", evs)
	}
}

// A failed install, a cancel and configData (issue 38).
func TestDDIFailureCancelAndConfigData(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.DDIGateway = "gateway" })
	tpl := e.ddiTemplate("firmware")
	gw := "GatewayToken " + e.key("gateway")
	base := "/ddi/default/controller/v1/dev01" // tenants compare without case
	e.key("dev01")

	// A template of another kind never reaches the controller.
	e.task("once", map[string]any{"executor": "uid_dev01", "start_time": ts(t0)})
	if code, poll := e.ddi(0, "GET", base, gw, nil); code != 200 || link(poll, "deploymentBase") != "" {
		t.Fatalf("poll with only an agent's task due: %d %v", code, poll)
	}
	// A gateway token of a uid that is not the gateway's: refused.
	if code, out := e.ddi(0, "GET", base, "GatewayToken "+e.key("dev02"), nil); code != 403 {
		t.Fatalf("gateway token of a plain uid: %d %v", code, out)
	}

	failing := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_dev01", "start_time": ts(t0),
		"template_id": tpl, "params": deploymentParams("2.0"), "max_attempts": 1})
	_, poll := e.ddi(0, "GET", base, gw, nil)
	href := link(poll, "deploymentBase")
	id := href[strings.LastIndex(href, "/")+1:]
	if code, out := e.ddi(0, "POST", base+"/deploymentBase/"+id+"/feedback", gw,
		map[string]any{"status": map[string]any{"execution": "closed", "result": map[string]any{"finished": "failure"},
			"details": []any{"Installation failed: hardware mismatch"}}}); code != 200 {
		t.Fatalf("closed failure: %d %v", code, out)
	}
	recs, _ := e.records(adminToken, "/v1/admin/dispatches?uid=dev01&task_id="+failing["task_id"].(string))
	if len(recs) != 1 || recs[0]["result"] != "failure" || !strings.Contains(fmt.Sprint(recs[0]["detail"]), "hardware mismatch") {
		t.Fatalf("failure record: %v", recs)
	}

	// A cancel: shown as cancelAction until the controller acknowledges it.
	e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_dev01", "start_time": ts(t0),
		"template_id": tpl, "params": deploymentParams("3.0")})
	_, poll = e.ddi(0, "GET", base, gw, nil)
	href = link(poll, "deploymentBase")
	id = href[strings.LastIndex(href, "/")+1:]
	recs, _ = e.records(adminToken, "/v1/admin/dispatches?uid=dev01&state=open")
	e.admin("POST", "/v1/admin/dispatches/"+recs[0]["log_id"].(string)+"/cancel", nil)
	_, poll = e.ddi(0, "GET", base, gw, nil)
	if link(poll, "deploymentBase") != "" || !strings.HasSuffix(link(poll, "cancelAction"), "/cancelAction/"+id) {
		t.Fatalf("poll after the admin's cancel: %v", poll)
	}
	if code, out := e.ddi(0, "GET", base+"/cancelAction/"+id, gw, nil); code != 200 ||
		out["cancelAction"].(map[string]any)["stopId"] != id {
		t.Fatalf("cancelAction: %d %v", code, out)
	}
	if code, out := e.ddi(0, "POST", base+"/deploymentBase/"+id+"/feedback", gw, feedback(0, "proceeding", "none")); code != 410 {
		t.Fatalf("deployment feedback on a cancelled action: %d %v, want 410", code, out)
	}
	if code, out := e.ddi(0, "POST", base+"/cancelAction/"+id+"/feedback", gw,
		feedback(0, "closed", "success", "cancellation acknowledged.")); code != 200 {
		t.Fatalf("cancel acknowledged: %d %v", code, out)
	}
	if _, poll = e.ddi(0, "GET", base, gw, nil); link(poll, "cancelAction") != "" || link(poll, "deploymentBase") != "" {
		t.Fatalf("poll after the acknowledgement: %v", poll)
	}

	// configData: the uid's labels. A bad status is a 400.
	if code, out := e.ddi(0, "PUT", base+"/configData", gw, map[string]any{"id": "", "time": "20261126T153410",
		"status": map[string]any{"execution": "closed"}, "data": map[string]any{"serialNo": "dev01-sn", "hwRevision": "1.0"}}); code != 200 {
		t.Fatalf("configData: %d %v", code, out)
	}
	if _, poll := e.ddi(0, "GET", base, gw, nil); link(poll, "configData") != "" {
		t.Fatalf("poll after configData: %v, want no configData link (the node has the attributes)", poll)
	}
	client := e.admin("GET", "/v1/admin/clients/dev01", nil)
	if labels := client["agent"].(map[string]any)["labels"].(map[string]any); labels["hwRevision"] != "1.0" || labels["serialNo"] != "dev01-sn" {
		t.Fatalf("labels after configData: %v", client)
	}
	if code, out := e.ddi(0, "POST", base+"/cancelAction/"+id+"/feedback", gw,
		map[string]any{"status": map[string]any{"execution": "exploded"}}); code != 400 {
		t.Fatalf("unknown execution: %d %v", code, out)
	}
}

// A DDI template's params are a deployment; its schema is the server's.
func TestDDITemplateIsADeployment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.expectMsg("POST", "/v1/admin/templates", map[string]any{"name": "x", "ddi": true, "schema": map[string]any{"type": "object"}},
		400, "invalid_argument", "schema")
	e.expectMsg("POST", "/v1/admin/templates", map[string]any{"name": "x", "ddi": true, "stages": []any{"a", "b"}},
		400, "invalid_argument", "stages")
	tpl := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "fw", "ddi": true})
	if tpl["ddi"] != true || !strings.Contains(fmt.Sprint(tpl["schema"]), "chunks") {
		t.Fatalf("ddi template: %v", tpl)
	}
	id := int64(tpl["id"].(float64))
	for _, params := range []any{
		map[string]any{},
		map[string]any{"chunks": []any{}},
		map[string]any{"chunks": []any{map[string]any{"part": "os", "name": "a", "version": "1", "artifacts": []any{
			map[string]any{"filename": "a.swu", "size": 1, "url": "http://x/a.swu", "hashes": map[string]any{"sha1": "nothex"}}}}}},
		map[string]any{"chunks": []any{map[string]any{"part": "os", "name": "a", "version": "1", "artifacts": []any{
			map[string]any{"filename": "../a.swu", "size": 1, "url": "http://x/a.swu", "hashes": map[string]any{"sha1": strings.Repeat("a", 40)}}}}}},
	} {
		e.expectMsg("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_1", "start_time": ts(t0),
			"template_id": id, "params": params}, 422, "params_invalid", "")
	}
	e.expectMsg("PATCH", fmt.Sprintf("/v1/admin/templates/%d", id), map[string]any{"ddi": false}, 400, "invalid_argument", "ddi")
	// Campaign items go to fetch agents: not of a DDI template.
	e.expectMsg("POST", "/v1/admin/campaigns", map[string]any{"name": "c", "template_id": id, "executor": "gid_g",
		"params": deploymentParams("1"), "items": map[string]any{"count": 1}}, 400, "invalid_argument", "DDI template")
}

// A deployment whose task asks for a confirmed success (confirm_seconds) counts once
// the controller polls again after closing it: the device came back from its reboot.
func TestDDIConfirmedSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	tpl := e.admin("POST", "/v1/admin/templates", map[string]any{"name": "fw", "ddi": true, "confirm_seconds": 120})
	e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_dev01", "start_time": ts(t0),
		"template_id": tpl["id"], "params": deploymentParams("1.0")})
	target := "TargetToken " + e.key("dev01")
	base := "/ddi/DEFAULT/controller/v1/dev01"
	_, poll := e.ddi(0, "GET", base, target, nil)
	href := link(poll, "deploymentBase")
	id := href[strings.LastIndex(href, "/")+1:]
	if sleep := poll["config"].(map[string]any)["polling"].(map[string]any)["sleep"]; sleep != "00:00:40" {
		t.Fatalf("sleep of a controller holding a deployment with confirm_seconds 120: %v, want a third of it", sleep)
	}
	if code, out := e.ddi(0, "POST", base+"/deploymentBase/"+id+"/feedback", target, feedback(0, "closed", "success")); code != 200 {
		t.Fatalf("closed: %d %v", code, out)
	}
	if recs, _ := e.records(adminToken, "/v1/admin/dispatches?uid=dev01"); len(recs) != 1 || recs[0]["state"] != "unconfirmed" {
		t.Fatalf("after closed: %v, want unconfirmed", recs)
	}
	e.clock.Advance(30 * time.Second)
	if _, poll := e.ddi(0, "GET", base, target, nil); link(poll, "deploymentBase") != "" {
		t.Fatalf("the confirming poll: %v", poll)
	}
	if recs, _ := e.records(adminToken, "/v1/admin/dispatches?uid=dev01"); recs[0]["state"] != "done" || recs[0]["result"] != "success" {
		t.Fatalf("after the next poll: %v, want done success", recs)
	}
}

// A deployment naming an uploaded artifact links it under the controller's path, and
// the device downloads it there with its own token, by ranges too.
func TestDDIArtifactDownload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnvWith(t, 1, func(c *app.Config) { c.ArtifactDir = dir })
	blob := bytes.Repeat([]byte("swu!"), 1000)
	code, up, _ := e.uploadArtifact("fw.swu", bytes.NewReader(blob), lengthOf(blob))
	if code != 201 {
		t.Fatalf("upload: %d %v", code, up)
	}
	tpl := e.ddiTemplate("fw")
	e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_dev01", "start_time": ts(t0), "template_id": tpl,
		"params": map[string]any{"chunks": []any{map[string]any{"part": "os", "name": "fw", "version": "1",
			"artifacts": []any{map[string]any{"artifact_id": up["id"]}}}}}})
	target := "TargetToken " + e.key("dev01")
	base := "/ddi/DEFAULT/controller/v1/dev01"
	_, poll := e.ddi(0, "GET", base, target, nil)
	_, dep := e.ddi(0, "GET", strings.TrimPrefix(link(poll, "deploymentBase"), e.urls[0]), target, nil)
	art := dep["deployment"].(map[string]any)["chunks"].([]any)[0].(map[string]any)["artifacts"].([]any)[0].(map[string]any)
	href := art["_links"].(map[string]any)["download"].(map[string]any)["href"].(string)
	want := fmt.Sprintf("%s%s/softwaremodules/%v/artifacts/fw.swu", e.urls[0], base, up["id"])
	if href != want || art["size"] != float64(len(blob)) || art["hashes"].(map[string]any)["sha256"] != up["hashes"].(map[string]any)["sha256"] {
		t.Fatalf("artifact in the deployment: %v, want href %s", art, want)
	}
	get := func(auth, rng string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", href, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	if resp, _ := get("", ""); resp.StatusCode != 401 {
		t.Fatalf("download without a token: %d", resp.StatusCode)
	}
	if resp, b := get(target, ""); resp.StatusCode != 200 || !bytes.Equal(b, blob) {
		t.Fatalf("download: %d, %d bytes", resp.StatusCode, len(b))
	}
	if resp, b := get(target, "bytes=4-11"); resp.StatusCode != 206 || string(b) != "swu!swu!" {
		t.Fatalf("ranged download: %d %q", resp.StatusCode, b)
	}
	// Another controller, with a valid key but no deployment naming it: not found.
	if code, _ := e.ddi(0, "GET", strings.Replace(strings.TrimPrefix(href, e.urls[0]), "/dev01/", "/dev02/", 1),
		"TargetToken "+e.key("dev02"), nil); code != 404 {
		t.Fatalf("download by a controller that holds no deployment naming it: %d, want 404", code)
	}
	wrong := strings.Replace(href, "fw.swu", "other.swu", 1)
	if code, _ := e.ddi(0, "GET", strings.TrimPrefix(wrong, e.urls[0]), target, nil); code != 404 {
		t.Fatalf("download under another name: %d, want 404", code)
	}
	// In use by a live task: the artifact stays.
	if code, _ := e.do(0, "DELETE", fmt.Sprintf("/v1/admin/artifacts/%v", up["id"]), adminToken, nil); code != 409 {
		t.Fatalf("delete of an artifact in use: %d, want 409", code)
	}
}

// Behind a proxy, the links are written with DISPATCH_DDI_URL.
func TestDDILinksUseTheConfiguredURL(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.DDIURL = "https://updates.example.com/ddi/" })
	e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_dev01", "start_time": ts(t0),
		"template_id": e.ddiTemplate("fw"), "params": deploymentParams("1")})
	_, poll := e.ddi(0, "GET", "/ddi/DEFAULT/controller/v1/dev01", "TargetToken "+e.key("dev01"), nil)
	if href := link(poll, "deploymentBase"); !strings.HasPrefix(href, "https://updates.example.com/ddi/DEFAULT/controller/v1/dev01/deploymentBase/") {
		t.Fatalf("link: %q", href)
	}
}

// A revoked key is refused on the DDI paths as on fetch, at once, on every node.
func TestDDIRevokedKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	target := "TargetToken " + e.key("dev01")
	base := "/ddi/DEFAULT/controller/v1/dev01"
	if code, out := e.ddi(1, "GET", base, target, nil); code != 200 {
		t.Fatalf("poll: %d %v", code, out)
	}
	e.admin("DELETE", "/v1/admin/clients/dev01/keys", nil)
	for i := range 2 {
		if code, out := e.ddi(i, "GET", base, target, nil); code != 401 {
			t.Fatalf("poll with a revoked key on node %d: %d %v", i, code, out)
		}
		if code, out := e.ddi(i, "PUT", base+"/configData", target, map[string]any{"data": map[string]any{"a": "b"}}); code != 401 {
			t.Fatalf("configData with a revoked key on node %d: %d %v", i, code, out)
		}
	}
}

// What a DDI task may be: its artifacts uploaded ones, its template a DDI one for good;
// and a DDI template takes no stages, by PATCH either.
func TestDDITaskEdits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnvWith(t, 1, func(c *app.Config) { c.ArtifactDir = dir })
	tpl := e.ddiTemplate("fw")
	byID := func(id any) map[string]any {
		return map[string]any{"chunks": []any{map[string]any{"part": "os", "name": "fw", "version": "1",
			"artifacts": []any{map[string]any{"artifact_id": id}}}}}
	}
	e.expectMsg("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_dev01", "start_time": ts(t0), "template_id": tpl,
		"params": byID(999)}, 422, "params_invalid", "artifact 999 does not exist")
	code, up, _ := e.uploadArtifact("fw;v2.swu", strings.NewReader("payload"), nil)
	if code != 201 {
		t.Fatalf("upload: %d %v", code, up)
	}
	task := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_dev01", "start_time": ts(t0), "template_id": tpl,
		"params": byID(up["id"])})
	path := "/v1/admin/tasks/once/" + fmt.Sprint(task["id"])
	e.expectMsg("PATCH", path, map[string]any{"params": byID(998)}, 422, "params_invalid", "artifact 998")
	e.expectMsg("PATCH", path, map[string]any{"template_id": e.template(), "params": map[string]any{}}, 400, "invalid_argument", "DDI template")
	e.expectMsg("PATCH", fmt.Sprintf("/v1/admin/templates/%d", tpl), map[string]any{"stages": []any{"a", "b"}}, 400, "invalid_argument", "stages")

	// A name with ; downloads under the link the deployment gives.
	target := "TargetToken " + e.key("dev01")
	_, poll := e.ddi(0, "GET", "/ddi/DEFAULT/controller/v1/dev01", target, nil)
	_, dep := e.ddi(0, "GET", strings.TrimPrefix(link(poll, "deploymentBase"), e.urls[0]), target, nil)
	art := dep["deployment"].(map[string]any)["chunks"].([]any)[0].(map[string]any)["artifacts"].([]any)[0].(map[string]any)
	href := art["_links"].(map[string]any)["download"].(map[string]any)["href"].(string)
	req, _ := http.NewRequest("GET", href, nil)
	req.Header.Set("Authorization", target)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "payload" {
		t.Fatalf("download of %s: %d %q", href, resp.StatusCode, b)
	}
}

// An action whose dispatch ended otherwise (an admin expired it) is gone, and closed.
func TestDDIEndedActionIsGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_dev01", "start_time": ts(t0),
		"template_id": e.ddiTemplate("fw"), "params": deploymentParams("1")})
	target := "TargetToken " + e.key("dev01")
	base := "/ddi/DEFAULT/controller/v1/dev01"
	_, poll := e.ddi(0, "GET", base, target, nil)
	href := strings.TrimPrefix(link(poll, "deploymentBase"), e.urls[0])
	recs, _ := e.records(adminToken, "/v1/admin/dispatches?uid=dev01&state=open")
	e.admin("POST", "/v1/admin/dispatches/"+recs[0]["log_id"].(string)+"/expire", nil)
	if code, out := e.ddi(0, "GET", href, target, nil); code != 410 {
		t.Fatalf("deploymentBase of an expired action: %d %v, want 410", code, out)
	}
	if n := e.count("SELECT COUNT(*) FROM ddi_action WHERE closed_at IS NULL"); n != 0 {
		t.Fatalf("open actions after the expiry: %d", n)
	}
}
