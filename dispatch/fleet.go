package dispatch

import (
	"context"
	"time"

	"github.com/taskpull/taskd"
)

// Fleet remembers which uids poll and the agents they report (internal/fleet): in
// memory, written to MySQL in batches, so that a poll adds no round trip.
type Fleet interface {
	// Seen records a poll of uid at at, with the agent it reported (nil: none).
	Seen(uid string, at time.Time, agent *taskd.AgentInfo)
	// Reported reports whether uid's latest report seen was agent.
	Reported(uid string, agent taskd.AgentInfo) bool
}

// SetFleet has fetches recorded in f.
func (s *Service) SetFleet(f Fleet) { s.fleet = f }

// seen records an answered fetch of uid.
func (s *Service) seen(uid string, agent *taskd.AgentInfo) {
	if s.fleet != nil {
		s.fleet.Seen(uid, s.now(), agent)
	}
}

// Report matches what a fetch of uid reports of its agent against the dynamic groups,
// before the fetch takes anything: a report that changes uid's memberships writes them
// and invalidates uid's heap, so that this fetch already sees the tasks of a group it
// joined, and takes nothing new of one it left. A report this node saw last from uid
// costs nothing.
func (s *Service) Report(ctx context.Context, uid string, agent *taskd.AgentInfo) error {
	if agent == nil || s.fleet != nil && s.fleet.Reported(uid, *agent) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	changed, err := s.store.SyncAgentGroups(ctx, uid, *agent, s.rules.Matches, s.now())
	if err != nil || !changed {
		return err
	}
	if err := s.invalidateUser(ctx, uid); err != nil {
		// Noted in MySQL: every node's heap-change feed applies it once Redis answers.
		s.log.WarnContext(ctx, "a report changed a user's dynamic groups; its heap stays until the heap-change feed reaches Redis",
			"component", "dispatch", "uid", uid, "err", err)
	}
	return nil
}
