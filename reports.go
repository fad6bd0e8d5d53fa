package taskd

import (
	"encoding/json"
	"time"
)

// What the admin API reads back: filters and pages of tasks and events, per-task
// statistics and the audit log. The database package answers them; the admin service
// asks.

// TaskFilter narrows a task list. Zero values match everything (but deleted tasks,
// which match only Status == StatusDeleted).
type TaskFilter struct {
	Executor   string
	Kind       Kind
	Status     Status
	TemplateID int64
}

// EventFilter narrows an event list.
type EventFilter struct {
	UID      string
	Task     TaskKey // zero: any
	Type     EventType
	From, To time.Time
}

// EventCursor is where a page of events ends: events are ordered by (at, event_id)
// descending.
type EventCursor struct {
	At      time.Time
	EventID string
}

// StoredEvent is an event as the dispatch records tell it.
type StoredEvent struct {
	EventID string    `json:"event_id"`
	Type    EventType `json:"type"`
	LogID   string    `json:"log_id"`
	UID     string    `json:"uid"`
	TaskID  string    `json:"task_id"`
	DueAt   time.Time `json:"due_at"`
	Attempt int       `json:"attempt"`
	Result  string    `json:"result,omitempty"`
	Stage   string    `json:"stage,omitempty"` // a multi-stage task's
	// Reason says why a success counted as a failure (complete events only).
	Reason string `json:"reason,omitempty"`
	// Final says a failure was final as its agent said ("retry": false): complete and
	// dead events of a record that died at once.
	Final bool `json:"final,omitempty"`
	// Missed and LastDueAt: a missed event's run, from due_at to last_due_at, Missed
	// occurrences its user will never get (the task's misfire policy).
	Missed    int        `json:"missed,omitempty"`
	LastDueAt *time.Time `json:"last_due_at,omitempty"`
	At        time.Time  `json:"at"`
}

// Overview is the state of the dispatch pipeline at a glance: tasks due, dispatches open, waiting
// for a retry and dead (attempts used up), and the events not yet relayed to Kafka
// (with the time the oldest was written: the pipeline's lag).
type Overview struct {
	// DueNow and DueNextHour count the active tasks with an occurrence due in the last
	// hour, and in the next (quota left or not).
	DueNow         int        `json:"due_now"`
	DueNextHour    int        `json:"due_next_hour"`
	OpenDispatches int        `json:"open_dispatches"`
	RetryWaiting   int        `json:"retry_waiting"`
	Dead           int        `json:"dead"`
	OutboxPending  int        `json:"outbox_pending"`
	OutboxOldestAt *time.Time `json:"outbox_oldest_at"`
}

// TaskStats is what happened to one task in a time range.
type TaskStats struct {
	TaskID     string `json:"task_id"`
	Dispatched int    `json:"dispatched"`
	Completed  int    `json:"completed"`
	Failed     int    `json:"failed"`
	Expired    int    `json:"expired"`
	Dead       int    `json:"dead"`
	Redo       int    `json:"redo"`
	// Missed counts the occurrences users will never get because of the task's
	// misfire policy, recorded in the range.
	Missed       int    `json:"missed"`
	LatencyMSP50 *int64 `json:"latency_ms_p50"`
	LatencyMSP95 *int64 `json:"latency_ms_p95"`
	Claimed      int    `json:"claimed"`
	Remaining    *int   `json:"remaining"`
}

// AuditEntry is one recorded admin change.
type AuditEntry struct {
	ID     int64           `json:"-"`
	At     time.Time       `json:"at"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Target string          `json:"target"`
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}
