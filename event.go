package taskd

import (
	"strconv"
	"time"
)

// EventType is what happened to a dispatch, or to a task's rollout (rollout.*).
type EventType string

const (
	EventDispatch EventType = "dispatch"
	EventComplete EventType = "complete"
	EventExpire   EventType = "expire"
	EventRedo     EventType = "redo"
	// EventDead: the occurrence used up its attempts (failed or expired max_attempts
	// times) for this user; it is not dispatched to the user again and its slot stays
	// taken.
	EventDead EventType = "dead"
	// EventCancel: an open or waiting dispatch ended for good, because its task was
	// deleted or an admin cancelled it.
	EventCancel EventType = "cancel"
	// EventRetry: an admin sent a dead occurrence back to its user, attempts counted
	// afresh (the event carries the dead record's log id and attempt).
	EventRetry EventType = "retry"
	// EventMissed: occurrences of a rotate task its user will never get, because of
	// the task's misfire policy (latest, skip): a run of them, with no log id.
	EventMissed EventType = "missed"
)

// A rollout's events: the moves of its state (RolloutChange); they name the task alone.
const (
	EventRolloutPhase     EventType = "rollout.phase"     // the next phase opened
	EventRolloutBaking    EventType = "rollout.baking"    // the gate passed: the bake before the next phase
	EventRolloutWaiting   EventType = "rollout.waiting"   // an admin's move is awaited
	EventRolloutAborted   EventType = "rollout.aborted"   // stopped: the task is paused
	EventRolloutCompleted EventType = "rollout.completed" // the last phase passed
	EventRolloutPaused    EventType = "rollout.paused"    // an admin paused it
	EventRolloutResumed   EventType = "rollout.resumed"   // an admin resumed it
)

// EventID is the id of an event: the same in the admin API, the outbox, Kafka and
// Elasticsearch (where it is the document _id), so an event seen in one is found in the
// others. A dispatch has at most one event of each type but redo, whose n-th occurrence
// (counting from 1) is numbered.
func EventID(logID string, typ EventType, redo int) string {
	if typ == EventRedo {
		return logID + ":" + string(typ) + ":" + strconv.Itoa(redo)
	}
	return logID + ":" + string(typ)
}

// Event is one dispatch lifecycle event, as it travels through the outbox, Kafka and
// Elasticsearch. EventID is unique and stable: replays index the same document.
type Event struct {
	EventID string    `json:"event_id"`
	Type    EventType `json:"type"`
	LogID   string    `json:"log_id"`
	UID     string    `json:"uid"`
	TaskID  string    `json:"task_id"`
	Kind    string    `json:"kind"`
	DueAt   time.Time `json:"due_at"`
	Attempt int       `json:"attempt"`
	Result  string    `json:"result,omitempty"`
	// Stage is the stage of a multi-stage task the dispatch worked.
	Stage     string `json:"stage,omitempty"`
	LatencyMS *int64 `json:"latency_ms,omitempty"`
	// Reason says why a success counted as a failure (its detail failed the template's
	// result schema); "" for none.
	Reason string `json:"reason,omitempty"`
	// Final says the complete's failure was final as its agent said ("retry": false):
	// the occurrence died at once, attempts left or not. Set on that complete event and
	// its dead event.
	Final bool `json:"final,omitempty"`
	// Missed and LastDueAt: a missed event's run, from due_at to last_due_at.
	Missed    int        `json:"missed,omitempty"`
	LastDueAt *time.Time `json:"last_due_at,omitempty"`
	Node      string     `json:"node"`
	At        time.Time  `json:"at"`
	// RolloutEvent is set on a rollout's events (rollout.*), which name the task alone
	// (no log id or uid).
	*RolloutEvent
}

// RolloutEvent is what a rollout event says: the move (from_state to state), the phase
// it is in now (1-based), its cap, and the figures of the phase the move decided on.
type RolloutEvent struct {
	FromState string `json:"from_state"`
	State     string `json:"state"`
	Phase     int    `json:"phase"`
	Cap       int    `json:"cap"`
	PhaseFigures
	// Actor is the admin who moved it; "" for the server's own moves.
	Actor string `json:"actor,omitempty"`
}

// RolloutEventID is the id of a rollout event of task at at: unique per move.
func RolloutEventID(task TaskKey, typ EventType, at time.Time) string {
	return "rollout:" + task.String() + ":" + at.UTC().Format(time.RFC3339Nano) + ":" + string(typ)
}
