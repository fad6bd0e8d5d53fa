package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/queue"
)

// Tests of the open doors: revocation that Redis missed, guessing keys, secrets and
// tokens, authentication before parsing, bounded dependency work, 405s that say what
// is allowed.

// refuseKeysChanged makes Redis fail the one script that drops a user's cached key set
// (KEYS: user hash, key set; ARGV: ttl), as a Redis refusing writes would.
type refuseKeysChanged struct {
	on     atomic.Bool
	keySet string
}

func (h *refuseKeysChanged) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *refuseKeysChanged) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *refuseKeysChanged) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if h.on.Load() && len(a) == 6 && (a[0] == "evalsha" || a[0] == "eval") && a[4] == h.keySet {
			cmd.SetErr(&net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET})
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

// A revoked key never keeps working: when Redis cannot be told, the revoke says so, and
// the cached key set is read from MySQL again within the recheck bound.
func TestRevokedKeyStopsWhenRedisCannotBeTold(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.KeyRecheck = time.Second })
	hook := &refuseKeysChanged{keySet: queue.Keys{Prefix: e.prefix}.ClientKeys("1")}
	e.rdb.AddHook(hook)
	k := e.key("1")
	if code, _ := e.do(0, "POST", "/v1/fetch", k, nil); code != 200 {
		t.Fatalf("fetch with a fresh key: %d", code)
	}
	hook.on.Store(true)
	code, out := e.do(0, "DELETE", "/v1/admin/clients/1/keys", adminToken, nil)
	if code != 503 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "cache could not be told") {
		t.Fatalf("revoke while Redis refuses: %d %v", code, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _ := e.do(0, "POST", "/v1/fetch", k, nil)
		if code == 401 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the revoked key still works (%d)", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	hook.on.Store(false)
	if code, out := e.do(0, "DELETE", "/v1/admin/clients/1/keys", adminToken, nil); code != 200 {
		t.Fatalf("revoke again once Redis answers: %d %v", code, out)
	}
}

func wellFormedKey(uid string) string { return uid + "." + strings.Repeat("x", 43) }

// Failed authentications are limited per source address: after the burst, 429 with
// Retry-After, before any lookup is made.
func TestFailedAuthenticationsAreLimitedPerSource(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		try  func(e *env, i int) int
	}{
		{"unknown client keys", func(e *env, i int) int {
			code, _ := e.do(0, "POST", "/v1/fetch", wellFormedKey("nobody"+strconv.Itoa(i)), nil)
			return code
		}},
		{"wrong enroll secret", func(e *env, i int) int {
			code, _ := e.do(0, "POST", "/v1/enroll", "", map[string]any{"uid": "7", "enroll_secret": "guess" + strconv.Itoa(i)})
			return code
		}},
		{"wrong admin token", func(e *env, i int) int {
			code, _ := e.do(0, "GET", "/v1/admin/templates", "guess-"+strconv.Itoa(i), nil)
			return code
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, 1, func(c *app.Config) { c.AuthFailureBurst, c.AuthFailureRate = 5, 0.01 })
			for i := 0; i < 5; i++ {
				if code := tc.try(e, i); code != 401 {
					t.Fatalf("failure %d: %d, want 401", i+1, code)
				}
			}
			for i := 5; i < 8; i++ {
				if code := tc.try(e, i); code != 429 {
					t.Fatalf("failure %d past the burst: %d, want 429", i+1, code)
				}
			}
			req, _ := http.NewRequest("GET", e.urls[0]+"/v1/admin/templates", nil)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			resp, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != 429 || ra < 1 {
				t.Fatalf("the source is turned away with Retry-After: %d %q", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
		})
	}
}

// Enrolling again and again does not pile keys up: the oldest beyond the cap are revoked.
func TestEnrollCapsLiveKeysPerUID(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.KeysPerUID = 2 })
	var keys []string
	for i := 0; i < 3; i++ {
		code, out := e.do(0, "POST", "/v1/enroll", "", map[string]any{"uid": "7", "enroll_secret": "enroll-secret"})
		if code != 200 {
			t.Fatalf("enroll: %d %v", code, out)
		}
		keys = append(keys, out["client_key"].(string))
	}
	for i, want := range []int{401, 200, 200} {
		if code, _ := e.do(0, "POST", "/v1/fetch", keys[i], nil); code != want {
			t.Errorf("key %d: %d, want %d", i+1, code, want)
		}
	}
	if n := e.count("SELECT COUNT(*) FROM client_key WHERE uid = '7' AND revoked_at IS NULL"); n != 2 {
		t.Fatalf("%d live keys, want 2", n)
	}
}

// A malformed body from someone without a valid key is a 401, not a 400: authentication
// comes first.
func TestAuthenticationComesBeforeParsing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	good := e.key("1")
	for _, path := range []string{"/v1/fetch", "/v1/complete"} {
		if code, out := e.do(0, "POST", path, wellFormedKey("1"), "{not json"); code != 401 {
			t.Errorf("%s, bad key and bad body: %d %v, want 401", path, code, out)
		}
		if code, _ := e.do(0, "POST", path, good, "{not json"); code != 400 {
			t.Errorf("%s, good key and bad body: %d, want 400", path, code)
		}
	}
}

// While MySQL stalls (here: a row lock held elsewhere), a request answers 503 with
// Retry-After once its dependency bound runs out, instead of hanging; a long poll's wait
// is not dependency work.
func TestDependencyWorkIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.RequestTimeout = 300 * time.Millisecond })
	id := e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute))})
	k := e.key("1")
	idle := e.key("2")

	tx, err := e.store.DB().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("SELECT id FROM task_once WHERE id = ? FOR UPDATE", strings.TrimPrefix(id, "once:")); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 20 * time.Second}
	for _, c := range []struct{ method, path, token, body string }{
		{"POST", "/v1/fetch", k, ""},
		{"PATCH", "/v1/admin/tasks/once/" + strings.TrimPrefix(id, "once:"), adminToken, `{"priority": 7}`},
	} {
		req, _ := http.NewRequest(c.method, e.urls[0]+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s while MySQL stalls: %v", c.method, c.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s %s while MySQL stalls: %d Retry-After %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	code, out := e.do(0, "POST", "/v1/fetch", idle, map[string]any{"wait_ms": 1000})
	if code != 200 || out["task"] != nil {
		t.Fatalf("a long poll longer than the bound: %d %v", code, out)
	}
	tx.Rollback()
	if r := mustFetch(t, e, k); r.TaskID != id {
		t.Fatalf("after the stall: %+v", r)
	}
}

// Every 405 says which methods the path takes.
func TestMethodNotAllowedCarriesAllow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	for path, want := range map[string]string{
		"/v1/fetch":                  "POST",
		"/v1/admin/templates":        "GET, POST",
		"/v1/admin/tasks/once/1":     "GET, PUT, PATCH, DELETE",
		"/v1/admin/groups/g/members": "GET, POST, PUT",
	} {
		req, _ := http.NewRequest("HEAD", e.urls[0]+path, nil)
		if path == "/v1/fetch" || path == "/v1/admin/templates" {
			req.Method = "PATCH"
		}
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != want {
			t.Errorf("%s %s: %d Allow %q, want 405 %q", req.Method, path, resp.StatusCode, resp.Header.Get("Allow"), want)
		}
	}
}

// JSON replies are read by programs: "<", ">" and "&" come back as themselves.
func TestRepliesDoNotEscapeHTML(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	body := `{"name": "a<b> & c", "schema": {"type": "object"}}`
	req, _ := http.NewRequest("POST", e.urls[0]+"/v1/admin/templates", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || !strings.Contains(string(raw), `"name":"a<b> & c"`) {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
}

// A uid that looks like an executor is refused at enrollment, as the admin paths refuse
// it: its keys could never be revoked by its bare id.
func TestEnrollRefusesPrefixedUID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	code, out := e.do(0, "POST", "/v1/enroll", "", map[string]any{"uid": "uid_5", "enroll_secret": "enroll-secret"})
	if code != 400 {
		t.Fatalf("enroll uid_5: %d %v", code, out)
	}
}

// After Redis lost its data, a node rebuilds heaps at its bounded rate: a poll past the
// budget answers 503 unavailable with a jittered Retry-After and reads nothing from
// MySQL; polls of users whose heap is warm go on.
func TestRebuildBudgetTurnsPollsAway(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.RebuildRate, c.RebuildBurst = 0.001, 3 })
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Hour))})
	keys := map[string]string{}
	for _, uid := range []string{"1", "2", "3", "4"} {
		keys[uid] = e.key(uid)
	}
	for _, uid := range []string{"1", "2", "3"} {
		if code, out := e.do(0, "POST", "/v1/fetch", keys[uid], nil); code != 200 {
			t.Fatalf("cold fetch of %s within the burst: %d %v", uid, code, out)
		}
	}
	req, _ := http.NewRequest("POST", e.urls[0]+"/v1/fetch", nil)
	req.Header.Set("Authorization", "Bearer "+keys["4"])
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct{ Code, Message string }
	}
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != 503 || body.Error.Code != "unavailable" || ra < 1 || ra > 3 {
		t.Fatalf("cold fetch past the budget: %d %+v Retry-After %q; want 503 unavailable, 1..3 s",
			resp.StatusCode, body.Error, resp.Header.Get("Retry-After"))
	}
	if n := e.loaders[0].rebuilds.Load(); n != 3 {
		t.Fatalf("%d heap rebuilds read MySQL, want 3", n)
	}
	if code, _ := e.do(0, "POST", "/v1/fetch", keys["1"], nil); code != 200 {
		t.Fatalf("a warm user's poll past the budget: %d, want 200", code)
	}
	// Redis loses everything: the warm user is cold again, and turned away too.
	testenv.DeletePrefix(t, e.rdb, e.prefix)
	if code, _ := e.do(0, "POST", "/v1/fetch", keys["1"], nil); code != 503 {
		t.Fatalf("after Redis lost its data, a poll past the budget: %d, want 503", code)
	}
	if n := e.loaders[0].rebuilds.Load(); n != 3 {
		t.Fatalf("%d heap rebuilds read MySQL, want still 3", n)
	}
}
