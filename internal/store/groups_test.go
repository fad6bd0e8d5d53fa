package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/targeting"
	"github.com/taskpull/taskd/internal/testenv"
)

var groupsAt = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func report(version string, labels map[string]string) *taskd.AgentInfo {
	return &taskd.AgentInfo{Version: version, Labels: labels}
}

func ruleOf(t *testing.T, g taskd.DynamicGroup) func(taskd.AgentInfo) bool {
	t.Helper()
	r, err := targeting.Parse(g)
	if err != nil {
		t.Fatal(err)
	}
	return r.Matches
}

func wantCode(t *testing.T, what string, err error, code taskd.Code) {
	t.Helper()
	var te *taskd.Error
	if !errors.As(err, &te) || te.Code != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
}

// A rule's members are the clients whose stored report matches; it follows a new rule,
// and a dynamic group's members are not an admin's to change.
func TestDynamicGroupRule(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	ctx := context.Background()
	if err := st.SaveSightings(ctx, []taskd.Sighting{
		{UID: "dg-a", At: groupsAt, Agent: report("1.5.0", map[string]string{"env": "prod"})},
		{UID: "dg-b", At: groupsAt, Agent: report("2.1.0", map[string]string{"env": "prod", "canary": "yes"})},
		{UID: "dg-c", At: groupsAt, Agent: report("1.0.0", map[string]string{"env": "dev"})},
		{UID: "dg-d", At: groupsAt}, // polled, reported nothing
	}); err != nil {
		t.Fatal(err)
	}
	rule := taskd.DynamicGroup{Selector: "env=prod"}
	g, changed, err := st.SetGroupRule(ctx, "test", "dg-prod", rule, ruleOf(t, rule), groupsAt)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(changed, []string{"dg-a", "dg-b"}) || g.Members != 2 || !g.Dynamic {
		t.Fatalf("set: %+v, changed %v", g, changed)
	}
	rule = taskd.DynamicGroup{Selector: "env=prod,!canary", AgentVersion: ">=1.4.0 <2"}
	if _, changed, err = st.SetGroupRule(ctx, "test", "dg-prod", rule, ruleOf(t, rule), groupsAt); err != nil || !slices.Equal(changed, []string{"dg-b"}) {
		t.Fatalf("a narrower rule: changed %v, %v", changed, err)
	}
	got, err := st.Group(ctx, "dg-prod")
	if err != nil || got != (taskd.Group{GID: "dg-prod", Dynamic: true, Selector: rule.Selector, AgentVersion: rule.AgentVersion, Members: 1}) {
		t.Fatalf("group: %+v, %v", got, err)
	}
	if m, _ := st.Members(ctx, "dg-prod"); !slices.Equal(m, []string{"dg-a"}) {
		t.Fatalf("members %v", m)
	}
	_, err = st.AddMembers(ctx, "test", "dg-prod", []string{"dg-c"}, groupsAt)
	wantCode(t, "add to a dynamic group", err, taskd.CodeConflict)
	_, err = st.ReplaceMembers(ctx, "test", "dg-prod", []string{"dg-c"}, groupsAt)
	wantCode(t, "replace a dynamic group's members", err, taskd.CodeConflict)
	_, err = st.RemoveMember(ctx, "test", "dg-prod", "dg-a", groupsAt)
	wantCode(t, "remove from a dynamic group", err, taskd.CodeConflict)

	// A group kept by hand keeps its members: giving it a rule is a conflict.
	if _, err := st.AddMembers(ctx, "test", "dg-kept", []string{"dg-c"}, groupsAt); err != nil {
		t.Fatal(err)
	}
	_, _, err = st.SetGroupRule(ctx, "test", "dg-kept", rule, ruleOf(t, rule), groupsAt)
	wantCode(t, "a rule for a kept group with members", err, taskd.CodeConflict)

	removed, err := st.DeleteGroup(ctx, "test", "dg-prod", groupsAt)
	if err != nil || !slices.Equal(removed, []string{"dg-a"}) {
		t.Fatalf("delete: %v, %v", removed, err)
	}
	_, err = st.Group(ctx, "dg-prod")
	wantCode(t, "a deleted group", err, taskd.CodeNotFound)
	_, err = st.DeleteGroup(ctx, "test", "dg-prod", groupsAt)
	wantCode(t, "delete again", err, taskd.CodeNotFound)
	// Deleted, it may be kept by hand again.
	if _, err := st.AddMembers(ctx, "test", "dg-prod", []string{"dg-c"}, groupsAt); err != nil {
		t.Fatal(err)
	}
}

// A fetch's report makes its uid a member of exactly the dynamic groups it matches, and
// is stored where a later rule reads it.
func TestSyncAgentGroups(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	ctx := context.Background()
	var rules targeting.Rules
	for gid, rule := range map[string]taskd.DynamicGroup{"sy-prod": {Selector: "env=prod"}, "sy-v2": {AgentVersion: ">=2"}} {
		if _, _, err := st.SetGroupRule(ctx, "test", gid, rule, ruleOf(t, rule), groupsAt); err != nil {
			t.Fatal(err)
		}
	}
	sync := func(a *taskd.AgentInfo, want bool, groups ...string) {
		t.Helper()
		changed, err := st.SyncAgentGroups(ctx, "sy-u", *a, rules.Matches, groupsAt)
		if err != nil || changed != want {
			t.Fatalf("sync %+v: changed %v, %v; want %v", a, changed, err, want)
		}
		for _, gid := range []string{"sy-prod", "sy-v2"} {
			m, _ := st.Members(ctx, gid)
			if slices.Contains(m, "sy-u") != slices.Contains(groups, gid) {
				t.Fatalf("after %+v: %s has %v", a, gid, m)
			}
		}
	}
	sync(report("1.0.0", map[string]string{"env": "prod"}), true, "sy-prod")
	sync(report("1.0.0", map[string]string{"env": "prod"}), false, "sy-prod")
	sync(report("2.0.0", map[string]string{"env": "prod"}), true, "sy-prod", "sy-v2")
	sync(report("2.0.0", map[string]string{"env": "dev"}), true, "sy-v2")
	// The report is stored: a rule set now reads it.
	rule := taskd.DynamicGroup{Selector: "env=dev"}
	if _, changed, err := st.SetGroupRule(ctx, "test", "sy-dev", rule, ruleOf(t, rule), groupsAt); err != nil || !slices.Equal(changed, []string{"sy-u"}) {
		t.Fatalf("a rule after the report: %v, %v", changed, err)
	}
	// Another node's batch does not overwrite it, though its poll is later: the report
	// it carries is one that node saw before.
	if err := st.SaveSightings(ctx, []taskd.Sighting{{UID: "sy-u", At: groupsAt.Add(time.Minute), Agent: report("0.9.0", nil)}}); err != nil {
		t.Fatal(err)
	}
	c, _, err := st.ListClients(ctx, taskd.ClientFilter{}, "sy-t", 1)
	if err != nil || len(c) != 1 || c[0].Agent == nil || c[0].Agent.Version != "2.0.0" {
		t.Fatalf("the stored report: %+v, %v", c, err)
	}
}

func TestDynamicGroupsAreBounded(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	ctx := context.Background()
	rule := taskd.DynamicGroup{Selector: "env=prod"}
	for i := range taskd.MaxDynamicGroups {
		if _, _, err := st.SetGroupRule(ctx, "test", fmt.Sprintf("cap-%d", i), rule, ruleOf(t, rule), groupsAt); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := st.SetGroupRule(ctx, "test", "cap-one-more", rule, ruleOf(t, rule), groupsAt)
	wantCode(t, "one dynamic group more", err, taskd.CodeConflict)
	// A rule's change is not a new group.
	dev := taskd.DynamicGroup{Selector: "env=dev"}
	if _, _, err := st.SetGroupRule(ctx, "test", "cap-0", dev, ruleOf(t, dev), groupsAt); err != nil {
		t.Fatal(err)
	}
}
