package app

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/admin"
	"github.com/taskpull/taskd/api"
	"github.com/taskpull/taskd/clientkey"
	"github.com/taskpull/taskd/ddi"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/internal/authguard"
	"github.com/taskpull/taskd/internal/console"
	"github.com/taskpull/taskd/internal/web"
)

// routes lists every route of the server.
func (a *App) routes() http.Handler {
	log := a.deps.Log
	r := chi.NewRouter()
	r.Use(middleware.Recoverer, a.measure, a.limitAuthFailures, a.boundWork)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		web.Error(w, r, log, taskd.Errorf(taskd.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		allowed := allowedMethods(r, req.URL.Path)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		web.Encode(w, http.StatusMethodNotAllowed, map[string]any{"error": map[string]string{
			"code": "method_not_allowed", "message": req.Method + " is not allowed on " + req.URL.Path +
				"; allowed: " + strings.Join(allowed, ", ")}})
	})

	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		web.Encode(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", a.handleReady())
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{}))
	r.Method(http.MethodGet, "/openapi.json", api.Handler())
	// The console calls the admin API through this very router, in process; its
	// sessions live in Redis and last while their admin token is still accepted.
	tokens := admin.ParseTokens(a.cfg.AdminTokens)
	secrets := make([]string, 0, len(tokens))
	for _, t := range tokens {
		secrets = append(secrets, t.Secret)
	}
	r.Mount("/console", console.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.handler.ServeHTTP(w, r)
	}), log, console.Config{Redis: a.deps.Redis, SessionKey: a.Cache.Keys().ConsoleSession, AdminTokens: secrets,
		Clock: a.deps.Clock, Mode: a.consoleMode}).Routes())

	keys := clientkey.NewHandlers(a.Keys, log)
	isAdminToken := func(token string) bool {
		for _, t := range tokens {
			if t.Secret != "" && authguard.SameSecret(token, t.Secret) {
				return true
			}
		}
		return false
	}
	client := dispatch.NewHandlers(a.Dispatch, log).RecognizeAdminTokens(isAdminToken)
	r.Method(http.MethodPost, "/v1/enroll", keys.Enroll())
	r.Method(http.MethodPost, "/v1/fetch", client.Fetch())
	r.Method(http.MethodPost, "/v1/complete", client.Complete())
	r.Method(http.MethodPost, "/v1/progress", client.Progress())
	r.Route("/ddi", ddi.NewHandlers(a.Dispatch, a.Artifacts, log, ddi.Config{Tenant: a.cfg.DDITenant, BaseURL: a.cfg.DDIURL,
		Timeout: a.cfg.RequestTimeout}).Routes)
	r.Method(http.MethodGet, "/v1/dispatches", dispatch.NewRecords(a.deps.Store, a.Cache, log).RecognizeAdminTokens(isAdminToken).List())

	isClientKey := func(ctx context.Context, key string) bool {
		_, err := a.Keys.Verify(ctx, key)
		return err == nil
	}
	h := admin.NewHandlers(a.Admin, log)
	r.Route("/v1/admin", func(r chi.Router) {
		r.Use(admin.RequireAdmin(tokens, isClientKey, log))
		// The creates take an Idempotency-Key (admin/idempotency.go).
		idem := r.With(admin.Idempotent(a.deps.Store, a.deps.Clock, log))
		idem.Method(http.MethodPost, "/templates", h.CreateTemplate())
		r.Method(http.MethodGet, "/templates", h.ListTemplates())
		r.Method(http.MethodGet, "/templates/{id}", h.GetTemplate())
		r.Method(http.MethodPatch, "/templates/{id}", h.PatchTemplate())
		r.Method(http.MethodDelete, "/templates/{id}", h.DeleteTemplate())
		r.Method(http.MethodGet, "/tasks", h.ListTasks())
		idem.Method(http.MethodPost, "/tasks/{kind}", h.CreateTask())
		r.Method(http.MethodPost, "/tasks/{kind}/preview", h.PreviewTask())
		r.Method(http.MethodGet, "/tasks/{kind}/{id}", h.GetTask())
		r.Method(http.MethodPut, "/tasks/{kind}/{id}", h.ReplaceTask())
		r.Method(http.MethodPatch, "/tasks/{kind}/{id}", h.PatchTask())
		r.Method(http.MethodDelete, "/tasks/{kind}/{id}", h.DeleteTask())
		r.Method(http.MethodGet, "/tasks/{kind}/{id}/results", h.TaskResults())
		r.Method(http.MethodGet, "/tasks/{kind}/{id}/rollout", h.GetRollout())
		r.Method(http.MethodPost, "/tasks/{kind}/{id}/rollout/{move}", h.MoveRollout())
		r.Method(http.MethodGet, "/rollouts", h.ListRollouts())
		r.Method(http.MethodPut, "/groups/{gid}/members", h.ReplaceMembers())
		r.Method(http.MethodPost, "/groups/{gid}/members", h.AddMembers())
		r.Method(http.MethodGet, "/groups", h.ListGroups())
		r.Method(http.MethodPut, "/groups/{gid}", h.SetGroup())
		r.Method(http.MethodGet, "/groups/{gid}", h.GetGroup())
		r.Method(http.MethodDelete, "/groups/{gid}", h.DeleteGroup())
		r.Method(http.MethodGet, "/groups/{gid}/members", h.ListMembers())
		r.Method(http.MethodDelete, "/groups/{gid}/members/{uid}", h.RemoveMember())
		idem.Method(http.MethodPost, "/clients/{uid}/keys", h.IssueKey())
		r.Method(http.MethodDelete, "/clients/{uid}/keys", h.RevokeKeys())
		r.Method(http.MethodGet, "/schedule", h.Schedule())
		r.Method(http.MethodGet, "/events", h.Events())
		r.Method(http.MethodGet, "/stats", h.Stats())
		r.Method(http.MethodGet, "/stats/agents", h.VersionStats())
		r.Method(http.MethodGet, "/overview", h.Overview())
		r.Method(http.MethodGet, "/audit", h.Audit())
		r.Method(http.MethodGet, "/nodes", a.nodes())
		r.Method(http.MethodGet, "/clients", h.ListClients())
		r.Method(http.MethodGet, "/clients/{uid}", h.GetClient())
		r.Method(http.MethodPut, "/clients/{uid}", h.PutClient())
		r.Method(http.MethodGet, "/dispatches", h.ListDispatches())
		r.Method(http.MethodPost, "/dispatches/{log_id}/expire", h.ExpireDispatch())
		r.Method(http.MethodPost, "/dispatches/{log_id}/retry", h.RetryDispatch())
		r.Method(http.MethodPost, "/dispatches/{log_id}/cancel", h.CancelDispatch())
		campaigns := admin.NewCampaigns(a.deps.Store, a.Campaigns, h).WithUploadLimits(a.cfg.UploadsPerNode, a.cfg.UploadTimeout)
		idem.Method(http.MethodPost, "/campaigns", campaigns.CreateCampaign())
		r.Method(http.MethodGet, "/campaigns", campaigns.ListCampaigns())
		r.Method(http.MethodGet, "/campaigns/{id}", campaigns.GetCampaign())
		r.Method(http.MethodGet, "/campaigns/{id}/failures", campaigns.CampaignFailures())
		r.Method(http.MethodPost, "/campaigns/{id}/items", campaigns.UploadItems())
		r.Method(http.MethodPost, "/campaigns/{id}/{move}", campaigns.MoveCampaign())
		// An upload takes an Idempotency-Key too, its body hashed as it streams.
		artifacts := admin.NewArtifacts(a.Artifacts, h, a.cfg.ArtifactUploadTimeout).WithIdempotency(a.deps.Store, a.deps.Clock)
		r.Method(http.MethodPost, "/artifacts", artifacts.UploadArtifact())
		r.Method(http.MethodGet, "/artifacts", artifacts.ListArtifacts())
		r.Method(http.MethodGet, "/artifacts/{id}", artifacts.GetArtifact())
		r.Method(http.MethodDelete, "/artifacts/{id}", artifacts.DeleteArtifact())
	})
	return r
}

// allowedMethods lists the methods that have a route at path, for a 405's Allow header.
func allowedMethods(r chi.Routes, path string) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete} {
		if r.Match(chi.NewRouteContext(), m, path) {
			out = append(out, m)
		}
	}
	return out
}

// limitAuthFailures turns away, with 429, a source address that has failed to
// authenticate too often (any 401 counts: a bad client key, enrollment secret or admin
// token), before any work is done for it.
func (a *App) limitAuthFailures(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		src := authguard.Source(r)
		if wait, blocked := a.guard.Blocked(src); blocked {
			err := taskd.Errorf(taskd.CodeRateLimited, "too many failed authentications from %s; try again later", src)
			err.RetryAfter = wait
			web.Error(w, r, a.deps.Log, err)
			return
		}
		ww, ok := w.(middleware.WrapResponseWriter) // measure's, when it runs first
		if !ok {
			ww = middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		}
		next.ServeHTTP(ww, r)
		if ww.Status() == http.StatusUnauthorized {
			a.guard.Fail(src)
		}
	})
}

// boundWork bounds each request's MySQL and Redis work; past the bound the request
// answers 503 with Retry-After. A fetch, and a read of a task's results, bound each
// round of their long poll instead (the wait itself is not dependency work).
func (a *App) boundWork(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/fetch" || isResultsRead(r) || isUpload(r) || isDownload(r) {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), a.cfg.RequestTimeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// isUpload reports whether r uploads a campaign's uids (it takes as long as the body
// does, in one transaction, bounded by the upload's size) or an artifact's bytes
// (streamed to the artifact storage, bounded by their size and the upload timeout),
// through the API or the console's form (which calls the API with the same body).
func isUpload(r *http.Request) bool {
	return r.Method == http.MethodPost && (strings.HasPrefix(r.URL.Path, "/v1/admin/campaigns/") &&
		strings.HasSuffix(r.URL.Path, "/items") || r.URL.Path == "/v1/admin/artifacts" || r.URL.Path == "/console/artifacts")
}

// isResultsRead reports whether r reads a task's results
// (/v1/admin/tasks/{kind}/{id}/results), which may wait for them.
func isResultsRead(r *http.Request) bool {
	parts := strings.Split(r.URL.Path, "/")
	return r.Method == http.MethodGet && len(parts) == 7 && parts[1] == "v1" && parts[2] == "admin" &&
		parts[3] == "tasks" && parts[6] == "results"
}

// isDownload reports whether r is a device's download of an artifact through the DDI
// endpoint: it takes as long as the bytes do (its lookups are bounded on their own).
func isDownload(r *http.Request) bool {
	// /ddi/{tenant}/controller/v1/{controllerId}/softwaremodules/{id}/artifacts/{name}
	parts := strings.Split(r.URL.Path, "/")
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && len(parts) == 10 && parts[1] == "ddi" &&
		parts[3] == "controller" && parts[6] == "softwaremodules" && parts[8] == "artifacts"
}

// measure records each request's latency under its route pattern (never the raw path,
// which would carry ids into label values).
func (a *App) measure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		a.metrics.Request(route, r.Method, status, time.Since(started))
	})
}

func (a *App) handleReady() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		away := a.away(r.Context(), 2*time.Second)
		mode, serving := readiness(away)
		body := map[string]any{"mode": mode, "serving": serving}
		switch {
		case len(away) == 0:
			body["status"] = "ready"
			web.Encode(w, http.StatusOK, body)
		case len(away) == 1 && r.URL.Query().Get("degraded") == "ok":
			// A balancer that keeps degraded nodes asks so.
			body["status"] = "degraded"
			body["away"] = away
			web.Encode(w, http.StatusOK, body)
		default:
			body["status"] = "unavailable"
			body["away"] = away
			body["error"] = map[string]string{"code": string(taskd.CodeUnavailable),
				"message": strings.Join(away, " and ") + " unavailable"}
			w.Header().Set("Retry-After", "1")
			web.Encode(w, http.StatusServiceUnavailable, body)
		}
	}
}

// away pings MySQL and Redis at once, each within bound, and returns those that did
// not answer ("mysql", "redis"): a MySQL that hangs must not make Redis look away too.
func (a *App) away(ctx context.Context, bound time.Duration) []string {
	ping := func(f func(context.Context) error) chan error {
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			done <- f(ctx)
		}()
		return done
	}
	mysqlPing := ping(a.deps.Store.DB().PingContext)
	redisPing := ping(func(ctx context.Context) error { return a.deps.Redis.Ping(ctx).Err() })
	var away []string
	if <-mysqlPing != nil {
		away = append(away, "mysql")
	}
	if <-redisPing != nil {
		away = append(away, "redis")
	}
	return away
}

// consoleMode is the console's banner: what is away, and what the node serves.
func (a *App) consoleMode(ctx context.Context) ([]string, string) {
	away := a.away(ctx, 500*time.Millisecond)
	_, serving := readiness(away)
	return away, serving
}

// readiness is the mode a node is in with the dependencies away, and what it serves
// then (README, "What taskd guarantees").
func readiness(away []string) (mode, serving string) {
	switch {
	case len(away) == 0:
		return "normal", "everything"
	case len(away) == 2:
		return "down", "nothing but health"
	case away[0] == "redis":
		return "degraded", "fetches and completes from MySQL (each poll reads MySQL, within DISPATCH_REBUILD_RATE); no campaign items"
	}
	return "degraded", "redos of open dispatches, empty polls and campaign items from Redis; no new claims, completes or admin writes"
}
