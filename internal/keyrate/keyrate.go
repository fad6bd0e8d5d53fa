// Package keyrate limits events per key (a user, a source) in this process's memory: a
// token bucket per key (golang.org/x/time/rate), of burst events refilled at a rate a
// second. Memory stays bounded by the keys in use: a bucket that has filled up again is
// indistinguishable from a new one, so it is dropped, and only the keys that had an
// event within the time a bucket takes to fill (burst / rate) hold one.
package keyrate

import (
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// shards spreads the keys over this many locks, so that concurrent events of different
// keys rarely wait for each other.
const shards = 64

// Limiter is a token bucket per key. The zero Limiter is not usable; New makes one.
type Limiter struct {
	limit rate.Limit
	burst int
	// sweep is how often a shard looks for full buckets to drop: the time a bucket takes
	// to fill, and no more often than once a second (a sweep walks the whole shard).
	sweep  time.Duration
	seed   maphash.Seed
	shards [shards]shard
}

type shard struct {
	mu    sync.Mutex
	keys  map[string]*rate.Limiter
	swept time.Time
}

// New returns a limiter that lets each key have burst events at once, then perSecond
// a second. perSecond must be > 0 and burst >= 1.
func New(perSecond float64, burst int) *Limiter {
	l := &Limiter{limit: rate.Limit(perSecond), burst: burst, seed: maphash.MakeSeed()}
	l.sweep = max(time.Second, time.Duration(float64(burst)/perSecond*float64(time.Second)))
	for i := range l.shards {
		l.shards[i].keys = map[string]*rate.Limiter{}
	}
	return l
}

// Allow counts one event of key at now and reports whether it is within the limit. An
// event past it is not counted; wait is then how long until key may have one.
func (l *Limiter) Allow(key string, now time.Time) (wait time.Duration, ok bool) {
	s := &l.shards[maphash.String(l.seed, key)%shards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.swept) >= l.sweep {
		s.drop(now, l.burst)
	}
	b, found := s.keys[key]
	if !found {
		b = rate.NewLimiter(l.limit, l.burst)
		// The key may be part of a larger string (a request's header): it is kept
		// alone.
		s.keys[strings.Clone(key)] = b
	}
	if b.AllowN(now, 1) {
		return 0, true
	}
	return time.Duration((1 - b.TokensAt(now)) / float64(l.limit) * float64(time.Second)), false
}

// drop forgets the keys whose bucket is full again at now (s.mu held).
func (s *shard) drop(now time.Time, burst int) {
	for k, b := range s.keys {
		if b.TokensAt(now) >= float64(burst) {
			delete(s.keys, k)
		}
	}
	s.swept = now
}

// Len is how many keys hold a bucket.
func (l *Limiter) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.keys)
		s.mu.Unlock()
	}
	return n
}
