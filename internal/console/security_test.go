package console_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/console"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/queue"
)

const adminToken = "console-security-token"

// shared is what the nodes of one deployment share: the database, Redis and the key
// prefix.
type shared struct {
	store  *store.Store
	rdb    redis.UniversalClient
	prefix string
}

func newShared(t *testing.T) shared {
	rdb, prefix := testenv.Redis(t)
	return shared{store: testenv.Store(t), rdb: rdb, prefix: prefix}
}

// startNode starts one node of the deployment with the admin tokens given (name=secret)
// and clk, and returns its base URL.
func startNode(t *testing.T, sh shared, clk clock.Clock, tokens ...string) string {
	t.Helper()
	return startNodeWith(t, sh, clk, nil, tokens...)
}

// startNodeWith is startNode with the config changed by tweak (nil: as it is). Its
// artifacts go to a directory of the test's.
func startNodeWith(t *testing.T, sh shared, clk clock.Clock, tweak func(*app.Config), tokens ...string) string {
	t.Helper()
	cfg := app.Config{RedisPrefix: sh.prefix, CatchUp: time.Hour, AdminTokens: tokens,
		MaxWait: time.Second, SweepInterval: time.Second, Node: "console-" + testenv.Suffix(), RequestTimeout: time.Minute,
		ArtifactDir: t.TempDir()}
	if tweak != nil {
		tweak(&cfg)
	}
	a := app.New(cfg, app.Deps{Store: sh.store, Redis: sh.rdb, Clock: clk,
		Log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))})
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// browser sends requests as a browser would, one at a time, without following
// redirects (the tests look at where they go).
var browser = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// reply is a response with its body read.
type reply struct {
	*http.Response
	body string
}

// send makes a request with the cookies given (name=value) and, for a POST, the form.
func send(t *testing.T, method, u string, form url.Values, header http.Header, cookies ...*http.Cookie) reply {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, c := range cookies {
		req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	}
	res, err := browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{res, string(b)}
}

func cookieOf(res reply, name string) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

var (
	signInField = regexp.MustCompile(`name="signin" value="([^"]+)"`)
	csrfField   = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// signIn signs in on the node at base with token, as the sign-in form does, and
// returns the session cookie and the CSRF token its pages carry. header goes with
// every request (an X-Forwarded-Proto, say).
func signIn(t *testing.T, base, token string, header http.Header) (*http.Cookie, string) {
	t.Helper()
	form := send(t, http.MethodGet, base+"/console/signin", nil, header)
	m := signInField.FindStringSubmatch(form.body)
	formCookie := cookieOf(form, "taskd_console_signin")
	if m == nil || formCookie == nil {
		t.Fatalf("sign-in form: no token or no cookie:\n%s", form.body)
	}
	res := send(t, http.MethodPost, base+"/console/signin", url.Values{"signin": {m[1]}, "token": {token}}, header, formCookie)
	session := cookieOf(res, "taskd_console")
	if res.StatusCode != http.StatusSeeOther || session == nil || session.Value == "" {
		t.Fatalf("sign in: %d, session cookie %v:\n%s", res.StatusCode, session, res.body)
	}
	page := send(t, http.MethodGet, base+"/console/", nil, header, session)
	m = csrfField.FindStringSubmatch(page.body)
	if page.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("dashboard after sign-in: %d:\n%s", page.StatusCode, page.body)
	}
	return session, m[1]
}

// wantSignIn fails t unless res sends the browser to the sign-in page.
func wantSignIn(t *testing.T, what string, res reply) {
	t.Helper()
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/console/signin") {
		t.Fatalf("%s: %d to %q, want a redirect to sign-in", what, res.StatusCode, res.Header.Get("Location"))
	}
}

// A session is a random id, not the admin token: each sign-in has an id and a CSRF
// token of its own, and one session's CSRF token is no good with another's.
func TestSessionIsRandomNotTheToken(t *testing.T) {
	t.Parallel()
	base := startNode(t, newShared(t), clock.Real{}, "ops="+adminToken)
	s1, csrf1 := signIn(t, base, adminToken, nil)
	s2, csrf2 := signIn(t, base, adminToken, nil)
	if strings.Contains(s1.Value, adminToken) || strings.Contains(s2.Value, adminToken) {
		t.Fatalf("the session cookie holds the admin token: %q", s1.Value)
	}
	if s1.Value == s2.Value || csrf1 == csrf2 {
		t.Fatalf("two sign-ins share a session id or a CSRF token: %q %q, %q %q", s1.Value, s2.Value, csrf1, csrf2)
	}
	if len(s1.Value) < 32 {
		t.Fatalf("session id %q is too short to be unguessable", s1.Value)
	}
	res := send(t, http.MethodPost, base+"/console/signout", url.Values{"csrf": {csrf1}}, nil, s2)
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-out of session 2 with session 1's CSRF token: %d, want 403", res.StatusCode)
	}
	if res := send(t, http.MethodGet, base+"/console/templates", nil, nil, s2); res.StatusCode != http.StatusOK {
		t.Fatalf("session 2 after the refused sign-out: %d", res.StatusCode)
	}
}

// Sign-out ends the session on the server: its cookie and CSRF token, replayed, go back
// to sign-in and change nothing. So does a session id the server never gave out.
func TestSignOutRevokesTheSession(t *testing.T) {
	t.Parallel()
	base := startNode(t, newShared(t), clock.Real{}, "ops="+adminToken)
	session, csrf := signIn(t, base, adminToken, nil)
	other, _ := signIn(t, base, adminToken, nil)
	res := send(t, http.MethodPost, base+"/console/signout", url.Values{"csrf": {csrf}}, nil, session)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/console/signin?m=out" {
		t.Fatalf("sign out: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	wantSignIn(t, "the signed-out cookie", send(t, http.MethodGet, base+"/console/templates", nil, nil, session))
	res = send(t, http.MethodPost, base+"/console/templates", url.Values{"csrf": {csrf}, "name": {"after-signout"},
		"schema": {`{"type": "object"}`}}, nil, session)
	wantSignIn(t, "a form posted with the signed-out cookie and its CSRF token", res)
	if res := send(t, http.MethodGet, base+"/console/templates", nil, nil, other); res.StatusCode != http.StatusOK ||
		strings.Contains(res.body, "after-signout") {
		t.Fatalf("another session: %d, or the signed-out session created a template:\n%s", res.StatusCode, res.body)
	}
	unknown := make([]byte, 32)
	rand.Read(unknown)
	wantSignIn(t, "an unknown session id", send(t, http.MethodGet, base+"/console/", nil, nil,
		&http.Cookie{Name: "taskd_console", Value: hex.EncodeToString(unknown)}))
}

// A session ends 12 hours after its sign-in, however busy.
func TestSessionEndsAfterItsLifetime(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	base := startNode(t, newShared(t), clk, "ops="+adminToken)
	session, _ := signIn(t, base, adminToken, nil)
	for i := range 12 {
		clk.Advance(59 * time.Minute)
		if res := send(t, http.MethodGet, base+"/console/templates", nil, nil, session); res.StatusCode != http.StatusOK {
			t.Fatalf("a session in use, %d×59 min after sign-in: %d", i+1, res.StatusCode)
		}
	}
	clk.Advance(13 * time.Minute) // 12 h 01 min
	wantSignIn(t, "a session 12 hours old", send(t, http.MethodGet, base+"/console/templates", nil, nil, session))
}

// Redis holds the session under the deployment's prefix, at the hash of its id (not
// the id), without the admin token, expiring when idle; each request renews the idle
// timeout.
func TestSessionInRedisExpiresWhenIdle(t *testing.T) {
	t.Parallel()
	sh := newShared(t)
	base := startNode(t, sh, clock.Real{}, "ops="+adminToken)
	session, _ := signIn(t, base, adminToken, nil)
	keys := queue.Keys{Prefix: sh.prefix}
	sum := sha256.Sum256([]byte(session.Value))
	key := keys.ConsoleSession(hex.EncodeToString(sum[:]))
	if n, err := sh.rdb.Exists(t.Context(), keys.ConsoleSession(session.Value)).Result(); err != nil || n != 0 {
		t.Fatalf("a key named by the session id itself: %d %v", n, err)
	}
	val, err := sh.rdb.Get(t.Context(), key).Result()
	if err != nil {
		t.Fatalf("the session in Redis: %v", err)
	}
	if strings.Contains(val, adminToken) || strings.Contains(val, session.Value) {
		t.Fatalf("Redis holds the admin token or the session id: %s", val)
	}
	ttl := sh.rdb.TTL(t.Context(), key).Val()
	if ttl <= 0 || ttl > console.DefaultIdleTimeout {
		t.Fatalf("the session's TTL is %s, want at most the idle timeout %s", ttl, console.DefaultIdleTimeout)
	}
	sh.rdb.Expire(t.Context(), key, time.Minute)
	if res := send(t, http.MethodGet, base+"/console/templates", nil, nil, session); res.StatusCode != http.StatusOK {
		t.Fatalf("templates: %d", res.StatusCode)
	}
	if ttl := sh.rdb.TTL(t.Context(), key).Val(); ttl <= time.Minute {
		t.Fatalf("a request did not renew the idle timeout: TTL %s", ttl)
	}
	sh.rdb.Del(t.Context(), key) // as the TTL does
	wantSignIn(t, "an idle session", send(t, http.MethodGet, base+"/console/templates", nil, nil, session))
}

// A session works on every node of the deployment (they share Redis), and ends on
// all of them once its admin token is rotated out of DISPATCH_ADMIN_TOKEN, though its
// name stays.
func TestSessionAcrossNodesEndsWhenItsTokenIsRotatedOut(t *testing.T) {
	t.Parallel()
	sh := newShared(t)
	const next = "console-security-token-next"
	a := startNode(t, sh, clock.Real{}, "ops="+adminToken, "ops2="+next)
	b := startNode(t, sh, clock.Real{}, "ops="+adminToken, "ops2="+next)
	rotated := startNode(t, sh, clock.Real{}, "ops="+next)
	session, csrf := signIn(t, a, adminToken, nil)
	res := send(t, http.MethodPost, b+"/console/templates", url.Values{"csrf": {csrf}, "name": {"from-b"},
		"schema": {`{"type": "object"}`}}, nil, session)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/console/templates" {
		t.Fatalf("a form posted to another node: %d to %q:\n%s", res.StatusCode, res.Header.Get("Location"), res.body)
	}
	res = send(t, http.MethodGet, rotated+"/console/templates", nil, nil, session)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/console/signin?m=refused" {
		t.Fatalf("a node that no longer accepts the token: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	wantSignIn(t, "the session on a node with the old token, after", send(t, http.MethodGet, a+"/console/templates", nil, nil, session))
	fresh, _ := signIn(t, rotated, next, nil)
	if res := send(t, http.MethodGet, a+"/console/templates", nil, nil, fresh); res.StatusCode != http.StatusOK {
		t.Fatalf("a session of the new token on another node: %d", res.StatusCode)
	}
}

// The cookie that hands a new client key to the page that shows it is Secure behind a
// proxy that terminates TLS, as the session cookie is.
func TestIssuedKeyCookieSecureBehindTLSProxy(t *testing.T) {
	t.Parallel()
	base := startNode(t, newShared(t), clock.Real{}, "ops="+adminToken)
	https := http.Header{"X-Forwarded-Proto": {"https"}}
	session, csrf := signIn(t, base, adminToken, https)
	res := send(t, http.MethodPost, base+"/console/clients/9/keys", url.Values{"csrf": {csrf}}, https, session)
	issued := cookieOf(res, "taskd_console_issued")
	if res.StatusCode != http.StatusSeeOther || issued == nil {
		t.Fatalf("issue a key: %d, cookie %v:\n%s", res.StatusCode, issued, res.body)
	}
	if !issued.Secure || !issued.HttpOnly {
		t.Fatalf("the one-time key cookie behind a TLS proxy: %s, want Secure and HttpOnly", issued)
	}
	shown := send(t, http.MethodGet, base+"/console/clients?uid=9", nil, https, session, issued)
	if !strings.Contains(shown.body, `id="new-key" value="9.`) {
		t.Fatalf("the key is not shown:\n%s", shown.body)
	}
	if cleared := cookieOf(shown, "taskd_console_issued"); cleared == nil || cleared.MaxAge >= 0 || !cleared.Secure {
		t.Fatalf("the page that shows the key clears its cookie: %v", cleared)
	}
}

// The console's static files are served, their directory is not listed.
func TestStaticDirectoryNotListed(t *testing.T) {
	t.Parallel()
	base := startNode(t, newShared(t), clock.Real{}, "ops="+adminToken)
	for _, path := range []string{"/console/static/", "/console/static", "/console/static/.", "/console/static//"} {
		if res := send(t, http.MethodGet, base+path, nil, nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404:\n%.300s", path, res.StatusCode, res.body)
		}
	}
	res := send(t, http.MethodGet, base+"/console/static/console.css", nil, nil)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/css") {
		t.Fatalf("GET console.css: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
}

// An audit entry holding a value nested 7,000 deep (an agent's checkpoint, stored
// before the server capped nesting) makes a small page: JSON is shown compact and cut
// at a few KiB, with a note saying so.
func TestDeepJSONInTheAuditLogMakesASmallPage(t *testing.T) {
	t.Parallel()
	sh := newShared(t)
	base := startNode(t, sh, clock.Real{}, "ops="+adminToken)
	session, _ := signIn(t, base, adminToken, nil)
	const depth = 7000
	deep := `{"checkpoint":` + strings.Repeat(`{"a":`, depth) + `"<b>bottom</b>"` + strings.Repeat("}", depth) + `}`
	if _, err := sh.store.DB().ExecContext(t.Context(), `INSERT INTO audit_log (at, actor, action, target, before_json, after_json)
		VALUES (?, 'agent', 'dispatch.retry', 'once:1', ?, ?)`, time.Now().UTC(), deep, `{"params":{"url":"<i>x</i>"}}`); err != nil {
		t.Fatal(err)
	}
	res := send(t, http.MethodGet, base+"/console/audit", nil, nil, session)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("audit page: %d:\n%.500s", res.StatusCode, res.body)
	}
	t.Logf("the audit page: %d bytes", len(res.body))
	if len(res.body) > 64<<10 {
		t.Fatalf("the audit page is %d bytes for one entry", len(res.body))
	}
	if !regexp.MustCompile(`… \(truncated, \d+ bytes\)`).MatchString(res.body) {
		t.Fatalf("no truncation note on the page:\n%.2000s", res.body)
	}
	if !strings.Contains(res.body, `{&#34;params&#34;:{&#34;url&#34;:&#34;&lt;i&gt;x&lt;/i&gt;&#34;}}`) {
		t.Fatalf("a small value is not shown whole and compact:\n%s", res.body)
	}
}
