package queue

import (
	"hash/maphash"
	"strings"
	"sync"
)

// userGroups remembers each user's groups (comma-joined, sorted), so that a warm peek
// can name the group generation keys up front; a wrong guess costs one more round
// trip, never a wrong answer (the script compares against the groups the heap was
// built from). Every poll reads it and rebuilds write it: maps in shards, each under
// its own lock (a sync.Map's lookup cost a poll about as much as the rest of its
// bookkeeping, profiled under load). The zero value is ready.
type userGroups struct {
	once   sync.Once
	seed   maphash.Seed
	shards [64]groupShard
}

type groupShard struct {
	mu    sync.RWMutex
	users map[string]string
}

func (g *userGroups) shard(uid string) *groupShard {
	g.once.Do(func() { g.seed = maphash.MakeSeed() })
	return &g.shards[maphash.String(g.seed, uid)%uint64(len(g.shards))]
}

// Load returns uid's groups as last stored, ok false if none were.
func (g *userGroups) Load(uid string) (groups string, ok bool) {
	s := g.shard(uid)
	s.mu.RLock()
	groups, ok = s.users[uid]
	s.mu.RUnlock()
	return groups, ok
}

// Store remembers groups as uid's.
func (g *userGroups) Store(uid, groups string) {
	s := g.shard(uid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users == nil {
		s.users = map[string]string{}
	}
	if _, ok := s.users[uid]; !ok {
		uid = strings.Clone(uid) // the uid may be part of a larger string (a request's header)
	}
	s.users[uid] = groups
}
