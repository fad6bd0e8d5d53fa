package taskd

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
)

// What the dispatch lists show (an agent's own records, GET /v1/dispatches; any
// records, GET /v1/admin/dispatches) and what an admin's change to one record did. The
// database package answers them; the services ask.

// dispatchStateNames are the states as the API names them. A failed attempt that the
// next attempt superseded (StateRetried) is "failed": that is what happened to it.
var dispatchStateNames = map[DispatchState]string{
	StateOpen:        "open",
	StateRetryWait:   "retry_wait",
	StateDone:        "done",
	StateExpired:     "expired",
	StateRetried:     "failed",
	StateDead:        "dead",
	StateCancelled:   "cancelled",
	StateStaged:      "staged",
	StateUnconfirmed: "unconfirmed",
}

// dispatchStateOrder is the order error messages list the state names in.
var dispatchStateOrder = []DispatchState{StateOpen, StateRetryWait, StateDone, StateRetried, StateExpired,
	StateDead, StateCancelled, StateStaged, StateUnconfirmed}

// DispatchStateName is the API's name of a record's state ("" for none it knows).
func DispatchStateName(s DispatchState) string { return dispatchStateNames[s] }

// ParseDispatchState parses a state name of the lists' state filter.
func ParseDispatchState(name string) (DispatchState, error) {
	for s, n := range dispatchStateNames {
		if n == name {
			return s, nil
		}
	}
	names := make([]string, len(dispatchStateOrder))
	for i, s := range dispatchStateOrder {
		names[i] = dispatchStateNames[s]
	}
	return 0, Errorf(CodeInvalid, "state: must be one of %s, got %q", strings.Join(names, ", "), name)
}

// DispatchFilter narrows a list of dispatch records. Zero values match everything;
// From and To bound dispatched_at to [From, To).
type DispatchFilter struct {
	UID      string
	Task     TaskKey // zero: any
	State    DispatchState
	From, To time.Time
}

// DispatchCursor is where a page of dispatch records ends: records are ordered by log
// id descending (a log id carries its record's dispatch time, so this is newest
// first), and the next page starts after this one. The dispatch time rides along so
// that cursors keep the form they always had.
type DispatchCursor struct {
	DispatchedAt time.Time
	LogID        string
}

// Encode is the cursor as the API hands it out: opaque to clients.
func (c DispatchCursor) Encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.DispatchedAt.UTC().Format(time.RFC3339Nano) + "|" + c.LogID))
}

// ParseDispatchCursor parses a cursor Encode gave out; nil for "" (the first page).
func ParseDispatchCursor(s string) (*DispatchCursor, error) {
	if s == "" {
		return nil, nil
	}
	bad := Errorf(CodeInvalid, "cursor: not a cursor this server gave out")
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, bad
	}
	at, id, ok := strings.Cut(string(raw), "|")
	t, err := time.Parse(time.RFC3339Nano, at)
	if !ok || err != nil || id == "" || len(id) > 64 {
		return nil, bad
	}
	return &DispatchCursor{DispatchedAt: t.UTC(), LogID: id}, nil
}

// DispatchRecord is one dispatch record as the lists show it. Attempt is the attempt
// the record was, State its API name, Result "success", "failure" or null, Detail (the
// complete's) and Checkpoint (the latest progress) JSON objects or null, Stage the
// stage of a multi-stage task it worked (null for none).
type DispatchRecord struct {
	LogID          string          `json:"log_id"`
	UID            string          `json:"uid"`
	TaskID         string          `json:"task_id"`
	DueAt          time.Time       `json:"due_at"`
	Attempt        int             `json:"attempt"`
	State          string          `json:"state"`
	Result         *string         `json:"result"`
	Detail         json.RawMessage `json:"detail"`
	Checkpoint     json.RawMessage `json:"checkpoint"`
	Stage          *string         `json:"stage"`
	DispatchedAt   time.Time       `json:"dispatched_at"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	RetryAt        *time.Time      `json:"retry_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	// RetriedAt is when an admin sent this dead record's occurrence back to its user
	// (the next attempt is a record of its own); CancelledAt when it was ended for good.
	RetriedAt   *time.Time `json:"retried_at"`
	CancelledAt *time.Time `json:"cancelled_at"`
	// Resumed says the record continues a waiting one (a retry, a next stage, an admin's
	// retry) rather than claiming a quota slot anew.
	Resumed bool `json:"resumed"`
	// RolloutPhase is the rollout phase (1-based) the record was claimed in (null: its
	// task had no rollout); Reason why a success counted as a failure.
	RolloutPhase *int   `json:"rollout_phase"`
	Reason       string `json:"reason,omitempty"`
	// Final says the record died of a final failure ("retry": false), attempts left or
	// not.
	Final bool `json:"final,omitempty"`
	// ConfirmBy is, on a success of a task with confirm_seconds, when its user had to
	// fetch again for it to count (state unconfirmed until then); null for none.
	ConfirmBy *time.Time `json:"confirm_by"`
}

// DispatchChange is an admin's change to one dispatch record (expire, retry, cancel) as
// committed: the record as the lists show it afterwards, and what the caches must
// follow.
type DispatchChange struct {
	Record DispatchRecord
	// WasOpen says the record was open before the change: the user's open-dispatch
	// hint may name it.
	WasOpen bool
	// Executor is the task's executor, and Reopened says the change gave a slot back
	// to an occurrence whose quota was used up (see Dispatch.Reopened).
	Executor string
	Reopened bool
}
