package dispatch

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/taskpull/taskd"
)

// A client key is "<uid>.<secret>": the uid says whose key set to check (so the check
// is one lookup in that user's Redis slot), the 256-bit secret makes it unguessable.
// Only the SHA-256 of the whole key is stored; a slow hash buys nothing for a random
// secret of that size.

// ParseKey splits a client key into its uid and the hash to look up. ok is false for a
// string that cannot be a client key.
func ParseKey(key string) (uid, hash string, ok bool) {
	uid, secret, found := strings.Cut(key, ".")
	if !found || !taskd.ValidID(uid) || len(secret) < 32 {
		return "", "", false
	}
	return uid, HashKey(key), true
}

// HashKey is the stored form of a client key.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func newKey(uid string) string {
	b := make([]byte, 32)
	rand.Read(b)
	return uid + "." + base64.RawURLEncoding.EncodeToString(b)
}

// IssueKey creates a client key for uid and returns it; only its hash is kept. actor
// is who asked, for the audit log.
func (s *Service) IssueKey(ctx context.Context, actor, uid string) (string, error) {
	if !taskd.ValidID(uid) {
		return "", taskd.Errorf(taskd.CodeInvalid, "uid: must be 1 to 64 of [A-Za-z0-9_-], got %q", uid)
	}
	key := newKey(uid)
	if err := s.store.CreateClientKey(ctx, actor, uid, HashKey(key), s.clock.Now().UTC()); err != nil {
		return "", err
	}
	if err := s.cache.KeysChanged(ctx, uid); err != nil {
		return "", err
	}
	return key, nil
}

// RevokeKeys revokes every key of uid; they stop working at once.
func (s *Service) RevokeKeys(ctx context.Context, actor, uid string) (int, error) {
	n, err := s.store.RevokeClientKeys(ctx, actor, uid, s.clock.Now().UTC())
	if err != nil {
		return 0, err
	}
	return n, s.cache.KeysChanged(ctx, uid)
}

// Enroll issues a key to an agent that knows the enrollment secret.
func (s *Service) Enroll(ctx context.Context, uid, secret string) (string, error) {
	if s.cfg.EnrollSecret == "" {
		return "", taskd.Errorf(taskd.CodePermission, "enrollment is disabled on this server")
	}
	if subtle.ConstantTimeCompare([]byte(secret), []byte(s.cfg.EnrollSecret)) != 1 {
		return "", taskd.Errorf(taskd.CodeUnauthenticated, "enroll_secret: wrong")
	}
	return s.IssueKey(ctx, "enroll", uid)
}

// VerifyKey checks a client key (for callers outside fetch and complete, such as the
// admin API telling a client key from a bad token).
func (s *Service) VerifyKey(ctx context.Context, key string) (uid string, err error) {
	uid, hash, ok := ParseKey(key)
	if !ok {
		return "", taskd.Errorf(taskd.CodeUnauthenticated, "not a client key")
	}
	return uid, s.cache.VerifyKey(ctx, uid, hash)
}
