package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/testenv"
)

func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"DISPATCH_CATCH_UP": "soon"}, nil, "DISPATCH_CATCH_UP"},
		{map[string]string{"DISPATCH_REDIS_DB": "99"}, nil, "DISPATCH_REDIS_DB"},
		{nil, []string{"-catch-up", "-1h"}, "DISPATCH_CATCH_UP"},
		{map[string]string{"DISPATCH_ADMIN_TOKEN": "short"}, nil, "DISPATCH_ADMIN_TOKEN"},
		{nil, []string{"-no-such-flag"}, "no-such-flag"},
	} {
		getenv := func(k string) string { return c.env[k] }
		err := run(t.Context(), c.args, getenv, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("env %v args %v: err %v, want it to name %s", c.env, c.args, err, c.want)
		}
	}
}

// The binary's run starts on the embedded defaults it is given, serves, and shuts down
// gracefully when its context ends.
func TestRunServesAndShutsDown(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	_, prefix := testenv.Redis(t)
	env := map[string]string{
		"DISPATCH_ADDR":         "127.0.0.1:0",
		"DISPATCH_MYSQL_DSN":    dsn,
		"DISPATCH_REDIS_PREFIX": prefix,
		"DISPATCH_ADMIN_TOKEN":  "a-long-admin-token",
	}
	addr, stop := startDispatchd(t, withTestRedis(env))
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/admin/templates", nil)
	req.Header.Set("Authorization", "Bearer a-long-admin-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("admin with token: %v %v", resp, err)
	}
	resp.Body.Close()

	// a request in flight when the shutdown starts still gets its answer
	slow, _ := http.NewRequest("POST", "http://"+addr+"/v1/fetch", bytes.NewBufferString(`{"wait_ms": 1000}`))
	key := enroll(t, addr)
	slow.Header.Set("Authorization", "Bearer "+key)
	got := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(slow)
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	time.Sleep(200 * time.Millisecond) // let the long poll reach the server
	shutdown := make(chan error, 1)
	go func() { shutdown <- stop() }()
	if code := <-got; code != 200 {
		t.Fatalf("in-flight request during shutdown: %d", code)
	}
	if err := <-shutdown; err != nil {
		t.Fatalf("run: %v", err)
	}
}

// withTestRedis adds to env the settings that reach the test Redis (standalone or the
// cluster of TASKD_TEST_REDIS_CLUSTER), where testenv.Redis cleans up.
func withTestRedis(env map[string]string) map[string]string {
	for _, kv := range testenv.RedisEnv() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// startDispatchd runs the binary's run with env on its own goroutine and returns the
// address it listens on and a stop function that cancels it and returns run's error.
func startDispatchd(t *testing.T, env map[string]string) (addr string, stop func() error) {
	t.Helper()
	return startDispatchdLogged(t, env, io.Discard)
}

// startDispatchdLogged is startDispatchd with run's log going to stderr.
func startDispatchdLogged(t *testing.T, env map[string]string, stderr io.Writer) (addr string, stop func() error) {
	t.Helper()
	if env["DISPATCH_ARTIFACT_DIR"] == "" { // not in the package's directory
		env["DISPATCH_ARTIFACT_DIR"] = t.TempDir()
	}
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, nil, func(k string) string { return env[k] }, pw, stderr)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("dispatchd did not start: %v (%v)", err, <-errc)
	}
	go io.Copy(io.Discard, pr)
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-errc
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	return strings.TrimSpace(strings.TrimPrefix(line, "dispatchd listening on ")), stop
}

func enroll(t *testing.T, addr string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/admin/clients/7/keys", nil)
	req.Header.Set("Authorization", "Bearer a-long-admin-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	s := string(b)
	i := strings.Index(s, `"client_key":"`)
	if i < 0 {
		t.Fatalf("issue key: %s", s)
	}
	s = s[i+len(`"client_key":"`):]
	return s[:strings.Index(s, `"`)]
}

func slogDiscard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The start-up log says where the console is, as a browser on the machine opens it.
func TestConsoleURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"[::]:8080":      "http://localhost:8080/console/",
		"0.0.0.0:8080":   "http://localhost:8080/console/",
		"127.0.0.1:9000": "http://127.0.0.1:9000/console/",
		"[::1]:9000":     "http://[::1]:9000/console/",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := consoleURL(a); got != want {
			t.Errorf("consoleURL(%s) = %s, want %s", addr, got, want)
		}
	}
}
