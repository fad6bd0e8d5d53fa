package app_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/testenv"
)

// With DISPATCH_REDIS_MODE=sentinel the server finds its master through the sentinels:
// here one sentinel of the test's own, watching the test Redis under a name of its own
// (a sentinel with no replica to promote changes nothing on the master).
func TestRedisThroughSentinel(t *testing.T) {
	if testenv.RedisCluster() != "" {
		t.Skip("a sentinel watches a standalone master; this run's Redis is a cluster")
	}
	t.Parallel()
	master := os.Getenv("TASKD_TEST_REDIS_ADDR")
	if master == "" {
		master = "127.0.0.1:6379"
	}
	host, port, _ := net.SplitHostPort(master)
	sentinel := startSentinel(t, fmt.Sprintf("sentinel monitor taskdtest%s %s %s 1\n", testenv.Suffix(), host, port))
	name := strings.Fields(sentinel.conf)[2]

	cfg, err := app.LoadConfig(nil, func(k string) string {
		return map[string]string{"DISPATCH_REDIS_MODE": "sentinel", "DISPATCH_REDIS_ADDR": sentinel.addr,
			"DISPATCH_REDIS_MASTER_NAME": name}[k]
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rdb := app.NewRedis(cfg)
	defer rdb.Close()
	key := "taskdtest:" + testenv.Suffix() + ":sentinel"
	if err := rdb.Set(t.Context(), key, "through the sentinel", time.Minute).Err(); err != nil {
		t.Fatalf("write through the sentinel's master: %v", err)
	}
	defer rdb.Del(t.Context(), key)
	direct := testenv.RedisClient(t)
	defer direct.Close()
	if got, err := direct.Get(t.Context(), key).Result(); err != nil || got != "through the sentinel" {
		t.Fatalf("the master the sentinel named is not the test Redis: %q, %v", got, err)
	}
}

type sentinelProc struct{ addr, conf string }

// startSentinel runs `redis-server <conf> --sentinel` on a free loopback port, stopped
// when t ends.
func startSentinel(t *testing.T, conf string) sentinelProc {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte("port "+port+"\nbind 127.0.0.1\ndir "+dir+"\n"+conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", path, "--sentinel")
	out := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server --sentinel (Debian's redis-server package): %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel did not listen on %s:\n%s", addr, out.String())
		}
	}
	return sentinelProc{addr: addr, conf: conf}
}
