// Package wire holds the client API's bodies as they travel, for the agent SDK and
// its fake server (agenttest), so that the two speak one API: every field the server
// sends, named once. The server's own types (dispatch.Assignment, its requests) are
// the reference; the contract suite (agent/internal/contract) holds the fake to them.
package wire

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode"
	"unicode/utf8"
)

// Task is a task as POST /v1/fetch hands it out (the server's dispatch.Assignment).
type Task struct {
	LogID          string          `json:"log_id"`
	TaskID         string          `json:"task_id"`
	Kind           string          `json:"kind"`
	DueAt          time.Time       `json:"due_at"`
	TemplateID     int64           `json:"template_id"`
	Params         json.RawMessage `json:"params"`
	Redo           bool            `json:"redo"`
	Attempt        int             `json:"attempt"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	// Checkpoint is the latest progress saved for the occurrence by this uid.
	Checkpoint json.RawMessage `json:"checkpoint,omitempty"`
	// Stage is the stage of a multi-stage task, and Context what the previous stage's
	// complete handed it.
	Stage   string          `json:"stage,omitempty"`
	Context json.RawMessage `json:"context,omitempty"`
	// CampaignID and Item name a campaign item (task_id campaign:<id>): Item is its
	// index or its uid.
	CampaignID *int64          `json:"campaign_id,omitempty"`
	Item       json.RawMessage `json:"item,omitempty"`
}

// FetchRequest is POST /v1/fetch's body (optional: none is a fetch of one task, no
// wait). Max or TemplateIDs make it a batch fetch.
type FetchRequest struct {
	WaitMS      *int64           `json:"wait_ms,omitempty"`
	Max         *int             `json:"max,omitempty"`
	TemplateIDs []int64          `json:"template_ids,omitempty"`
	Complete    *CompleteRequest `json:"complete,omitempty"`
	// Agent says which agent polls; the server keeps the latest per uid (the fleet
	// view), so an agent sends it when it changed, not on every poll.
	Agent *Agent `json:"agent,omitempty"`
}

// Agent is what an agent reports of itself on fetch (the server's taskd.AgentInfo).
type Agent struct {
	Version  string            `json:"version,omitempty"`
	Hostname string            `json:"hostname,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
}

// FetchReply is POST /v1/fetch's reply. Tasks is there (maybe empty) for a batch
// fetch only; Task is its first, or null.
type FetchReply struct {
	Task      *Task      `json:"task"`
	Tasks     []*Task    `json:"tasks,omitzero"`
	NextDueAt *time.Time `json:"next_due_at"`
}

// CompleteRequest is POST /v1/complete's body, and a fetch's carried complete.
type CompleteRequest struct {
	LogID  string          `json:"log_id"`
	Result string          `json:"result"`
	Detail json.RawMessage `json:"detail,omitempty"`
	// NextStage, Context and DelaySeconds hand a multi-stage task on to its next stage.
	NextStage    string          `json:"next_stage,omitempty"`
	Context      json.RawMessage `json:"context,omitempty"`
	DelaySeconds *int64          `json:"delay_seconds,omitempty"`
	// Retry false makes a failure final: the server ends the task at once, whatever
	// attempts are left. nil: true (a failure is retried while attempts are left).
	Retry *bool `json:"retry,omitempty"`
}

// OK is the reply of a complete: {"ok": true}.
type OK struct {
	OK bool `json:"ok"`
}

// ProgressRequest is POST /v1/progress's body.
type ProgressRequest struct {
	LogID       string          `json:"log_id"`
	Checkpoint  json.RawMessage `json:"checkpoint,omitempty"`
	ExtendLease bool            `json:"extend_lease,omitempty"`
}

// ProgressReply is POST /v1/progress's reply: the lease's end after the report
// (null: the dispatch has no lease).
type ProgressReply struct {
	OK             bool       `json:"ok"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
}

// EnrollRequest is POST /v1/enroll's body.
type EnrollRequest struct {
	UID          string `json:"uid"`
	EnrollSecret string `json:"enroll_secret"`
}

// EnrollReply is POST /v1/enroll's reply.
type EnrollReply struct {
	ClientKey string `json:"client_key"`
}

// ErrorReply is the body of every reply other than 2xx.
type ErrorReply struct {
	Error Error `json:"error"`
}

// Error is an error reply's code (invalid_argument, stale_lease, ...) and message.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// OrNil is raw, or nil for none or JSON null: the server sends null for a field it
// has no value of, and leaves some out.
func OrNil(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// BodyLimit is the server's bound on a client request's body.
const BodyLimit = 64 << 10

// MaxCheckpoint is the server's bound on a checkpoint's, and a stage context's,
// encoded size.
const MaxCheckpoint = 16 << 10

// MaxDepth is the server's bound on a request body's nesting (objects and arrays
// within each other), the body counting as one level.
const MaxDepth = 64

// The server's bounds of an agent object (taskd.AgentInfo.Check): the SDK refuses a
// Config past them at New, and the fake refuses a fetch past them as the server does.
const (
	MaxAgentVersion  = 64
	MaxAgentHostname = 255
	MaxAgentLabels   = 32
	MaxLabelKey      = 63
	MaxLabelValue    = 255
	maxNameChars     = 128
)

// Check refuses, naming the field (under "agent."), what the server refuses of an
// agent object: a version or hostname that is not a name (1..128 characters shown as
// themselves), too long; more than 32 labels; a label key that is not 1..63 of
// [A-Za-z0-9._/-]; a value that is not a name or over 255 bytes (empty is allowed).
func (a Agent) Check() error {
	if len(a.Version) > MaxAgentVersion {
		return fmt.Errorf("agent.version: at most %d bytes, got %d", MaxAgentVersion, len(a.Version))
	}
	if a.Version != "" {
		if err := checkName("agent.version", a.Version); err != nil {
			return err
		}
	}
	if len(a.Hostname) > MaxAgentHostname {
		return fmt.Errorf("agent.hostname: at most %d bytes, got %d", MaxAgentHostname, len(a.Hostname))
	}
	if a.Hostname != "" {
		if err := checkName("agent.hostname", a.Hostname); err != nil {
			return err
		}
	}
	if len(a.Labels) > MaxAgentLabels {
		return fmt.Errorf("agent.labels: at most %d labels, got %d", MaxAgentLabels, len(a.Labels))
	}
	for _, k := range slices.Sorted(maps.Keys(a.Labels)) {
		if err := CheckLabelKey("agent.labels", k); err != nil {
			return err
		}
		v := a.Labels[k]
		if len(v) > MaxLabelValue {
			return fmt.Errorf("agent.labels.%s: at most %d bytes, got %d", k, MaxLabelValue, len(v))
		}
		if v != "" {
			if err := checkName("agent.labels."+k, v); err != nil {
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
		return fmt.Errorf("%s: a label key is 1..%d characters, got %d", field, MaxLabelKey, len(k))
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '/' || r == '-') {
			return fmt.Errorf("%s: label key %q: only letters, digits and . _ / - are allowed", field, k)
		}
	}
	return nil
}

// checkName is the server's rule for a name (taskd.CheckName): UTF-8, 1..128
// characters, not only spaces, none of them a control, format, private-use or
// unassigned character, nor a line or paragraph separator.
func checkName(field, name string) error {
	n := 0
	blank := true
	for i, r := range name {
		switch {
		case r == utf8.RuneError:
			return fmt.Errorf("%s: must be UTF-8 text (no invalid bytes or lone surrogates)", field)
		case unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Co, unicode.Zl, unicode.Zp) || !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs):
			return fmt.Errorf("%s: must not hold control, format or invisible characters (got %U at byte %d)", field, r, i)
		case !unicode.IsSpace(r):
			blank = false
		}
		n++
	}
	if n == 0 || blank || n > maxNameChars {
		return fmt.Errorf("%s: required, 1 to %d characters, not only spaces, got %d", field, maxNameChars, n)
	}
	return nil
}
