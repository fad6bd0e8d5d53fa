package queue

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Background work divided among the live nodes (seed 000's 分片, seed 003's
// membership): the work is a list of units ("sweeper:3", "campaign:12"), each held by
// one node at a time under a lease in Redis. A node holds its share: the units divided
// by the live nodes, rounded up, capped by configuration. It renews its leases at a
// third of their TTL; a dead node's run out, and the others, counting one node fewer,
// take its units over within the TTL.

// Shares is this node's part of one kind of background work.
type Shares struct {
	rdb  redis.UniversalClient
	keys Keys
	node string
	ttl  time.Duration

	mu      sync.Mutex
	held    map[string]time.Time // unit -> when its lease was last taken or renewed
	divided bool                 // the last Divide reached Redis
}

// NewShares returns node's shares over rdb, each lease lasting ttl unrenewed.
func NewShares(rdb redis.UniversalClient, keys Keys, node string, ttl time.Duration) *Shares {
	return &Shares{rdb: rdb, keys: keys, node: node, ttl: ttl, held: map[string]time.Time{}}
}

// lease is the key of the lease on unit.
func (k Keys) lease(unit string) string { return k.Prefix + "lease:" + unit }

// Divide is one round of taking this node's share of units among nodes live nodes,
// at most perNode of them (0: no cap). It gives up what it holds that is no longer
// among units or is over the share (the last units first), renews the leases a third
// of the way through their TTL (dropping the ones another node took meanwhile), and
// takes free units in order while it holds fewer than its share. It returns the units
// it holds, in units' order. A Redis failure ends the round: the units held so far are
// returned with the error, and Held reports the division unknown until the next round
// that succeeds.
func (s *Shares) Divide(ctx context.Context, units []string, nodes, perNode int) ([]string, error) {
	share := len(units)
	if nodes > 1 {
		share = (len(units) + nodes - 1) / nodes
	}
	if perNode > 0 {
		share = min(share, perNode)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	work := make(map[string]bool, len(units))
	for _, u := range units {
		work[u] = true
	}
	for u := range s.held {
		if !work[u] {
			s.release(ctx, u)
		}
	}
	for i := len(units) - 1; i >= 0 && len(s.held) > share; i-- {
		if _, ok := s.held[units[i]]; ok {
			s.release(ctx, units[i])
		}
	}
	s.divided = false
	now := time.Now() // the leases expire in Redis's time, not the service's clock
	for _, u := range units {
		renewed, holds := s.held[u]
		if holds && now.Sub(renewed) < s.ttl/3 || !holds && len(s.held) >= share {
			continue
		}
		ok, err := s.hold(ctx, u)
		if err != nil {
			return s.list(units), err
		}
		if ok {
			s.held[u] = now
		} else {
			delete(s.held, u)
		}
	}
	s.divided = true
	return s.list(units), nil
}

// Held lists the units this node holds, shortest first ("sweeper:2" before
// "sweeper:10"), and whether the last Divide reached
// Redis (false: what is held is not known; before the first Divide too).
func (s *Shares) Held() ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.held))
	for u := range s.held {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(len(a)-len(b), strings.Compare(a, b)) })
	return out, s.divided
}

// ReleaseAll gives every lease up (a node stopping cleanly: the others need not wait
// for the TTL).
func (s *Shares) ReleaseAll(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for u := range s.held {
		s.release(ctx, u)
	}
	s.divided = false
}

// list is the held units in units' order.
func (s *Shares) list(units []string) []string {
	var out []string
	for _, u := range units {
		if _, ok := s.held[u]; ok {
			out = append(out, u)
		}
	}
	return out
}

// hold takes (or, when this node holds it already, renews) the lease on unit and
// reports whether this node holds it.
func (s *Shares) hold(ctx context.Context, unit string) (bool, error) {
	key := s.keys.lease(unit)
	n, err := renewScript.Run(ctx, s.rdb, []string{key}, s.node, s.ttl.Milliseconds()).Int()
	if err != nil {
		return false, unavailable("lease", err)
	}
	if n == 1 {
		return true, nil
	}
	ok, err := s.rdb.SetNX(ctx, key, s.node, s.ttl).Result()
	if err != nil {
		return false, unavailable("lease", err)
	}
	return ok, nil
}

// release gives up the lease on unit, if this node still holds it. A failure leaves
// the lease to run out.
func (s *Shares) release(ctx context.Context, unit string) {
	delete(s.held, unit)
	releaseScript.Run(ctx, s.rdb, []string{s.keys.lease(unit)}, s.node)
}

// releaseScript releases a lease only if the caller still holds it.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// renewScript extends a lease only if the caller still holds it.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)
