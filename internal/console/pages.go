package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
)

// pageSize is how many rows a list page shows.
const pageSize = 50

func (c *Console) dashboard(w http.ResponseWriter, r *http.Request) {
	now := time.Now().UTC()
	totals := func(from time.Time) (map[string]float64, bool) {
		var body struct{ Tasks []map[string]any }
		if !c.fetch(w, r, query("/v1/admin/stats", "from", from.Format(time.RFC3339)), &body) {
			return nil, false
		}
		sum := map[string]float64{"dispatched": 0, "completed": 0, "failed": 0, "expired": 0, "redo": 0}
		for _, t := range body.Tasks {
			for _, k := range []string{"dispatched", "completed", "failed", "expired", "redo"} {
				sum[k] += num(t[k])
			}
		}
		return sum, true
	}
	hour, ok := totals(now.Add(-time.Hour))
	if !ok {
		return
	}
	day, ok := totals(now.Add(-24 * time.Hour))
	if !ok {
		return
	}
	var overview map[string]any
	if !c.fetch(w, r, "/v1/admin/overview", &overview) {
		return
	}
	lag := ""
	if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(overview["outbox_oldest_at"])); err == nil {
		lag = now.Sub(at).Round(time.Second).String()
	}
	var nodes struct{ Nodes []map[string]any }
	if !c.fetch(w, r, "/v1/admin/nodes", &nodes) {
		return
	}
	// The campaigns an operator watches: the active ones (at most the latest 100).
	var camps struct{ Campaigns []map[string]any }
	if !c.fetch(w, r, "/v1/admin/campaigns?limit=100", &camps) {
		return
	}
	active := []map[string]any{}
	for _, cp := range camps.Campaigns {
		switch cp["state"] {
		case "running", "paused", "stopping":
			active = append(active, cp)
		}
	}
	// The rollouts an operator watches: those neither completed nor aborted.
	var rollouts struct{ Rollouts []map[string]any }
	if !c.fetch(w, r, "/v1/admin/rollouts", &rollouts) {
		return
	}
	c.render(w, r, http.StatusOK, "dashboard", "Dashboard", map[string]any{"Hour": hour, "Day": day, "Now": now,
		"Overview": overview, "Lag": lag, "Nodes": nodes.Nodes, "Campaigns": active, "Rollouts": rollouts.Rollouts})
}

// ---- templates ----

func (c *Console) templates(w http.ResponseWriter, r *http.Request) {
	c.templatesPage(w, r, http.StatusOK, map[string]any{})
}

func (c *Console) templatesPage(w http.ResponseWriter, r *http.Request, status int, data map[string]any) {
	var body struct{ Templates []map[string]any }
	if !c.fetch(w, r, "/v1/admin/templates", &body) {
		return
	}
	data["Templates"] = body.Templates
	if _, set := data["Schema"]; !set {
		data["Schema"] = "{\n  \"type\": \"object\",\n  \"required\": [\"url\"],\n  \"properties\": {\n    \"url\": {\"type\": \"string\", \"title\": \"URL\"}\n  }\n}"
	}
	c.render(w, r, status, "templates", "Templates", data)
}

// createTemplate creates a template from the form: a name and a JSON Schema, or a
// DDI template, whose schema (a deployment) is the server's.
func (c *Console) createTemplate(w http.ResponseWriter, r *http.Request) {
	name, schema, ddi := strings.TrimSpace(r.PostFormValue("name")), r.PostFormValue("schema"), r.PostFormValue("ddi") == "1"
	form := map[string]any{"Name": name, "Schema": schema, "DDI": ddi}
	body := map[string]any{"name": name, "ddi": true}
	if !ddi {
		var parsed json.RawMessage
		if err := json.Unmarshal([]byte(schema), &parsed); err != nil {
			form["SchemaError"] = "Not JSON: " + err.Error()
			c.templatesPage(w, r, http.StatusBadRequest, form)
			return
		}
		body = map[string]any{"name": name, "schema": parsed}
	}
	res, ok := c.api(w, r, http.MethodPost, "/v1/admin/templates", body)
	if !ok {
		return
	}
	if !res.ok() {
		msg := res.message()
		switch {
		case strings.HasPrefix(msg, "name"):
			form["NameError"] = msg
		case ddi: // the schema field is hidden
			form["Error"] = msg
		default:
			form["SchemaError"] = msg
		}
		c.templatesPage(w, r, res.status, form)
		return
	}
	http.Redirect(w, r, "/console/templates", http.StatusSeeOther)
}

func (c *Console) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	res, ok := c.api(w, r, http.MethodDelete, "/v1/admin/templates/"+url.PathEscape(chi.URLParam(r, "id")), nil)
	if !ok {
		return
	}
	if !res.ok() {
		c.templatesPage(w, r, res.status, map[string]any{"Error": "Template " + chi.URLParam(r, "id") + " was not deleted: " + res.message()})
		return
	}
	http.Redirect(w, r, "/console/templates", http.StatusSeeOther)
}

// ---- tasks ----

func (c *Console) tasks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filter := map[string]string{}
	for _, k := range []string{"executor", "kind", "status", "template_id", "cursor"} {
		filter[k] = strings.TrimSpace(q.Get(k))
	}
	path := query("/v1/admin/tasks", "executor", filter["executor"], "kind", filter["kind"], "status", filter["status"],
		"template_id", filter["template_id"], "limit", strconv.Itoa(pageSize), "cursor", filter["cursor"])
	res, ok := c.api(w, r, http.MethodGet, path, nil)
	if !ok {
		return
	}
	data := map[string]any{"Filter": filter}
	if !res.ok() {
		data["Error"] = res.message()
		c.render(w, r, res.status, "tasks", "Tasks", data)
		return
	}
	var body struct {
		Tasks      []map[string]any
		NextCursor string `json:"next_cursor"`
	}
	res.decode(&body)
	names, _, ok := c.templateNames(w, r)
	if !ok {
		return
	}
	data["Tasks"], data["TemplateNames"] = body.Tasks, names
	if body.NextCursor != "" {
		data["Next"] = query("/console/tasks", "executor", filter["executor"], "kind", filter["kind"],
			"status", filter["status"], "template_id", filter["template_id"], "cursor", body.NextCursor)
	}
	c.render(w, r, http.StatusOK, "tasks", "Tasks", data)
}

func (c *Console) task(w http.ResponseWriter, r *http.Request) {
	var t map[string]any
	if !c.fetch(w, r, taskPath(r), &t) {
		return
	}
	names, ddi, ok := c.templateNames(w, r)
	if !ok {
		return
	}
	ro, ok := c.taskRollout(w, r, t)
	if !ok {
		return
	}
	var deployment *deploymentView
	if ddi[fmt.Sprint(t["template_id"])] {
		if deployment, ok = c.taskDeployment(w, r, t); !ok {
			return
		}
	}
	rollout := exampleRollout
	if t["rollout"] != nil {
		b, _ := json.MarshalIndent(t["rollout"], "", "  ")
		rollout = string(b)
	}
	data := map[string]any{"Task": t, "TemplateNames": names, "Rollout": ro, "RolloutJSON": rollout, "Deployment": deployment}
	if r.URL.Query().Get("saved") == "1" {
		// Just created or saved: the write's warnings, worked out again by a dry run of
		// the task as stored (the redirect carries no text a link could forge).
		data["Saved"] = true
		var preview struct{ Warnings []map[string]any }
		res, ok := c.api(w, r, http.MethodPost, "/v1/admin/tasks/"+url.PathEscape(chi.URLParam(r, "kind"))+"/preview", previewBody(t))
		if !ok {
			return
		}
		if res.ok() {
			res.decode(&preview)
			data["Warnings"] = preview.Warnings
		}
	}
	c.render(w, r, http.StatusOK, "task", "Task "+chi.URLParam(r, "kind")+":"+chi.URLParam(r, "id"), data)
}

// previewBody is a create's body for task t as the API shows it: its own settings, not
// the inherited ones.
func previewBody(t map[string]any) map[string]any {
	body := map[string]any{}
	for _, k := range []string{"executor", "start_time", "template_id", "params", "priority", "dispatch_times", "mode",
		"space_minutes", "cron", "time_zone", "misfire", "end_time", "rollout"} {
		if v, ok := t[k]; ok && v != nil {
			body[k] = v
		}
	}
	own, _ := t["own"].(map[string]any)
	for _, k := range inheritable {
		if v := own[k]; v != nil {
			body[k] = v
		}
	}
	return body
}

// templateNames are the templates' names by id (as text, the way a task's template_id
// prints), so task lists name the template rather than show a number; and the ids of
// the DDI templates.
func (c *Console) templateNames(w http.ResponseWriter, r *http.Request) (names map[string]string, ddi map[string]bool, ok bool) {
	var body struct{ Templates []map[string]any }
	if !c.fetch(w, r, "/v1/admin/templates", &body) {
		return nil, nil, false
	}
	names, ddi = make(map[string]string, len(body.Templates)), map[string]bool{}
	for _, t := range body.Templates {
		name, _ := t["name"].(string)
		names[fmt.Sprint(t["id"])] = name
		if t["ddi"] == true {
			ddi[fmt.Sprint(t["id"])] = true
		}
	}
	return names, ddi, true
}

// taskForm is the state of the task form: the task's fields (the API's names, as
// the form holds them), the errors by field (params' by JSON pointer, under "p:"), the
// template whose schema generates the params fields, and whether params are edited as
// raw JSON.
type taskForm struct {
	Kind     string // once or rotate; fixed when editing
	ID       string // the id of the task being edited
	Editing  string // the task key being edited ("" for a new task)
	Form     map[string]string
	Errors   map[string]string
	Template map[string]any
	Params   map[string]any // the params the fields show
	Raw      bool
	// Version is the version of the task the form was filled from: a save is made
	// against it (If-Match), so that an edit someone made meanwhile is never
	// overwritten unseen.
	Version string
}

// newTask is the form of a new task.
func (c *Console) newTask(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tf := taskForm{Kind: "once", Errors: map[string]string{}, Raw: q.Get("raw") == "1",
		Form: map[string]string{"template_id": q.Get("template"), "priority": "5", "dispatch_times": "1",
			"mode": "once_per_user", "start_time": inputTime(time.Now().Add(time.Minute)), "params": "{}"}}
	if q.Get("kind") == "rotate" {
		tf.Kind = "rotate"
	}
	c.renderTaskForm(w, r, http.StatusOK, tf)
}

// editTask is the form of an existing task, filled from it.
func (c *Console) editTask(w http.ResponseWriter, r *http.Request) {
	kind, id := chi.URLParam(r, "kind"), chi.URLParam(r, "id")
	var t map[string]any
	if !c.fetch(w, r, taskPath(r), &t) {
		return
	}
	form, pm := taskFormValues(t)
	tf := taskForm{Kind: kind, ID: id, Editing: kind + ":" + id, Form: form, Errors: map[string]string{}, Params: pm,
		Raw: r.URL.Query().Get("raw") == "1", Version: fmt.Sprint(t["version"])}
	c.renderTaskForm(w, r, http.StatusOK, tf)
}

// taskFormValues are the form's values of task t (as the API shows it), and its
// params.
func taskFormValues(t map[string]any) (map[string]string, map[string]any) {
	form := map[string]string{}
	for _, k := range taskFields {
		switch v := t[k].(type) {
		case nil:
		case string:
			form[k] = v
		case json.Number:
			form[k] = v.String()
		}
	}
	for _, k := range []string{"start_time", "end_time"} {
		if at, err := time.Parse(time.RFC3339, form[k]); err == nil {
			form[k] = inputTime(at)
		}
	}
	// A setting the task does not set itself stays empty: saved so, it stays
	// inherited (or the server's default).
	own, _ := t["own"].(map[string]any)
	for _, k := range inheritable {
		if own[k] == nil {
			delete(form, k)
		}
	}
	params, _ := json.Marshal(t["params"])
	form["params"] = string(params)
	pm, _ := t["params"].(map[string]any)
	return form, pm
}

// renderTaskForm shows tf with the templates to choose from and, unless tf.Raw or
// the template's schema cannot be edited field by field, the params as fields.
func (c *Console) renderTaskForm(w http.ResponseWriter, r *http.Request, status int, tf taskForm) {
	var body struct{ Templates []map[string]any }
	if !c.fetch(w, r, "/v1/admin/templates", &body) {
		return
	}
	if tf.Template == nil {
		for _, t := range body.Templates {
			if fmt.Sprint(t["id"]) == tf.Form["template_id"] || (tf.Form["template_id"] == "" && tf.Template == nil) {
				tf.Template = t
			}
		}
	}
	data := map[string]any{"Templates": body.Templates, "Task": tf}
	schema, _ := tf.Template["schema"].(map[string]any)
	if tf.Template["ddi"] == true {
		data["DDI"] = true
		if tf.Editing == "" && strings.TrimSpace(tf.Form["params"]) == "{}" {
			example, ok := c.exampleDeployment(w, r)
			if !ok {
				return
			}
			tf.Form["params"] = example
		}
	}
	if !tf.Raw && byField(tf.Template) {
		perrs := map[string]string{}
		for k, v := range tf.Errors {
			if p, ok := strings.CutPrefix(k, "p:"); ok {
				perrs[p] = v
			}
		}
		data["ParamFields"] = paramFields(schema, "", tf.Params, perrs)
	}
	title := "New task"
	if tf.Editing != "" {
		title = "Edit task " + tf.Editing
	}
	c.render(w, r, status, "newtask", title, data)
}

// byField reports whether the params of template tpl's tasks are edited field by
// field: its schema allows it, and it is not a DDI template (whose deployment, chunks
// of artifacts, reads best as JSON).
func byField(tpl map[string]any) bool {
	schema, _ := tpl["schema"].(map[string]any)
	return formable(schema) && tpl["ddi"] != true
}

// exampleDeployment is the params a new DDI task's form offers: one chunk of the
// newest artifact uploaded, or of a file elsewhere when there is none.
func (c *Console) exampleDeployment(w http.ResponseWriter, r *http.Request) (string, bool) {
	var list artifactList
	if !c.fetch(w, r, "/v1/admin/artifacts?limit=1", &list) {
		return "", false
	}
	artifact := map[string]any{"filename": "update.swu", "size": 0, "url": "https://files.example.com/update.swu",
		"hashes": map[string]any{"sha1": strings.Repeat("0", 40)}}
	name := "update"
	if len(list.Artifacts) > 0 {
		artifact = map[string]any{"artifact_id": list.Artifacts[0].ID}
		name = strings.TrimSuffix(list.Artifacts[0].Filename, path.Ext(list.Artifacts[0].Filename))
	}
	b, _ := json.MarshalIndent(map[string]any{"chunks": []any{map[string]any{"part": "os", "name": name, "version": "1.0",
		"artifacts": []any{artifact}}}}, "", "  ")
	return string(b), true
}

// taskFields are the form fields of a task, in the API's names.
var taskFields = []string{"executor", "start_time", "template_id", "params", "priority",
	"dispatch_times", "mode", "status", "space_minutes", "cron", "time_zone", "misfire", "end_time", "lease_seconds", "max_attempts",
	"retry_backoff_seconds", "retry_multiplier", "retry_max_seconds", "dispatch_rate_per_minute", "confirm_seconds"}

// inheritable are the task's settings a template may give: the form shows a task's
// own value, and a field left empty inherits (or takes the server's default).
var inheritable = []string{"lease_seconds", "max_attempts", "retry_backoff_seconds", "retry_multiplier",
	"retry_max_seconds", "dispatch_rate_per_minute", "confirm_seconds"}

// shownFields are the task fields the form shows an error beside; another field's
// error goes above the form.
var shownFields = []string{"executor", "start_time", "params", "priority", "dispatch_times", "space_minutes",
	"cron", "time_zone", "misfire", "end_time", "lease_seconds", "max_attempts", "retry_backoff_seconds", "retry_multiplier", "retry_max_seconds",
	"dispatch_rate_per_minute", "confirm_seconds"}

// taskPath is the API path of the task r names, its parts escaped.
func taskPath(r *http.Request) string {
	return "/v1/admin/tasks/" + url.PathEscape(chi.URLParam(r, "kind")) + "/" + url.PathEscape(chi.URLParam(r, "id"))
}

func (c *Console) createTask(w http.ResponseWriter, r *http.Request) {
	kind := "once"
	if r.PostFormValue("kind") == "rotate" {
		kind = "rotate"
	}
	c.submitTask(w, r, taskForm{Kind: kind}, http.MethodPost, "/v1/admin/tasks/"+kind)
}

func (c *Console) replaceTask(w http.ResponseWriter, r *http.Request) {
	kind, id := chi.URLParam(r, "kind"), chi.URLParam(r, "id")
	c.submitTask(w, r, taskForm{Kind: kind, ID: id, Editing: kind + ":" + id}, http.MethodPut, taskPath(r))
}

// submitTask sends the task form to the API (method, path) and shows the task, or
// the form again with each error at its field.
func (c *Console) submitTask(w http.ResponseWriter, r *http.Request, tf taskForm, method, path string) {
	tf.Form, tf.Errors, tf.Raw = map[string]string{}, map[string]string{}, r.PostFormValue("raw") == "1"
	tf.Version = r.PostFormValue("version")
	for _, k := range taskFields {
		tf.Form[k] = strings.TrimSpace(r.PostFormValue(k))
	}
	body := map[string]any{"executor": tf.Form["executor"], "mode": tf.Form["mode"]}
	if tf.Form["status"] != "" {
		body["status"] = tf.Form["status"]
	}
	for _, k := range []string{"cron", "time_zone", "misfire"} { // a rotating task's schedule
		if tf.Form[k] != "" {
			body[k] = tf.Form[k]
		}
	}
	for _, k := range []string{"start_time", "end_time"} {
		if tf.Form[k] == "" {
			continue
		}
		t, err := parseInputTime(tf.Form[k])
		if err != nil {
			tf.Errors[k] = "Enter a date and time in UTC, 24 h: YYYY-MM-DD HH:MM:SS."
			continue
		}
		body[k] = t.UTC().Format(time.RFC3339)
	}
	if v := tf.Form["retry_multiplier"]; v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			tf.Errors["retry_multiplier"] = "Enter a number."
		} else {
			body["retry_multiplier"] = n
		}
	}
	for _, k := range []string{"template_id", "priority", "dispatch_times", "space_minutes", "lease_seconds", "max_attempts",
		"retry_backoff_seconds", "retry_max_seconds", "dispatch_rate_per_minute", "confirm_seconds"} {
		if tf.Form[k] == "" {
			continue
		}
		n, err := strconv.ParseInt(tf.Form[k], 10, 64)
		if err != nil {
			tf.Errors[k] = "Enter a whole number."
			continue
		}
		body[k] = n
	}
	// The params: from the fields the template's schema generated, or as raw JSON.
	var schema map[string]any
	if tf.Form["template_id"] != "" {
		res, ok := c.api(w, r, http.MethodGet, "/v1/admin/templates/"+url.PathEscape(tf.Form["template_id"]), nil)
		if !ok {
			return
		}
		if res.ok() {
			res.decode(&tf.Template)
			schema, _ = tf.Template["schema"].(map[string]any)
		}
	}
	if !tf.Raw && byField(tf.Template) {
		perrs := map[string]string{}
		tf.Params = readParams(schema, "", r.PostForm, perrs)
		for p, msg := range perrs {
			tf.Errors["p:"+p] = msg
		}
		body["params"] = tf.Params
		raw, _ := json.Marshal(tf.Params)
		tf.Form["params"] = string(raw)
	} else {
		var params map[string]any
		if err := decodeJSON([]byte(tf.Form["params"]), &params); err != nil {
			tf.Errors["params"] = "Not a JSON object: " + err.Error()
		} else {
			body["params"], tf.Params = params, params
		}
	}
	if len(tf.Errors) > 0 {
		c.renderTaskForm(w, r, http.StatusBadRequest, tf)
		return
	}
	ifMatch := ""
	if method == http.MethodPut && tf.Version != "" {
		ifMatch = `"` + tf.Version + `"`
	}
	res, ok := c.apiIfMatch(w, r, method, path, ifMatch, body)
	if !ok {
		return
	}
	if res.status == http.StatusPreconditionFailed {
		c.changedSinceOpened(w, r, path, tf)
		return
	}
	if !res.ok() {
		fieldErrors(res, tf)
		c.renderTaskForm(w, r, res.status, tf)
		return
	}
	var t struct {
		Kind string
		ID   int64
	}
	res.decode(&t)
	http.Redirect(w, r, "/console/tasks/"+t.Kind+"/"+strconv.FormatInt(t.ID, 10)+"?saved=1", http.StatusSeeOther)
}

// changedSinceOpened shows the task form again after a save refused because someone
// changed the task since the form was opened: the values entered stay (nothing was
// saved), each field that now differs says what the task has now, and the form is
// made against the current version, so saving again applies what was entered, seen.
func (c *Console) changedSinceOpened(w http.ResponseWriter, r *http.Request, path string, tf taskForm) {
	var t map[string]any
	if !c.fetch(w, r, path, &t) {
		return
	}
	now, _ := taskFormValues(t)
	for _, k := range taskFields {
		entered := tf.Form[k]
		if at, err := parseInputTime(entered); err == nil {
			entered = inputTime(at)
		}
		if k == "template_id" || now[k] == entered {
			continue
		}
		if k == "params" && paramsEqual(now[k], tf.Form[k]) {
			continue
		}
		v := now[k]
		if v == "" {
			v = "(not set)"
		}
		tf.Errors[k] = "Now: " + v
	}
	tf.Errors["form"] = "This task was changed since you opened it, and nothing was saved. Your values are below; " +
		"under each field that differs is what the task has now. Save again to replace them with yours, or open the task again to start from its current values."
	tf.Version = fmt.Sprint(t["version"])
	c.renderTaskForm(w, r, http.StatusPreconditionFailed, tf)
}

// paramsEqual reports whether two params documents hold the same JSON.
func paramsEqual(a, b string) bool {
	var x, y any
	if decodeJSON([]byte(a), &x) != nil || decodeJSON([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// fieldErrors puts an API error next to the field it names: a 422's schema errors at
// the params fields they concern (or at the raw params), a 400's "field: ..." at that
// field, anything else above the form.
func fieldErrors(res result, tf taskForm) {
	var e apiError
	json.Unmarshal(res.body, &e)
	if e.Error.Code == "params_invalid" {
		errs := schemaErrors(e.Error.Details)
		var lines []string
		for at, msg := range errs {
			tf.Errors["p:"+at] = msg
			where := at
			if where == "" {
				where = "(the params)"
			}
			lines = append(lines, where+": "+msg)
		}
		sort.Strings(lines)
		if len(lines) == 0 {
			lines = append(lines, e.Error.Message)
		}
		tf.Errors["params"] = strings.Join(lines, "; ")
		return
	}
	msg := res.message()
	if field, rest, ok := strings.Cut(msg, ":"); ok && slices.Contains(shownFields, field) {
		tf.Errors[field] = strings.TrimSpace(rest)
		return
	}
	tf.Errors["form"] = msg
}

// setStatus pauses or resumes a task (a merge patch of its status).
func (c *Console) setStatus(w http.ResponseWriter, r *http.Request) {
	status := r.PostFormValue("status")
	if _, ok := c.change(w, r, http.MethodPatch, taskPath(r), map[string]any{"status": status}, "error", "Task", map[string]any{}); !ok {
		return
	}
	http.Redirect(w, r, "/console/tasks/"+url.PathEscape(chi.URLParam(r, "kind"))+"/"+url.PathEscape(chi.URLParam(r, "id")), http.StatusSeeOther)
}

// confirmDeleteTask asks before a task is deleted (no script: a page of its own).
func (c *Console) confirmDeleteTask(w http.ResponseWriter, r *http.Request) {
	kind, id := chi.URLParam(r, "kind"), chi.URLParam(r, "id")
	var t map[string]any
	if !c.fetch(w, r, taskPath(r), &t) {
		return
	}
	c.render(w, r, http.StatusOK, "confirm", "Delete task "+kind+":"+id+"?", map[string]any{
		"Action": "/console/tasks/" + url.PathEscape(kind) + "/" + url.PathEscape(id) + "/delete",
		"Back":   "/console/tasks/" + url.PathEscape(kind) + "/" + url.PathEscape(id),
		"Button": "Delete task " + kind + ":" + id,
		"Text":   "The task stops being offered at once, on every node; its dispatches and events stay. It is listed under the status \"deleted\" and cannot be restored.",
		"Task":   t,
	})
}

func (c *Console) deleteTask(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.change(w, r, http.MethodDelete, taskPath(r), nil, "error", "Task", map[string]any{}); !ok {
		return
	}
	http.Redirect(w, r, "/console/tasks", http.StatusSeeOther)
}

// ---- schedule ----

// schedule is one executor's occurrences from an hour ago (what is due and may still
// be taken: the default catch-up) to 7 days ahead, by day, with each occurrence's
// quota claimed and remaining.
func (c *Console) schedule(w http.ResponseWriter, r *http.Request) {
	executor := strings.TrimSpace(r.URL.Query().Get("executor"))
	data := map[string]any{"Executor": executor}
	if executor == "" {
		c.render(w, r, http.StatusOK, "schedule", "Schedule", data)
		return
	}
	now := time.Now().UTC().Truncate(time.Second)
	res, ok := c.api(w, r, http.MethodGet, query("/v1/admin/schedule", "executor", executor,
		"from", now.Add(-time.Hour).Format(time.RFC3339), "to", now.Add(7*24*time.Hour).Format(time.RFC3339)), nil)
	if !ok {
		return
	}
	if !res.ok() {
		data["Error"] = res.message()
		c.render(w, r, res.status, "schedule", "Schedule", data)
		return
	}
	var body struct {
		Occurrences []map[string]any
		Truncated   bool
	}
	res.decode(&body)
	data["Truncated"] = body.Truncated
	data["Days"], data["Count"] = scheduleDays(body.Occurrences), len(body.Occurrences)
	c.render(w, r, http.StatusOK, "schedule", "Schedule of "+executor, data)
}

// ---- audit and events ----

func (c *Console) audit(w http.ResponseWriter, r *http.Request) {
	cursor := r.URL.Query().Get("cursor")
	var body struct {
		Entries    []map[string]any
		NextCursor string `json:"next_cursor"`
	}
	if !c.fetch(w, r, query("/v1/admin/audit", "limit", strconv.Itoa(pageSize), "cursor", cursor), &body) {
		return
	}
	data := map[string]any{"Entries": body.Entries}
	if body.NextCursor != "" {
		data["Next"] = query("/console/audit", "cursor", body.NextCursor)
	}
	c.render(w, r, http.StatusOK, "audit", "Audit log", data)
}

func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filter := map[string]string{}
	for _, k := range []string{"uid", "task_id", "type", "cursor"} {
		filter[k] = strings.TrimSpace(q.Get(k))
	}
	res, ok := c.api(w, r, http.MethodGet, query("/v1/admin/events", "uid", filter["uid"], "task_id", filter["task_id"],
		"type", filter["type"], "limit", strconv.Itoa(pageSize), "cursor", filter["cursor"]), nil)
	if !ok {
		return
	}
	data := map[string]any{"Filter": filter}
	if !res.ok() {
		data["Error"] = res.message()
		c.render(w, r, res.status, "events", "Events", data)
		return
	}
	var body struct {
		Events     []map[string]any
		NextCursor string `json:"next_cursor"`
	}
	res.decode(&body)
	data["Events"] = body.Events
	if body.NextCursor != "" {
		data["Next"] = query("/console/events", "uid", filter["uid"], "task_id", filter["task_id"], "type", filter["type"],
			"cursor", body.NextCursor)
	}
	c.render(w, r, http.StatusOK, "events", "Events", data)
}

// scheduleDay is one day of an executor's schedule, its occurrences grouped in runs.
type scheduleDay struct {
	Day  string
	Runs []scheduleRun
}

// scheduleRun is one row of the schedule: occurrences of one task in a row at one
// spacing, with the same priority, claimed and remaining (a rotating task every 5
// minutes is one row a day, not 288).
type scheduleRun struct {
	TaskID, First, Last string
	// LocalFirst and LocalLast: a cron task's times on the wall clock of its Zone.
	LocalFirst, LocalLast, Zone string
	Count                       int
	Every                       time.Duration
	Priority, Claimed           any
	Remaining                   any
	last                        time.Time
}

// scheduleDays groups occurrences (in due order) by UTC day, and each day's
// occurrences of one task into runs: an occurrence joins its task's latest run of the
// day when its quota numbers match and it follows at the run's spacing.
func scheduleDays(occurrences []map[string]any) []scheduleDay {
	var days []scheduleDay
	var open map[string]int // task id → index of its latest run in the current day
	for _, o := range occurrences {
		due, _ := o["due_at"].(string)
		at, err := time.Parse(time.RFC3339, due)
		if err != nil {
			continue
		}
		d := at.UTC().Format("Monday 2 January")
		if len(days) == 0 || days[len(days)-1].Day != d {
			days = append(days, scheduleDay{Day: d})
			open = map[string]int{}
		}
		day := &days[len(days)-1]
		taskID := fmt.Sprint(o["task_id"])
		if i, ok := open[taskID]; ok {
			run := &day.Runs[i]
			step := at.Sub(run.last)
			same := fmt.Sprint(run.Priority, run.Claimed, run.Remaining) == fmt.Sprint(o["priority"], o["claimed"], o["remaining"])
			if same && step > 0 && (run.Count == 1 || step == run.Every) {
				run.Every, run.Last, run.last = step, due, at
				run.LocalLast = localClock(o)
				run.Count++
				continue
			}
		}
		zone, _ := o["time_zone"].(string)
		day.Runs = append(day.Runs, scheduleRun{TaskID: taskID, First: due, Last: due, Count: 1, last: at,
			LocalFirst: localClock(o), LocalLast: localClock(o), Zone: zone,
			Priority: o["priority"], Claimed: o["claimed"], Remaining: o["remaining"]})
		open[taskID] = len(day.Runs) - 1
	}
	return days
}

// localClock is a cron occurrence's local_time as a wall clock with its date ("Sun 25
// Oct 02:30 +02:00"), or "" for another task's.
func localClock(o map[string]any) string {
	s, _ := o["local_time"].(string)
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return ""
	}
	return t.Format("Mon 2 Jan 15:04 -07:00")
}

// Spacing is the run's spacing for people: "5 min", "1 h 30 min", "45 s".
func (r scheduleRun) Spacing() string {
	d := r.Every
	var parts []string
	if h := d / time.Hour; h > 0 {
		parts = append(parts, strconv.Itoa(int(h))+" h")
	}
	if m := d % time.Hour / time.Minute; m > 0 {
		parts = append(parts, strconv.Itoa(int(m))+" min")
	}
	if s := d % time.Minute / time.Second; s > 0 || len(parts) == 0 {
		parts = append(parts, strconv.Itoa(int(s))+" s")
	}
	return strings.Join(parts, " ")
}
