package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/web"
)

// Idempotency-Key (the IETF httpapi draft) on the admin API's creates: a create sent
// again with the same key and body within IdempotencyWindow answers the first reply
// again (status, body, ETag, Location) and creates nothing; with another body it is a
// 422. A second request while the first is under way waits for it (a few seconds) and
// then answers its reply, or 409. Keys are per admin token, kept in MySQL, so that a
// retry reaching another node is recognized. Only a success spends a key: a refused
// create (4xx) may be corrected and sent again under the same key; after a server
// error (5xx) the key stays taken for abandonAfter, since the create may have been
// made. An artifact upload takes a
// key too, its body compared by hash rather than kept (artifacts.go).

// IdempotencyWindow is how long a key's reply is kept.
const IdempotencyWindow = 24 * time.Hour

// MaxIdempotencyKey bounds a key's length.
const MaxIdempotencyKey = 255

// idempotentBody bounds the body an idempotent create may have (it is hashed whole).
const idempotentBody = 8 << 20

// abandonAfter is when a request under way is taken for lost (its node died): its key
// may be used again.
const abandonAfter = 2 * time.Minute

// IdempotencyStore keeps the keys (internal/store).
type IdempotencyStore interface {
	BeginIdempotent(ctx context.Context, actor, key, hash string, now time.Time, expiry, abandon time.Duration) (*taskd.IdempotentReply, bool, error)
	// KeptReply returns the reply kept under actor's key within expiry of now (nil for
	// none: never used, expired, or a request under way), without deciding anything.
	KeptReply(ctx context.Context, actor, key string, now time.Time, expiry time.Duration) (*taskd.IdempotentReply, error)
	FinishIdempotent(ctx context.Context, actor, key string, status int, header map[string][]string, body []byte) error
	DropIdempotent(ctx context.Context, actor, key string) error
}

// replayedHeaders are the reply headers a replay gives again.
var replayedHeaders = []string{"Content-Type", "ETag", "Location"}

// Idempotent returns the middleware of the creates that take an Idempotency-Key.
func Idempotent(st IdempotencyStore, clk clock.Clock, log *slog.Logger) func(http.Handler) http.Handler {
	st = sealed{st}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, given, err := requestKey(r)
			switch {
			case !given:
				next.ServeHTTP(w, r)
				return
			case err != nil:
				web.Error(w, r, log, err)
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, idempotentBody))
			if err != nil {
				var tooLarge *http.MaxBytesError
				if errors.As(err, &tooLarge) {
					err = taskd.Errorf(taskd.CodeTooLarge, "request body is over %d bytes (an Idempotency-Key request's body is kept whole to be compared)", idempotentBody)
				} else {
					err = taskd.Errorf(taskd.CodeInvalid, "reading request body: %v", err)
				}
				web.Error(w, r, log, err)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			idempotently(w, r, st, clk, log, key, requestHash(r, body), next, nil)
		})
	}
}

// requestKey is r's Idempotency-Key, whether it has one, and why the key is refused.
func requestKey(r *http.Request) (key string, given bool, err error) {
	key, given = r.Header.Get("Idempotency-Key"), len(r.Header.Values("Idempotency-Key")) > 0
	if given {
		err = checkIdempotencyKey(key)
	}
	return key, given, err
}

// idempotently answers r, a request with Idempotency-Key key whose hash is hash (what
// another request under the key must share to be the same). When the key is r's to
// use (never used by its admin token, or its last use expired, or under way so long it
// was abandoned), it serves r with serve and keeps serve's reply under the key if it is
// a success (else frees the key). Otherwise it answers: the reply kept under the key
// again (the same request: Idempotent-Replayed: true), a 422 (the key was used for
// another request), or, when a request with the key is under way for 5 s more, a 409;
// and first calls release, if not nil, to let go of what r holds (an upload's bytes).
func idempotently(w http.ResponseWriter, r *http.Request, st IdempotencyStore, clk clock.Clock, log *slog.Logger,
	key, hash string, serve http.Handler, release func()) {
	if release == nil {
		release = func() {}
	}
	actor := ActorFrom(r.Context())
	for wait := time.Duration(0); ; {
		prev, began, err := st.BeginIdempotent(r.Context(), actor, key, hash, clk.Now().UTC(), IdempotencyWindow, abandonAfter)
		switch {
		case err != nil:
			release()
			web.Error(w, r, log, err)
			return
		case began:
			serveRecorded(w, r, serve, st, actor, key, log)
			return
		case prev.RequestHash != hash:
			release()
			web.Error(w, r, log, taskd.Errorf(taskd.CodeParamsInvalid,
				"Idempotency-Key %q was used within 24 h for another request (another body, path or query); use a new key for a new request", key))
			return
		case prev.Status != 0:
			release()
			for _, h := range replayedHeaders {
				if v := prev.Header[h]; len(v) > 0 {
					w.Header()[h] = v
				}
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(prev.Status)
			w.Write(prev.Body)
			return
		}
		// Under way: wait for it a little.
		if wait >= 5*time.Second {
			release()
			e := taskd.Errorf(taskd.CodeConflict, "a request with Idempotency-Key %q is under way; send it again later", key)
			e.RetryAfter = time.Second
			web.Error(w, r, log, e)
			return
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-r.Context().Done():
			t.Stop()
			release()
			return
		case <-t.C:
		}
		wait += 100 * time.Millisecond
	}
}

// checkIdempotencyKey refuses an empty, long or unprintable key.
func checkIdempotencyKey(key string) error {
	if key == "" || len(key) > MaxIdempotencyKey {
		return taskd.Errorf(taskd.CodeInvalid, "Idempotency-Key: 1..%d printable ASCII characters, got %d bytes", MaxIdempotencyKey, len(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return taskd.Errorf(taskd.CodeInvalid, "Idempotency-Key: printable ASCII only, got byte 0x%02x at %d", c, i)
		}
	}
	return nil
}

// requestHash is what two requests under one key must share: method, path, query and
// body.
func requestHash(r *http.Request, body []byte) string {
	h := sha256.New()
	for _, s := range []string{r.Method, r.URL.Path, r.URL.RawQuery, strconv.Itoa(len(body))} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// uploadHash is what two uploads under one key must share: method, path, query, and
// the bytes' SHA-256 and length (the body is hashed as it streams, not kept).
func uploadHash(r *http.Request, sha256Hex string, size int64) string {
	h := sha256.New()
	for _, s := range []string{r.Method, r.URL.Path, r.URL.RawQuery, "sha256:" + sha256Hex, strconv.FormatInt(size, 10)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// serveRecorded runs the create and answers its reply. A success is kept under the
// key; a refusal (4xx: nothing was made) frees it; a server error leaves it under way
// until abandonAfter, since it may have come after the create committed (a reply cut
// off, a bound run out while committing): a retry meanwhile gets 409, not a second
// record.
func serveRecorded(w http.ResponseWriter, r *http.Request, next http.Handler, st IdempotencyStore, actor, key string, log *slog.Logger) {
	rec := &recorder{header: http.Header{}}
	next.ServeHTTP(rec, r)
	// On a context of its own: the request's may be what ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	var err error
	if rec.status >= 200 && rec.status < 300 {
		kept := map[string][]string{}
		for _, h := range replayedHeaders {
			if v := rec.header.Values(h); len(v) > 0 {
				kept[h] = v
			}
		}
		err = st.FinishIdempotent(ctx, actor, key, rec.status, kept, rec.body.Bytes())
	} else if rec.status < 500 {
		err = st.DropIdempotent(ctx, actor, key)
	}
	if err != nil {
		log.WarnContext(ctx, "an Idempotency-Key's reply could not be kept: a retry within the abandon time gets 409, then creates again",
			"key_hash", sealedKey(key), "err", err)
	}
	for h, v := range rec.header {
		w.Header()[h] = v
	}
	w.WriteHeader(rec.status)
	w.Write(rec.body.Bytes())
}

// recorder keeps a handler's reply.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
