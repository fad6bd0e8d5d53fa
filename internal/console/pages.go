package console

import (
	"encoding/json"
	"net/http"
	"slices"
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
		res, ok := c.api(w, r, http.MethodGet, query("/v1/admin/stats", "from", from.Format(time.RFC3339)), nil)
		if !ok {
			return nil, false
		}
		var body struct{ Tasks []map[string]any }
		res.decode(&body)
		sum := map[string]float64{}
		for _, t := range body.Tasks {
			for _, k := range []string{"dispatched", "completed", "failed", "expired", "redo"} {
				n, _ := t[k].(float64)
				sum[k] += n
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
	c.render(w, r, http.StatusOK, "dashboard", "Dashboard", map[string]any{"Hour": hour, "Day": day, "Now": now})
}

// ---- templates ----

func (c *Console) templates(w http.ResponseWriter, r *http.Request) {
	c.templatesPage(w, r, http.StatusOK, map[string]any{})
}

func (c *Console) templatesPage(w http.ResponseWriter, r *http.Request, status int, data map[string]any) {
	res, ok := c.api(w, r, http.MethodGet, "/v1/admin/templates", nil)
	if !ok {
		return
	}
	var body struct{ Templates []map[string]any }
	res.decode(&body)
	data["Templates"] = body.Templates
	if _, set := data["Schema"]; !set {
		data["Schema"] = "{\n  \"type\": \"object\",\n  \"required\": [\"url\"],\n  \"properties\": {\n    \"url\": {\"type\": \"string\", \"title\": \"URL\"}\n  }\n}"
	}
	c.render(w, r, status, "templates", "Templates", data)
}

func (c *Console) createTemplate(w http.ResponseWriter, r *http.Request) {
	name, schema := strings.TrimSpace(r.PostFormValue("name")), r.PostFormValue("schema")
	form := map[string]any{"Name": name, "Schema": schema}
	var parsed json.RawMessage
	if err := json.Unmarshal([]byte(schema), &parsed); err != nil {
		form["SchemaError"] = "Not JSON: " + err.Error()
		c.templatesPage(w, r, http.StatusBadRequest, form)
		return
	}
	res, ok := c.api(w, r, http.MethodPost, "/v1/admin/templates", map[string]any{"name": name, "schema": parsed})
	if !ok {
		return
	}
	if !res.ok() {
		msg := res.message()
		if strings.HasPrefix(msg, "name") {
			form["NameError"] = msg
		} else {
			form["SchemaError"] = msg
		}
		c.templatesPage(w, r, res.status, form)
		return
	}
	http.Redirect(w, r, "/console/templates", http.StatusSeeOther)
}

func (c *Console) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	res, ok := c.api(w, r, http.MethodDelete, "/v1/admin/templates/"+chi.URLParam(r, "id"), nil)
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
	data["Tasks"] = body.Tasks
	if body.NextCursor != "" {
		data["Next"] = query("/console/tasks", "executor", filter["executor"], "kind", filter["kind"],
			"status", filter["status"], "template_id", filter["template_id"], "cursor", body.NextCursor)
	}
	c.render(w, r, http.StatusOK, "tasks", "Tasks", data)
}

func (c *Console) task(w http.ResponseWriter, r *http.Request) {
	res, ok := c.api(w, r, http.MethodGet, "/v1/admin/tasks/"+chi.URLParam(r, "kind")+"/"+chi.URLParam(r, "id"), nil)
	if !ok {
		return
	}
	if !res.ok() {
		c.render(w, r, res.status, "error", "Task", map[string]any{"Message": res.message()})
		return
	}
	var t map[string]any
	res.decode(&t)
	c.render(w, r, http.StatusOK, "task", "Task "+chi.URLParam(r, "kind")+":"+chi.URLParam(r, "id"), map[string]any{"Task": t})
}

// newTask is the form of a new task; its fields are the API's.
func (c *Console) newTask(w http.ResponseWriter, r *http.Request) {
	c.taskForm(w, r, http.StatusOK, map[string]any{
		"Form": map[string]string{"kind": "once", "template_id": r.URL.Query().Get("template"), "priority": "5",
			"dispatch_times": "1", "mode": "once_per_user", "start_time": inputTime(time.Now().Add(time.Minute)),
			"params": "{}"},
	})
}

func (c *Console) taskForm(w http.ResponseWriter, r *http.Request, status int, data map[string]any) {
	res, ok := c.api(w, r, http.MethodGet, "/v1/admin/templates", nil)
	if !ok {
		return
	}
	var body struct{ Templates []map[string]any }
	res.decode(&body)
	data["Templates"] = body.Templates
	c.render(w, r, status, "newtask", "New task", data)
}

// taskFields are the form fields of a task, in the API's names.
var taskFields = []string{"kind", "executor", "start_time", "template_id", "params", "priority",
	"dispatch_times", "mode", "status", "space_minutes", "end_time", "lease_seconds", "max_attempts"}

func (c *Console) createTask(w http.ResponseWriter, r *http.Request) {
	form := map[string]string{}
	for _, k := range taskFields {
		form[k] = strings.TrimSpace(r.PostFormValue(k))
	}
	errs := map[string]string{}
	body := map[string]any{"executor": form["executor"], "mode": form["mode"]}
	if form["status"] != "" {
		body["status"] = form["status"]
	}
	for _, k := range []string{"start_time", "end_time"} {
		if form[k] == "" {
			continue
		}
		t, err := time.Parse("2006-01-02T15:04", form[k])
		if err != nil {
			errs[k] = "Enter a date and time (UTC)."
			continue
		}
		body[k] = t.UTC().Format(time.RFC3339)
	}
	for _, k := range []string{"template_id", "priority", "dispatch_times", "space_minutes", "lease_seconds", "max_attempts"} {
		if form[k] == "" {
			continue
		}
		n, err := strconv.ParseInt(form[k], 10, 64)
		if err != nil {
			errs[k] = "Enter a whole number."
			continue
		}
		body[k] = n
	}
	var params json.RawMessage
	if err := json.Unmarshal([]byte(form["params"]), &params); err != nil {
		errs["params"] = "Not JSON: " + err.Error()
	} else {
		body["params"] = params
	}
	data := map[string]any{"Form": form, "Errors": errs}
	if len(errs) > 0 {
		c.taskForm(w, r, http.StatusBadRequest, data)
		return
	}
	kind := form["kind"]
	if kind != "rotate" {
		kind = "once"
	}
	res, ok := c.api(w, r, http.MethodPost, "/v1/admin/tasks/"+kind, body)
	if !ok {
		return
	}
	if !res.ok() {
		fieldErrors(res, errs)
		c.taskForm(w, r, res.status, data)
		return
	}
	var t struct {
		Kind string
		ID   int64
	}
	res.decode(&t)
	http.Redirect(w, r, "/console/tasks/"+t.Kind+"/"+strconv.FormatInt(t.ID, 10), http.StatusSeeOther)
}

// fieldErrors puts an API error next to the field it names: a 422's schema errors at
// params (with the place in the params each concerns), a 400's "field: ..." at that
// field, anything else above the form.
func fieldErrors(res result, errs map[string]string) {
	var e apiError
	json.Unmarshal(res.body, &e)
	if e.Error.Code == "params_invalid" {
		var out struct {
			Errors []struct {
				InstanceLocation string `json:"instanceLocation"`
				Error            string `json:"error"`
			} `json:"errors"`
		}
		json.Unmarshal(e.Error.Details, &out)
		var lines []string
		for _, d := range out.Errors {
			at := d.InstanceLocation
			if at == "" {
				at = "(the params)"
			}
			lines = append(lines, at+": "+d.Error)
		}
		if len(lines) == 0 {
			lines = append(lines, e.Error.Message)
		}
		errs["params"] = strings.Join(lines, "; ")
		return
	}
	msg := res.message()
	if field, rest, ok := strings.Cut(msg, ":"); ok && slices.Contains(taskFields, field) {
		errs[field] = strings.TrimSpace(rest)
		return
	}
	errs["form"] = msg
}

// setStatus pauses or resumes a task (a merge patch of its status).
func (c *Console) setStatus(w http.ResponseWriter, r *http.Request) {
	path := "/v1/admin/tasks/" + chi.URLParam(r, "kind") + "/" + chi.URLParam(r, "id")
	status := r.PostFormValue("status")
	res, ok := c.api(w, r, http.MethodPatch, path, map[string]any{"status": status})
	if !ok {
		return
	}
	if !res.ok() {
		c.render(w, r, res.status, "error", "Task", map[string]any{"Message": res.message()})
		return
	}
	http.Redirect(w, r, "/console/tasks/"+chi.URLParam(r, "kind")+"/"+chi.URLParam(r, "id"), http.StatusSeeOther)
}

func (c *Console) deleteTask(w http.ResponseWriter, r *http.Request) {
	res, ok := c.api(w, r, http.MethodDelete, "/v1/admin/tasks/"+chi.URLParam(r, "kind")+"/"+chi.URLParam(r, "id"), nil)
	if !ok {
		return
	}
	if !res.ok() {
		c.render(w, r, res.status, "error", "Task", map[string]any{"Message": res.message()})
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
	var body struct{ Occurrences []map[string]any }
	res.decode(&body)
	type day struct {
		Day         string
		Occurrences []map[string]any
	}
	var days []day
	for _, o := range body.Occurrences {
		at, _ := time.Parse(time.RFC3339, o["due_at"].(string))
		d := at.UTC().Format("Monday 2 January")
		if len(days) == 0 || days[len(days)-1].Day != d {
			days = append(days, day{Day: d})
		}
		days[len(days)-1].Occurrences = append(days[len(days)-1].Occurrences, o)
	}
	data["Days"], data["Count"] = days, len(body.Occurrences)
	c.render(w, r, http.StatusOK, "schedule", "Schedule of "+executor, data)
}

// ---- audit and events ----

func (c *Console) audit(w http.ResponseWriter, r *http.Request) {
	cursor := r.URL.Query().Get("cursor")
	res, ok := c.api(w, r, http.MethodGet, query("/v1/admin/audit", "limit", strconv.Itoa(pageSize), "cursor", cursor), nil)
	if !ok {
		return
	}
	var body struct {
		Entries    []map[string]any
		NextCursor string `json:"next_cursor"`
	}
	res.decode(&body)
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
