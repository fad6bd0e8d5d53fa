package queue

import (
	"cmp"
	"context"
	"fmt"
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
// take its units over.
//
// A node works only on the units whose lease it took or renewed less than two thirds
// of the TTL ago: a lease it could not renew (Redis failing, for this key or all) may
// have run out and gone to another node, and it stops working on it before that can
// happen.

// Shares is this node's part of one kind of background work.
type Shares struct {
	rdb  redis.UniversalClient
	key  func(unit string) string // the key of the lease on a unit
	node string
	ttl  time.Duration

	divide sync.Mutex // one Divide (or ReleaseAll) at a time; Held does not wait for it

	mu      sync.Mutex
	held    map[string]time.Time // unit -> when its lease was last taken or renewed
	divided bool                 // the last Divide reached Redis
}

// NewShares returns node's shares over rdb, each lease lasting ttl unrenewed, under
// the key <prefix>lease:<unit>.
func NewShares(rdb redis.UniversalClient, keys Keys, node string, ttl time.Duration) *Shares {
	return newShares(rdb, keys.lease, node, ttl)
}

// lease is the key of the lease on unit.
func (k Keys) lease(unit string) string { return k.Prefix + "lease:" + unit }

func newShares(rdb redis.UniversalClient, key func(string) string, node string, ttl time.Duration) *Shares {
	return &Shares{rdb: rdb, key: key, node: node, ttl: ttl, held: map[string]time.Time{}}
}

// Divide is one round of taking this node's share of units among nodes live nodes,
// at most perNode of them (0: no cap). It gives up what it holds that is no longer
// among units or is over the share (the last units first), renews the leases a third
// of the way through their TTL (dropping the ones another node took meanwhile), and
// takes free units in order while it holds fewer than its share. It returns the units
// it holds and may work on, in units' order. A Redis failure ends the round (so does a
// third of the TTL going by): the units still fresh are returned with the error, and
// Held reports the division unknown until a round succeeds.
func (s *Shares) Divide(ctx context.Context, units []string, nodes, perNode int) ([]string, error) {
	share := len(units)
	if nodes > 1 {
		share = (len(units) + nodes - 1) / nodes
	}
	if perNode > 0 {
		share = min(share, perNode)
	}
	s.divide.Lock()
	defer s.divide.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.ttl/3)
	defer cancel()
	s.mu.Lock()
	held := make(map[string]time.Time, len(s.held))
	for u, at := range s.held {
		held[u] = at
	}
	s.mu.Unlock()

	work := make(map[string]bool, len(units))
	for _, u := range units {
		work[u] = true
	}
	for u := range held {
		if !work[u] {
			s.release(ctx, u)
			delete(held, u)
		}
	}
	for i := len(units) - 1; i >= 0 && len(held) > share; i-- {
		if _, ok := held[units[i]]; ok {
			s.release(ctx, units[i])
			delete(held, units[i])
		}
	}
	var err error
	for _, u := range units {
		renewed, holds := held[u]
		if holds && time.Since(renewed) < s.ttl/3 || !holds && len(held) >= share {
			continue
		}
		start := time.Now() // the leases expire in Redis's time, not the service's clock
		var ok bool
		if ok, err = s.hold(ctx, u); err != nil {
			break
		}
		if ok {
			held[u] = start
		} else {
			delete(held, u)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = held
	s.divided = err == nil
	return s.fresh(units), err
}

// Held lists the units this node holds and may work on, shortest first ("sweeper:2"
// before "sweeper:10"), and whether the last Divide reached Redis (false: what is
// held is not known; before the first Divide too). A Divide takes at most a third of
// the TTL.
func (s *Shares) Held() ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.fresh(nil)
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(len(a)-len(b), strings.Compare(a, b)) })
	return out, s.divided
}

// ReleaseAll gives every lease up (a node stopping cleanly: the others need not wait
// for the TTL). An error says how many leases are left to run out.
func (s *Shares) ReleaseAll(ctx context.Context) error {
	s.divide.Lock()
	defer s.divide.Unlock()
	s.mu.Lock()
	units := make([]string, 0, len(s.held))
	for u := range s.held {
		units = append(units, u)
	}
	s.held, s.divided = map[string]time.Time{}, false
	s.mu.Unlock()
	var failed int
	var first error
	for _, u := range units {
		if err := s.release(ctx, u); err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if first != nil {
		return fmt.Errorf("%d of %d leases left to run out: %w", failed, len(units), first)
	}
	return nil
}

// fresh lists the held units taken or renewed less than two thirds of the TTL ago, in
// order's order (nil: any order). The caller holds s.mu.
func (s *Shares) fresh(order []string) []string {
	ok := func(u string) bool { at, held := s.held[u]; return held && time.Since(at) < 2*s.ttl/3 }
	var out []string
	if order == nil {
		for u := range s.held {
			if ok(u) {
				out = append(out, u)
			}
		}
		return out
	}
	for _, u := range order {
		if ok(u) {
			out = append(out, u)
		}
	}
	return out
}

// renewScript extends a lease only if the caller still holds it.
//
//	KEYS[1] -> the lease
//	ARGV[1] -> the node
//	ARGV[2] -> the lease's TTL, ms
//	Returns -> integer: 1 renewed, 0 not this node's (or gone)
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)

// hold takes (or, when this node holds it already, renews) the lease on unit and
// reports whether this node holds it.
func (s *Shares) hold(ctx context.Context, unit string) (bool, error) {
	key := s.key(unit)
	n, err := intReply("renew", renewScript.Run(ctx, s.rdb, []string{key}, s.node, s.ttl.Milliseconds()))
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

// releaseScript releases a lease only if the caller still holds it.
//
//	KEYS[1] -> the lease
//	ARGV[1] -> the node
//	Returns -> integer: 1 released, 0 not this node's (or gone); release does not read it
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// release gives up the lease on unit, if this node still holds it. A failure leaves
// the lease to run out.
func (s *Shares) release(ctx context.Context, unit string) error {
	if err := releaseScript.Run(ctx, s.rdb, []string{s.key(unit)}, s.node).Err(); err != nil {
		return unavailable("release lease "+unit, err)
	}
	return nil
}
