package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/taskpull/taskd"
)

// ---- groups and their members ----

// groups shows one group's members (the API lists members by group; groups exist
// through their members and their tasks).
func (c *Console) groups(w http.ResponseWriter, r *http.Request) {
	c.groupPage(w, r, http.StatusOK, strings.TrimSpace(r.URL.Query().Get("gid")), map[string]any{})
}

func (c *Console) groupPage(w http.ResponseWriter, r *http.Request, status int, gid string, data map[string]any) {
	if gid != "" && !taskd.ValidID(gid) {
		data["Error"] = "A group id is 1 to 64 letters, digits, - or _, without the gid_ prefix."
		c.render(w, r, http.StatusBadRequest, "groups", "Groups", data)
		return
	}
	data["Gid"] = gid
	if gid != "" {
		res, ok := c.api(w, r, http.MethodGet, "/v1/admin/groups/"+url.PathEscape(gid)+"/members", nil)
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

func (c *Console) clients(w http.ResponseWriter, r *http.Request) {
	uid := strings.TrimSpace(r.URL.Query().Get("uid"))
	if uid != "" && !taskd.ValidID(uid) {
		c.render(w, r, http.StatusBadRequest, "clients", "Clients", map[string]any{
			"Error": "A user id is 1 to 64 letters, digits, - or _, without the uid_ prefix."})
		return
	}
	data := map[string]any{"UID": uid, "Revoked": r.URL.Query().Get("revoked") == "1"}
	if ck, err := r.Cookie(issuedCookie); err == nil {
		if owner, key, ok := strings.Cut(ck.Value, " "); ok && owner == uid {
			data["Key"] = key
		}
		setCookie(w, r, issuedCookie, "", "/console/clients", -1)
	}
	c.render(w, r, http.StatusOK, "clients", "Clients", data)
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
