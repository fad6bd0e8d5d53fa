package clientkey_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/clientkey"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/queue"
)

// An unknown uid's answer is cached as a known uid's is: its empty key set stays in
// Redis for KeyRecheck, as a set with keys does; a key issued to it drops that answer
// and works at once.
func TestUnknownUIDIsCachedAsAKnownOne(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	cache := queue.NewCache(rdb, st, clk, queue.Config{Prefix: prefix, KeyTTL: 30 * time.Second})
	svc := clientkey.New(st, cache, clk, slog.New(slog.NewTextHandler(io.Discard, nil)), clientkey.Config{})
	ctx := context.Background()
	known, err := svc.Issue(ctx, "admin", "known")
	if err != nil {
		t.Fatal(err)
	}
	wrong := func(uid string) string { return uid + "." + strings.Repeat("x", 43) }
	for _, key := range []string{known, wrong("nobody")} {
		svc.Verify(ctx, key)
	}
	for _, uid := range []string{"known", "nobody"} {
		set := cache.Keys().ClientKeys(uid)
		if ttl := rdb.PTTL(ctx, set).Val(); ttl <= 0 || ttl > 30*time.Second {
			t.Errorf("the key set of %s lives %s, want at most KeyRecheck (30s)", uid, ttl)
		}
	}
	if n, _ := rdb.SCard(ctx, cache.Keys().ClientKeys("nobody")).Result(); n != 1 {
		t.Errorf("the unknown uid's cached set has %d members, want 1 (the loaded marker)", n)
	}
	if _, err := svc.Verify(ctx, wrong("nobody")); taskd.ErrorCode(err) != taskd.CodeUnauthenticated {
		t.Fatalf("a second probe of an unknown uid: %v", err)
	}
	issued, err := svc.Issue(ctx, "admin", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if uid, err := svc.Verify(ctx, issued); err != nil || uid != "nobody" {
		t.Fatalf("a key issued to a uid whose empty set was cached: %q %v", uid, err)
	}
}
