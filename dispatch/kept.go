package dispatch

import (
	"context"
	"encoding/json"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// MySQL away. A fetch whose user holds an open dispatch hands it out again (redo),
// which needs only what was handed out: so the cache keeps, beside the open-dispatch
// hint, a copy of the assignment (keptCopy, written with the hint in the same round
// trip), and while MySQL cannot say what is open, a fetch whose hint names a dispatch
// hands out that copy (fromCopy). Such a redo is not recorded (no redo event, the
// record's redo_count unchanged) and renews nothing; the lease in the copy is the
// dispatch's, since a redo does not move it; a checkpoint saved since is not in it. A
// fetch that needs MySQL for anything else (a claim, an expiry) answers 503 as before.
//
// A copy must not outlive its dispatch: a complete drops it before it reaches MySQL
// (in its key check's round trip, VerifyCompleting, or its peek's, PeekCompleting, which
// also keep a copy of it from being written again after), and a hint cleared or
// forgotten, an invalidation of the user and the heap-change feed drop it too.

// maxKeptCopy bounds the copy kept of one assignment: a larger one (its params) is
// not kept, and its redo waits for MySQL.
const maxKeptCopy = 64 << 10

// keptCopy is the copy of the assignment in tasks with logID that the cache keeps with
// the hint, or nil: none found, a DDI deployment's (DDI controllers do not redo from a
// fetch), or too large.
func keptCopy(tasks []*Assignment, logID string) []byte {
	for _, a := range tasks {
		if a.LogID != logID {
			continue
		}
		if a.ActionID != 0 {
			return nil
		}
		b, err := json.Marshal(a)
		if err != nil || len(b) > maxKeptCopy {
			return nil
		}
		return b
	}
	return nil
}

// fromCopy is the redo a fetch hands out while MySQL is away: the copy kept of the
// dispatch uid's hint (seen) names, if MySQL's failure (err) was its being unavailable
// and the copy's lease has not run out (an expiry needs MySQL); nil otherwise.
func (s *Service) fromCopy(ctx context.Context, uid string, seen schedule.OpenHint, now time.Time, err error) *Assignment {
	if seen.State != schedule.OpenSome || taskd.ErrorCode(err) != taskd.CodeUnavailable {
		return nil
	}
	// On a bound of its own: a MySQL that hangs rather than refuses spent the
	// request's.
	read, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	b, cerr := s.cache.OpenCopy(read, uid, seen.LogID)
	if cerr != nil || b == nil {
		return nil
	}
	var a Assignment
	if json.Unmarshal(b, &a) != nil || a.LogID != seen.LogID {
		return nil
	}
	if a.LeaseExpiresAt != nil && !now.Before(*a.LeaseExpiresAt) {
		return nil
	}
	a.Redo = true
	s.cfg.Metrics.Degraded("mysql")
	return &a
}

// notDropped makes uid's hint unknown, and its copy gone, after a complete whose key
// check or peek could not drop the copy (dropped false: Redis away, or refusing
// writes). When Redis refuses that too, the change is noted for the heap-change feed,
// which drops them once Redis answers (forgetOpen).
func (s *Service) notDropped(ctx context.Context, uid string, dropped bool) {
	if !dropped {
		s.forgetOpen(ctx, uid)
	}
}
