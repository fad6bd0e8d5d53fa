// Package console is the web console at /console/: server-rendered pages that do
// everything through the public admin API. Each page calls the API's own handler in
// process with the signed-in admin token, so validation, errors and the audit log are
// the API's, and the console can do nothing a curl user cannot.
//
// The session is a random id in an HttpOnly, SameSite=Strict cookie scoped to
// /console/, kept in Redis with idle and absolute expiry (sessions.go); every form that
// changes something carries a CSRF token of the session (an upload's multipart form as
// its first part, checked before the file is read). A session whose admin token
// the server no longer accepts ends, with a message. The pages send a
// Content-Security-Policy that allows scripts from the console's own files only;
// html/template escapes every value that came from users, and JSON from agents and
// admins is shown compact and cut at a few KiB (showJSON).
package console

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/internal/clock"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// cookieName is the session cookie: the session's id, HttpOnly, scoped to /console/.
const cookieName = "taskd_console"

// csp forbids inline script and every source but the console's own.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Config is what the console's sessions need.
type Config struct {
	// Redis holds the sessions, seen by every node.
	Redis redis.UniversalClient
	// SessionKey is the Redis key of the session whose id has the SHA-256 idHash (hex),
	// under the deployment's prefix.
	SessionKey func(idHash string) string
	// AdminTokens are the admin token secrets the server accepts: a session lives only
	// while the one it signed in with is among them.
	AdminTokens []string
	Clock       clock.Clock
	// Mode says which dependencies this node finds away and what it serves then
	// (nil: not shown); every page shows it while one is.
	Mode func(ctx context.Context) (away []string, serving string)
	// IdleTimeout ends a session unused for that long (default DefaultIdleTimeout);
	// Lifetime ends it that long after sign-in, however busy (default DefaultLifetime).
	IdleTimeout, Lifetime time.Duration
}

func (cfg *Config) setDefaults() {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Lifetime <= 0 {
		cfg.Lifetime = DefaultLifetime
	}
}

func (cfg Config) validate() error {
	if cfg.Redis == nil || cfg.SessionKey == nil {
		return fmt.Errorf("console: the sessions need Redis and a SessionKey")
	}
	return nil
}

// Console serves the pages.
type Console struct {
	admin    http.Handler
	log      *slog.Logger
	sessions *sessions
	pages    map[string]*template.Template
	// mode is Config.Mode.
	mode func(ctx context.Context) (away []string, serving string)
}

// New returns the console over api, the server's own handler (the /v1/admin routes
// are called through it). It panics on a Config without Redis: a wiring mistake.
func New(api http.Handler, log *slog.Logger, cfg Config) *Console {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	c := &Console{admin: api, log: log, pages: map[string]*template.Template{}, mode: cfg.Mode,
		sessions: &sessions{rdb: cfg.Redis, key: cfg.SessionKey, tokens: cfg.AdminTokens, clock: cfg.Clock,
			idle: cfg.IdleTimeout, lifetime: cfg.Lifetime}}
	funcs := template.FuncMap{
		"json":         showJSON,
		"time":         showTime,
		"fieldOf":      fieldOf,
		"list":         func(s ...string) []string { return s },
		"moves":        campaignMoves,
		"budgetPaused": budgetPaused,
		"phaseBar":     phaseBar,
		"hasPrefix":    strings.HasPrefix,
		"nonzero":      func(v any) bool { return num(v) != 0 },
		"split":        func(taskID string) []string { k, id, _ := strings.Cut(taskID, ":"); return []string{k, id} },
		"rolloutMoves": rolloutMoves,
		"size":         humanSize,
		"shortHash":    shortHash,
		"taskLink":     taskLink,
		"templateName": func(names map[string]string, id any) string {
			if name := names[fmt.Sprint(id)]; name != "" {
				return name + " (" + fmt.Sprint(id) + ")"
			}
			return fmt.Sprint(id)
		},
	}
	names, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		panic(err)
	}
	for _, name := range names {
		page := strings.TrimSuffix(strings.TrimPrefix(name, "templates/"), ".html")
		if page == "layout" {
			continue
		}
		c.pages[page] = template.Must(template.New("layout.html").Funcs(funcs).
			ParseFS(templateFiles, "templates/layout.html", name))
	}
	return c
}

// Routes is the console's router, to be mounted at /console.
func (c *Console) Routes() http.Handler {
	r := chi.NewRouter()
	r.Use(secureHeaders)
	static, _ := fs.Sub(staticFiles, "static")
	r.Get("/static/*", serveFiles(static))
	r.Get("/signin", c.signInPage)
	r.Post("/signin", c.signIn)
	r.Group(func(r chi.Router) {
		r.Use(c.session)
		r.Post("/signout", c.signOut)
		r.Get("/", c.dashboard)
		r.Get("/templates", c.templates)
		r.Post("/templates", c.createTemplate)
		r.Post("/templates/{id}/delete", c.deleteTemplate)
		r.Get("/tasks", c.tasks)
		r.Get("/tasks/new", c.newTask)
		r.Post("/tasks", c.createTask)
		r.Get("/tasks/{kind}/{id}", c.task)
		r.Get("/tasks/{kind}/{id}/edit", c.editTask)
		r.Post("/tasks/{kind}/{id}", c.replaceTask)
		r.Post("/tasks/{kind}/{id}/status", c.setStatus)
		r.Post("/tasks/{kind}/{id}/rollout", c.setRollout)
		r.Post("/tasks/{kind}/{id}/rollout/{move}", c.moveRollout)
		r.Get("/tasks/{kind}/{id}/delete", c.confirmDeleteTask)
		r.Post("/tasks/{kind}/{id}/delete", c.deleteTask)
		r.Get("/schedule", c.schedule)
		r.Get("/groups", c.groups)
		r.Post("/groups/{gid}/members", c.addMembers)
		r.Post("/groups/{gid}/members/{uid}/delete", c.removeMember)
		r.Post("/groups/{gid}/rule", c.setRule)
		r.Post("/groups/{gid}/delete", c.deleteGroup)
		r.Get("/clients", c.clients)
		r.Post("/clients/{uid}", c.setMaxInFlight)
		r.Post("/clients/{uid}/keys", c.issueKey)
		r.Post("/clients/{uid}/keys/delete", c.revokeKeys)
		r.Get("/campaigns", c.campaigns)
		r.Get("/campaigns/{id}", c.campaign)
		r.Post("/campaigns", c.createCampaign)
		r.Post("/campaigns/{id}/{move}", c.moveCampaign)
		r.Get("/artifacts", c.artifacts)
		r.Post("/artifacts", c.uploadArtifact)
		r.Get("/artifacts/{id}", c.artifact)
		r.Get("/artifacts/{id}/delete", c.confirmDeleteArtifact)
		r.Post("/artifacts/{id}/delete", c.deleteArtifact)
		r.Get("/stats", c.stats)
		r.Get("/audit", c.audit)
		r.Get("/events", c.events)
	})
	return r
}

// serveFiles serves the files of fsys under /console/static/, and 404 for anything
// else: a directory is not listed.
func serveFiles(fsys fs.FS) http.HandlerFunc {
	files := http.StripPrefix("/console/static/", http.FileServerFS(fsys))
	return func(w http.ResponseWriter, r *http.Request) {
		st, err := fs.Stat(fsys, chi.URLParam(r, "*"))
		if err != nil || !st.Mode().IsRegular() {
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	}
}

func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// ---- the session ----

// session admits a request with a live session (and, on a POST, its CSRF token);
// without one it sends the browser to sign in.
func (c *Console) session(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(cookieName)
		if err != nil || ck.Value == "" {
			http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
			return
		}
		s, state, err := c.sessions.find(r.Context(), ck.Value)
		if err != nil {
			c.sessionsUnavailable(w, r, err)
			return
		}
		switch state {
		case sessionEnded:
			setCookie(w, r, cookieName, "", "/console/", -1)
			http.Redirect(w, r, "/console/signin?m=ended", http.StatusSeeOther)
			return
		case sessionRefused:
			setCookie(w, r, cookieName, "", "/console/", -1)
			http.Redirect(w, r, "/console/signin?m=refused", http.StatusSeeOther)
			return
		}
		ctx := context.WithValue(r.Context(), sessionKey{}, s)
		if r.Method == http.MethodPost {
			token, parts := formCSRF(r)
			if !hmac.Equal([]byte(token), []byte(s.csrf)) {
				c.render(w, r, http.StatusForbidden, "error", "Refused", map[string]any{
					"Error": "This form is out of date or did not come from the console (CSRF check). Go back, reload the page and try again."})
				return
			}
			if parts != nil {
				ctx = context.WithValue(ctx, partsKey{}, parts)
			}
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// partsKey holds, in a request's context, the rest of a multipart form whose CSRF
// token was checked (formParts).
type partsKey struct{}

// maxCSRFBytes bounds the CSRF part read from a multipart form (a token is 64 bytes).
const maxCSRFBytes = 256

// formCSRF is the CSRF token a POST carries: a urlencoded form's csrf field, or the
// first part of a multipart form, which must be it. A multipart form (an artifact's
// upload) is not parsed whole, which would keep a file of any size in memory or a
// temporary file before the check: its parts after the token are returned, unread,
// for the handler to stream on.
func formCSRF(r *http.Request) (string, *multipart.Reader) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
		return r.PostFormValue("csrf"), nil
	}
	parts, err := r.MultipartReader()
	if err != nil {
		return "", nil
	}
	p, err := parts.NextPart()
	if err != nil || p.FormName() != "csrf" || p.FileName() != "" {
		return "", nil
	}
	token, err := io.ReadAll(io.LimitReader(p, maxCSRFBytes))
	if err != nil {
		return "", nil
	}
	return string(token), parts
}

// formParts is the rest of r's multipart form after its CSRF token; nil for a request
// of another kind.
func formParts(r *http.Request) *multipart.Reader {
	parts, _ := r.Context().Value(partsKey{}).(*multipart.Reader)
	return parts
}

// sessionsUnavailable answers a request the session store (Redis) failed.
func (c *Console) sessionsUnavailable(w http.ResponseWriter, r *http.Request, err error) {
	c.log.Error("console: sessions", "err", err)
	c.render(w, r, http.StatusServiceUnavailable, "error", "Unavailable", map[string]any{
		"Error": "The console cannot reach its sessions (Redis) right now. Try again in a moment."})
}

// setCookie sets a cookie of the console, HttpOnly and SameSite=Strict; maxAge < 0
// deletes it. It is Secure over TLS, here or at a proxy in front that says so (a
// header a client could forge only makes the cookie stricter).
func setCookie(w http.ResponseWriter, r *http.Request, name, value, path string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: path, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")})
}

// signInCookie carries the sign-in form's own CSRF token (double submit): a form
// posted from another site cannot sign the browser in under a token of its choosing.
const signInCookie = "taskd_console_signin"

func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	c.signInForm(w, r, http.StatusOK, signInMessages[r.URL.Query().Get("m")])
}

// signInForm shows the sign-in form with a fresh CSRF token.
func (c *Console) signInForm(w http.ResponseWriter, r *http.Request, status int, message string) {
	b := make([]byte, 16)
	rand.Read(b)
	token := hex.EncodeToString(b)
	setCookie(w, r, signInCookie, token, "/console/signin", 3600)
	c.render(w, r, status, "signin", "Sign in", map[string]any{"Message": message, "SignInToken": token,
		"Idle": spanText(c.sessions.idle), "Lifetime": spanText(c.sessions.lifetime)})
}

// spanText shows a session lifetime in hours, or minutes when not whole hours.
func spanText(d time.Duration) string {
	unit, n := "hour", int(d/time.Hour)
	if d%time.Hour != 0 {
		unit, n = "minute", int(d/time.Minute)
	}
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}

var signInMessages = map[string]string{
	"refused": "Your admin token was not accepted: it is wrong, or it has been revoked. Sign in again.",
	"ended":   "Your session has ended: you signed out, it was idle too long, or it reached its lifetime. Sign in again.",
	"out":     "You are signed out.",
}

func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	ck, err := r.Cookie(signInCookie)
	if err != nil || ck.Value == "" || !hmac.Equal([]byte(ck.Value), []byte(r.PostFormValue("signin"))) {
		c.signInForm(w, r, http.StatusBadRequest, "This sign-in form is out of date or did not come from the console; sign in again.")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token == "" {
		c.signInForm(w, r, http.StatusBadRequest, "Enter an admin token.")
		return
	}
	res := c.call(r, token, http.MethodGet, "/v1/admin/templates", nil)
	switch {
	case res.status == http.StatusUnauthorized || res.status == http.StatusForbidden:
		// 400, not 401: the API call has counted the failure against this address
		// already (one wrong token, one count).
		c.signInForm(w, r, http.StatusBadRequest, "That token was not accepted: it is not an admin token, or it has been revoked.")
		return
	case res.status != http.StatusOK:
		c.signInForm(w, r, res.status, res.message())
		return
	}
	// A session this browser had ends: a sign-in always starts a new one.
	if old, err := r.Cookie(cookieName); err == nil && old.Value != "" {
		if err := c.sessions.end(r.Context(), old.Value); err != nil {
			c.log.Warn("console: end the session replaced by a sign-in", "err", err)
		}
	}
	id, err := c.sessions.start(r.Context(), token)
	if err != nil {
		c.log.Error("console: sessions", "err", err)
		c.signInForm(w, r, http.StatusServiceUnavailable, "The console cannot keep a session right now (Redis did not answer). Try again in a moment.")
		return
	}
	setCookie(w, r, cookieName, id, "/console/", int(c.sessions.lifetime.Seconds()))
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

// signOut ends the session on every node, not only in this browser.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	if err := c.sessions.end(r.Context(), currentSession(r).id); err != nil {
		c.sessionsUnavailable(w, r, err)
		return
	}
	setCookie(w, r, cookieName, "", "/console/", -1)
	http.Redirect(w, r, "/console/signin?m=out", http.StatusSeeOther)
}

// ---- the admin API, called in process ----

// sessionKey holds the session in a request's context.
type sessionKey struct{}

// currentSession is the session of r (empty outside the session's routes).
func currentSession(r *http.Request) session {
	s, _ := r.Context().Value(sessionKey{}).(session)
	return s
}

// result is an API reply.
type result struct {
	status int
	body   []byte
}

// apiError is the API's error shape.
type apiError struct {
	Error struct {
		Code    string          `json:"code"`
		Message string          `json:"message"`
		Details json.RawMessage `json:"details"`
	} `json:"error"`
}

func (res result) ok() bool { return res.status >= 200 && res.status < 300 }

// message is the API's error message, or the status.
func (res result) message() string {
	var e apiError
	if json.Unmarshal(res.body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return fmt.Sprintf("the server answered %d %s", res.status, http.StatusText(res.status))
}

// decode reads the reply into v, numbers as json.Number: exact however large, and
// shown as written (a float64 of a million prints as 1e+06).
func (res result) decode(v any) error { return decodeJSON(res.body, v) }

func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// call sends one request to the admin API with token, as the browser's address (so a
// wrong token counts against it like any other).
func (c *Console) call(r *http.Request, token, method, path string, body any) result {
	return c.callIfMatch(r, token, method, path, "", body)
}

// callIfMatch is call with an If-Match header (none when ifMatch is "").
func (c *Console) callIfMatch(r *http.Request, token, method, path, ifMatch string, body any) result {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return result{status: http.StatusInternalServerError, body: []byte(`{"error":{"message":"` + err.Error() + `"}}`)}
		}
		rd = bytes.NewReader(buf)
	}
	req, ok := c.newCall(r, token, method, path, rd)
	if !ok {
		return result{status: http.StatusBadRequest}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	return c.roundTrip(req, nil)
}

// newCall is a request to the admin API with token, as the browser's address (so a
// wrong token counts against it like any other).
func (c *Console) newCall(r *http.Request, token, method, path string, body io.Reader) (*http.Request, bool) {
	// A context without the console's route: the API's router routes the call afresh.
	ctx := context.WithValue(r.Context(), chi.RouteCtxKey, nil)
	req, err := http.NewRequestWithContext(ctx, method, path, body)
	if err != nil {
		return nil, false
	}
	req.RemoteAddr = r.RemoteAddr
	req.Header.Set("Authorization", "Bearer "+token)
	return req, true
}

// roundTrip sends req through the admin API in process. conn, when not nil, is the
// browser's response: the read deadlines the API sets on an upload go to the
// browser's connection, whose bytes the upload's body streams on.
func (c *Console) roundTrip(req *http.Request, conn http.ResponseWriter) result {
	rec := &recorder{header: http.Header{}}
	if conn != nil {
		rec.conn = http.NewResponseController(conn)
	}
	c.admin.ServeHTTP(rec, req)
	return result{status: rec.status, body: rec.body.Bytes()}
}

// api is call with the session's token; a token the API refuses ends the session and
// sends the browser to sign in (ok false: the reply is written).
func (c *Console) api(w http.ResponseWriter, r *http.Request, method, path string, body any) (result, bool) {
	return c.apiIfMatch(w, r, method, path, "", body)
}

// apiIfMatch is api with an If-Match header (none when ifMatch is "").
func (c *Console) apiIfMatch(w http.ResponseWriter, r *http.Request, method, path, ifMatch string, body any) (result, bool) {
	s := currentSession(r)
	res := c.callIfMatch(r, s.token, method, path, ifMatch, body)
	return res, c.accepted(w, r, res)
}

// accepted reports whether the API took the session's token for res; a token refused
// ends the session and sends the browser to sign in (the reply is written).
func (c *Console) accepted(w http.ResponseWriter, r *http.Request, res result) bool {
	if res.status != http.StatusUnauthorized {
		return true
	}
	if err := c.sessions.end(r.Context(), currentSession(r).id); err != nil {
		c.log.Warn("console: end a refused session", "err", err)
	}
	setCookie(w, r, cookieName, "", "/console/", -1)
	http.Redirect(w, r, "/console/signin?m=refused", http.StatusSeeOther)
	return false
}

// change sends a call that changes something; on an error reply it shows page with
// data and the API's message as data["Error"], and returns false (as on a refused
// session, which goes back to sign-in).
func (c *Console) change(w http.ResponseWriter, r *http.Request, method, path string, body any,
	page, title string, data map[string]any) (result, bool) {
	res, ok := c.api(w, r, method, path, body)
	if !ok {
		return res, false
	}
	if !res.ok() {
		data["Error"] = res.message()
		c.render(w, r, res.status, page, title, data)
		return res, false
	}
	return res, true
}

// fetch GETs path into v; on an error reply it shows the error page and returns false
// (as does a refused session, which goes back to sign-in).
func (c *Console) fetch(w http.ResponseWriter, r *http.Request, path string, v any) bool {
	res, ok := c.api(w, r, http.MethodGet, path, nil)
	if !ok {
		return false
	}
	if !res.ok() {
		c.render(w, r, res.status, "error", "Error", map[string]any{"Error": res.message()})
		return false
	}
	if err := res.decode(v); err != nil {
		c.render(w, r, http.StatusInternalServerError, "error", "Error", map[string]any{"Error": "The server's reply could not be read: " + err.Error()})
		return false
	}
	return true
}

// recorder is the response the in-process API call writes.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	conn   *http.ResponseController // the browser's, on an upload
}

// SetReadDeadline sets the browser's connection's read deadline, on an upload whose
// body is that connection's (http.ResponseController finds it): the API's bounds on an
// upload's pace apply to the browser that sends it.
func (r *recorder) SetReadDeadline(t time.Time) error {
	if r.conn == nil {
		return http.ErrNotSupported
	}
	return r.conn.SetReadDeadline(t)
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

// ---- rendering ----

// view is what every page template gets.
type view struct {
	Title    string
	CSRF     string
	SignedIn bool
	Nav      string
	Data     map[string]any
	// Degraded says what is away and what the node serves meanwhile ("": all is well).
	Degraded string
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data map[string]any) {
	v := view{Title: title, Nav: page, Data: data}
	if c.mode != nil {
		if away, serving := c.mode(r.Context()); len(away) > 0 {
			v.Degraded = "This node is degraded: " + strings.Join(away, " and ") + " unreachable. It serves " + serving + "."
		}
	}
	if s := currentSession(r); s.id != "" {
		v.SignedIn, v.CSRF = true, s.csrf
	}
	tmpl, found := c.pages[page]
	if !found {
		c.log.Error("console: no such page", "page", page)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, v); err != nil {
		c.log.Error("console: render", "page", page, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// maxShownJSON is how many bytes of one JSON value a page shows.
const maxShownJSON = 4 << 10

// showJSON shows v as compact JSON, with <, > and & as themselves (the template
// escapes them for HTML, so a param holding <script> reads as it was written), cut at
// maxShownJSON bytes with a note of its full size. Agents write checkpoints and details
// of up to 16 KiB, nested deep: indented, a value nested n deep takes n² spaces (7,000
// deep, 49 MB), and a page of fifty of them would take gigabytes.
func showJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "(not shown: " + err.Error() + ")"
	}
	out := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	if len(out) <= maxShownJSON {
		return string(out)
	}
	cut := maxShownJSON
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return string(out[:cut]) + "… (truncated, " + strconv.Itoa(len(out)) + " bytes)"
}

// showTime shows an RFC 3339 time of the API (or a time.Time) as UTC, minutes and
// seconds.
func showTime(s any) string {
	t, ok := s.(time.Time)
	if !ok {
		str, _ := s.(string)
		var err error
		if t, err = time.Parse(time.RFC3339Nano, str); err != nil {
			return str
		}
	}
	return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
}

// field is one labelled input of a form, with its value and error.
type field struct{ Name, Label, Type, Value, Error string }

func fieldOf(name, label, typ string, form, errs map[string]string) field {
	return field{Name: name, Label: label, Type: typ, Value: form[name], Error: errs[name]}
}

// inputTime is a time as the task form shows it: UTC, 24 h, to the second. The form
// uses a text input, not datetime-local, whose display follows the browser's locale
// and time zone (an "AM/PM" under a label that says UTC).
func inputTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") }

// parseInputTime reads a time as entered in the task form, as UTC: "2006-01-02
// 15:04:05", without seconds, or with a "T" (as datetime-local and RFC 3339 write it),
// or a whole RFC 3339 time (converted to UTC).
func parseInputTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	s = strings.Replace(strings.TrimSpace(s), "T", " ", 1)
	t, err := time.Parse("2006-01-02 15:04:05", s)
	if err != nil {
		t, err = time.Parse("2006-01-02 15:04", s)
	}
	return t, err
}

// query builds path?values, leaving out empty values.
func query(path string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}
