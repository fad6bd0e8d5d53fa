package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/testenv"
)

// A node that stops cleanly while it runs campaigns (their syncs going on every few
// milliseconds) logs no warning or error, and is gone from the other node's
// GET /v1/admin/nodes as soon as its run returns, long before the node timeout. It is
// stopped three times over, its syncs caught at different points.
func TestCleanStopLogsNothingAndLeaves(t *testing.T) {
	t.Parallel()
	const token = "stop-test-token"
	dsn := testenv.MySQLDSN(t)
	_, prefix := testenv.Redis(t)
	env := func(node string) map[string]string {
		return withTestRedis(map[string]string{
			"DISPATCH_ADDR": "127.0.0.1:0", "DISPATCH_MYSQL_DSN": dsn, "DISPATCH_REDIS_PREFIX": prefix,
			"DISPATCH_ADMIN_TOKEN": token, "DISPATCH_MYSQL_CONNS": "4", "DISPATCH_NODE": node,
			// A node that failed to leave stays listed for a minute: the test sees it.
			"DISPATCH_NODE_HEARTBEAT": "100ms", "DISPATCH_NODE_TIMEOUT": "1m",
			"DISPATCH_CAMPAIGN_SYNC": "5ms",
		})
	}
	call := func(addr, method, path string, body any) map[string]any {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, "http://"+addr+path, r)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %v", method, path, resp.StatusCode, out)
		}
		return out
	}
	// roles are the listed nodes' roles, as node addr lists them.
	roles := func(addr string) map[string]string {
		t.Helper()
		out := map[string]string{}
		nodes, _ := call(addr, "GET", "/v1/admin/nodes", nil)["nodes"].([]any)
		for _, n := range nodes {
			n := n.(map[string]any)
			out[n["node"].(string)] = fmt.Sprint(n["roles"])
		}
		return out
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	addrB, _ := startDispatchd(t, env("node-b"))
	call(addrB, "PUT", "/v1/admin/groups/workers/members", map[string]any{"uids": []string{"agent"}})
	tpl := call(addrB, "POST", "/v1/admin/templates", map[string]any{"name": "t", "schema": map[string]any{"type": "object"}})
	for i := range 4 {
		c := call(addrB, "POST", "/v1/admin/campaigns", map[string]any{"name": fmt.Sprintf("c%d", i), "template_id": tpl["id"],
			"executor": "gid_workers", "items": map[string]any{"count": 1000}, "rate_per_second": 100, "window": 100, "lease_seconds": 5})
		call(addrB, "POST", fmt.Sprintf("/v1/admin/campaigns/%d/start", int64(c["id"].(float64))), nil)
	}

	for round := range 3 {
		var logs testenv.SyncBuffer
		addrA, stopA := startDispatchdLogged(t, env("node-a"), &logs)
		waitFor("node-a runs campaigns", func() bool { return strings.Contains(roles(addrA)["node-a"], "campaign:") })
		if err := stopA(); err != nil {
			t.Fatalf("round %d: run: %v", round, err)
		}
		if m := roles(addrB); len(m) != 1 || m["node-b"] == "" {
			t.Errorf("round %d: right after node-a stopped, node-b lists %v", round, m)
		}
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var line struct{ Level string }
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Level == "WARN" || line.Level == "ERROR" {
				t.Errorf("round %d: node-a logged: %s", round, sc.Text())
			}
		}
		if t.Failed() {
			return
		}
	}
}
