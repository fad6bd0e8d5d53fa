package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/taskpull/taskd"
)

// Artifacts: the list (newest first, a page at a time), an upload form whose file is
// streamed to the API as it arrives, an artifact's page with its hashes, and a delete
// after confirming, refused with the API's message (naming the tasks) while a task
// names the artifact.

// artifactList is the API's page of artifacts.
type artifactList struct {
	Artifacts  []taskd.Artifact `json:"artifacts"`
	NextCursor string           `json:"next_cursor"`
}

func (c *Console) artifacts(w http.ResponseWriter, r *http.Request) {
	c.artifactsPage(w, r, http.StatusOK, map[string]any{})
}

// artifactsPage shows a page of the list (at the cursor the URL names) and the upload
// form, with data (an error, what was just uploaded).
func (c *Console) artifactsPage(w http.ResponseWriter, r *http.Request, status int, data map[string]any) {
	cursor := r.URL.Query().Get("cursor")
	var list artifactList
	if !c.fetch(w, r, query("/v1/admin/artifacts", "limit", strconv.Itoa(pageSize), "cursor", cursor), &list) {
		return
	}
	data["Artifacts"] = list.Artifacts
	if list.NextCursor != "" {
		data["Next"] = query("/console/artifacts", "cursor", list.NextCursor)
	}
	if id := r.URL.Query().Get("uploaded"); id != "" && r.Method == http.MethodGet {
		// Just uploaded: said from the record (the redirect carries no text a link
		// could forge).
		res, ok := c.api(w, r, http.MethodGet, "/v1/admin/artifacts/"+url.PathEscape(id), nil)
		if !ok {
			return
		}
		var a taskd.Artifact
		if res.ok() && res.decode(&a) == nil {
			data["Uploaded"] = a
		}
	}
	c.render(w, r, status, "artifacts", "Artifacts", data)
}

// uploadArtifact sends the upload form's file to the API as the browser sends it: the
// console keeps none of it, and the API bounds its size (413 too_large) and its pace,
// and keeps nothing of an upload it refuses.
func (c *Console) uploadArtifact(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, msg string) {
		c.artifactsPage(w, r, status, map[string]any{"Error": msg})
	}
	parts := formParts(r)
	if parts == nil {
		fail(http.StatusBadRequest, "Not uploaded: upload the file with the form on this page.")
		return
	}
	file, err := parts.NextPart()
	if err != nil || file.FormName() != "file" || file.FileName() == "" {
		fail(http.StatusBadRequest, "Not uploaded: choose a file.")
		return
	}
	req, ok := c.newCall(r, currentSession(r).token, http.MethodPost,
		query("/v1/admin/artifacts", "filename", file.FileName()), file)
	if !ok {
		fail(http.StatusBadRequest, "Not uploaded: the file's name cannot be sent.")
		return
	}
	req.ContentLength = -1 // the part's length is known once it has all come
	req.Header.Set("Content-Type", "application/octet-stream")
	res := c.roundTrip(req, w)
	if !c.accepted(w, r, res) {
		return
	}
	if !res.ok() {
		// The rest of a refused upload is not read: net/http reads at most 256 KiB
		// more after this reply, then closes the connection, and the browser shows the
		// reply though its upload was cut short (the browser test's upload over the
		// limit).
		fail(res.status, "Not uploaded: "+res.message())
		return
	}
	var a taskd.Artifact
	if err := res.decode(&a); err != nil {
		fail(http.StatusInternalServerError, "Uploaded, but the server's reply could not be read: "+err.Error())
		return
	}
	http.Redirect(w, r, "/console/artifacts?uploaded="+strconv.FormatInt(a.ID, 10), http.StatusSeeOther)
}

// artifact is an artifact's page: its size and whole hashes.
func (c *Console) artifact(w http.ResponseWriter, r *http.Request) {
	var a taskd.Artifact
	if !c.fetch(w, r, "/v1/admin/artifacts/"+url.PathEscape(chi.URLParam(r, "id")), &a) {
		return
	}
	c.render(w, r, http.StatusOK, "artifact", "Artifact "+a.Filename, map[string]any{"Artifact": a})
}

// confirmDeleteArtifact asks before an artifact is deleted: its bytes go for good.
func (c *Console) confirmDeleteArtifact(w http.ResponseWriter, r *http.Request) {
	var a taskd.Artifact
	if !c.fetch(w, r, "/v1/admin/artifacts/"+url.PathEscape(chi.URLParam(r, "id")), &a) {
		return
	}
	id := strconv.FormatInt(a.ID, 10)
	c.render(w, r, http.StatusOK, "confirm", "Delete artifact "+a.Filename+"?", map[string]any{
		"Action": "/console/artifacts/" + id + "/delete",
		"Back":   "/console/artifacts/" + id,
		"Button": "Delete artifact " + a.Filename,
		"Text": "Artifact " + id + " (" + a.Filename + ", " + humanSize(a.Size) + ") and its bytes are deleted for good. " +
			"While a task that is not deleted names it in its deployment, it is not deleted.",
	})
}

// deleteArtifact deletes an artifact; one in use is refused, with the tasks that name
// it.
func (c *Console) deleteArtifact(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	res, ok := c.api(w, r, http.MethodDelete, "/v1/admin/artifacts/"+url.PathEscape(id), nil)
	if !ok {
		return
	}
	if !res.ok() {
		data := map[string]any{"Error": "Artifact " + id + " was not deleted: " + res.message()}
		var e apiError
		var details struct{ Tasks []string }
		if json.Unmarshal(res.body, &e) == nil && len(e.Error.Details) > 0 && json.Unmarshal(e.Error.Details, &details) == nil {
			data["InUse"] = details.Tasks
		}
		c.artifactsPage(w, r, res.status, data)
		return
	}
	http.Redirect(w, r, "/console/artifacts", http.StatusSeeOther)
}

// humanSize is a size in bytes for people: "512 B", "4.0 KiB", "1.5 GiB".
func humanSize(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f, i := float64(n)/1024, 0
	// 1023.96 KiB shows as 1.0 MiB, not 1024.0 KiB.
	for f >= 1023.95 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + units[i]
}

// shortHash is the start of a hex digest, enough to tell artifacts apart at a glance.
func shortHash(h string) string {
	if len(h) <= 12 {
		return h
	}
	return h[:12] + "…"
}

// taskLink is the console's page of task key "kind:id".
func taskLink(key string) string {
	kind, id, _ := strings.Cut(key, ":")
	return "/console/tasks/" + url.PathEscape(kind) + "/" + url.PathEscape(id)
}
