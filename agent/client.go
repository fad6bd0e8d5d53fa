package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/taskpull/taskd/agent/internal/wire"
)

// The requests an agent makes, as metrics name them.
const (
	reqFetch    = "fetch"
	reqComplete = "complete"
	reqProgress = "progress"
	reqEnroll   = "enroll"
)

// apiError is a reply other than 2xx, in the API's error shape.
type apiError struct {
	status     int
	code       string
	message    string
	retryAfter time.Duration // the Retry-After header; hasRetry says whether there was one
	hasRetry   bool
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message)
}

// fatalError is an error no retry mends (the key refused after a fresh enrollment,
// an enrollment refused): the agent stops.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// statusOf is err's HTTP status, 0 when there was no reply.
func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status
	}
	return 0
}

// replyMeta is what a reply tells besides its body: when the request was sent (by the
// agent's clock) and the server's Date.
type replyMeta struct {
	sent   time.Time
	date   time.Time // zero when the reply had none
	keyGen int       // the generation of the key the request was sent with (call)
}

// post sends body to path and decodes a 2xx reply into out. auth sends the key.
func (a *Agent) post(ctx context.Context, path string, key string, body, out any) (replyMeta, error) {
	buf, err := json.Marshal(body)
	if err != nil {
		return replyMeta{}, fmt.Errorf("encode %s: %w", path, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+path, bytes.NewReader(buf))
	if err != nil {
		return replyMeta{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "taskd-agent-go")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	meta := replyMeta{sent: time.Now()}
	resp, err := a.http.Do(req)
	if err != nil {
		return meta, fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		meta.date = d
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return meta, fmt.Errorf("POST %s: reading the reply: %w", path, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &apiError{status: resp.StatusCode}
		var eb wire.ErrorReply
		if json.Unmarshal(raw, &eb) == nil {
			e.code, e.message = eb.Error.Code, eb.Error.Message
		} else {
			e.message = strings.TrimSpace(string(raw[:min(len(raw), 200)]))
		}
		e.retryAfter, e.hasRetry = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		return meta, fmt.Errorf("POST %s: %w", path, e)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return meta, fmt.Errorf("POST %s: decoding the reply: %w", path, err)
		}
	}
	return meta, nil
}

// maxRetryAfter caps the wait a Retry-After asks for: a server that asks for more
// (or for a number that overflows a time.Duration) is asked again after this.
const maxRetryAfter = 5 * time.Minute

// retryAfter reads a Retry-After header (seconds, or an HTTP date) at now: the wait,
// between 0 and maxRetryAfter, and whether the header named one.
func retryAfter(header string, now time.Time) (time.Duration, bool) {
	header = strings.TrimSpace(header)
	if header == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(header, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(header); err == nil {
		return min(max(0, t.Sub(now)), maxRetryAfter), true
	}
	return 0, false
}

// call is post with the agent's key; on a 401 it enrolls once more (when it can) and
// sends again. A key refused again, or a 401 without enrollment credentials, is a
// fatalError.
func (a *Agent) call(ctx context.Context, path string, body, out any) (replyMeta, error) {
	for {
		key, gen := a.currentKey()
		meta, err := a.post(ctx, path, key, body, out)
		meta.keyGen = gen
		if statusOf(err) != http.StatusUnauthorized {
			if err == nil {
				a.keyWorked(gen)
			}
			return meta, err
		}
		if rerr := a.reenroll(ctx, gen, err); rerr != nil {
			return meta, rerr
		}
	}
}

func (a *Agent) currentKey() (string, int) {
	a.keyMu.Lock()
	defer a.keyMu.Unlock()
	return a.key, a.keyGen
}

// keyWorked notes that key generation gen was accepted: a later 401 may enroll again.
func (a *Agent) keyWorked(gen int) {
	a.keyMu.Lock()
	if gen == a.keyGen {
		a.keyFresh = false
	}
	a.keyMu.Unlock()
}

// reenroll handles a 401 (refused) of a request sent with key generation gen: when
// another request enrolled meanwhile, nothing (send again with the new key); else it
// waits a random moment (so that a fleet whose keys were revoked together does not
// enroll together) and enrolls, once: a key from an enrollment refused before any
// request with it was accepted stops the agent.
func (a *Agent) reenroll(ctx context.Context, gen int, refused error) error {
	a.enrollMu.Lock()
	defer a.enrollMu.Unlock()
	a.keyMu.Lock()
	current, fresh := a.keyGen, a.keyFresh
	a.keyMu.Unlock()
	switch {
	case current != gen:
		return nil
	case a.cfg.UID == "" || a.cfg.EnrollSecret == "":
		return &fatalError{fmt.Errorf("the client key was refused, and there is no UID and EnrollSecret to enroll with: %w", refused)}
	case fresh:
		return &fatalError{fmt.Errorf("the client key was refused right after enrolling: %w", refused)}
	}
	a.log.Warn("client key refused; enrolling again", "component", "agent", "uid", a.cfg.UID)
	if !sleep(ctx, rand.N(a.jitter()+1)) {
		return ctx.Err()
	}
	return a.enroll(ctx)
}

// enroll gets a new key with the uid and secret (retrying what is worth it) and keeps
// it, in the key file too when there is one.
func (a *Agent) enroll(ctx context.Context) error {
	var bo backoff
	for {
		var out wire.EnrollReply
		ectx, cancel := context.WithTimeout(ctx, a.enrollTimeout)
		_, err := a.post(ectx, "/v1/enroll", "", wire.EnrollRequest{UID: a.cfg.UID, EnrollSecret: a.cfg.EnrollSecret}, &out)
		cancel()
		if err == nil && out.ClientKey == "" {
			err = errors.New("enroll: the reply has no client_key")
		}
		if err == nil {
			a.setKey(out.ClientKey, true)
			if a.cfg.KeyFile != "" {
				if err := writeKeyFile(a.cfg.KeyFile, out.ClientKey); err != nil {
					// The key works for this process; the next start enrolls again.
					a.log.Error("keeping the client key", "component", "agent", "key_file", a.cfg.KeyFile, "err", err)
				}
			}
			a.log.Info("enrolled", "component", "agent", "uid", a.cfg.UID)
			return nil
		}
		if st := statusOf(err); st == http.StatusUnauthorized || st == http.StatusForbidden || st == http.StatusBadRequest {
			return &fatalError{fmt.Errorf("enroll as %q: %w", a.cfg.UID, err)}
		}
		d, ok := a.retryDelay(err, &bo, reqEnroll)
		if !ok || !sleep(ctx, d) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		a.log.Warn("enroll failed; trying again", "component", "agent", "err", err, "wait", d)
	}
}

// setKey takes key up; fresh says it comes from an enrollment just made.
func (a *Agent) setKey(key string, fresh bool) {
	a.keyMu.Lock()
	a.key = key
	a.keyGen++
	a.keyFresh = fresh
	a.keyMu.Unlock()
}

// ensureKey gives the agent a key: Config.Key, else the key file's, else a new
// enrollment.
func (a *Agent) ensureKey(ctx context.Context) error {
	if k, _ := a.currentKey(); k != "" {
		return nil
	}
	if a.cfg.KeyFile != "" {
		b, err := os.ReadFile(a.cfg.KeyFile)
		switch {
		case err == nil && strings.TrimSpace(string(b)) != "":
			a.setKey(strings.TrimSpace(string(b)), false)
			return nil
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("key file: %w", err)
		}
	}
	if a.cfg.UID == "" || a.cfg.EnrollSecret == "" {
		return fmt.Errorf("no client key: set Key, or UID and EnrollSecret (the key file %q has none)", a.cfg.KeyFile)
	}
	return a.enroll(ctx)
}

// writeKeyFile writes key to path, readable by its owner only, replacing the file in
// one step (a crash leaves the old key or the new one, never half of one).
func writeKeyFile(path, key string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(key + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// backoff is capped exponential backoff with full jitter: the n-th wait is drawn
// uniformly from [0, min(backoffCap, backoffBase * 2^n)].
type backoff struct{ n int }

const (
	backoffBase = 100 * time.Millisecond
	backoffCap  = 30 * time.Second
)

func (b *backoff) next() time.Duration {
	ceiling := backoffCap
	if b.n < 20 {
		ceiling = min(backoffCap, backoffBase<<b.n)
	}
	b.n++
	return rand.N(ceiling + 1)
}

func (b *backoff) reset() { b.n = 0 }

// retryDelay says whether a request that failed with err is worth sending again, and
// after how long: exactly the Retry-After of a 429 or 503 (at most maxRetryAfter); backoff for no reply,
// another 5xx, or a 429 or 503 without Retry-After. It counts the retry (and a 429)
// in the metrics.
func (a *Agent) retryDelay(err error, bo *backoff, request string) (time.Duration, bool) {
	var fe *fatalError
	if errors.As(err, &fe) || errors.Is(err, context.Canceled) {
		return 0, false
	}
	var ae *apiError
	switch {
	case !errors.As(err, &ae):
	case ae.status == http.StatusTooManyRequests:
		a.metrics.rateLimited.WithLabelValues(request).Inc()
		if ae.hasRetry {
			a.metrics.retries.WithLabelValues(request).Inc()
			return ae.retryAfter, true
		}
	case ae.status == http.StatusServiceUnavailable && ae.hasRetry:
		a.metrics.retries.WithLabelValues(request).Inc()
		return ae.retryAfter, true
	case ae.status < 500:
		return 0, false
	}
	a.metrics.retries.WithLabelValues(request).Inc()
	return bo.next(), true
}

// sleep waits d or until ctx is done; false when ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
