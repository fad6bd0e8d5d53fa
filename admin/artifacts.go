package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/config"
)

// Software artifacts, for admins: upload one (the body is the file's bytes), list them,
// read one, delete one that no task uses.

// ArtifactService keeps artifacts (package artifact).
type ArtifactService interface {
	Upload(ctx context.Context, actor, filename string, body io.Reader, size int64) (taskd.Artifact, error)
	// Receive stores and hashes an upload's bytes without its record; Keep writes the
	// record (removing the bytes when it cannot); Discard removes received bytes.
	// Digest hashes an upload's body within the same limits, storing nothing.
	Receive(ctx context.Context, filename string, body io.Reader, size int64) (taskd.Artifact, error)
	Keep(ctx context.Context, actor string, a taskd.Artifact) (taskd.Artifact, error)
	Discard(ctx context.Context, a taskd.Artifact)
	Digest(ctx context.Context, filename string, body io.Reader, size int64) (taskd.Hashes, int64, error)
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
	// idem keeps the uploads' Idempotency-Keys; nil: an upload takes none
	// (WithIdempotency).
	idem  IdempotencyStore
	clock clock.Clock
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

// WithIdempotency has uploads take an Idempotency-Key, kept in st (UploadArtifact).
func (as *Artifacts) WithIdempotency(st IdempotencyStore, clk clock.Clock) *Artifacts {
	as.idem, as.clock = sealed{st}, clk
	return as
}

// UploadArtifact is POST /v1/admin/artifacts?filename=NAME: the body is the file's
// bytes (any Content-Type), streamed to the artifact storage as it arrives, the
// reply the new artifact (201). A body over the limit is a 413; one cut off, or that
// sends nothing for 30 s, a 400; either way nothing is kept.
//
// It takes an Idempotency-Key as the creates do (idempotency.go), within the same 24 h
// and per admin token, but its body, up to gigabytes, is not kept to be compared: it is
// hashed as it streams, and what two uploads under one key must share is their method,
// path and query (the filename) and the bytes' SHA-256 and length (uploadHash). The key
// is settled once the bytes are stored, before the record is written: a key the upload
// may use (unused, expired, abandoned) keeps the new artifact and its reply; a key
// whose upload succeeded with the same hash answers that reply again (201, its body
// and Location, Idempotent-Replayed: true), and the bytes just stored are removed: no
// second artifact, no second audit entry; a key used for another request (other bytes,
// another filename, another route) is a 422, the bytes removed too. Uploads under one
// key at once each store their bytes and settle one at a time: the first keeps its
// artifact, the others (waiting up to 5 s for its settling, else a 409) answer its
// reply and remove theirs. When the key holds a reply already as the upload begins, the
// body is only hashed, never stored.
func (as *Artifacts) UploadArtifact() http.Handler {
	plain := as.h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		filename, err := uploadName(r.URL.Query())
		if err != nil {
			return 0, nil, err
		}
		body := as.body(w, r)
		a, err := as.svc.Upload(r.Context(), ActorFrom(r.Context()), filename, body, r.ContentLength)
		if err := as.readErr(w, body, err); err != nil {
			return 0, nil, err
		}
		return created(w, a)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, given, err := requestKey(r)
		switch {
		case !given || as.idem == nil:
			plain.ServeHTTP(w, r)
		case err != nil:
			as.h.fail(w, r, err)
		default:
			as.uploadOnce(w, r, key)
		}
	})
}

// uploadOnce is an upload with Idempotency-Key key (see UploadArtifact).
func (as *Artifacts) uploadOnce(w http.ResponseWriter, r *http.Request, key string) {
	ctx := r.Context()
	filename, err := uploadName(r.URL.Query())
	if err != nil {
		as.h.fail(w, r, err)
		return
	}
	body := as.body(w, r)
	kept, err := as.idem.KeptReply(ctx, ActorFrom(ctx), key, as.clock.Now().UTC(), IdempotencyWindow)
	if err != nil {
		as.h.fail(w, r, err)
		return
	}
	if kept != nil {
		// Most likely sent again after a lost reply: compare without storing.
		hashes, n, err := as.svc.Digest(ctx, filename, body, r.ContentLength)
		if err := as.readErr(w, body, err); err != nil {
			as.h.fail(w, r, err)
			return
		}
		// The key is the upload's only if its reply expired while the body came: the
		// bytes are gone, so the upload is to be sent again.
		again := as.h.serve(func(http.ResponseWriter, *http.Request) (int, any, error) {
			return 0, nil, taskd.Errorf(taskd.CodeConflict,
				"the reply kept under Idempotency-Key %q expired while this upload was read; send it again", key)
		})
		idempotently(w, r, as.idem, as.clock, as.h.log, key, uploadHash(r, hashes.SHA256, n), again, nil)
		return
	}
	a, err := as.svc.Receive(ctx, filename, body, r.ContentLength)
	if err := as.readErr(w, body, err); err != nil {
		as.h.fail(w, r, err)
		return
	}
	keep := as.h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		kept, err := as.svc.Keep(r.Context(), ActorFrom(r.Context()), a)
		if err != nil {
			return 0, nil, err
		}
		return created(w, kept)
	})
	// Bytes no record will name are removed before the reply: the upload's client
	// finds nothing of them left.
	idempotently(w, r, as.idem, as.clock, as.h.log, key, uploadHash(r, a.Hashes.SHA256, a.Size), keep,
		func() { as.svc.Discard(ctx, a) })
}

// uploadName is an upload's filename query parameter, required, and the only one.
func uploadName(q url.Values) (string, error) {
	if err := known(q, "filename"); err != nil {
		return "", err
	}
	if !q.Has("filename") {
		return "", taskd.Errorf(taskd.CodeInvalid, "filename: required, as a query parameter (POST /v1/admin/artifacts?filename=NAME with the bytes as the body)")
	}
	return q.Get("filename"), nil
}

// body is an upload's body, read within the upload's bounds.
func (as *Artifacts) body(w http.ResponseWriter, r *http.Request) *idleReader {
	return &idleReader{r: r.Body, rc: http.NewResponseController(w), end: time.Now().Add(as.uploadTotal)}
}

// readErr is err, an upload's failure to read body (and store it), as the API says
// it: a read deadline is the upload's timeout or its idle bound. Then the rest of the
// body is not read: the connection cannot carry another request.
func (as *Artifacts) readErr(w http.ResponseWriter, body *idleReader, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(body.end):
		err = taskd.Errorf(taskd.CodeInvalid, "upload: not received within %s (DISPATCH_ARTIFACT_UPLOAD_TIMEOUT); nothing was kept",
			config.FormatDuration(as.uploadTotal))
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = taskd.Errorf(taskd.CodeInvalid, "upload: nothing came for %s; nothing was kept", uploadIdle)
	}
	w.Header().Set("Connection", "close")
	return err
}

// created is the reply of an upload that made artifact a.
func created(w http.ResponseWriter, a taskd.Artifact) (int, any, error) {
	w.Header().Set("Location", "/v1/admin/artifacts/"+strconv.FormatInt(a.ID, 10))
	return http.StatusCreated, a, nil
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
