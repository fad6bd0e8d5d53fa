package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"mime"
	"net/http"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/web"
)

// editable is the editable part of a task as a JSON document: what a merge patch
// applies to. Its members are taskRequest's, so the merged document is read and checked
// as a PUT body is; settings the task does not set itself are absent (they stay
// inherited unless the patch sets them).
func editable(t taskd.Task) map[string]any {
	doc := map[string]any{"executor": t.Executor, "start_time": t.StartTime, "template_id": t.TemplateID,
		"params": t.Params, "dispatch_times": t.DispatchTimes, "mode": t.Mode.String(), "priority": t.Priority,
		"status": t.Status.String()}
	settingsDoc(t.Own, doc)
	if t.Rollout != nil {
		doc["rollout"] = t.Rollout
	}
	if t.OwnWindows != nil {
		doc["windows"] = t.OwnWindows
	}
	if t.Key.Kind == taskd.KindRotate {
		doc["misfire"] = max(t.Misfire, taskd.MisfireCatchUp).String()
		if t.Cron != "" {
			doc["cron"], doc["time_zone"] = t.Cron, t.TimeZone
		} else {
			doc["space_minutes"] = t.SpaceMinutes
		}
		if t.EndTime != nil {
			doc["end_time"] = t.EndTime
		}
	}
	return doc
}

// editableFields are the members a merge patch may name; serverFields are members of a
// task reply that the server sets.
var (
	editableFields = map[string]bool{"executor": true, "start_time": true, "template_id": true, "params": true,
		"dispatch_times": true, "mode": true, "priority": true, "status": true, "lease_seconds": true,
		"max_attempts": true, "retry_backoff_seconds": true, "retry_multiplier": true, "retry_max_seconds": true,
		"dispatch_rate_per_minute": true, "confirm_seconds": true, "space_minutes": true, "cron": true, "time_zone": true, "misfire": true,
		"end_time": true, "rollout": true, "windows": true}
	serverFields = map[string]bool{"id": true, "task_id": true, "kind": true, "created_at": true, "updated_at": true,
		"inherited": true, "own": true, "version": true}
)

// jsonPatchMediaType is JSON Patch (RFC 6902), another format than the merge patch
// this endpoint takes: it is refused, not misread. Any other Content-Type is read as a
// merge patch, as every other endpoint reads JSON whatever the header says (curl's
// default form type included).
const jsonPatchMediaType = "application/json-patch+json"

// PatchTask is PATCH /v1/admin/tasks/{kind}/{id}: a JSON merge patch (RFC 7396) of the
// task's editable fields. Absent members stay as they are; null takes an optional field
// back to its default (end_time: null clears it); params merges recursively, as the RFC
// says. The merged task is checked exactly as a PUT body is, and replaced as PUT replaces
// it (audited as task.patch, caches invalidated).
func (h *Handlers) PatchTask() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		key, err := pathTaskKey(r)
		if err != nil {
			return 0, nil, err
		}
		if ct := r.Header.Get("Content-Type"); ct != "" {
			if mt, _, _ := mime.ParseMediaType(ct); mt == jsonPatchMediaType {
				return 0, nil, taskd.Errorf(taskd.CodeInvalid,
					"Content-Type: this endpoint takes a JSON merge patch (application/merge-patch+json), not a JSON Patch")
			}
		}
		var patch json.RawMessage
		if err := web.Decode(w, r, bodyLimit, false, &patch); err != nil {
			return 0, nil, err
		}
		if err := checkPatch(patch, editableFields, serverFields); err != nil {
			return 0, nil, err
		}
		t, err := h.patchTask(r.Context(), key, patch, ifMatch(r))
		return http.StatusOK, h.withWarnings(r.Context(), t, err), tagged(w, taskd.Count(t.Version), err)
	})
}

// patchTask merges patch into the task as it is, held locked: an edit another admin
// made meanwhile is kept, never overwritten with what was read before it.
func (h *Handlers) patchTask(ctx context.Context, key taskd.TaskKey, patch json.RawMessage, ifMatch taskd.IfMatch) (taskd.Task, error) {
	return h.svc.UpdateTask(ctx, key, ifMatch, func(current taskd.Task) (taskd.Task, error) {
		doc, err := json.Marshal(editable(current))
		if err != nil {
			return current, err
		}
		merged, err := mergePatch(doc, patch)
		if err != nil {
			return current, err
		}
		var req taskRequest
		if err := web.DecodeBytes(merged, &req); err != nil {
			return current, err
		}
		return req.task(key.Kind)
	})
}

// checkPatch refuses a patch that is not an object (RFC 7396 would have it replace the
// whole document) or that names a member other than the editable ones (a member the
// server sets is named so).
func checkPatch(patch json.RawMessage, editableFields, serverFields map[string]bool) error {
	if !isObject(patch) {
		return taskd.Errorf(taskd.CodeInvalid, "request body: a merge patch must be a JSON object of the fields to change, got %s",
			web.Describe(patch))
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(patch, &members); err != nil {
		return taskd.Errorf(taskd.CodeMalformedJSON, "request body: malformed JSON: %v", err)
	}
	for name := range members {
		switch {
		case serverFields[name]:
			return taskd.Errorf(taskd.CodeInvalid, "%s: set by the server, not editable", name)
		case !editableFields[name]:
			return taskd.Errorf(taskd.CodeInvalid, "request body: unknown field %q", name)
		}
	}
	return nil
}

// mergePatch applies a JSON merge patch to target as RFC 7396 section 2 says: an object
// patch merges member by member, recursively, null removing a member; anything else
// (an array, a string...) replaces the target as it is, nulls inside included. Values
// the patch does not touch are kept as written, so numbers keep every digit.
//
// It is done here rather than with a library: the one at hand (evanphx/json-patch v5)
// drops nulls inside arrays that a patch adds, which the RFC keeps, and escapes HTML.
func mergePatch(target, patch json.RawMessage) (json.RawMessage, error) {
	if !isObject(patch) {
		return patch, nil
	}
	members := map[string]json.RawMessage{}
	if isObject(target) {
		if err := json.Unmarshal(target, &members); err != nil {
			return nil, err
		}
	}
	var changes map[string]json.RawMessage
	if err := json.Unmarshal(patch, &changes); err != nil {
		return nil, taskd.Errorf(taskd.CodeMalformedJSON, "request body: malformed JSON: %v", err)
	}
	for name, v := range changes {
		if string(bytes.TrimSpace(v)) == "null" {
			delete(members, name)
			continue
		}
		m, err := mergePatch(members[name], v)
		if err != nil {
			return nil, err
		}
		members[name] = m
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(members); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}
