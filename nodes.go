package taskd

import "time"

// Node is a live server process as GET /v1/admin/nodes shows it: its name
// (DISPATCH_NODE), when it started and last beat, and the background work it holds.
type Node struct {
	Node      string    `json:"node"`
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
	Roles     []string  `json:"roles"`
}
