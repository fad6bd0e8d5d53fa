// Package authguard limits failed authentications per source address, so that client
// keys, the enrollment secret and admin tokens cannot be guessed at network speed, and
// unknown keys cannot make every request a MySQL lookup.
package authguard

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxSources bounds the memory one guard holds: past it, sources whose allowance is
// whole again are forgotten (they are indistinguishable from new ones).
const maxSources = 100_000

// Guard counts failed authentications per source: each source has a token bucket of
// burst failures refilled at perSecond; a source with an empty bucket is refused until
// it refills. Successful requests cost nothing.
type Guard struct {
	burst int
	limit rate.Limit
	now   func() time.Time

	mu      sync.Mutex
	sources map[string]*rate.Limiter
}

// New returns a guard allowing burst failures per source, then perSecond.
func New(burst int, perSecond float64, now func() time.Time) *Guard {
	if now == nil {
		now = time.Now
	}
	return &Guard{burst: burst, limit: rate.Limit(perSecond), now: now, sources: map[string]*rate.Limiter{}}
}

// Blocked reports whether src has used up its failures, and how long until it may fail
// again.
func (g *Guard) Blocked(src string) (time.Duration, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l, ok := g.sources[src]
	if !ok {
		return 0, false
	}
	tokens := l.TokensAt(g.now())
	if tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - tokens) / float64(g.limit) * float64(time.Second)), true
}

// Fail records a failed authentication by src.
func (g *Guard) Fail(src string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	l, ok := g.sources[src]
	if !ok {
		if len(g.sources) >= maxSources {
			g.prune(now)
		}
		l = rate.NewLimiter(g.limit, g.burst)
		g.sources[src] = l
	}
	l.AllowN(now, 1)
}

// prune forgets the sources whose bucket is full again.
func (g *Guard) prune(now time.Time) {
	for src, l := range g.sources {
		if l.TokensAt(now) >= float64(g.burst) {
			delete(g.sources, src)
		}
	}
}

// Source is the address a request came from: the peer's IP (a proxy's X-Forwarded-For
// is not trusted; behind one, the proxy should do its own limiting).
func Source(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// SameSecret compares two secrets in constant time, whatever their lengths: it compares
// their SHA-256 digests, so not even the length of the expected one leaks.
func SameSecret(got, want string) bool {
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
