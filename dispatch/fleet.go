package dispatch

import (
	"time"

	"github.com/taskpull/taskd"
)

// Fleet remembers which uids poll and the agents they report (internal/fleet): in
// memory, written to MySQL in batches, so that a poll adds no round trip.
type Fleet interface {
	// Seen records a poll of uid at at, with the agent it reported (nil: none).
	Seen(uid string, at time.Time, agent *taskd.AgentInfo)
}

// SetFleet has fetches recorded in f.
func (s *Service) SetFleet(f Fleet) { s.fleet = f }

// seen records an answered fetch of uid.
func (s *Service) seen(uid string, agent *taskd.AgentInfo) {
	if s.fleet != nil {
		s.fleet.Seen(uid, s.now(), agent)
	}
}
