package clientkey_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/clientkey"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/queue"
)

// setup returns the service over a database and a Redis prefix of the test's own.
func setup(t *testing.T, cfg clientkey.Config) (*clientkey.Service, *store.Store) {
	t.Helper()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	cache := queue.NewCache(rdb, st, clk, queue.Config{Prefix: prefix})
	return clientkey.New(st, cache, clk, slog.New(slog.NewTextHandler(io.Discard, nil)), cfg), st
}

func TestParse(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 43)
	for key, ok := range map[string]bool{
		"42." + long:     true,
		"42":             false, // no secret
		"42.short":       false,
		"." + long:       false, // no uid
		"uid_42." + long: false, // an executor is not a uid
		"a b." + long:    false,
	} {
		uid, hash, got := clientkey.Parse(key)
		if got != ok {
			t.Errorf("Parse(%q) ok = %v", key, got)
			continue
		}
		if ok && (uid != "42" || hash != clientkey.Hash(key) || len(hash) != 64) {
			t.Errorf("Parse(%q) = %q, %q", key, uid, hash)
		}
	}
}

// A key works once issued, only for its uid, and stops at once when revoked; beyond
// AdminKeysPerUID the oldest is revoked.
func TestIssueVerifyRevoke(t *testing.T) {
	t.Parallel()
	svc, _ := setup(t, clientkey.Config{AdminKeysPerUID: 2})
	ctx := context.Background()
	k1, err := svc.Issue(ctx, "admin", "42")
	if err != nil {
		t.Fatal(err)
	}
	if uid, err := svc.Verify(ctx, k1); err != nil || uid != "42" {
		t.Fatalf("Verify(issued) = %q, %v", uid, err)
	}
	forged := "43" + strings.TrimPrefix(k1, "42")
	if _, err := svc.Verify(ctx, forged); taskd.ErrorCode(err) != taskd.CodeUnauthenticated {
		t.Fatalf("a key moved to another uid: %v", err)
	}
	k2, _ := svc.Issue(ctx, "admin", "42")
	k3, _ := svc.Issue(ctx, "admin", "42") // the third of at most two: k1 goes
	if _, err := svc.Verify(ctx, k1); taskd.ErrorCode(err) != taskd.CodeUnauthenticated {
		t.Fatalf("the oldest key still works past AdminKeysPerUID: %v", err)
	}
	for _, k := range []string{k2, k3} {
		if _, err := svc.Verify(ctx, k); err != nil {
			t.Fatalf("a recent key: %v", err)
		}
	}
	n, err := svc.Revoke(ctx, "admin", "42")
	if err != nil || n != 2 {
		t.Fatalf("Revoke = %d, %v", n, err)
	}
	for _, k := range []string{k2, k3} {
		if _, err := svc.Verify(ctx, k); taskd.ErrorCode(err) != taskd.CodeUnauthenticated {
			t.Fatalf("a revoked key works: %v", err)
		}
	}
	if _, err := svc.Issue(ctx, "admin", "gid_1"); taskd.ErrorCode(err) != taskd.CodeInvalid {
		t.Fatalf("issue to an executor name: %v", err)
	}
}

func TestEnroll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	closed, _ := setup(t, clientkey.Config{})
	if _, err := closed.Enroll(ctx, "42", "anything"); taskd.ErrorCode(err) != taskd.CodePermission {
		t.Fatalf("enroll without a secret configured: %v", err)
	}
	svc, st := setup(t, clientkey.Config{EnrollSecret: "s3cret"})
	if _, err := svc.Enroll(ctx, "42", "wrong"); taskd.ErrorCode(err) != taskd.CodeUnauthenticated {
		t.Fatalf("enroll with a wrong secret: %v", err)
	}
	key, err := svc.Enroll(ctx, "42", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Verify(ctx, key); err != nil {
		t.Fatalf("an enrolled key: %v", err)
	}
	var actor string
	if err := st.DB().QueryRowContext(ctx, "SELECT actor FROM audit_log ORDER BY id DESC LIMIT 1").Scan(&actor); err != nil {
		t.Fatal(err)
	}
	if actor != "enroll" {
		t.Fatalf("audit actor %q, want enroll", actor)
	}
}

// unreachable is a cache that cannot be told of changes.
type unreachable struct{ clientkey.Cache }

func (unreachable) KeysChanged(context.Context, string) error { return errors.New("redis down") }

// A revocation the cache cannot be told of is saved, and reported as unavailable with
// when cached copies stop working.
func TestRevokeWithoutCache(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	svc := clientkey.New(st, unreachable{}, clock.Real{}, slog.New(slog.NewTextHandler(io.Discard, nil)),
		clientkey.Config{})
	ctx := context.Background()
	if _, err := svc.Issue(ctx, "admin", "42"); err != nil {
		t.Fatalf("an issue the cache missed still hands the key out: %v", err)
	}
	n, err := svc.Revoke(ctx, "admin", "42")
	if n != 1 || taskd.ErrorCode(err) != taskd.CodeUnavailable || !strings.Contains(err.Error(), "until a node reaches it") {
		t.Fatalf("Revoke = %d, %v", n, err)
	}
}
