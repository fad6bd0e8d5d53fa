package taskd

import "time"

// EventType is what happened to a dispatch.
type EventType string

const (
	EventDispatch EventType = "dispatch"
	EventComplete EventType = "complete"
	EventExpire   EventType = "expire"
	EventRedo     EventType = "redo"
)

// Event is one dispatch lifecycle event, as it travels through the outbox, Kafka and
// Elasticsearch. EventID is unique and stable: replays index the same document.
type Event struct {
	EventID   string    `json:"event_id"`
	Type      EventType `json:"type"`
	LogID     string    `json:"log_id"`
	UID       string    `json:"uid"`
	TaskID    string    `json:"task_id"`
	Kind      string    `json:"kind"`
	DueAt     time.Time `json:"due_at"`
	Attempt   int       `json:"attempt"`
	Result    string    `json:"result,omitempty"`
	LatencyMS *int64    `json:"latency_ms,omitempty"`
	Node      string    `json:"node"`
	At        time.Time `json:"at"`
}
