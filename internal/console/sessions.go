package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/internal/clock"
)

// Sessions. The cookie holds a random id and nothing else. Redis holds the session,
// under the deployment's prefix so that every node behind a load balancer sees it, at
// the key of the id's SHA-256 (what Redis holds is no cookie): when it began, and a
// verifier of the admin token it signed in with (an HMAC of the id keyed by the token),
// never the token. Each request finds, among the admin tokens the node accepts now, the
// one the verifier names, and calls the API with it: a token rotated out of
// DISPATCH_ADMIN_TOKEN ends its sessions, and a copy of Redis signs no one in. A session
// ends when idle for IdleTimeout (the key's TTL, renewed by each request), Lifetime after
// it began, or at sign-out (the key is deleted).

// Defaults of the session lifetimes.
const (
	DefaultIdleTimeout = time.Hour
	DefaultLifetime    = 12 * time.Hour
)

// session is a signed-in session found for a request.
type session struct {
	id    string // the cookie's value
	token string // the admin token the session acts with
	csrf  string // what its forms carry
}

// sessionRecord is what Redis holds of a session.
type sessionRecord struct {
	Verifier string    `json:"verifier"`
	Started  time.Time `json:"started"`
}

// sessionState is what a lookup found.
type sessionState int

const (
	sessionLive    sessionState = iota
	sessionEnded                // unknown, signed out, idle too long or past its lifetime
	sessionRefused              // its admin token is no longer accepted
)

// sessions keeps the console's sessions in Redis.
type sessions struct {
	rdb      redis.UniversalClient
	key      func(idHash string) string
	tokens   []string
	clock    clock.Clock
	idle     time.Duration
	lifetime time.Duration
}

// start begins a session acting with token and returns its id.
func (s *sessions) start(ctx context.Context, token string) (string, error) {
	b := make([]byte, 32)
	rand.Read(b)
	id := base64.RawURLEncoding.EncodeToString(b)
	rec, err := json.Marshal(sessionRecord{Verifier: verifier(token, id), Started: s.clock.Now().UTC()})
	if err != nil {
		return "", err
	}
	if err := s.rdb.Set(ctx, s.key(idHash(id)), rec, s.idle).Err(); err != nil {
		return "", fmt.Errorf("start console session: %w", err)
	}
	return id, nil
}

// find looks session id up and renews its idle timeout. A session past its lifetime, or
// whose admin token is no longer accepted, is ended.
func (s *sessions) find(ctx context.Context, id string) (session, sessionState, error) {
	key := s.key(idHash(id))
	raw, err := s.rdb.GetEx(ctx, key, s.idle).Bytes()
	if errors.Is(err, redis.Nil) {
		return session{}, sessionEnded, nil
	}
	if err != nil {
		return session{}, 0, fmt.Errorf("find console session: %w", err)
	}
	var rec sessionRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return session{}, sessionEnded, s.end(ctx, id)
	}
	if !s.clock.Now().Before(rec.Started.Add(s.lifetime)) {
		return session{}, sessionEnded, s.end(ctx, id)
	}
	for _, token := range s.tokens {
		if token != "" && hmac.Equal([]byte(verifier(token, id)), []byte(rec.Verifier)) {
			return session{id: id, token: token, csrf: csrfToken(id)}, sessionLive, nil
		}
	}
	return session{}, sessionRefused, s.end(ctx, id)
}

// end ends session id on every node.
func (s *sessions) end(ctx context.Context, id string) error {
	if err := s.rdb.Del(ctx, s.key(idHash(id))).Err(); err != nil {
		return fmt.Errorf("end console session: %w", err)
	}
	return nil
}

// idHash names a session in Redis.
func idHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// verifier ties a session to the admin token it signed in with, without holding it.
func verifier(token, id string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("taskd console session\x00" + id))
	return hex.EncodeToString(m.Sum(nil))
}

// csrfToken is what every state-changing form of session id must carry: of that session
// only, and dead with it.
func csrfToken(id string) string {
	m := hmac.New(sha256.New, []byte(id))
	m.Write([]byte("taskd console csrf"))
	return hex.EncodeToString(m.Sum(nil))
}
