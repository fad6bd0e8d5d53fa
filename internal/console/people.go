package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/taskpull/taskd"
)

// ---- groups and their members ----

// groups lists the groups (members and tasks of each), or shows one group's members.
func (c *Console) groups(w http.ResponseWriter, r *http.Request) {
	c.groupPage(w, r, http.StatusOK, strings.TrimSpace(r.URL.Query().Get("gid")), map[string]any{"Empty": r.URL.Query().Get("empty") == "1"})
}

func (c *Console) groupPage(w http.ResponseWriter, r *http.Request, status int, gid string, data map[string]any) {
	if gid != "" && !taskd.ValidID(gid) {
		data["Error"] = "A group id is 1 to 64 letters, digits, - or _, without the gid_ prefix."
		c.render(w, r, http.StatusBadRequest, "groups", "Groups", data)
		return
	}
	data["Gid"] = gid
	if gid == "" {
		cursor := r.URL.Query().Get("cursor")
		res, ok := c.api(w, r, http.MethodGet, query("/v1/admin/groups", "limit", strconv.Itoa(pageSize), "cursor", cursor), nil)
		if !ok {
			return
		}
		if !res.ok() {
			data["Error"] = res.message()
		} else {
			var body struct {
				Groups     []map[string]any
				NextCursor string `json:"next_cursor"`
			}
			res.decode(&body)
			for _, g := range body.Groups {
				// A group with tasks and no members: its tasks go nowhere.
				g["nowhere"] = fmt.Sprint(g["members"]) == "0" && fmt.Sprint(g["tasks"]) != "0"
			}
			data["Groups"] = body.Groups
			if body.NextCursor != "" {
				data["Next"] = query("/console/groups", "cursor", body.NextCursor)
			}
		}
	} else {
		// The group itself (its rule, if dynamic); a gid nobody used yet is a new group.
		res, ok := c.api(w, r, http.MethodGet, "/v1/admin/groups/"+url.PathEscape(gid), nil)
		if !ok {
			return
		}
		switch {
		case res.ok():
			var g map[string]any
			res.decode(&g)
			data["Group"] = g
		case res.status != http.StatusNotFound:
			data["Error"] = res.message()
		}
		res, ok = c.api(w, r, http.MethodGet, "/v1/admin/groups/"+url.PathEscape(gid)+"/members", nil)
		if !ok {
			return
		}
		if !res.ok() {
			data["Error"] = res.message()
		} else {
			var body struct{ UIDs []string }
			res.decode(&body)
			data["Members"] = body.UIDs
		}
	}
	c.render(w, r, status, "groups", "Groups", data)
}

// setRule makes a group dynamic, or changes its rule.
func (c *Console) setRule(w http.ResponseWriter, r *http.Request) {
	gid := chi.URLParam(r, "gid")
	rule := map[string]any{}
	for _, k := range []string{"selector", "agent_version"} {
		if v := strings.TrimSpace(r.PostFormValue(k)); v != "" {
			rule[k] = v
		}
	}
	res, ok := c.api(w, r, http.MethodPut, "/v1/admin/groups/"+url.PathEscape(gid), rule)
	if !ok {
		return
	}
	if !res.ok() {
		c.groupPage(w, r, res.status, gid, map[string]any{"RuleError": res.message(),
			"Selector": r.PostFormValue("selector"), "AgentVersion": r.PostFormValue("agent_version")})
		return
	}
	var g struct{ Members int }
	res.decode(&g)
	empty := ""
	if g.Members == 0 {
		empty = "1" // the page says so: the reply's empty_group warning
	}
	http.Redirect(w, r, query("/console/groups", "gid", gid, "empty", empty), http.StatusSeeOther)
}

// deleteGroup removes a group's members and rule.
func (c *Console) deleteGroup(w http.ResponseWriter, r *http.Request) {
	gid := chi.URLParam(r, "gid")
	res, ok := c.api(w, r, http.MethodDelete, "/v1/admin/groups/"+url.PathEscape(gid), nil)
	if !ok {
		return
	}
	if !res.ok() {
		c.groupPage(w, r, res.status, gid, map[string]any{"Error": "gid_" + gid + " was not deleted: " + res.message()})
		return
	}
	http.Redirect(w, r, "/console/groups", http.StatusSeeOther)
}

// splitIDs reads ids separated by commas, spaces or new lines.
func splitIDs(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
}

func (c *Console) addMembers(w http.ResponseWriter, r *http.Request) {
	gid := chi.URLParam(r, "gid")
	uids := splitIDs(r.PostFormValue("uids"))
	res, ok := c.api(w, r, http.MethodPost, "/v1/admin/groups/"+url.PathEscape(gid)+"/members", map[string]any{"uids": uids})
	if !ok {
		return
	}
	if !res.ok() {
		c.groupPage(w, r, res.status, gid, map[string]any{"UIDsError": res.message(), "UIDs": r.PostFormValue("uids")})
		return
	}
	http.Redirect(w, r, query("/console/groups", "gid", gid), http.StatusSeeOther)
}

func (c *Console) removeMember(w http.ResponseWriter, r *http.Request) {
	gid, uid := chi.URLParam(r, "gid"), chi.URLParam(r, "uid")
	res, ok := c.api(w, r, http.MethodDelete, "/v1/admin/groups/"+url.PathEscape(gid)+"/members/"+url.PathEscape(uid), nil)
	if !ok {
		return
	}
	if !res.ok() {
		c.groupPage(w, r, res.status, gid, map[string]any{"Error": "User " + uid + " was not removed: " + res.message()})
		return
	}
	http.Redirect(w, r, query("/console/groups", "gid", gid), http.StatusSeeOther)
}

// ---- clients: their keys ----

// issuedCookie hands a newly issued client key from the POST that issued it to the
// page it redirects to, once: reloading that page shows it no more and issues nothing.
const issuedCookie = "taskd_console_issued"

// notSeen are the choices of the fleet page's "not seen for" filter.
var notSeen = []struct{ Value, Label string }{{"", "any time"}, {"5m", "5 minutes"}, {"1h", "1 hour"}, {"24h", "24 hours"}}

// clients is the fleet (every client, filtered and paged), or one client's page when
// uid is given.
func (c *Console) clients(w http.ResponseWriter, r *http.Request) {
	uid := strings.TrimSpace(r.URL.Query().Get("uid"))
	if uid == "" {
		c.fleet(w, r)
		return
	}
	if !taskd.ValidID(uid) {
		c.render(w, r, http.StatusBadRequest, "clients", "Clients", map[string]any{
			"Error": "A user id is 1 to 64 letters, digits, - or _, without the uid_ prefix."})
		return
	}
	data := map[string]any{"UID": uid, "Revoked": r.URL.Query().Get("revoked") == "1", "Saved": r.URL.Query().Get("saved") == "1"}
	if ck, err := r.Cookie(issuedCookie); err == nil {
		if owner, key, ok := strings.Cut(ck.Value, " "); ok && owner == uid {
			data["Key"] = key
		}
		setCookie(w, r, issuedCookie, "", "/console/clients", -1)
	}
	c.clientPage(w, r, http.StatusOK, uid, data)
}

// clientPage shows one client: its agent and last poll, its settings (max_in_flight,
// editable), its keys and its latest dispatches.
func (c *Console) clientPage(w http.ResponseWriter, r *http.Request, status int, uid string, data map[string]any) {
	data["UID"] = uid
	var setting map[string]any
	if !c.fetch(w, r, "/v1/admin/clients/"+url.PathEscape(uid), &setting) {
		return
	}
	data["Setting"] = setting
	if _, set := data["MaxInFlight"]; !set {
		data["MaxInFlight"] = fmt.Sprint(setting["max_in_flight"])
	}
	var dispatches struct{ Dispatches []map[string]any }
	if !c.fetch(w, r, query("/v1/admin/dispatches", "uid", uid, "limit", "20"), &dispatches) {
		return
	}
	data["Dispatches"] = dispatches.Dispatches
	c.render(w, r, status, "clients", "Clients", data)
}

// fleet lists every client with its last poll, keys, open dispatches and agent,
// filtered by group, label and how long it has not been seen, in pages.
func (c *Console) fleet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filter := map[string]string{}
	for _, k := range []string{"group", "label", "selector", "not_seen", "cursor"} {
		filter[k] = strings.TrimSpace(q.Get(k))
	}
	data := map[string]any{"Filter": filter, "NotSeen": notSeen}
	seenBefore := ""
	if filter["not_seen"] != "" {
		d, err := time.ParseDuration(filter["not_seen"])
		if err != nil || d <= 0 {
			data["Error"] = "Not seen for: choose one of the durations offered."
			c.render(w, r, http.StatusBadRequest, "fleet", "Clients", data)
			return
		}
		seenBefore = c.sessions.clock.Now().UTC().Add(-d).Format(time.RFC3339)
	}
	res, ok := c.api(w, r, http.MethodGet, query("/v1/admin/clients", "group", filter["group"], "label", filter["label"],
		"selector", filter["selector"], "seen_before", seenBefore, "limit", strconv.Itoa(pageSize), "cursor", filter["cursor"]), nil)
	if !ok {
		return
	}
	if !res.ok() {
		data["Error"] = res.message()
		c.render(w, r, res.status, "fleet", "Clients", data)
		return
	}
	var body struct {
		Clients    []map[string]any
		NextCursor string `json:"next_cursor"`
	}
	res.decode(&body)
	data["Clients"] = body.Clients
	if body.NextCursor != "" {
		data["Next"] = query("/console/clients", "group", filter["group"], "label", filter["label"],
			"selector", filter["selector"], "not_seen", filter["not_seen"], "cursor", body.NextCursor)
	}
	c.render(w, r, http.StatusOK, "fleet", "Clients", data)
}

// setMaxInFlight is the client page's settings form.
func (c *Console) setMaxInFlight(w http.ResponseWriter, r *http.Request) {
	uid := chi.URLParam(r, "uid")
	raw := strings.TrimSpace(r.PostFormValue("max_in_flight"))
	n, err := strconv.Atoi(raw)
	if err != nil {
		c.clientPage(w, r, http.StatusBadRequest, uid, map[string]any{"MaxInFlight": raw,
			"MaxInFlightError": "A whole number, 1 to 100."})
		return
	}
	res, ok := c.api(w, r, http.MethodPut, "/v1/admin/clients/"+url.PathEscape(uid), map[string]any{"max_in_flight": n})
	if !ok {
		return
	}
	if !res.ok() {
		c.clientPage(w, r, res.status, uid, map[string]any{"MaxInFlight": raw, "MaxInFlightError": res.message()})
		return
	}
	http.Redirect(w, r, query("/console/clients", "uid", uid, "saved", "1"), http.StatusSeeOther)
}

// issueKey issues a client key and shows it, once: the server keeps only its hash.
func (c *Console) issueKey(w http.ResponseWriter, r *http.Request) {
	uid := chi.URLParam(r, "uid")
	res, ok := c.change(w, r, http.MethodPost, "/v1/admin/clients/"+url.PathEscape(uid)+"/keys", nil,
		"clients", "Clients", map[string]any{"UID": uid})
	if !ok {
		return
	}
	var body struct {
		ClientKey string `json:"client_key"`
	}
	res.decode(&body)
	setCookie(w, r, issuedCookie, uid+" "+body.ClientKey, "/console/clients", 60)
	http.Redirect(w, r, query("/console/clients", "uid", uid), http.StatusSeeOther)
}

func (c *Console) revokeKeys(w http.ResponseWriter, r *http.Request) {
	uid := chi.URLParam(r, "uid")
	if _, ok := c.change(w, r, http.MethodDelete, "/v1/admin/clients/"+url.PathEscape(uid)+"/keys", nil,
		"clients", "Clients", map[string]any{"UID": uid}); !ok {
		return
	}
	http.Redirect(w, r, query("/console/clients", "uid", uid, "revoked", "1"), http.StatusSeeOther)
}
