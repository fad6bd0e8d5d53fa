package app_test

import (
	"fmt"
	"testing"
	"time"
)

// A user removed from a group takes none of the group's tasks, even when its cached
// heap still offers them (the invalidation never reached Redis: here, the membership
// row is deleted behind the cache's back). The claim reads the membership in MySQL,
// refuses, and rebuilds the user's heap, which then offers nothing of the group.
func TestRemovedMemberTakesNothingOfTheGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1", "2"}})
	e.task("rotate", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-time.Minute)), "space_minutes": 5,
		"dispatch_times": -1})
	k1, k2 := e.key("1"), e.key("2")
	got := e.fetch(0, k1)
	if got.Task == nil {
		t.Fatal("a member got nothing")
	}
	e.mustComplete(k1, got.Task.LogID)
	// The heap is warm and offers the next rotation at t0+4m.
	if _, err := e.store.DB().Exec("DELETE FROM group_member WHERE gid = 'g' AND uid = '1'"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(5 * time.Minute)
	if r := e.fetch(0, k1); r.Task != nil {
		t.Fatalf("a removed member got %s of its old group", r.Task.TaskID)
	}
	if r := e.fetch(0, k1); r.NextDueAt != nil {
		t.Fatalf("the removed member's heap still offers the group's task (next due %v)", r.NextDueAt)
	}
	if r := e.fetch(0, k2); r.Task == nil {
		t.Fatal("the member left in the group got nothing")
	}
	if n := e.count("SELECT COUNT(*) FROM dispatch WHERE uid = '1'"); n != 1 {
		t.Fatalf("%d dispatches to the removed member, want its one before the removal", n)
	}
}

// A group of 12,000 members is emptied with one PUT: the change commits and every
// member's heap is told in a few round trips, well within the request's time, and
// none of them takes the group's task afterwards. A list of more uids than a request
// may carry is a 413 naming the limit, before anything is written.
func TestLargeMembershipChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	uids := make([]string, 12_000)
	for i := range uids {
		uids[i] = fmt.Sprintf("m%05d", i)
	}
	code, out := e.do(0, "PUT", "/v1/admin/groups/big/members", adminToken, map[string]any{"uids": append(uids, "one-more")[:10_001]})
	if code != 413 || out["error"].(map[string]any)["code"] != "too_large" {
		t.Fatalf("10,001 uids in one request: %d %v, want 413 naming the limit", code, out)
	}
	if n := e.count("SELECT COUNT(*) FROM group_member"); n != 0 {
		t.Fatalf("%d members written by a refused request", n)
	}
	e.admin("PUT", "/v1/admin/groups/big/members", map[string]any{"uids": uids[:10_000]})
	e.admin("POST", "/v1/admin/groups/big/members", map[string]any{"uids": uids[10_000:]})
	e.task("rotate", map[string]any{"executor": "gid_big", "start_time": ts(t0.Add(-time.Minute)), "space_minutes": 5,
		"dispatch_times": -1})
	sample := []string{uids[0], uids[6000], uids[11_999]}
	keys := map[string]string{}
	for _, u := range sample {
		keys[u] = e.key(u)
		if r := e.fetch(0, keys[u]); r.Task == nil {
			t.Fatalf("member %s got nothing", u)
		} else {
			e.mustComplete(keys[u], r.Task.LogID)
		}
	}
	e.admin("PUT", "/v1/admin/groups/big/members", map[string]any{"uids": []string{}})
	e.clock.Advance(5 * time.Minute)
	for _, u := range sample {
		if r := e.fetch(0, keys[u]); r.Task != nil || r.NextDueAt != nil {
			t.Fatalf("former member %s: task %v, next due %v; want nothing", u, r.Task, r.NextDueAt)
		}
	}
}
