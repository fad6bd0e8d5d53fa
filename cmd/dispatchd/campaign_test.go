package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/testenv"
)

// A 100,000-item campaign worked by 50 agents across two dispatchd processes; one is
// killed with SIGKILL midway and restarted, its campaign runner moving to the other
// within the node timeout; the campaign is paused, resumed, stopped and started again
// during the run. At the end every item is done once in the count, the items handed
// out more than once are within the window, and the handouts kept to the rate.
func TestCampaignAcrossKilledDispatchd(t *testing.T) {
	t.Parallel()
	dir := buildTools(t)
	const (
		total  = 100_000
		agents = 50
		rate   = 4000.0
		window = 2000
		token  = "campaign-test-token"
	)
	dsn := testenv.MySQLDSN(t)
	_, prefix := testenv.Redis(t)
	env := func(node string) []string {
		return append(slices.Concat(childEnv(), testenv.RedisEnv()),
			"DISPATCH_ADDR=127.0.0.1:0", "DISPATCH_MYSQL_DSN="+dsn, "DISPATCH_REDIS_PREFIX="+prefix,
			"DISPATCH_ADMIN_TOKEN="+token, "DISPATCH_MYSQL_CONNS=4", "DISPATCH_REQUEST_TIMEOUT=30s",
			"DISPATCH_NODE="+node, "DISPATCH_NODE_HEARTBEAT=500ms", "DISPATCH_NODE_TIMEOUT=3s",
			"DISPATCH_CAMPAIGN_SYNC=200ms", "DISPATCH_POLL_RATE=10000", "DISPATCH_POLL_BURST=10000")
	}
	a, urlA := startProcess(t, dir, env("node-a"))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}, Timeout: 30 * time.Second}
	call := func(url, method, path, bearer string, body any) (int, map[string]any, error) {
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, url+path, r)
		req.Header.Set("Authorization", "Bearer "+bearer)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out, nil
	}
	admin := func(method, path string, body any) map[string]any {
		t.Helper()
		code, out, err := call(urlA, method, path, token, body)
		if err != nil || code >= 300 {
			t.Fatalf("%s %s: %d %v %v", method, path, code, out, err)
		}
		return out
	}
	uids := make([]string, agents)
	for i := range uids {
		uids[i] = fmt.Sprintf("agent%02d", i)
	}
	admin("PUT", "/v1/admin/groups/workers/members", map[string]any{"uids": uids})
	keys := make([]string, agents)
	for i, u := range uids {
		keys[i] = admin("POST", "/v1/admin/clients/"+u+"/keys", nil)["client_key"].(string)
		admin("PUT", "/v1/admin/clients/"+u, map[string]any{"max_in_flight": 10})
	}
	tpl := admin("POST", "/v1/admin/templates", map[string]any{"name": "t", "schema": map[string]any{"type": "object"}})
	c := admin("POST", "/v1/admin/campaigns", map[string]any{"name": "big", "template_id": tpl["id"], "executor": "gid_workers",
		"items": map[string]any{"count": total}, "rate_per_second": rate, "window": window, "lease_seconds": 5})
	path := fmt.Sprintf("/v1/admin/campaigns/%d", int64(c["id"].(float64)))
	role := fmt.Sprintf("campaign:%d", int64(c["id"].(float64)))
	admin("POST", path+"/start", nil)
	holder := func(url string) string {
		_, out, err := call(url, "GET", "/v1/admin/nodes", token, nil)
		if err != nil {
			return ""
		}
		nodes, _ := out["nodes"].([]any)
		for _, n := range nodes {
			n := n.(map[string]any)
			if strings.Contains(fmt.Sprint(n["roles"]), role) {
				return n["node"].(string)
			}
		}
		return ""
	}
	waitFor := func(what string, limit time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, limit)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("node-a runs the campaign", 10*time.Second, func() bool { return holder(urlA) == "node-a" })
	_, urlB := startProcess(t, dir, env("node-b"))
	urls := []string{urlA, urlB}

	// The agents: fetch up to 10 items, complete each; on a connection error, the other
	// server.
	var handouts, completes atomic.Int64
	var mu sync.Mutex
	seen := map[int64]int{}
	var stop atomic.Bool
	var wg sync.WaitGroup
	started := time.Now()
	for i := range agents {
		wg.Go(func() {
			server := i % 2
			for !stop.Load() {
				code, out, err := call(urls[server], "POST", "/v1/fetch", keys[i], map[string]any{"max": 10, "wait_ms": 200})
				if err != nil || code == 503 {
					server = 1 - server
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if code != 200 {
					t.Errorf("fetch: %d %v", code, out)
					return
				}
				tasks, _ := out["tasks"].([]any)
				for _, x := range tasks {
					// A redo is an item the user holds; the first time the agent sees it
					// (its first reply was lost with the killed server), it counts.
					it := x.(map[string]any)
					item := int64(it["item"].(float64))
					mu.Lock()
					if it["redo"] != true || seen[item] == 0 {
						handouts.Add(1)
						seen[item]++
					}
					mu.Unlock()
				}
				for _, x := range tasks {
					it := x.(map[string]any)
					for {
						code, out, err := call(urls[server], "POST", "/v1/complete", keys[i], map[string]any{"log_id": it["log_id"], "result": "success"})
						if err != nil || code == 503 {
							server = 1 - server
							time.Sleep(50 * time.Millisecond)
							continue
						}
						if code == 200 {
							completes.Add(1)
						} else if code != 409 { // 409: the lease ran out while its server was down
							t.Errorf("complete: %d %v", code, out)
						}
						break
					}
				}
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	done := func() int64 {
		_, out, err := call(urlB, "GET", path, token, nil)
		if err != nil {
			return 0
		}
		n, _ := out["done"].(float64)
		return int64(n)
	}

	waitFor("30,000 done", 2*time.Minute, func() bool { return done() >= 30_000 })
	a.Process.Signal(syscall.SIGKILL)
	a.Wait()
	waitFor("node-b takes the campaign over", 3*time.Second+5*time.Second, func() bool { return holder(urlB) == "node-b" })
	envA := append(env("node-a"), "DISPATCH_ADDR="+strings.TrimPrefix(urlA, "http://"))
	startProcess(t, dir, envA)

	waitFor("50,000 done", 2*time.Minute, func() bool { return done() >= 50_000 })
	moveB := func(m string) map[string]any {
		code, out, err := call(urlB, "POST", path+"/"+m, token, nil)
		if err != nil || code != 200 {
			t.Fatalf("%s: %d %v %v", m, code, out, err)
		}
		return out
	}
	moveB("pause")
	time.Sleep(time.Second) // the items in flight are completed
	before := handouts.Load()
	time.Sleep(time.Second)
	if got := handouts.Load() - before; got != 0 {
		t.Fatalf("%d items handed out while paused", got)
	}
	moveB("resume")
	waitFor("70,000 done", 2*time.Minute, func() bool { return done() >= 70_000 })
	moveB("stop")
	waitFor("stopped", 30*time.Second, func() bool {
		_, out, _ := call(urlB, "GET", path, token, nil)
		return out["state"] == "stopped"
	})
	moveB("start")
	waitFor("finished", 3*time.Minute, func() bool {
		_, out, _ := call(urlB, "GET", path, token, nil)
		return out["state"] == "finished"
	})
	elapsed := time.Since(started)
	stop.Store(true)
	wg.Wait()

	_, final, _ := call(urlB, "GET", path, token, nil)
	if final["done"].(float64) != total || final["failed"].(float64) != 0 || final["offset"].(float64) != total {
		t.Fatalf("final count: %v", final)
	}
	if len(seen) != total {
		t.Fatalf("%d distinct items handed out, want %d", len(seen), total)
	}
	again := handouts.Load() - total
	if again > window {
		t.Fatalf("%d items handed out again, more than the window (%d)", again, window)
	}
	// Every handout took a token: over the run's span, the rate plus one bucket.
	if min := time.Duration(float64(handouts.Load()-int64(rate)) / rate * float64(time.Second)); elapsed < min {
		t.Fatalf("%d handouts in %v: faster than %v/s plus a bucket (at least %v)", handouts.Load(), elapsed, rate, min)
	}
	t.Logf("%d items, %d handouts (%d again), %d completes acknowledged, in %v (%.0f items/s, rate %v)",
		total, handouts.Load(), again, completes.Load(), elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), rate)
}
