package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// A revocation committed by a node that died before it could tell Redis stops the key
// on every node within moments (each node reads the key changes every second), with the
// default key recheck of a day: before, the key kept working until its cached set
// expired.
func TestRevocationOfADeadNodeReachesEveryNode(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	_, prefix := testenv.Redis(t)
	addr, _ := startDispatchd(t, withTestRedis(map[string]string{
		"DISPATCH_ADDR":         "127.0.0.1:0",
		"DISPATCH_MYSQL_DSN":    dsn,
		"DISPATCH_REDIS_PREFIX": prefix,
		"DISPATCH_ADMIN_TOKEN":  "a-long-admin-token",
	}))
	key := enroll(t, addr)
	fetch := func() int {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/fetch", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := fetch(); code != 200 {
		t.Fatalf("fetch with a fresh key: %d", code)
	}
	// The dead node: its revocation is committed, and Redis never hears of it.
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, store.OpenOptions{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n, err := st.RevokeClientKeys(ctx, "admin", "7", time.Now()); err != nil || n != 1 {
		t.Fatalf("revoke in MySQL: %d %v", n, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for fetch() != 401 {
		if time.Now().After(deadline) {
			t.Fatal("the revoked key still works 20 s after its revocation was committed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
