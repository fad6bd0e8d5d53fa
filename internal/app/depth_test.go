package app_test

import (
	"strings"
	"testing"
	"time"
)

// deep is a JSON object nested n levels, 2 bytes a level: {"k":[[...[]...]]}, the
// shape of the 14 KB checkpoint 7,000 levels deep.
func deep(n int) string { return `{"k":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + "}" }

// What agents send (checkpoints, details, stage contexts) and what admins send
// (params, patches) nests at most 64 levels: deeper is a 400 naming the field, before
// anything is stored or merged, and the dispatch is untouched.
func TestNestingIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	taskID := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "lease_seconds": 60})
	key := e.key("1")
	got := e.fetch(0, key)
	if got.Task == nil {
		t.Fatal("no task")
	}
	logID := got.Task.LogID
	refused := func(what, method, path, token, body, field string) {
		t.Helper()
		code, out := e.do(0, method, path, token, body)
		errBody, _ := out["error"].(map[string]any)
		msg, _ := errBody["message"].(string)
		if code != 400 || !strings.HasPrefix(msg, field+": nested deeper than 64 levels") {
			t.Errorf("%s: %d %v, want 400 naming %s", what, code, out, field)
		}
	}
	refused("a checkpoint 7,000 deep", "POST", "/v1/progress", key, `{"log_id":"`+logID+`","checkpoint":`+deep(7000)+`}`, "checkpoint")
	refused("a detail 65 deep", "POST", "/v1/complete", key, `{"log_id":"`+logID+`","result":"success","detail":`+deep(65)+`}`, "detail")
	refused("a carried complete's detail", "POST", "/v1/fetch", key, `{"complete":{"log_id":"`+logID+`","result":"success","detail":`+deep(100)+`}}`, "complete")
	refused("a stage context", "POST", "/v1/complete", key, `{"log_id":"`+logID+`","result":"success","next_stage":"b","context":`+deep(65)+`}`, "context")
	path := "/v1/admin/tasks/once/" + taskID[len("once:"):]
	refused("a patch 9,000 deep", "PATCH", path, adminToken, `{"params":`+deep(9000)+`}`, "params")
	refused("task params", "POST", "/v1/admin/tasks/once", adminToken, `{"executor":"uid_1","start_time":"`+ts(t0)+`","template_id":1,"params":`+deep(65)+`}`, "params")
	// 64 levels are taken; the dispatch was untouched by the refusals.
	if code, out := e.do(0, "POST", "/v1/progress", key, `{"log_id":"`+logID+`","checkpoint":`+deep(63)+`}`); code != 200 {
		t.Fatalf("a checkpoint 63 deep (64 with the body): %d %v", code, out)
	}
	if code, out := e.complete(0, key, logID, "success"); code != 200 {
		t.Fatalf("complete after the refusals: %d %v", code, out)
	}
}
