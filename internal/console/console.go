// Package console is the web console at /console/: server-rendered pages that do
// everything through the public admin API. Each page calls the API's own handler in
// process with the signed-in admin token, so validation, errors and the audit log are
// the API's, and the console can do nothing a curl user cannot.
//
// The session is the admin token in an HttpOnly, SameSite=Strict cookie scoped to
// /console/; every form that changes something carries a CSRF token derived from it
// (an HMAC keyed by the token, so it needs no server state and works on every node).
// A token the API refuses (wrong, or revoked since) ends the session with a message.
// The pages send a Content-Security-Policy that allows scripts from the console's own
// files only; html/template escapes every value that came from users.
package console

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// cookieName is the session cookie: the admin token, HttpOnly, scoped to /console/.
const cookieName = "taskd_console"

// csp forbids inline script and every source but the console's own.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Console serves the pages.
type Console struct {
	admin http.Handler
	log   *slog.Logger
	pages map[string]*template.Template
}

// New returns the console over api, the server's own handler (the /v1/admin routes
// are called through it).
func New(api http.Handler, log *slog.Logger) *Console {
	c := &Console{admin: api, log: log, pages: map[string]*template.Template{}}
	funcs := template.FuncMap{
		"json":    prettyJSON,
		"time":    showTime,
		"fieldOf": fieldOf,
		"list":    func(s ...string) []string { return s },
		"moves":   campaignMoves,
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
	r.Get("/static/*", http.StripPrefix("/console/static/", http.FileServerFS(static)).ServeHTTP)
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
		r.Get("/tasks/{kind}/{id}/delete", c.confirmDeleteTask)
		r.Post("/tasks/{kind}/{id}/delete", c.deleteTask)
		r.Get("/schedule", c.schedule)
		r.Get("/groups", c.groups)
		r.Post("/groups/{gid}/members", c.addMembers)
		r.Post("/groups/{gid}/members/{uid}/delete", c.removeMember)
		r.Get("/clients", c.clients)
		r.Post("/clients/{uid}/keys", c.issueKey)
		r.Post("/clients/{uid}/keys/delete", c.revokeKeys)
		r.Get("/campaigns", c.campaigns)
		r.Post("/campaigns", c.createCampaign)
		r.Post("/campaigns/{id}/{move}", c.moveCampaign)
		r.Get("/stats", c.stats)
		r.Get("/audit", c.audit)
		r.Get("/events", c.events)
	})
	return r
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

// session admits a request with a session cookie (and, on a POST, its CSRF token);
// without one it sends the browser to sign in.
func (c *Console) session(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(cookieName)
		if err != nil || ck.Value == "" {
			http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost && !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(csrfToken(ck.Value))) {
			c.render(w, r, http.StatusForbidden, "error", "Refused", map[string]any{
				"Error": "This form is out of date or did not come from the console (CSRF check). Go back, reload the page and try again."})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, ck.Value)))
	})
}

// csrfToken is what every state-changing form of a session must carry.
func csrfToken(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("taskd console csrf"))
	return hex.EncodeToString(m.Sum(nil))
}

func setSession(w http.ResponseWriter, r *http.Request, token string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: token, Path: "/console/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		// Secure over TLS, here or at a proxy in front that says so (a header a client
		// could forge only makes the cookie stricter).
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
	http.SetCookie(w, &http.Cookie{Name: signInCookie, Value: token, Path: "/console/signin", MaxAge: 3600,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")})
	c.render(w, r, status, "signin", "Sign in", map[string]any{"Message": message, "SignInToken": token})
}

var signInMessages = map[string]string{
	"refused": "Your admin token was not accepted: it is wrong, or it has been revoked. Sign in again.",
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
	setSession(w, r, token, int((12 * time.Hour).Seconds()))
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	setSession(w, r, "", -1)
	http.Redirect(w, r, "/console/signin?m=out", http.StatusSeeOther)
}

// ---- the admin API, called in process ----

// tokenKey holds the session's admin token in a request's context.
type tokenKey struct{}

// sessionToken is the signed-in admin token of r, or "".
func sessionToken(r *http.Request) string {
	t, _ := r.Context().Value(tokenKey{}).(string)
	return t
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
	// A context without the console's route: the API's router routes the call afresh.
	ctx := context.WithValue(r.Context(), chi.RouteCtxKey, nil)
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return result{status: http.StatusBadRequest}
	}
	req.RemoteAddr = r.RemoteAddr
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	rec := &recorder{header: http.Header{}}
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
	res := c.callIfMatch(r, sessionToken(r), method, path, ifMatch, body)
	if res.status == http.StatusUnauthorized {
		setSession(w, r, "", -1)
		http.Redirect(w, r, "/console/signin?m=refused", http.StatusSeeOther)
		return res, false
	}
	return res, true
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
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data map[string]any) {
	v := view{Title: title, Nav: page, Data: data}
	if token := sessionToken(r); token != "" {
		v.SignedIn, v.CSRF = true, csrfToken(token)
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

// prettyJSON shows v as indented JSON, with <, > and & as themselves: the template
// escapes them for HTML, so a param holding <script> reads as it was written.
func prettyJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// showTime shows an RFC 3339 time of the API as UTC, minutes and seconds.
func showTime(s any) string {
	str, _ := s.(string)
	t, err := time.Parse(time.RFC3339Nano, str)
	if err != nil {
		return str
	}
	return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
}

// field is one labelled input of a form, with its value and error.
type field struct{ Name, Label, Type, Value, Error string }

func fieldOf(name, label, typ string, form, errs map[string]string) field {
	return field{Name: name, Label: label, Type: typ, Value: form[name], Error: errs[name]}
}

// inputTime is a time in a datetime-local input's form (UTC, to the second).
func inputTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") }

// parseInputTime reads a datetime-local value, with or without seconds, as UTC.
func parseInputTime(s string) (time.Time, error) {
	t, err := time.Parse("2006-01-02T15:04:05", s)
	if err != nil {
		t, err = time.Parse("2006-01-02T15:04", s)
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
