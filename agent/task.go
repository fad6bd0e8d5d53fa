package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/taskpull/taskd/agent/internal/wire"
	"github.com/taskpull/taskd/internal/jsondepth"
)

// Task is one dispatch of a task to this agent, as the server handed it out.
type Task struct {
	// LogID names this dispatch: the results and progress reports of it carry it.
	LogID string
	// TaskID is the task's key (once:12, rotate:3, campaign:7) and Kind its kind.
	TaskID string
	Kind   string
	// TemplateID is the task's parameter template.
	TemplateID int64
	// DueAt is when the occurrence this dispatch works was due.
	DueAt time.Time
	// Attempt counts the dispatches of this occurrence (and stage) to this uid, from 1.
	Attempt int
	// Redo says the server handed this dispatch out before (a reply was lost, or an
	// agent of this uid stopped without finishing it).
	Redo bool
	// LeaseExpiresAt is when the lease ended when the task was handed out, by the
	// server's clock (nil: no lease). The agent extends it while the handler runs.
	LeaseExpiresAt *time.Time
	// Stage is the stage of a multi-stage task this dispatch works, and StageContext
	// what the previous stage handed on (NextStage's context), as JSON.
	Stage        string
	StageContext json.RawMessage
	// LastCheckpoint is the latest checkpoint saved for this occurrence by this uid
	// (a retry, a redo or a later stage brings it), as JSON; nil for none.
	LastCheckpoint json.RawMessage
	// Params are the task's parameters, as JSON.
	Params json.RawMessage
	// CampaignID and Item name a campaign item (CampaignID 0: not one); Item is the
	// item's index or uid, as JSON.
	CampaignID int64
	Item       json.RawMessage

	run *run // nil for a Task the agent did not hand out
}

// ErrLeaseLost is the cause (context.Cause) of a handler's cancelled context when its
// task's lease lapsed before it could be extended, or the server took the task away
// (409 stale_lease: it expired, or an admin ended it). A result sent after it may be
// refused.
var ErrLeaseLost = errors.New("agent: the task's lease was lost")

// ErrStopping is the cause (context.Cause) of a handler's cancelled context when the
// agent stops and the handler did not finish within the shutdown grace.
var ErrStopping = errors.New("agent: stopping")

// Checkpoint saves v (it must encode as a JSON object of at most 16 KiB) as the task's
// progress: later dispatches of this occurrence to this uid bring it back as
// LastCheckpoint (a retry after a failure or an expiry, a redo, the next stage). It
// does not wait for the server: reports go at most one every
// Config.CheckpointInterval for the task, carrying the latest value, and the last
// value is sent before the task's result (except after Done, which ends the
// occurrence). It returns an error for a value that cannot be sent, or once the task
// is finished or its lease is lost.
func (t *Task) Checkpoint(v any) error {
	r := t.run
	if r == nil {
		return errors.New("agent: Checkpoint of a task that no agent handed out")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("agent: checkpoint: %w", err)
	}
	switch {
	case len(b) == 0 || b[0] != '{':
		return errors.New("agent: checkpoint: must encode as a JSON object")
	case len(b) > wire.MaxCheckpoint:
		return fmt.Errorf("agent: checkpoint: %d bytes is over the server's limit of %d", len(b), wire.MaxCheckpoint)
	case deeper(b, wire.MaxDepth-1): // the request body is one level more
		return fmt.Errorf("agent: checkpoint: nested deeper than the server's %d levels", wire.MaxDepth-1)
	}
	return r.checkpoint(b)
}

// deeper reports whether the JSON in b nests objects and arrays deeper than max.
func deeper(b []byte, max int) bool {
	_, over := jsondepth.Over(b, max)
	return over
}
