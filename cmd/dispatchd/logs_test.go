package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/internal/testenv"
)

// During an outage of Redis and MySQL every failed request logs "dependency unavailable"; the log
// carries it once, and the summary written by the time run returns counts the rest:
// every failure is accounted for, none hidden and none lost at shutdown.
func TestOutageWarningsAreCollapsed(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	// A proxy in front of one standalone Redis it can cut: this test runs on the
	// standalone Redis even when the others run on a cluster, and cleans up there.
	standalone := testenv.StandaloneRedisAddr()
	_, prefix := testenv.Redis(t)
	t.Cleanup(func() {
		rdb := goredis.NewClient(&goredis.Options{Addr: standalone})
		defer rdb.Close()
		testenv.DeletePrefix(t, rdb, prefix)
	})
	// Both dependencies are cut: with one away, a fetch is served from the other.
	redis := testenv.NewProxy(t, standalone)
	mcfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := testenv.NewProxy(t, mcfg.Addr)
	mcfg.Addr = db.Addr()
	env := map[string]string{
		"DISPATCH_ADDR":         "127.0.0.1:0",
		"DISPATCH_MYSQL_DSN":    mcfg.FormatDSN(),
		"DISPATCH_REDIS_ADDR":   redis.Addr(),
		"DISPATCH_REDIS_PREFIX": prefix,
		"DISPATCH_ADMIN_TOKEN":  "a-long-admin-token",
	}
	var logs testenv.SyncBuffer
	addr, stop := startDispatchdLogged(t, env, &logs)
	key := enroll(t, addr)
	redis.Cut()
	db.Cut()

	const requests = 12
	var wg sync.WaitGroup
	for range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", "http://"+addr+"/v1/fetch", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("fetch with Redis and MySQL down: %d, want 503", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}

	var written, repeated int
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var rec struct {
			Msg      string `json:"msg"`
			Repeated int    `json:"repeated"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		switch rec.Msg {
		case "dependency unavailable":
			written++
		case "dependency unavailable (repeated)":
			repeated += rec.Repeated
		}
	}
	if written+repeated != requests || written >= requests/2 {
		t.Fatalf("%d failed requests: %d warnings written, %d counted in summaries; want them collapsed and all counted\n%s",
			requests, written, repeated, logs.String())
	}
}
