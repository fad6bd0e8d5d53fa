// Package clientkey issues, revokes and checks the keys agents authenticate with. Both
// the dispatch service (fetch, complete) and the admin service (issue, revoke) use it;
// neither knows the other.
//
// A client key is "<uid>.<secret>": the uid says whose key set to check (so the check
// is one lookup in that user's Redis slot), the 256-bit secret makes it unguessable.
// Only the SHA-256 of the whole key is stored; a slow hash buys nothing for a random
// secret of that size.
package clientkey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/authguard"
	"github.com/taskpull/taskd/internal/clock"
)

// Store keeps the keys' hashes (MySQL).
type Store interface {
	// CreateClientKey stores the hash of a key an admin issued to uid, revoking the
	// oldest admin-issued keys beyond keep, and reports how many it revoked.
	CreateClientKey(ctx context.Context, actor, uid, hash string, keep int, now time.Time) (replaced int, err error)
	// EnrollClientKey stores the hash of a key uid's agent enrolled, revoking the
	// oldest enrolled keys beyond keep (never an admin-issued one), and reports how
	// many it revoked.
	EnrollClientKey(ctx context.Context, uid, hash string, keep int, now time.Time) (replaced int, err error)
	// RevokeClientKeys revokes every key of uid and reports how many.
	RevokeClientKeys(ctx context.Context, actor, uid string, now time.Time) (int, error)
	// KeyChanges returns the changes of keys noted after (at, uid), in that order, at
	// most limit of them.
	KeyChanges(ctx context.Context, at time.Time, uid string, limit int) ([]taskd.KeyChange, error)
}

// Cache holds each uid's valid key set (Redis).
type Cache interface {
	// VerifyKey reports whether hash is one of uid's valid keys.
	VerifyKey(ctx context.Context, uid, hash string) error
	// KeysChanged drops uid's cached key set after a change in the Store.
	KeysChanged(ctx context.Context, uid string) error
	// KeysChangedAt drops uid's cached key set unless it was loaded after a change
	// the Store noted at at.
	KeysChangedAt(ctx context.Context, uid string, at time.Time) error
	// CountEnrollment counts one enrollment at now against a limit of rate a second
	// and burst at once over every node, and returns 0, or how long to wait when the
	// limit is reached. A rate of 0 is no limit.
	CountEnrollment(ctx context.Context, rate float64, burst int, now time.Time) (time.Duration, error)
}

// Config tunes the service.
type Config struct {
	// EnrollSecret lets agents enroll themselves; empty disables enrollment.
	EnrollSecret string
	// AdminKeysPerUID caps a uid's live admin-issued keys: issuing one more revokes
	// the oldest admin-issued key (default 5).
	AdminKeysPerUID int
	// EnrolledKeysPerUID caps a uid's live enrolled keys: enrolling once more revokes
	// the oldest enrolled key, never an admin-issued one (default 5).
	EnrolledKeysPerUID int
	// EnrollUIDs, when set, is what a uid must match, whole, to enroll; nil: any uid.
	EnrollUIDs *regexp.Regexp
	// EnrollRate and EnrollBurst bound enrollments over every node (a limiter in the
	// Cache): so many a second, so many at once. Past it an enrollment is rate_limited
	// with Retry-After. A rate of 0 is no limit.
	EnrollRate  float64
	EnrollBurst int
}

// Service issues, revokes and checks client keys.
type Service struct {
	store Store
	cache Cache
	clock clock.Clock
	log   *slog.Logger
	cfg   Config
}

// New wires the service; settings left zero take their defaults.
func New(st Store, cache Cache, clk clock.Clock, log *slog.Logger, cfg Config) *Service {
	if cfg.AdminKeysPerUID <= 0 {
		cfg.AdminKeysPerUID = 5
	}
	if cfg.EnrolledKeysPerUID <= 0 {
		cfg.EnrolledKeysPerUID = 5
	}
	if cfg.EnrollUIDs != nil {
		// Matched whole: "host-[0-9]+" must not let "xhost-1y" in.
		cfg.EnrollUIDs = regexp.MustCompile(`^(?:` + cfg.EnrollUIDs.String() + `)$`)
	}
	if cfg.EnrollBurst <= 0 {
		cfg.EnrollBurst = max(1, int(cfg.EnrollRate))
	}
	return &Service{store: st, cache: cache, clock: clk, log: log.With("component", "clientkey"), cfg: cfg}
}

// Parse splits a client key into its uid and the hash to look up. ok is false for a
// string that cannot be a client key.
func Parse(key string) (uid, hash string, ok bool) {
	uid, secret, found := strings.Cut(key, ".")
	if !found || !taskd.ValidID(uid) || len(secret) < 32 {
		return "", "", false
	}
	return uid, Hash(key), true
}

// Hash is the stored form of a client key.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	var buf [2 * sha256.Size]byte
	hex.Encode(buf[:], sum[:])
	return string(buf[:])
}

func newKey(uid string) string {
	b := make([]byte, 32)
	rand.Read(b)
	return uid + "." + base64.RawURLEncoding.EncodeToString(b)
}

func (s *Service) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// Issue creates a client key for uid and returns it; only its hash is kept. actor is
// who asked, for the audit log. Past AdminKeysPerUID the oldest key an admin issued to uid
// is revoked; keys uid's agents enrolled are not touched.
func (s *Service) Issue(ctx context.Context, actor, uid string) (string, error) {
	return s.issue(ctx, uid, func(hash string) (int, error) {
		return s.store.CreateClientKey(ctx, actor, uid, hash, s.cfg.AdminKeysPerUID, s.now())
	})
}

// issue makes a key for uid, stores its hash with create (which reports how many keys
// the new one replaced) and tells the cache.
func (s *Service) issue(ctx context.Context, uid string, create func(hash string) (int, error)) (string, error) {
	if err := checkUID(uid); err != nil {
		return "", err
	}
	key := newKey(uid)
	replaced, err := create(Hash(key))
	if err != nil {
		return "", err
	}
	if err := s.keysChanged(ctx, uid); err != nil {
		// The key is committed: hand it out. It works once the cached set expires, as
		// the keys it replaced stop working then (KeyRecheck), and a retry goes on in
		// the background.
		s.log.WarnContext(ctx, "client key change not yet in the cache", "uid", uid, "replaced", replaced, "err", err)
	}
	return key, nil
}

func checkUID(uid string) error {
	if !taskd.ValidID(uid) {
		return taskd.Errorf(taskd.CodeInvalid, "uid: must be 1 to 64 of [A-Za-z0-9_-], not starting with uid_ or gid_, got %q", uid)
	}
	return nil
}

// Revoke revokes every key of uid; they stop working at once. If the cache cannot be
// told, the revocation (committed in the Store) is reported as a failure: cached copies
// of the keys keep working until the cached set expires (KeyRecheck at most) or a retry
// in the background reaches the cache, whichever comes first.
func (s *Service) Revoke(ctx context.Context, actor, uid string) (int, error) {
	n, err := s.store.RevokeClientKeys(ctx, actor, uid, s.now())
	if err != nil {
		return 0, err
	}
	return n, s.keysChanged(ctx, uid)
}

// keysChanged drops uid's cached key set after a change in the Store. When the cache
// cannot be told, it reports the failure: the change reaches the cache through every
// node's reading of the recent changes (RunChanges) once Redis answers again.
func (s *Service) keysChanged(ctx context.Context, uid string) error {
	err := s.cache.KeysChanged(ctx, uid)
	if err == nil {
		return nil
	}
	return &taskd.Error{Code: taskd.CodeUnavailable, Err: err, Message: fmt.Sprintf(
		"the change is saved, but the cache could not be told: cached copies of uid %s's keys work until a node "+
			"reaches it (every node applies the key changes it has not seen each second); repeat the call to make sure", uid)}
}

// Enroll issues a key to an agent that knows the enrollment secret, if uid may enroll
// (EnrollUIDs) and the deployment is within its enrollment rate (EnrollRate). The
// secret is checked first: a caller without it learns nothing of the other rules, and
// spends no one's allowance. Past EnrolledKeysPerUID the oldest enrolled key of uid is
// revoked; a key an admin issued never is.
func (s *Service) Enroll(ctx context.Context, uid, secret string) (string, error) {
	if s.cfg.EnrollSecret == "" {
		return "", taskd.Errorf(taskd.CodePermission, "enrollment is disabled on this server")
	}
	if !authguard.SameSecret(secret, s.cfg.EnrollSecret) {
		return "", taskd.Errorf(taskd.CodeUnauthenticated, "enroll_secret: wrong")
	}
	if err := checkUID(uid); err != nil {
		return "", err
	}
	if s.cfg.EnrollUIDs != nil && !s.cfg.EnrollUIDs.MatchString(uid) {
		return "", taskd.Errorf(taskd.CodePermission, "uid %s may not enroll on this server (DISPATCH_ENROLL_UIDS); an admin can issue it a key", uid)
	}
	wait, err := s.cache.CountEnrollment(ctx, s.cfg.EnrollRate, s.cfg.EnrollBurst, s.clock.Now())
	if err != nil {
		return "", err
	}
	if wait > 0 {
		e := taskd.Errorf(taskd.CodeRateLimited, "enrollments are limited to %g a second (burst %d) over the server; try again later",
			s.cfg.EnrollRate, s.cfg.EnrollBurst)
		e.RetryAfter = wait
		return "", e
	}
	return s.issue(ctx, uid, func(hash string) (int, error) {
		return s.store.EnrollClientKey(ctx, uid, hash, s.cfg.EnrolledKeysPerUID, s.now())
	})
}

// Verify checks a client key and returns its uid.
func (s *Service) Verify(ctx context.Context, key string) (uid string, err error) {
	uid, hash, ok := Parse(key)
	if !ok {
		return "", taskd.Errorf(taskd.CodeUnauthenticated, "not a client key")
	}
	return uid, s.cache.VerifyKey(ctx, uid, hash)
}
