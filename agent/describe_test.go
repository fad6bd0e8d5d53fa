package agent_test

// An agent describes itself on fetch: on the first, and again only when what it
// reports changed or the server may not have it.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd/agent"
	"github.com/taskpull/taskd/agent/agenttest"
)

// fetchLog records the fetches an agent sends: the key and the agent object of each.
type fetchLog struct {
	mu      sync.Mutex
	fetches []loggedFetch
}

type loggedFetch struct {
	key   string
	agent *agenttest.AgentInfo
}

func (l *fetchLog) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/v1/fetch") && req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(b))
		var body struct {
			Agent *agenttest.AgentInfo `json:"agent"`
		}
		json.Unmarshal(b, &body)
		l.mu.Lock()
		l.fetches = append(l.fetches, loggedFetch{strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer "), body.Agent})
		l.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (l *fetchLog) snapshot() []loggedFetch {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]loggedFetch(nil), l.fetches...)
}

// described are the fetches that carried an agent object.
func (l *fetchLog) described() []loggedFetch {
	var out []loggedFetch
	for _, f := range l.snapshot() {
		if f.agent != nil {
			out = append(out, f)
		}
	}
	return out
}

// The first fetch carries the agent (the program's version, the hostname, its labels
// and the SDK's own); later polls do not, until SetLabels changes it.
func TestDescribedOnFirstFetchAndWhenChanged(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	log := &fetchLog{}
	a := newAgent(t, s.URL, agent.Config{Key: s.Key("u1"), Version: "2.3.1", Labels: map[string]string{"site": "ams1"},
		PollWait: 20 * time.Millisecond, HTTPClient: &http.Client{Transport: log}})
	runAgent(t, a, agent.HandlerFunc(done))
	waitFor(t, 10*time.Second, "four fetches", func() bool { return len(log.snapshot()) >= 4 })
	if d := log.described(); len(d) != 1 || log.snapshot()[0].agent == nil {
		t.Fatalf("%d of %d fetches carried the agent, want the first only", len(d), len(log.snapshot()))
	}
	got, ok := s.Agent("u1")
	host, _ := os.Hostname()
	if !ok || got.Version != "2.3.1" || got.Hostname != host || got.Labels["site"] != "ams1" ||
		got.Labels["taskd.dev/os"] != runtime.GOOS || got.Labels["taskd.dev/arch"] != runtime.GOARCH || got.Labels["taskd.dev/sdk-version"] == "" {
		t.Fatalf("the server has %+v (%v)", got, ok)
	}

	if err := a.SetLabels(map[string]string{"site": "fra2"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the new labels on the server", func() bool { got, _ := s.Agent("u1"); return got.Labels["site"] == "fra2" })
	n := len(log.snapshot())
	waitFor(t, 10*time.Second, "three more fetches", func() bool { return len(log.snapshot()) >= n+3 })
	if d := log.described(); len(d) != 2 {
		t.Errorf("%d fetches carried the agent, want 2: the first and the one after SetLabels", len(d))
	}
	if got, _ := s.Agent("u1"); got.Labels["taskd.dev/os"] != runtime.GOOS || got.Version != "2.3.1" {
		t.Errorf("after SetLabels the server has %+v, want the agent's own labels and version kept", got)
	}
	if err := a.SetLabels(map[string]string{"taskd.dev/os": "plan9"}); err == nil {
		t.Error("SetLabels took a reserved label")
	}
}

// A fetch that failed may not have told the server: the next one carries the agent
// again. So does the first fetch after the agent enrolled again (its key revoked).
func TestDescribedAgainAfterAFailedFetchAndAfterEnrolling(t *testing.T) {
	t.Parallel()
	s := fakeServer(t)
	s.Inject(agenttest.Fault{On: agenttest.Fetch, Status: 500})
	log := &fetchLog{}
	a := newAgent(t, s.URL, agent.Config{UID: "u2", EnrollSecret: s.EnrollSecret, Version: "1.0.0",
		PollWait: 20 * time.Millisecond, HTTPClient: &http.Client{Transport: log}, Logger: quietLogger()})
	runAgent(t, a, agent.HandlerFunc(done))
	waitFor(t, 10*time.Second, "the server told", func() bool { _, ok := s.Agent("u2"); return ok })
	if d := log.described(); len(d) != 2 {
		t.Fatalf("%d fetches carried the agent, want 2: the one refused 500 and the next", len(d))
	}
	s.Revoke("u2")
	waitFor(t, 20*time.Second, "a fetch with a new key carrying the agent", func() bool {
		d := log.described()
		return len(d) > 0 && d[len(d)-1].key != d[0].key
	})
	n := len(log.snapshot())
	waitFor(t, 10*time.Second, "three more fetches", func() bool { return len(log.snapshot()) >= n+3 })
	if d := log.described(); len(d) != 3 {
		t.Errorf("%d fetches carried the agent, want 3", len(d))
	}
}

// New refuses what the server would refuse of the agent object, naming the setting,
// and labels under the agent's own prefix; NoHostname reports none.
func TestDescriptionChecked(t *testing.T) {
	t.Parallel()
	many := map[string]string{}
	for i := range 30 {
		many[string(rune('a'+i%26))+strings.Repeat("x", i/26)] = "v"
	}
	for _, c := range []struct {
		cfg  agent.Config
		want string
	}{
		{agent.Config{Labels: map[string]string{"taskd.dev/os": "plan9"}}, "Labels"},
		{agent.Config{Labels: many}, "Labels: at most 29"},
		{agent.Config{Labels: map[string]string{"bad key": "v"}}, "Labels"},
		{agent.Config{Labels: map[string]string{"k": "a\nb"}}, "Labels.k"},
		{agent.Config{Version: strings.Repeat("v", 65)}, "Version"},
		{agent.Config{Hostname: "host\x00"}, "Hostname"},
	} {
		c.cfg.URL, c.cfg.Key = "http://localhost:1", "u.k"
		if _, err := agent.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
	s := fakeServer(t)
	log := &fetchLog{}
	a := newAgent(t, s.URL, agent.Config{Key: s.Key("u3"), Hostname: agent.NoHostname, Once: true,
		HTTPClient: &http.Client{Transport: log}})
	if err := a.Run(t.Context(), agent.HandlerFunc(done)); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Agent("u3"); !ok || got.Hostname != "" || got.Version != "" {
		t.Errorf("with NoHostname and no version the server has %+v (%v)", got, ok)
	}
}
