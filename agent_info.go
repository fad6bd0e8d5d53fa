package taskd

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Agents. A fetch may say which agent polls ("agent": version, hostname, labels); the
// server remembers the latest per uid, with when the uid last polled, so that an
// operator sees the fleet: who is there, who went quiet, which release runs where.
// What an agent reports is bounded: it is stored for every uid.

// Bounds of what a fetch's agent object may hold.
const (
	MaxAgentVersion  = 64
	MaxAgentHostname = 255
	MaxAgentLabels   = 32
	MaxLabelKey      = 63
	MaxLabelValue    = 255
)

// AgentInfo is what an agent reports of itself on fetch.
type AgentInfo struct {
	Version  string            `json:"version"`
	Hostname string            `json:"hostname"`
	Labels   map[string]string `json:"labels"`
}

// Check refuses, naming the field (under "agent."), a version, hostname or label out
// of bounds: a label key is 1..63 of [A-Za-z0-9._/-] (as it is matched in
// label=key=value filters), a value up to 255 characters of plain text.
func (a AgentInfo) Check() error {
	if len(a.Version) > MaxAgentVersion {
		return Errorf(CodeInvalid, "agent.version: at most %d bytes, got %d", MaxAgentVersion, len(a.Version))
	}
	if a.Version != "" {
		if err := CheckName("agent.version", a.Version); err != nil {
			return err
		}
	}
	if len(a.Hostname) > MaxAgentHostname {
		return Errorf(CodeInvalid, "agent.hostname: at most %d bytes, got %d", MaxAgentHostname, len(a.Hostname))
	}
	if a.Hostname != "" {
		if err := CheckName("agent.hostname", a.Hostname); err != nil {
			return err
		}
	}
	if len(a.Labels) > MaxAgentLabels {
		return Errorf(CodeInvalid, "agent.labels: at most %d labels, got %d", MaxAgentLabels, len(a.Labels))
	}
	for _, k := range slices.Sorted(maps.Keys(a.Labels)) {
		if err := CheckLabelKey("agent.labels", k); err != nil {
			return err
		}
		v := a.Labels[k]
		if len(v) > MaxLabelValue {
			return Errorf(CodeInvalid, "agent.labels.%s: at most %d bytes, got %d", k, MaxLabelValue, len(v))
		}
		if v != "" {
			if err := CheckName("agent.labels."+k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckLabelKey refuses, naming field, a label key that is not 1..63 of
// [A-Za-z0-9._/-].
func CheckLabelKey(field, k string) error {
	if k == "" || len(k) > MaxLabelKey {
		return Errorf(CodeInvalid, "%s: a label key is 1..%d characters, got %d", field, MaxLabelKey, len(k))
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '/' || r == '-') {
			return Errorf(CodeInvalid, "%s: label key %q: only letters, digits and . _ / - are allowed", field, k)
		}
	}
	return nil
}

// Equal reports whether a and b report the same agent.
func (a AgentInfo) Equal(b AgentInfo) bool {
	return a.Version == b.Version && a.Hostname == b.Hostname && maps.Equal(a.Labels, b.Labels)
}

// LabelsJSON is the labels as a JSON object ({} for none), as MySQL stores them:
// without HTML escaping (json.Marshal's \u003c for a "<" is six bytes of one, and
// nothing stored here is ever written into HTML unescaped).
func (a AgentInfo) LabelsJSON() string {
	if len(a.Labels) == 0 {
		return "{}"
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(a.Labels); err != nil { // a map of strings always encodes
		panic(fmt.Sprintf("labels: %v", err))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Sighting is a uid's poll as the fleet records it: when, and the agent it reported
// (nil: it reported none, and the last one reported stands).
type Sighting struct {
	UID   string
	At    time.Time
	Agent *AgentInfo
}

// Client is one uid of the fleet as GET /v1/admin/clients lists it: when it last
// polled (null: never, or not since the server began recording), its live client keys,
// its open dispatches, its max_in_flight and the agent it last reported (null: none).
type Client struct {
	UID         string     `json:"uid"`
	LastSeen    *time.Time `json:"last_seen"`
	Keys        int        `json:"keys"`
	Open        int        `json:"open"`
	MaxInFlight int        `json:"max_in_flight"`
	Agent       *AgentInfo `json:"agent"`
}

// ClientFilter selects clients: members of Group, with every label of Labels, last
// seen before SeenBefore (never seen counts as before) and at or after SeenAfter.
type ClientFilter struct {
	Group      string
	Labels     map[string]string
	SeenBefore *time.Time
	SeenAfter  *time.Time
	// Matches, when set, keeps the clients whose latest report it accepts (a dynamic
	// group's rule: internal/targeting).
	Matches func(AgentInfo) bool
}

// GroupSummary is one group as GET /v1/admin/groups lists it: its members, how many
// active or paused tasks target it (a group with tasks and no members is where tasks
// go nowhere), and its rule when it is dynamic.
type GroupSummary struct {
	GID     string `json:"gid"`
	Members int    `json:"members"`
	Tasks   int    `json:"tasks"`
	// Dynamic, Selector and AgentVersion: a dynamic group's rule (taskd.Group).
	Dynamic      bool   `json:"dynamic"`
	Selector     string `json:"selector,omitempty"`
	AgentVersion string `json:"agent_version,omitempty"`
}

// VersionStats is what the dispatches of the uids whose agents report one version did
// in a time range: a bad release of an agent shows up as its failures.
type VersionStats struct {
	// Version is the agent version the uids report now ("" for none reported).
	Version    string `json:"version"`
	Clients    int    `json:"clients"`
	Dispatched int    `json:"dispatched"`
	Completed  int    `json:"completed"`
	Failed     int    `json:"failed"`
	Expired    int    `json:"expired"`
}
