package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/taskpull/taskd/api"
)

// flush writes every instance's recorded polls to MySQL, as their background work does
// every few seconds.
func (e *env) flush() {
	e.t.Helper()
	for _, a := range e.apps {
		if err := a.Fleet.Flush(context.Background()); err != nil {
			e.t.Fatal(err)
		}
	}
}

// uidsOf lists the uids of a GET /v1/admin/clients reply, checking its shape.
func uidsOf(t *testing.T, out map[string]any) []string {
	t.Helper()
	if _, ok := out["next_cursor"].(string); !ok {
		t.Fatalf("no next_cursor: %v", out)
	}
	var uids []string
	for _, c := range out["clients"].([]any) {
		uids = append(uids, c.(map[string]any)["uid"].(string))
	}
	return uids
}

func clientOf(t *testing.T, e *env, uid string) map[string]any {
	t.Helper()
	for _, c := range e.admin("GET", "/v1/admin/clients", nil)["clients"].([]any) {
		if m := c.(map[string]any); m["uid"] == uid {
			return m
		}
	}
	t.Fatalf("client %s not listed", uid)
	return nil
}

// TestFleetClients: a fetch's agent object and the poll itself are remembered without a
// MySQL write per poll (written in batches), and GET /v1/admin/clients lists every
// client with its last poll, live keys, open dispatches, max_in_flight and agent,
// filtered by group, label and last poll, in pages.
func TestFleetClients(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	k1, k2 := e.key("f1"), e.key("f2")
	e.key("f3") // enrolled, never polls
	e.key("f3")
	e.admin("PUT", "/v1/admin/groups/fg/members", map[string]any{"uids": []string{"f1", "f2"}})
	e.admin("PUT", "/v1/admin/clients/f2", map[string]any{"max_in_flight": 4})

	agent1 := map[string]any{"version": "1.2.0", "hostname": "h1", "labels": map[string]string{"region": "eu", "rack": "a"}}
	agent2 := map[string]any{"version": "1.3.0", "hostname": "h2", "labels": map[string]string{"region": "us"}}
	for range 3 {
		if code, out := e.do(0, "POST", "/v1/fetch", k1, map[string]any{"agent": agent1}); code != 200 {
			t.Fatalf("fetch: %d %v", code, out)
		}
	}
	if code, out := e.do(1, "POST", "/v1/fetch", k2, map[string]any{"agent": agent2, "max": 2}); code != 200 {
		t.Fatalf("batch fetch: %d %v", code, out)
	}
	// A new report is written at once (the dynamic groups are matched against it
	// before the fetch takes anything); the polls are not written one by one.
	if n := e.count("SELECT COUNT(*) FROM client_agent"); n != 2 {
		t.Fatalf("client_agent rows before a flush: %d, want the 2 reports", n)
	}
	c := clientOf(t, e, "f1")
	if c["last_seen"] != ts(t0) || c["agent"].(map[string]any)["version"] != "1.2.0" || c["keys"] != float64(1) {
		t.Fatalf("f1 before a flush: %v", c)
	}

	e.flush()
	c = clientOf(t, e, "f1")
	if c["last_seen"] != ts(t0) || c["keys"] != float64(1) || c["open"] != float64(0) || c["max_in_flight"] != float64(1) {
		t.Fatalf("f1: %v", c)
	}
	ag := c["agent"].(map[string]any)
	if ag["version"] != "1.2.0" || ag["hostname"] != "h1" || ag["labels"].(map[string]any)["rack"] != "a" {
		t.Fatalf("f1's agent: %v", ag)
	}
	// A client's own page says the same.
	one := e.admin("GET", "/v1/admin/clients/f1", nil)
	if one["last_seen"] != ts(t0) || one["keys"] != float64(1) || one["agent"].(map[string]any)["hostname"] != "h1" {
		t.Fatalf("GET /v1/admin/clients/f1: %v", one)
	}
	conforms(t, "ClientSetting", one)
	c = clientOf(t, e, "f2")
	if c["max_in_flight"] != float64(4) || c["agent"].(map[string]any)["version"] != "1.3.0" {
		t.Fatalf("f2: %v", c)
	}
	c = clientOf(t, e, "f3")
	if c["last_seen"] != nil || c["agent"] != nil || c["keys"] != float64(2) {
		t.Fatalf("f3 (never polled): %v", c)
	}

	// Two hours on, f2 polls again, without an agent object: its agent stands, its
	// last poll moves; f1 polls with a new release, which is written at once.
	e.clock.Advance(2 * time.Hour)
	e.fetch(1, k2)
	agent1["version"] = "1.2.1"
	if code, out := e.do(0, "POST", "/v1/fetch", k1, map[string]any{"agent": agent1}); code != 200 {
		t.Fatalf("fetch: %d %v", code, out)
	}
	e.clock.Advance(time.Second)
	e.do(0, "POST", "/v1/fetch", k1, nil) // within the resolution: nothing new to write
	e.flush()
	c = clientOf(t, e, "f2")
	if c["last_seen"] != ts(t0.Add(2*time.Hour)) || c["agent"].(map[string]any)["version"] != "1.3.0" {
		t.Fatalf("f2 after a poll without agent: %v", c)
	}
	if c := clientOf(t, e, "f1"); c["agent"].(map[string]any)["version"] != "1.2.1" {
		t.Fatalf("f1 after an upgrade: %v", c)
	}

	list := func(query string) []string {
		t.Helper()
		return uidsOf(t, e.admin("GET", "/v1/admin/clients?"+query, nil))
	}
	hour := url.QueryEscape(ts(t0.Add(time.Hour)))
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"f1", "f2", "f3"}},
		{"group=fg", []string{"f1", "f2"}},
		{"label=region=eu", []string{"f1"}},
		{"label=region=eu&label=rack=b", nil},
		{"label=region=us&group=fg", []string{"f2"}},
		{"seen_after=" + hour, []string{"f1", "f2"}},
		{"seen_before=" + url.QueryEscape(ts(t0.Add(2*time.Hour))), []string{"f3"}}, // never seen counts
		{"group=nobody", nil},
	} {
		if got := list(tc.query); !slices.Equal(got, tc.want) {
			t.Errorf("clients?%s: %v, want %v", tc.query, got, tc.want)
		}
	}

	// Pages.
	var paged []string
	cursor := ""
	for range 5 {
		out := e.admin("GET", "/v1/admin/clients?limit=2&cursor="+cursor, nil)
		paged = append(paged, uidsOf(t, out)...)
		if cursor = out["next_cursor"].(string); cursor == "" {
			break
		}
	}
	if !slices.Equal(paged, []string{"f1", "f2", "f3"}) {
		t.Fatalf("paged: %v", paged)
	}
	conforms(t, "ClientList", e.admin("GET", "/v1/admin/clients", nil))
	conforms(t, "ClientList", e.admin("GET", "/v1/admin/clients?limit=1", nil))

	// Bad filters and bad agent objects name what is wrong.
	for _, tc := range []struct {
		path, want string
	}{
		{"/v1/admin/clients?label=region", "label: want key=value"},
		{"/v1/admin/clients?label=a%20b=c", "label: label key"},
		{"/v1/admin/clients?seen_before=yesterday", "seen_before:"},
		{"/v1/admin/clients?group=gid_fg", "group: give the bare id"},
		{"/v1/admin/clients?lable=x=y", "unknown query parameter"},
	} {
		code, out := e.do(0, "GET", tc.path, adminToken, nil)
		if code != 400 || !strings.Contains(errMessage(out), tc.want) {
			t.Errorf("GET %s: %d %v, want 400 %q", tc.path, code, out, tc.want)
		}
	}
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		agent any
		want  string
	}{
		{map[string]any{"labels": map[string]string{"bad key": "v"}}, "agent.labels: label key"},
		{map[string]any{"hostname": long}, "agent.hostname: at most 255"},
		{map[string]any{"version": "1\u202e0"}, "agent.version:"},
		{map[string]any{"labels": map[string]string{"k": long}}, "agent.labels.k: at most 255"},
		{map[string]any{"version": 1}, "agent.version"},
	} {
		code, out := e.do(0, "POST", "/v1/fetch", k1, map[string]any{"agent": tc.agent})
		if code != 400 || !strings.Contains(errMessage(out), tc.want) {
			t.Errorf("fetch with agent %v: %d %v, want 400 %q", tc.agent, code, out, tc.want)
		}
	}
}

// TestFleetGroups: GET /v1/admin/groups lists every group with members, and every group
// a task targets, with its member and task counts (an empty group with a task stands
// out), in pages.
func TestFleetGroups(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.admin("PUT", "/v1/admin/groups/ga/members", map[string]any{"uids": []string{"1", "2", "3"}})
	e.admin("PUT", "/v1/admin/groups/gb/members", map[string]any{"uids": []string{"1"}})
	e.task("once", map[string]any{"executor": "gid_gb", "start_time": ts(t0)})
	e.task("rotate", map[string]any{"executor": "gid_gempty", "start_time": ts(t0), "space_minutes": 5})
	out := e.admin("GET", "/v1/admin/groups", nil)
	got := map[string][2]float64{}
	for _, g := range out["groups"].([]any) {
		m := g.(map[string]any)
		got[m["gid"].(string)] = [2]float64{m["members"].(float64), m["tasks"].(float64)}
	}
	want := map[string][2]float64{"ga": {3, 0}, "gb": {1, 1}, "gempty": {0, 1}}
	if len(got) != len(want) {
		t.Fatalf("groups: %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("group %s: %v, want %v", k, got[k], v)
		}
	}
	conforms(t, "GroupList", out)
	first := e.admin("GET", "/v1/admin/groups?limit=2", nil)
	if n := len(first["groups"].([]any)); n != 2 || first["next_cursor"] == "" {
		t.Fatalf("first page: %v", first)
	}
	second := e.admin("GET", "/v1/admin/groups?limit=2&cursor="+first["next_cursor"].(string), nil)
	if g := second["groups"].([]any); len(g) != 1 || g[0].(map[string]any)["gid"] != "gempty" || second["next_cursor"] != "" {
		t.Fatalf("second page: %v", second)
	}
}

// TestFleetVersionStats: dispatch outcomes by the agent version their uids report, so
// that a bad release shows up as its failures.
func TestFleetVersionStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_v1", "start_time": ts(t0.Add(-time.Minute))})
	e.task("once", map[string]any{"executor": "uid_v2", "start_time": ts(t0.Add(-time.Minute))})
	k1, k2 := e.key("v1"), e.key("v2")
	fetchAs := func(key, version string) string {
		t.Helper()
		code, out := e.do(0, "POST", "/v1/fetch", key, map[string]any{"agent": map[string]any{"version": version}})
		if code != 200 || out["task"] == nil {
			t.Fatalf("fetch: %d %v", code, out)
		}
		return out["task"].(map[string]any)["log_id"].(string)
	}
	e.mustComplete(k1, fetchAs(k1, "1.0.0"))
	if code, out := e.complete(0, k2, fetchAs(k2, "2.0.0"), "failure"); code != 200 {
		t.Fatalf("complete: %d %v", code, out)
	}
	e.flush()
	out := e.admin("GET", "/v1/admin/stats/agents?from="+url.QueryEscape(ts(t0.Add(-time.Hour))), nil)
	conforms(t, "VersionStatsList", out)
	got := map[string][4]float64{}
	for _, v := range out["versions"].([]any) {
		m := v.(map[string]any)
		got[m["version"].(string)] = [4]float64{m["clients"].(float64), m["dispatched"].(float64), m["completed"].(float64), m["failed"].(float64)}
	}
	if got["1.0.0"] != [4]float64{1, 1, 1, 0} || got["2.0.0"] != [4]float64{1, 1, 0, 1} || len(got) != 2 {
		t.Fatalf("stats by version: %v", out)
	}
}

// conforms fails the test unless reply (a decoded JSON reply) matches the OpenAPI
// document's component schema name: real replies, not hand-built values.
func conforms(t *testing.T, name string, reply map[string]any) {
	t.Helper()
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(api.Document))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("https://taskd.invalid/openapi.json", raw); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("https://taskd.invalid/openapi.json#/components/schemas/" + name)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(reply)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(inst); err != nil {
		t.Errorf("%s: reply %s does not match the OpenAPI document: %v", name, b, err)
	}
}

// A warm empty poll is still one Redis round trip and no MySQL query once the agent
// has reported itself (the SDK and taskd-agent send their report on the first fetch
// and when it changes): it answers with the MySQL pool closed. A report is checked
// against the stored one (one read) and, when it differs, matched against the dynamic
// groups before the fetch takes anything.
func TestFleetPollWithAgentIsOneRedisRoundTripAndNoMySQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Hour))})
	k := e.key("1")
	body := map[string]any{"agent": map[string]any{"version": "1.0.0", "hostname": "h", "labels": map[string]string{"a": "b"}}}
	if code, out := e.do(0, "POST", "/v1/fetch", k, body); code != 200 { // reports; warms heap and key set
		t.Fatalf("fetch: %d %v", code, out)
	}
	counter := &redisCounter{}
	e.rdb.AddHook(counter)
	e.store.DB().Close()
	for range 10 {
		if code, out := e.do(0, "POST", "/v1/fetch", k, nil); code != 200 || out["task"] != nil {
			t.Fatalf("warm empty poll after the report, MySQL closed: %d %v", code, out)
		}
	}
	if n := counter.n.Load(); n != 10 {
		t.Fatalf("10 warm polls sent %d Redis commands, want 10", n)
	}
	if err := e.apps[0].Fleet.Flush(t.Context()); err == nil {
		t.Fatal("a flush with MySQL closed: no error")
	}
}

// A uid polling steadily is written once per DISPATCH_SEEN_RESOLUTION (2 min by
// default), whatever its poll rate: the fleet view's writes are bounded by the fleet's
// size over minutes (issue 43), and last_seen lags by up to the resolution.
func TestSteadyPollsAreWrittenOncePerResolution(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	k := e.key("s1")
	poll := func() {
		t.Helper()
		if code, out := e.do(0, "POST", "/v1/fetch", k, nil); code != 200 {
			t.Fatalf("fetch: %d %v", code, out)
		}
		e.flush()
	}
	poll()
	start := e.clock.Now()
	for range 7 { // every 15 s for 105 s: within the resolution
		e.clock.Advance(15 * time.Second)
		poll()
	}
	if c := clientOf(t, e, "s1"); c["last_seen"] != ts(start) {
		t.Fatalf("last_seen after 105 s of polls every 15 s: %v, want the first poll's %s (written once per 2 min)", c["last_seen"], ts(start))
	}
	e.clock.Advance(15 * time.Second)
	poll()
	if c := clientOf(t, e, "s1"); c["last_seen"] != ts(start.Add(2*time.Minute)) {
		t.Fatalf("last_seen after 2 min of polls: %v, want %s", c["last_seen"], ts(start.Add(2*time.Minute)))
	}
}
