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
// create may be corrected and sent again under the same key.

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
	FinishIdempotent(ctx context.Context, actor, key string, status int, header map[string][]string, body []byte) error
	DropIdempotent(ctx context.Context, actor, key string) error
}

// replayedHeaders are the reply headers a replay gives again.
var replayedHeaders = []string{"Content-Type", "ETag", "Location"}

// Idempotent returns the middleware of the creates that take an Idempotency-Key.
func Idempotent(st IdempotencyStore, clk clock.Clock, log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, given := r.Header.Get("Idempotency-Key"), len(r.Header.Values("Idempotency-Key")) > 0
			if !given {
				next.ServeHTTP(w, r)
				return
			}
			if err := checkIdempotencyKey(key); err != nil {
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
			actor := ActorFrom(r.Context())
			hash := requestHash(r, body)
			for wait := time.Duration(0); ; {
				prev, began, err := st.BeginIdempotent(r.Context(), actor, key, hash, clk.Now().UTC(), IdempotencyWindow, abandonAfter)
				switch {
				case err != nil:
					web.Error(w, r, log, err)
					return
				case began:
					serveRecorded(w, r, next, st, actor, key, log)
					return
				case prev.RequestHash != hash:
					web.Error(w, r, log, taskd.Errorf(taskd.CodeParamsInvalid,
						"Idempotency-Key %q was used within 24 h for another request (another body, path or query); use a new key for a new request", key))
					return
				case prev.Status != 0:
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
					e := taskd.Errorf(taskd.CodeConflict, "a request with Idempotency-Key %q is under way; send it again later", key)
					e.RetryAfter = time.Second
					web.Error(w, r, log, e)
					return
				}
				t := time.NewTimer(100 * time.Millisecond)
				select {
				case <-r.Context().Done():
					t.Stop()
					return
				case <-t.C:
				}
				wait += 100 * time.Millisecond
			}
		})
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

// serveRecorded runs the create and answers its reply; a success is kept under the
// key, anything else frees the key.
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
	} else {
		err = st.DropIdempotent(ctx, actor, key)
	}
	if err != nil {
		log.WarnContext(ctx, "an Idempotency-Key's reply could not be kept: a retry within the abandon time gets 409, then creates again",
			"key", key, "err", err)
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
