package artifact

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
)

// Store is what the service needs from MySQL (internal/store).
type Store interface {
	CreateArtifact(ctx context.Context, actor string, a taskd.Artifact) (taskd.Artifact, error)
	GetArtifact(ctx context.Context, id int64) (taskd.Artifact, error)
	ListArtifacts(ctx context.Context, before int64, limit int) ([]taskd.Artifact, error)
	DeleteArtifact(ctx context.Context, actor string, id int64, now time.Time) (taskd.Artifact, error)
}

// Config says where artifacts' bytes go and how large they may be.
type Config struct {
	// Dir is the directory backend's directory (used when S3.Endpoint is empty).
	Dir string
	// MaxBytes bounds one artifact's size (zero: DefaultMaxBytes).
	MaxBytes int64
	// S3, when its Endpoint is set, is the bucket that holds the bytes instead.
	S3 S3Config
}

// The defaults of the settings.
const (
	DefaultMaxBytes = 1 << 30
	// DefaultDir is DISPATCH_ARTIFACT_DIR's default, relative to the working directory.
	DefaultDir = "artifacts"
)

// MaxFilenameBytes bounds a filename (a file name on most file systems, and the
// column's width).
const MaxFilenameBytes = 255

// Service stores, lists, deletes and serves artifacts.
type Service struct {
	store Store
	blobs backend
	clock clock.Clock
	log   *slog.Logger
	max   int64
}

// backend holds artifacts' bytes under keys the service chooses.
type backend interface {
	// name is what the records say holds their bytes: "dir" or "s3".
	name() string
	// where says where, for the log: the directory or the bucket's URL.
	where() string
	// prepare checks, at start, that the backend can take uploads (and makes the
	// directory).
	prepare(ctx context.Context) error
	// put stores r's bytes under key (size is r's length, or -1 when unknown). When
	// it fails, nothing is left under key.
	put(ctx context.Context, key string, r io.Reader, size int64) error
	// remove deletes the bytes under key; none there is no error.
	remove(ctx context.Context, key string) error
	// serve answers a device's request for a's bytes: the bytes (ranges, 304), or a
	// redirect to them. An error is returned before anything is written.
	serve(w http.ResponseWriter, r *http.Request, a taskd.Artifact) error
}

// New returns the service over st, keeping the bytes in cfg's bucket when one is
// configured, else in cfg's directory. It does no I/O: Prepare checks the backend.
func New(st Store, cfg Config, clk clock.Clock, log *slog.Logger) *Service {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Dir == "" {
		cfg.Dir = DefaultDir
	}
	log = log.With("component", "artifact")
	s := &Service{store: st, clock: clk, log: log, max: cfg.MaxBytes}
	if cfg.S3.Endpoint != "" {
		s.blobs = newBucket(cfg.S3)
	} else {
		s.blobs = &dir{path: cfg.Dir}
	}
	return s
}

// Prepare checks that the backend can take uploads: it makes the directory (and
// removes what uploads cut off by a crash left there), or asks the bucket whether it
// exists.
func (s *Service) Prepare(ctx context.Context) error {
	if err := s.blobs.prepare(ctx); err != nil {
		return err
	}
	s.log.Info("artifacts are kept in "+s.blobs.where(), "backend", s.blobs.name())
	return nil
}

// Where says where the bytes go: the directory, or the bucket's URL.
func (s *Service) Where() string { return s.blobs.where() }

func (s *Service) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// Upload stores body as a new artifact named filename, audited as actor's
// (artifact.create). size is body's length when known (a request's Content-Length), or
// -1. The bytes are streamed to the backend and hashed on the way; the record is
// written once the backend holds them. An upload over the size limit is too_large; a
// body that fails to read is invalid_argument, its cause kept (a read deadline's
// os.ErrDeadlineExceeded among them); either way, and whenever the record cannot be
// written, nothing is left behind. It is Receive, then Keep.
func (s *Service) Upload(ctx context.Context, actor, filename string, body io.Reader, size int64) (taskd.Artifact, error) {
	a, err := s.Receive(ctx, filename, body, size)
	if err != nil {
		return taskd.Artifact{}, err
	}
	return s.Keep(ctx, actor, a)
}

// Receive stores body's bytes for an artifact named filename and hashes them, as
// Upload does, without writing the record: the artifact it returns has no id, and
// Keep makes it one (or Discard removes its bytes). Refusals as Upload's, with nothing
// left behind.
func (s *Service) Receive(ctx context.Context, filename string, body io.Reader, size int64) (taskd.Artifact, error) {
	if err := CheckFilename(filename); err != nil {
		return taskd.Artifact{}, err
	}
	if size > s.max {
		return taskd.Artifact{}, s.tooLarge()
	}
	key := newKey()
	m := s.measure(body)
	if err := s.blobs.put(ctx, key, m, size); err != nil {
		if m.err != nil { // the body's fault, not the backend's
			return taskd.Artifact{}, m.err
		}
		return taskd.Artifact{}, backendErr(s.blobs, "store", err)
	}
	if err := m.whole(size); err != nil {
		s.discard(ctx, key)
		return taskd.Artifact{}, err
	}
	return taskd.Artifact{Filename: filename, Size: m.n, Backend: s.blobs.name(), Key: key, Hashes: m.hashes()}, nil
}

// Keep writes the record of artifact a, received (Receive) and not kept yet, audited as
// actor's (artifact.create), and returns it with its id. When the record cannot be
// written, the bytes are removed.
func (s *Service) Keep(ctx context.Context, actor string, a taskd.Artifact) (taskd.Artifact, error) {
	a.CreatedAt = s.now()
	kept, err := s.store.CreateArtifact(ctx, actor, a)
	if err != nil {
		s.discard(ctx, a.Key)
		return taskd.Artifact{}, err
	}
	s.log.InfoContext(ctx, "artifact uploaded", "artifact_id", kept.ID, "filename", kept.Filename, "size", kept.Size, "actor", actor)
	return kept, nil
}

// Discard removes the bytes of artifact a, received (Receive) and not kept.
func (s *Service) Discard(ctx context.Context, a taskd.Artifact) { s.discard(ctx, a.Key) }

// Digest reads body, an upload of filename, as Upload would, within the same limits
// and with the same refusals, and returns its hashes and length, storing nothing: what
// an upload sent again is told from the first by.
func (s *Service) Digest(ctx context.Context, filename string, body io.Reader, size int64) (taskd.Hashes, int64, error) {
	if err := CheckFilename(filename); err != nil {
		return taskd.Hashes{}, 0, err
	}
	if size > s.max {
		return taskd.Hashes{}, 0, s.tooLarge()
	}
	m := s.measure(body)
	if _, err := io.Copy(io.Discard, m); err != nil {
		return taskd.Hashes{}, 0, err // m's own error: the body's
	}
	if err := m.whole(size); err != nil {
		return taskd.Hashes{}, 0, err
	}
	return m.hashes(), m.n, nil
}

// measure wraps an upload's body to count and hash it within the size limit.
func (s *Service) measure(body io.Reader) *measured {
	return &measured{r: body, max: s.max, sha1: sha1.New(), md5: md5.New(), sha256: sha256.New(), tooLarge: s.tooLarge}
}

func (s *Service) tooLarge() error {
	return taskd.Errorf(taskd.CodeTooLarge, "artifact: over %d bytes (DISPATCH_ARTIFACT_MAX_BYTES)", s.max)
}

// discard deletes bytes stored for an upload that did not make a record, even when the
// request that brought them is gone.
func (s *Service) discard(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := s.blobs.remove(ctx, key); err != nil {
		s.log.WarnContext(ctx, "an upload's bytes were left in the backend", "key", key, "err", err)
	}
}

// backendErr is a failure of the backend: unavailable, the cause kept for the log.
func backendErr(b backend, op string, err error) error {
	var te *taskd.Error
	if errors.As(err, &te) {
		return err
	}
	return taskd.Unavailable("artifact storage ("+b.name()+")", fmt.Errorf("%s: %w", op, err))
}

// Lookup returns artifact id's record: its filename, size and hashes, which a DDI
// deployment lists (not_found for an id that names none).
func (s *Service) Lookup(ctx context.Context, id int64) (taskd.Artifact, error) {
	return s.store.GetArtifact(ctx, id)
}

// List returns up to limit artifacts, newest first, with ids below before (0: from the
// newest).
func (s *Service) List(ctx context.Context, before int64, limit int) ([]taskd.Artifact, error) {
	return s.store.ListArtifacts(ctx, before, limit)
}

// Delete deletes artifact id, audited as actor's (artifact.delete): its record, then
// its bytes. An artifact that a task not deleted names in its params is a conflict
// naming the tasks. Bytes that cannot be deleted once the record is gone stay behind
// (a warning is logged): the artifact is gone all the same.
func (s *Service) Delete(ctx context.Context, actor string, id int64) error {
	a, err := s.store.DeleteArtifact(ctx, actor, id, s.now())
	if err != nil {
		return err
	}
	if a.Backend != s.blobs.name() {
		s.log.WarnContext(ctx, "a deleted artifact's bytes were left in a backend this server no longer uses",
			"artifact_id", id, "backend", a.Backend, "key", a.Key)
		return nil
	}
	s.discard(ctx, a.Key)
	s.log.InfoContext(ctx, "artifact deleted", "artifact_id", id, "actor", actor)
	return nil
}

// Serve answers a device's GET (or HEAD) of artifact id's bytes. It does not
// authenticate the device: the caller has. The directory's bytes are served here,
// with Range, If-Range and If-None-Match (the ETag is the SHA-256); a bucket's are a
// 302 redirect to a presigned URL of the object (If-None-Match answered here with 304
// first). The reply's Content-Disposition names the file. An error (not_found for an
// unknown id, unavailable when the bytes cannot be reached) is returned before
// anything is written, for the caller to answer in its own form; nil means a reply
// was written.
func (s *Service) Serve(w http.ResponseWriter, r *http.Request, id int64) error {
	a, err := s.store.GetArtifact(r.Context(), id)
	if err != nil {
		return err
	}
	if a.Backend != s.blobs.name() {
		return taskd.Unavailable("artifact storage", fmt.Errorf("artifact %d is in backend %q, and this server uses %q", id, a.Backend, s.blobs.name()))
	}
	w.Header().Set("ETag", etag(a))
	return s.blobs.serve(w, r, a)
}

// etag is an artifact's entity tag: its SHA-256, which names its bytes.
func etag(a taskd.Artifact) string { return `"` + a.Hashes.SHA256 + `"` }

// noneMatch reports whether r's If-None-Match names tag (or is *).
func noneMatch(r *http.Request, tag string) bool {
	for _, t := range strings.Split(r.Header.Get("If-None-Match"), ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == tag {
			return true
		}
	}
	return false
}

// disposition is the Content-Disposition that names the file a device saves.
func disposition(filename string) string {
	if d := mime.FormatMediaType("attachment", map[string]string{"filename": filename}); d != "" {
		return d
	}
	return "attachment"
}

// CheckFilename refuses a filename that is empty, longer than MaxFilenameBytes bytes,
// not UTF-8, "." or "..", holding a path separator (/ or \), or holding a character
// that is not shown as itself (control, format, private-use or unassigned characters,
// line or paragraph separators), or that begins or ends with a space.
func CheckFilename(name string) error {
	switch {
	case name == "":
		return taskd.Errorf(taskd.CodeInvalid, "filename: required")
	case len(name) > MaxFilenameBytes:
		return taskd.Errorf(taskd.CodeInvalid, "filename: at most %d bytes, got %d", MaxFilenameBytes, len(name))
	case !utf8.ValidString(name):
		return taskd.Errorf(taskd.CodeInvalid, "filename: must be UTF-8 text")
	case name == "." || name == "..":
		return taskd.Errorf(taskd.CodeInvalid, "filename: must name a file, got %q", name)
	case strings.ContainsAny(name, `/\`):
		return taskd.Errorf(taskd.CodeInvalid, "filename: must not hold a path separator (/ or \\), got %q", name)
	case strings.TrimSpace(name) != name:
		return taskd.Errorf(taskd.CodeInvalid, "filename: must not begin or end with a space, got %q", name)
	}
	for i, r := range name {
		if unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Co, unicode.Zl, unicode.Zp) ||
			!unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs) {
			return taskd.Errorf(taskd.CodeInvalid, "filename: must hold printable characters only (got %U at byte %d)", r, i)
		}
	}
	return nil
}

// newKey names a new upload's bytes in the backend: random, so that an upload never
// overwrites another's, and a name says nothing of the file.
func newKey() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// measured reads an upload's body for the backend, counting and hashing the bytes,
// and failing past max. A failure of the body is kept, as a taskd error, in err, and
// reported as that error: a read error never reaches the backend as io.EOF or
// io.ErrUnexpectedEOF, which a backend reading part by part would take for the end of
// the body, storing what came before it.
type measured struct {
	r                 io.Reader
	max               int64
	n                 int64
	sha1, md5, sha256 hash.Hash
	tooLarge          func() error
	eof               bool
	err               error
}

func (m *measured) Read(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	if m.eof {
		return 0, io.EOF
	}
	// One byte more than the limit tells "exactly max" from "over max".
	if room := m.max + 1 - m.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := m.r.Read(p)
	m.n += int64(n)
	if m.n > m.max {
		m.err = m.tooLarge()
		return 0, m.err
	}
	m.sha1.Write(p[:n])
	m.md5.Write(p[:n])
	m.sha256.Write(p[:n])
	switch {
	case err == io.EOF:
		m.eof = true
	case err != nil:
		m.err = &taskd.Error{Code: taskd.CodeInvalid, Err: err,
			Message: fmt.Sprintf("body: reading it failed after %d bytes; nothing was stored", m.n)}
		return n, m.err
	}
	return n, err
}

// hashes are the hashes of what was read.
func (m *measured) hashes() taskd.Hashes {
	return taskd.Hashes{SHA1: hex.EncodeToString(m.sha1.Sum(nil)), MD5: hex.EncodeToString(m.md5.Sum(nil)),
		SHA256: hex.EncodeToString(m.sha256.Sum(nil))}
}

// whole checks, once the backend stored what it read, that it read all the body: size
// bytes when size is known (and no more), else up to the end.
func (m *measured) whole(size int64) error {
	if !m.eof {
		var one [1]byte
		if n, err := io.ReadFull(m, one[:]); n > 0 || m.err != nil || !errors.Is(err, io.EOF) {
			if m.err != nil {
				return m.err
			}
			return taskd.Errorf(taskd.CodeInvalid, "body: longer than its stated length, %d bytes", size)
		}
	}
	if size >= 0 && m.n != size {
		return taskd.Errorf(taskd.CodeInvalid, "body: %d bytes, but its stated length is %d", m.n, size)
	}
	return nil
}
