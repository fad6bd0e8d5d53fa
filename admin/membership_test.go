package admin_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/taskpull/taskd/admin"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/queue"
)

// unreachableCache is the Redis cache with its invalidations failing, as a Redis that
// went away between the MySQL commit and the telling would.
type unreachableCache struct{ *queue.Cache }

func (unreachableCache) InvalidateUser(context.Context, string) error {
	return errors.New("redis: connection refused")
}

func (unreachableCache) InvalidateUsers(context.Context, []string) error {
	return errors.New("redis: connection refused")
}

// A membership change that committed answers success even when the caches cannot be
// told (a 503 would make the client send it again, find nothing to change, and clear
// nothing); the failure is logged for the operator.
func TestCommittedMembershipChangeNeverFails(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	var logs testenv.SyncBuffer
	svc := admin.NewService(b.store, unreachableCache{b.cache}, b.keys, b.clock, slog.New(slog.NewTextHandler(&logs, nil)))
	if err := svc.ReplaceMembers(b.ctx, "g", []string{"1", "2"}); err != nil {
		t.Fatalf("replace: %v", err)
	}
	if err := svc.AddMembers(b.ctx, "g", []string{"3"}); err != nil {
		t.Fatalf("add: %v", err)
	}
	if err := svc.RemoveMember(b.ctx, "g", "1"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	members, err := b.store.Members(b.ctx, "g")
	if err != nil || strings.Join(members, ",") != "2,3" {
		t.Fatalf("members %v (%v), want 2,3", members, err)
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"membership change committed"); n != 3 {
		t.Fatalf("%d warnings, want one per change:\n%s", n, logs.String())
	}
}

// A task's create, replace and delete that committed answer success, too, when the
// caches cannot be told: a create told 503 would be sent again under its
// Idempotency-Key and make a second task. Every node's heap-change feed tells the
// caches, from the note each change made in its transaction.
func TestCommittedTaskChangeNeverFails(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	var logs testenv.SyncBuffer
	svc := admin.NewService(b.store, unreachableCache{b.cache}, b.keys, b.clock, slog.New(slog.NewTextHandler(&logs, nil)))
	task, err := svc.CreateTask(b.ctx, b.once("uid_7", t0))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	task.Priority = 9
	if _, err := svc.ReplaceTask(b.ctx, task, nil); err != nil {
		t.Fatalf("replace: %v", err)
	}
	if err := svc.DeleteTask(b.ctx, task.Key, nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"change committed, but a cache was not told"); n != 4 {
		t.Fatalf("%d warnings, want one per executor told (create, replace's before and after, delete):\n%s", n, logs.String())
	}
}
