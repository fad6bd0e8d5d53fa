package clientkey

import (
	"log/slog"
	"net/http"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/web"
)

// Handlers serves the client key routes that are not the admin API's.
type Handlers struct {
	svc *Service
	log *slog.Logger
}

// NewHandlers returns the handlers over svc.
func NewHandlers(svc *Service, log *slog.Logger) *Handlers { return &Handlers{svc: svc, log: log} }

type enrollRequest struct {
	UID          string `json:"uid"`
	EnrollSecret string `json:"enroll_secret"`
}

// enrollBodyLimit bounds an enrollment body.
const enrollBodyLimit = 64 << 10

// Enroll is POST /v1/enroll.
func (h *Handlers) Enroll() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A reply may carry a key, shown this once: no cache keeps a copy of any.
		w.Header().Set("Cache-Control", "no-store")
		var req enrollRequest
		if err := web.Decode(w, r, enrollBodyLimit, false, &req); err != nil {
			web.Error(w, r, h.log, err)
			return
		}
		if req.UID == "" {
			web.Error(w, r, h.log, taskd.Errorf(taskd.CodeInvalid, "uid: required"))
			return
		}
		key, err := h.svc.Enroll(r.Context(), req.UID, req.EnrollSecret)
		if err != nil {
			web.Error(w, r, h.log, err)
			return
		}
		web.Encode(w, http.StatusOK, map[string]string{"client_key": key})
	})
}
