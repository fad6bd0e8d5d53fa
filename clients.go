package taskd

import "time"

// A client's settings: how many dispatches it may hold open at once (seed 004's
// hold-N). A fetch with max hands out up to min(max, free slots) tasks; each open
// dispatch takes one of the user's numbered slots, 1..MaxInFlight.

// DefaultMaxInFlight is a client's max_in_flight until an admin sets one: seed 001's
// one task at a time.
const DefaultMaxInFlight = 1

// MaxInFlightLimit bounds max_in_flight (and a fetch's max).
const MaxInFlightLimit = 100

// ClientSetting is one client's settings as the admin API shows them. UpdatedAt is nil
// and Version 0 while the client has the defaults; Open is how many dispatches it holds
// open now (not part of the version: it is nobody's edit).
type ClientSetting struct {
	UID         string     `json:"uid"`
	MaxInFlight int        `json:"max_in_flight"`
	UpdatedAt   *time.Time `json:"updated_at"`
	Open        int        `json:"open"`
	// Keys, LastSeen and Agent show the client as the fleet list does (its live keys,
	// its last recorded poll, the agent it last reported); like Open, they are not
	// part of the version.
	Keys     int        `json:"keys"`
	LastSeen *time.Time `json:"last_seen"`
	Agent    *AgentInfo `json:"agent"`
	// Version counts the settings' writes (their ETag).
	Version int64 `json:"version"`
}

// OpenSlot is one of a user's open dispatches and the slot it holds.
type OpenSlot struct {
	Slot           int
	LogID          string
	LeaseExpiresAt *time.Time
}

// Take says how a fetch takes what it claims or resumes: into which of the user's open
// slots (1 for a fetch without max), and, when Templates is not empty, only
// occurrences of those templates (any other is Filtered: the entry stays for another
// fetch). DDI says the take is a DDI controller's: it takes the tasks of DDI templates
// and nothing else, and any other take takes none of them.
type Take struct {
	Slot      int
	Templates []int64
	DDI       bool
}

// Single is the take of a fetch without max: slot 1, any template.
var Single = Take{Slot: 1}

// OpenSlot is the slot the take names; 1 for none (the zero Take is Single).
func (t Take) OpenSlot() int { return max(t.Slot, 1) }

// Allows reports whether the take accepts a task of template id.
func (t Take) Allows(templateID int64) bool {
	if len(t.Templates) == 0 {
		return true
	}
	for _, id := range t.Templates {
		if id == templateID {
			return true
		}
	}
	return false
}

// KeyChange says that a client's keys changed at At (a key issued, enrolled or
// revoked): whatever a cache holds of them from before is to be dropped.
type KeyChange struct {
	UID string
	At  time.Time
}

// HeapChange says that a change made at At invalidated the cached heaps of Target, an
// executor: one user's (uid_<id>), or every member's of a group (gid_<id>). ID orders
// the changes noted at the same time.
type HeapChange struct {
	ID     int64
	Target string
	At     time.Time
}

// IdempotentReply is an admin request kept under its Idempotency-Key: its hash, and
// its reply once it succeeded (Status 0: under way).
type IdempotentReply struct {
	RequestHash string
	Status      int
	Header      map[string][]string
	Body        []byte
	CreatedAt   time.Time
}
