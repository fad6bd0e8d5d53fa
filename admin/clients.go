package admin

import (
	"context"
	"net/http"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/web"
)

// A client's settings (GET and PUT /v1/admin/clients/{uid}): how many dispatches it may
// hold open at once. A batch fetch reads them from MySQL on every request, so a change
// reaches the client's next fetch without touching any cache.

// ClientSetting returns uid's settings (the defaults when none were set).
func (s *Service) ClientSetting(ctx context.Context, uid string) (taskd.ClientSetting, error) {
	return s.store.ClientSetting(ctx, uid)
}

// SetMaxInFlight sets uid's max_in_flight (1..taskd.MaxInFlightLimit).
func (s *Service) SetMaxInFlight(ctx context.Context, uid string, n int, ifMatch taskd.IfMatch) (taskd.ClientSetting, error) {
	if n < 1 || n > taskd.MaxInFlightLimit {
		return taskd.ClientSetting{}, taskd.Errorf(taskd.CodeInvalid, "max_in_flight: must be 1..%d, got %d", taskd.MaxInFlightLimit, n)
	}
	return s.store.SetMaxInFlight(ctx, ActorFrom(ctx), uid, n, ifMatch, s.now())
}

// GetClient is GET /v1/admin/clients/{uid}.
func (h *Handlers) GetClient() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		uid, err := pathUser(r)
		if err != nil {
			return 0, nil, err
		}
		c, err := h.svc.ClientSetting(r.Context(), uid)
		return http.StatusOK, c, tagged(w, taskd.Count(c.Version), err)
	})
}

// PutClient is PUT /v1/admin/clients/{uid} {"max_in_flight": n}.
func (h *Handlers) PutClient() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		uid, err := pathUser(r)
		if err != nil {
			return 0, nil, err
		}
		var req struct {
			MaxInFlight *reqInt `json:"max_in_flight"`
		}
		if err := web.Decode(w, r, bodyLimit, false, &req); err != nil {
			return 0, nil, err
		}
		if req.MaxInFlight == nil {
			return 0, nil, taskd.Errorf(taskd.CodeInvalid, "max_in_flight: required, 1..%d", taskd.MaxInFlightLimit)
		}
		n, err := req.MaxInFlight.in("max_in_flight", 1, taskd.MaxInFlightLimit, "1..100")
		if err != nil {
			return 0, nil, err
		}
		c, err := h.svc.SetMaxInFlight(r.Context(), uid, int(n), ifMatch(r))
		return http.StatusOK, c, tagged(w, taskd.Count(c.Version), err)
	})
}
