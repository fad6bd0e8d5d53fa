package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/queue"
)

// The heap-change feed compares the time a change was noted (the writing node's clock)
// with Redis's (the versions, and when a heap was built). These tests set the fake
// clock a minute ahead of Redis's, so that whatever Redis did comes before the changes
// made in the test, or a minute behind it, so that whatever Redis does comes after them.

// storeTask creates a task the way the admin service does, but without its
// invalidation after the commit: as if the admin process died in between.
func (e *env) storeTask(executor string, start time.Time) taskd.Task {
	e.t.Helper()
	tpl := e.template()
	t, err := e.store.CreateTask(context.Background(), "admin", taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce},
		Executor: executor, StartTime: start.Truncate(time.Second), TemplateID: tpl, Params: []byte(`{}`),
		DispatchTimes: -1, Mode: taskd.ModeOncePerUser, Priority: 5, Status: taskd.StatusActive},
		e.clock.Now().UTC().Truncate(time.Microsecond))
	if err != nil {
		e.t.Fatal(err)
	}
	return t
}

// feedFor lets the heap-change feed of instance 0 run for d of the fake clock, a step a
// second.
func (e *env) feedFor(d time.Duration) {
	e.t.Helper()
	for range int(d / queue.HeapChangeStep) {
		e.clock.Advance(queue.HeapChangeStep)
		if err := e.apps[0].HeapFeed.Step(context.Background()); err != nil {
			e.t.Fatal(err)
		}
	}
}

func nextDue(r fetchReply) string {
	if r.NextDueAt == nil {
		return "none"
	}
	return ts(*r.NextDueAt)
}

// A task created by an admin process that died between its commit and its
// invalidation reaches its user's next poll within two seconds of the feed running,
// not when the heap's window renews hours later.
func TestHeapChangeOfADeadAdminReachesThePoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.clock.Set(time.Now().Add(time.Minute))
	k := e.key("u")
	if r := e.fetch(0, k); r.Task != nil || r.NextDueAt != nil {
		t.Fatalf("a user without tasks was offered %+v", r)
	}
	task := e.storeTask("uid_u", e.clock.Now().Add(-time.Minute))
	if r := e.fetch(0, k); r.Task != nil {
		t.Fatal("the warm heap offered the new task without an invalidation: this test proves nothing")
	}
	before := e.loaders[0].rebuilds.Load()
	e.feedFor(2 * time.Second)
	r := e.fetch(0, k)
	if r.Task == nil || r.Task.TaskID != task.Key.String() {
		t.Fatalf("after two seconds of the feed the user was offered %+v, want %s", r.Task, task.Key)
	}
	if n := e.loaders[0].rebuilds.Load() - before; n != 1 {
		t.Fatalf("%d rebuilds after the feed, want 1", n)
	}
}

// A task of a group, created by an admin process that died before invalidating the
// group, reaches every member's next poll.
func TestHeapChangeOfAGroupReachesEveryMember(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.clock.Set(time.Now().Add(time.Minute))
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"m1", "m2", "m3"}})
	keys := []string{e.key("m1"), e.key("m2"), e.key("m3")}
	for _, k := range keys {
		if r := e.fetch(0, k); r.NextDueAt != nil {
			t.Fatalf("a member without tasks: next due %s", nextDue(r))
		}
	}
	due := e.clock.Now().Add(time.Hour).Truncate(time.Second)
	e.storeTask("gid_g", due)
	if r := e.fetch(0, keys[0]); r.NextDueAt != nil {
		t.Fatal("a warm heap offered the group's new task without an invalidation: this test proves nothing")
	}
	e.feedFor(2 * time.Second)
	for i, k := range keys {
		if r := e.fetch(0, k); nextDue(r) != ts(due) {
			t.Errorf("member %d: next due %s after the feed, want the group's new task at %s", i+1, nextDue(r), ts(due))
		}
	}
}

// A Redis failover that lost an invalidation (the admin's, and the feed's first
// telling) is made good as the change leaves the feed's window: the feed tells it once
// more.
func TestHeapChangeIsToldAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.clock.Set(time.Now().Add(time.Minute))
	ctx := context.Background()
	k := e.key("u")
	e.fetch(0, k)
	user := e.apps[0].Cache.Keys().User("u")
	old, err := e.rdb.Dump(ctx, user).Result()
	if err != nil {
		t.Fatal(err)
	}
	due := e.clock.Now().Add(time.Hour).Truncate(time.Second)
	e.task("once", map[string]any{"executor": "uid_u", "start_time": ts(due)})
	e.feedFor(2 * time.Second)
	if r := e.fetch(0, k); nextDue(r) != ts(due) {
		t.Fatalf("next due %s after the change, want %s", nextDue(r), ts(due))
	}
	// The promoted replica has the user's hash as it was before the change, and no
	// heap of the new one.
	if err := e.rdb.RestoreReplace(ctx, user, 0, old).Err(); err != nil {
		t.Fatal(err)
	}
	e.rdb.Del(ctx, e.apps[0].Cache.Keys().Heap("u"))
	if r := e.fetch(0, k); r.NextDueAt != nil {
		t.Fatalf("the restored heap is not served (next due %s): this test proves nothing", nextDue(r))
	}
	e.feedFor(queue.HeapChangeWindow + 5*time.Second)
	if r := e.fetch(0, k); nextDue(r) != ts(due) {
		t.Fatalf("next due %s once the change left the window, want %s: the second telling did not happen", nextDue(r), ts(due))
	}
}

// The feed leaves alone a heap built after the change it tells of: a user whose first
// poll came after the change (its invalidation lost), and one whose invalidation went
// through, are not rebuilt again as the feed tells the change, nor as it tells it once
// more.
func TestHeapChangeLeavesHeapsBuiltSince(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.clock.Set(time.Now().Add(-time.Minute))
	lost, told := e.key("lost"), e.key("told")
	due := e.clock.Now().Add(time.Hour).Truncate(time.Second)
	e.storeTask("uid_lost", due)
	e.task("once", map[string]any{"executor": "uid_told", "start_time": ts(due)})
	for _, k := range []string{lost, told} {
		if r := e.fetch(0, k); nextDue(r) != ts(due) {
			t.Fatalf("next due %s, want %s", nextDue(r), ts(due))
		}
	}
	before := e.loaders[0].rebuilds.Load()
	for range queue.HeapChangeWindow/time.Second + 5 {
		e.feedFor(time.Second)
		for _, k := range []string{lost, told} {
			if r := e.fetch(0, k); nextDue(r) != ts(due) {
				t.Fatalf("next due %s, want %s", nextDue(r), ts(due))
			}
		}
	}
	if n := e.loaders[0].rebuilds.Load() - before; n != 0 {
		t.Fatalf("%d rebuilds of heaps built after the change, want none", n)
	}
}
