package app_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/swutest"
)

// The real SWUpdate client (Debian's swupdate 2022.12, in suricatta mode) against the
// DDI endpoint (issue 38): internal/swutest runs it, and says what it sends.

// swuEnv is a server whose DDI controllers are told to poll every second, with a signer
// of images and a file server of the .swu files deployments name by URL.
type swuEnv struct {
	*env
	signer *swutest.Signer
	files  *httptest.Server
	served map[string][]byte
}

func newSWUEnv(t *testing.T, instances int) *swuEnv {
	t.Helper()
	swutest.Require(t)
	dir := t.TempDir()
	e := &swuEnv{env: newEnvWith(t, instances, func(c *app.Config) { c.DDISleep, c.ArtifactDir = time.Second, dir }),
		signer: swutest.NewSigner(t), served: map[string][]byte{}}
	e.files = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := e.served[strings.TrimPrefix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, r.URL.Path, time.Time{}, strings.NewReader(string(b)))
	}))
	t.Cleanup(e.files.Close)
	return e
}

// deployment serves img as name and returns the params of a deployment of it.
func (e *swuEnv) deployment(name string, img *swutest.Image) map[string]any {
	e.served[name] = img.Bytes
	return map[string]any{"chunks": []any{map[string]any{"part": "os", "name": "app", "version": img.Version,
		"artifacts": []any{map[string]any{"filename": name, "size": img.Size, "url": e.files.URL + "/" + name,
			"hashes": map[string]any{"sha1": img.SHA1, "md5": img.MD5, "sha256": img.SHA256}}}}}}
}

// uploaded uploads img as name and returns the params of a deployment of it by its
// artifact id: devices download it through the DDI endpoint, with their token.
func (e *swuEnv) uploaded(name string, img *swutest.Image) map[string]any {
	e.t.Helper()
	code, out, _ := e.uploadArtifact(name, bytes.NewReader(img.Bytes), lengthOf(img.Bytes))
	if code != 201 || out["hashes"].(map[string]any)["sha1"] != img.SHA1 {
		e.t.Fatalf("upload: %d %v", code, out)
	}
	return map[string]any{"chunks": []any{map[string]any{"part": "os", "name": "app", "version": img.Version,
		"artifacts": []any{map[string]any{"artifact_id": out["id"]}}}}}
}

// controller starts SWUpdate as controller uid with its own client key.
func (e *swuEnv) controller(uid string, identify map[string]string) *swutest.Client {
	e.t.Helper()
	return swutest.Start(e.t.(*testing.T), swutest.Config{URL: e.urls[0] + "/ddi", Tenant: "DEFAULT", ControllerID: uid,
		TargetToken: e.key(uid), PollSeconds: 1, CertPath: e.signer.CertPath, Identify: identify})
}

// record waits until uid's dispatch record of taskID satisfies ok, and returns it.
func (e *swuEnv) record(uid, taskID string, what string, ok func(map[string]any) bool) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, _ := e.records(adminToken, "/v1/admin/dispatches?uid="+uid+"&task_id="+taskID)
		for _, r := range recs {
			if ok(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: %s never came; records: %v", uid, what, recs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func installed(r map[string]any) bool {
	cp, _ := json.Marshal(r["checkpoint"])
	return r["state"] == "open" && strings.Contains(string(cp), "All Chunks Installed.")
}

func finished(result string) func(map[string]any) bool {
	return func(r map[string]any) bool { return r["result"] == result }
}

// A deployment of an uploaded artifact (downloaded through the DDI endpoint with the
// device's token) installed, and confirmed by the client after its "reboot" (a restart
// with -c 2); the dispatch stays open, its lease renewed by each poll, until then.
func TestSWUpdateInstallsAndConfirmsAfterRestart(t *testing.T) {
	t.Parallel()
	e := newSWUEnv(t, 1)
	tpl := e.ddiTemplate("firmware")
	img := e.signer.Build(t, swutest.ImageSpec{Version: "1.0.1"})
	task := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_dev01", "start_time": ts(t0),
		"template_id": tpl, "params": e.uploaded("app.swu", img)})["task_id"].(string)
	c := e.controller("dev01", nil)
	e.record("dev01", task, "All Chunks Installed.", installed)
	if out, err := c.WaitFor("pending testing", 10*time.Second); err != nil {
		t.Fatalf("after the install: %v\n%s", err, out)
	}
	if r := e.record("dev01", task, "still open", installed); r["result"] != nil {
		t.Fatalf("before the reboot: %v", r)
	}
	c.Restart(swutest.ConfirmSuccess)
	r := e.record("dev01", task, "closed success", finished("success"))
	if r["state"] != "done" {
		t.Fatalf("after the confirmation: %v", r)
	}
	if n := e.count("SELECT COUNT(*) FROM ddi_action WHERE uid = 'dev01' AND closed_at IS NOT NULL"); n != 1 {
		t.Fatalf("closed actions: %d, want 1", n)
	}
}

// A failed install (the image is for other hardware) is reported as a failure, with
// SWUpdate's words as the detail; configData lands as the uid's labels.
func TestSWUpdateReportsAFailureAndItsAttributes(t *testing.T) {
	t.Parallel()
	e := newSWUEnv(t, 1)
	tpl := e.ddiTemplate("firmware")
	img := e.signer.Build(t, swutest.ImageSpec{Version: "2.0", Hardware: "9.9"})
	task := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_dev02", "start_time": ts(t0),
		"template_id": tpl, "params": e.deployment("other.swu", img), "max_attempts": 1})["task_id"].(string)
	e.controller("dev02", map[string]string{"hwRevision": "1.0", "serialNo": "dev02-sn"})
	r := e.record("dev02", task, "closed failure", finished("failure"))
	if d, _ := json.Marshal(r["detail"]); !strings.Contains(string(d), "No suitable .swu image found") {
		t.Fatalf("failure detail: %s", d)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		labels, _ := e.admin("GET", "/v1/admin/clients/dev02", nil)["agent"].(map[string]any)["labels"].(map[string]any)
		if labels["hwRevision"] == "1.0" && labels["serialNo"] == "dev02-sn" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("labels from configData: %v", labels)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// An admin's cancel of a deployment the device installed and holds (waiting for its
// reboot) reaches SWUpdate as a cancelAction, which it acknowledges.
func TestSWUpdateAcknowledgesACancel(t *testing.T) {
	t.Parallel()
	e := newSWUEnv(t, 1)
	tpl := e.ddiTemplate("firmware")
	img := e.signer.Build(t, swutest.ImageSpec{Version: "3.0"})
	task := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "uid_dev03", "start_time": ts(t0),
		"template_id": tpl, "params": e.deployment("app3.swu", img)})["task_id"].(string)
	c := e.controller("dev03", nil)
	r := e.record("dev03", task, "All Chunks Installed.", installed)
	e.admin("POST", "/v1/admin/dispatches/"+r["log_id"].(string)+"/cancel", nil)
	if out, err := c.WaitFor("cancel", 15*time.Second); err != nil {
		t.Fatalf("no cancel seen by SWUpdate: %v\n%s", err, out)
	}
	deadline := time.Now().Add(15 * time.Second)
	for e.count("SELECT COUNT(*) FROM ddi_action WHERE uid = 'dev03' AND closed_at IS NOT NULL") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the cancel was never acknowledged:\n%s", c.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := e.record("dev03", task, "cancelled", func(r map[string]any) bool { return r["state"] != "open" }); r["state"] != "cancelled" {
		t.Fatalf("record after the cancel: %v", r)
	}
}

// A rollout over five SWUpdate processes: phase 1's two devices install and confirm,
// the gate opens and the other three install; a second rollout whose image fails
// aborts after its first phase, and the others never get it.
func TestSWUpdateRollout(t *testing.T) {
	t.Parallel()
	e := newSWUEnv(t, 2)
	tpl := e.ddiTemplate("firmware")
	uids := []string{"rd0", "rd1", "rd2", "rd3", "rd4"}
	e.admin("PUT", "/v1/admin/groups/fleet/members", map[string]any{"uids": uids})
	rollout := map[string]any{"phases": []any{map[string]any{"count": 2}, map[string]any{"percent": 100}},
		"gate": map[string]any{"min_finished": 2, "success_ratio": 1, "failure_ratio": 0.5}}
	good := e.signer.Build(t, swutest.ImageSpec{Version: "4.0"})
	task := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "gid_fleet", "start_time": ts(t0),
		"template_id": tpl, "params": e.deployment("good.swu", good), "dispatch_times": 5, "rollout": rollout})["task_id"].(string)
	clients := map[string]*swutest.Client{}
	for _, u := range uids {
		clients[u] = e.controller(u, nil)
	}
	confirmed := map[string]bool{}
	confirm := func(want int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for len(confirmed) < want {
			// The rollout's step runs on every node's ticker, which the test's clock
			// holds still; its read runs it too.
			e.rollout(task)
			recs, _ := e.records(adminToken, "/v1/admin/dispatches?task_id="+task)
			for _, r := range recs {
				if u := r["uid"].(string); installed(r) && !confirmed[u] {
					clients[u].Restart(swutest.ConfirmSuccess)
					confirmed[u] = true
				}
			}
			if len(recs) > want {
				t.Fatalf("%d dispatched while the rollout allows %d: %v", len(recs), want, recs)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d confirmed; records: %v", len(confirmed), want, recs)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	confirm(2)
	for _, u := range uids {
		if confirmed[u] {
			e.record(u, task, "success", finished("success"))
		}
	}
	// The gate passed (two of two succeeded): phase 2 gives the other three theirs.
	confirm(5)
	for _, u := range uids {
		e.record(u, task, "success", finished("success"))
	}
	// Phase 2 was the last: the rollout completed (its figures are the phase's).
	if r := e.rollout(task); r["state"] != "completed" {
		t.Fatalf("rollout after five successes: %v", r)
	}

	// A failing image: phase 1's two fail, the rollout aborts, nobody else gets it.
	bad := e.signer.Build(t, swutest.ImageSpec{Version: "5.0", Hardware: "9.9"})
	failing := e.admin("POST", "/v1/admin/tasks/once", map[string]any{"executor": "gid_fleet", "start_time": ts(t0),
		"template_id": tpl, "params": e.deployment("bad.swu", bad), "dispatch_times": 5, "rollout": rollout,
		"max_attempts": 1})["task_id"].(string)
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := e.rollout(failing)
		if r["state"] == "aborted" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failing rollout: %v", r)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // three more polls of every device
	recs, _ := e.records(adminToken, "/v1/admin/dispatches?task_id="+failing)
	if len(recs) != 2 {
		t.Fatalf("dispatches of the aborted rollout: %d, want phase 1's two: %v", len(recs), recs)
	}
	for _, r := range recs {
		if r["result"] != "failure" {
			t.Fatalf("a dispatch of the aborted rollout: %v", r)
		}
	}
}
