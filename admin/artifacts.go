package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/config"
)

// Software artifacts, for admins: upload one (the body is the file's bytes), list them,
// read one, delete one that no task uses.

// ArtifactService keeps artifacts (package artifact).
type ArtifactService interface {
	Upload(ctx context.Context, actor, filename string, body io.Reader, size int64) (taskd.Artifact, error)
	Lookup(ctx context.Context, id int64) (taskd.Artifact, error)
	List(ctx context.Context, before int64, limit int) ([]taskd.Artifact, error)
	Delete(ctx context.Context, actor string, id int64) error
}

// Artifacts serves the artifact endpoints.
type Artifacts struct {
	svc ArtifactService
	h   *Handlers
	// uploadTotal bounds one upload's reading in all.
	uploadTotal time.Duration
}

// DefaultArtifactUploadTimeout is DISPATCH_ARTIFACT_UPLOAD_TIMEOUT's default.
const DefaultArtifactUploadTimeout = time.Hour

// NewArtifacts returns the artifact endpoints over svc; an upload is read within
// uploadTotal in all (zero or less: DefaultArtifactUploadTimeout), and given up when
// nothing comes for 30 seconds.
func NewArtifacts(svc ArtifactService, h *Handlers, uploadTotal time.Duration) *Artifacts {
	if uploadTotal <= 0 {
		uploadTotal = DefaultArtifactUploadTimeout
	}
	return &Artifacts{svc: svc, h: h, uploadTotal: uploadTotal}
}

// UploadArtifact is POST /v1/admin/artifacts?filename=NAME: the body is the file's
// bytes (any Content-Type), streamed to the artifact storage as it arrives, the
// reply the new artifact (201). A body over the limit is a 413; one cut off, or that
// sends nothing for 30 s, a 400; either way nothing is kept.
func (as *Artifacts) UploadArtifact() http.Handler {
	return as.h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		q := r.URL.Query()
		if err := known(q, "filename"); err != nil {
			return 0, nil, err
		}
		if !q.Has("filename") {
			return 0, nil, taskd.Errorf(taskd.CodeInvalid, "filename: required, as a query parameter (POST /v1/admin/artifacts?filename=NAME with the bytes as the body)")
		}
		body := &idleReader{r: r.Body, rc: http.NewResponseController(w), end: time.Now().Add(as.uploadTotal)}
		a, err := as.svc.Upload(r.Context(), ActorFrom(r.Context()), q.Get("filename"), body, r.ContentLength)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(body.end):
			err = taskd.Errorf(taskd.CodeInvalid, "upload: not received within %s (DISPATCH_ARTIFACT_UPLOAD_TIMEOUT); nothing was kept",
				config.FormatDuration(as.uploadTotal))
		case errors.Is(err, os.ErrDeadlineExceeded):
			err = taskd.Errorf(taskd.CodeInvalid, "upload: nothing came for %s; nothing was kept", uploadIdle)
		}
		if err != nil {
			// The rest of the body is not read: the connection cannot carry another
			// request.
			w.Header().Set("Connection", "close")
			return 0, nil, err
		}
		w.Header().Set("Location", "/v1/admin/artifacts/"+strconv.FormatInt(a.ID, 10))
		return http.StatusCreated, a, nil
	})
}

// ListArtifacts is GET /v1/admin/artifacts?limit=&cursor=, newest first.
func (as *Artifacts) ListArtifacts() http.Handler {
	return as.h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		q := r.URL.Query()
		if err := known(q, "limit", "cursor"); err != nil {
			return 0, nil, err
		}
		limit, err := queryLimit(q)
		if err != nil {
			return 0, nil, err
		}
		before, err := idCursor(q)
		if err != nil {
			return 0, nil, err
		}
		list, err := as.svc.List(r.Context(), before, limit+1)
		if err != nil {
			return 0, nil, err
		}
		next := ""
		if len(list) > limit {
			list = list[:limit]
			next = encodeCursor(strconv.FormatInt(list[limit-1].ID, 10))
		}
		return http.StatusOK, map[string]any{"artifacts": list, "next_cursor": next}, nil
	})
}

// GetArtifact is GET /v1/admin/artifacts/{id}.
func (as *Artifacts) GetArtifact() http.Handler {
	return as.h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		id, err := pathID(r, "id")
		if err != nil {
			return 0, nil, err
		}
		a, err := as.svc.Lookup(r.Context(), id)
		return http.StatusOK, a, err
	})
}

// DeleteArtifact is DELETE /v1/admin/artifacts/{id} (204; 409 conflict, naming the
// tasks, while a task not deleted names the artifact in its params).
func (as *Artifacts) DeleteArtifact() http.Handler {
	return as.h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		id, err := pathID(r, "id")
		if err != nil {
			return 0, nil, err
		}
		return http.StatusNoContent, nil, as.svc.Delete(r.Context(), ActorFrom(r.Context()), id)
	})
}
