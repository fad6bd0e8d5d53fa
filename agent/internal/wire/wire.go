// Package wire holds the client API's bodies as they travel, for the agent SDK and
// its fake server (agenttest), so that the two speak one API: every field the server
// sends, named once. The server's own types (dispatch.Assignment, its requests) are
// the reference; the contract suite (agent/internal/contract) holds the fake to them.
package wire

import (
	"encoding/json"
	"time"
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
