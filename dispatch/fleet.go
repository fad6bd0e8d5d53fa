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
// joined, and takes nothing new of one it left. The key is checked first: a report
// writes to MySQL. A report equal to the one stored costs one indexed read (the SDK and
// taskd-agent send theirs on the first fetch and when it changes); MySQL away, the
// fetch is refused (503), so that the agent sends its report again.
func (s *Service) Report(ctx context.Context, uid, keyHash string, agent *taskd.AgentInfo) error {
	if agent == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	if err := s.cache.VerifyKey(ctx, uid, keyHash); err != nil {
		return err
	}
	return s.report(ctx, uid, *agent)
}

// report stores what uid's agent reported and brings its dynamic groups up to date.
func (s *Service) report(ctx context.Context, uid string, agent taskd.AgentInfo) error {
	changed, err := s.store.SyncAgentGroups(ctx, uid, agent, s.rules.Matches, s.now())
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
