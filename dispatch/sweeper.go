package dispatch

import (
	"context"
	"time"
)

// Shards is the part of the open dispatches a sweep covers: those whose user's hash
// (CRC-32 of the uid) modulo Of is one of Parts. The nodes divide the parts among them;
// Of 0 is every dispatch.
type Shards struct {
	Of    int
	Parts []int
}

// SweepExpired expires every open dispatch of sh whose lease has run out, returning
// their quota slots to the pool, and reports how many it expired. Fetch expires a
// user's own dispatch lazily; the sweep frees slots held by agents that never come
// back. Several nodes may sweep the same dispatches (while Redis, which divides the
// parts, is unreachable, each sweeps them all): each expiry is a conditional update in
// its own transaction.
func (s *Service) SweepExpired(ctx context.Context, sh Shards) (int, error) {
	total := 0
	for {
		now := s.now()
		ids, err := s.store.ExpiredLeases(ctx, now, 200, sh.Of, sh.Parts)
		if err != nil {
			return total, err
		}
		for _, id := range ids {
			d, err := s.store.Expire(ctx, id, now)
			if err != nil {
				return total, err
			}
			if d == nil {
				continue // another node expired it first
			}
			total++
			s.cfg.Metrics.Expired(d.Occurrence.Task.Kind.String())
			// The expiry is committed; a cache failure must not stop the sweep (the
			// user's next fetch finds the truth in MySQL).
			if err := s.afterExpire(ctx, d); err != nil {
				s.log.WarnContext(ctx, "cache update after expiry failed", "uid", d.UID, "log_id", d.LogID, "err", err)
			}
		}
		if len(ids) < 200 {
			return total, nil
		}
	}
}

// RunSweeper sweeps every interval, the shards shards says at the time, until ctx is
// done: expired leases, then unconfirmed successes past their deadline.
func (s *Service) RunSweeper(ctx context.Context, interval time.Duration, shards func() Shards) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sh := shards()
			if n, err := s.SweepExpired(ctx, sh); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "lease sweep failed", "err", err)
			} else if n > 0 {
				s.log.InfoContext(ctx, "leases expired", "count", n)
			}
			if n, err := s.SweepUnconfirmed(ctx, sh); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "unconfirmed success sweep failed", "err", err)
			} else if n > 0 {
				s.log.InfoContext(ctx, "successes unconfirmed", "count", n)
			}
		}
	}
}
