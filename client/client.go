package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config is how to reach a dispatchd's admin API.
type Config struct {
	// URL is the server's base URL, e.g. "https://taskd.example.com".
	URL string
	// Token is an admin token (one of the server's DISPATCH_ADMIN_TOKENS).
	Token string
	// HTTPClient sends the requests; nil means one whose replies must begin within 2
	// minutes of their request's end (a long-polling Wait asks for at most a minute at
	// a time) and that puts no bound on an upload's length: a call's context bounds
	// the whole of it.
	HTTPClient *http.Client
	// MaxRetries bounds how often a request is sent again after a 429 or 503, or a
	// transport error where sending again is safe: 0 means 3, a negative number
	// never.
	MaxRetries int
	// MaxRetryWait bounds one wait between tries: a Retry-After longer than it is
	// not waited for, the error is returned at once. 0 means 30 seconds.
	MaxRetryWait time.Duration
}

// Client calls a dispatchd's admin API. It is safe for concurrent use.
type Client struct {
	base       string
	token      string
	http       *http.Client
	maxRetries int
	maxWait    time.Duration
}

// New returns a client of the server at cfg.URL.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: URL %q: want http(s)://host[:port]", cfg.URL)
	}
	if cfg.Token == "" {
		return nil, errors.New("client: Token: an admin token is required")
	}
	c := &Client{base: strings.TrimRight(cfg.URL, "/"), token: cfg.Token, http: cfg.HTTPClient,
		maxRetries: cfg.MaxRetries, maxWait: cfg.MaxRetryWait}
	if c.http == nil {
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment}
		if dt, ok := http.DefaultTransport.(*http.Transport); ok {
			tr = dt.Clone()
		}
		tr.ResponseHeaderTimeout = 2 * time.Minute
		c.http = &http.Client{Transport: tr}
	}
	switch {
	case c.maxRetries == 0:
		c.maxRetries = 3
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	if c.maxWait <= 0 {
		c.maxWait = 30 * time.Second
	}
	return c, nil
}

// Version is a record's version, as its ETag names it: what a read saw, to make a
// write conditional on it (IfMatch).
type Version string

// UnmarshalJSON reads a version as the API writes it in a body: a number for the
// records that count their writes.
func (v *Version) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = Version(s)
		return nil
	}
	if string(b) == "null" {
		*v = ""
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("version: %w", err)
	}
	*v = Version(n.String())
	return nil
}

// An Option changes one write: IfMatch, IdempotencyKey.
type Option func(*call)

// IfMatch makes a write conditional: it is made only if the record is still at
// version v, else the call fails with ErrPreconditionFailed and nothing changes.
// An empty v is an error of the call: a write guarded by no version would go
// through whatever changed.
func IfMatch(v Version) Option {
	return func(c *call) {
		if v == "" {
			c.err = errors.New("client: IfMatch: the version is empty (a campaign or rollout read from a list has none: read it alone)")
		}
		c.header.Set("If-Match", `"`+string(v)+`"`)
	}
}

// IdempotencyKey names a create, so that sending it again (from this process or
// another, within 24 hours) creates nothing more and answers the first reply. Every
// create sends a random key unless given one; give your own to make a create
// idempotent across restarts of your program (derive it from what it is for, e.g.
// "report-2026-11-store-17").
func IdempotencyKey(key string) Option {
	return func(c *call) { c.header.Set("Idempotency-Key", key) }
}

// call is one request, sent as many times as its retries allow.
type call struct {
	method, path string
	query        url.Values
	header       http.Header
	body         []byte    // JSON, sent again on a retry
	stream       io.Reader // an upload's body, sent again only if it can seek back
	// refusedSafe says a 503 of this call did nothing (an upload refused for want
	// of a slot, before its body is read).
	refusedSafe bool
	create      bool  // sends an Idempotency-Key
	err         error // an option's error: the call is not sent
	meta        *replyMeta
}

// replyMeta is what a reply says besides its body: its ETag.
type replyMeta struct {
	etag Version
}

func newCall(method, path string, opts []Option) *call {
	c := &call{method: method, path: path, header: http.Header{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// do sends c and decodes a 2xx reply's body into out (nil: the body is dropped).
func (cl *Client) do(ctx context.Context, c *call, out any) error {
	if c.err != nil {
		return c.err
	}
	if c.create && c.header.Get("Idempotency-Key") == "" {
		c.header.Set("Idempotency-Key", "taskd-go-"+rand.Text())
	}
	// ambiguous says an earlier try may have been carried out (a transport error, a
	// 503): a 404 of a delete sent again is then its success.
	ambiguous := false
	for try := 0; ; try++ {
		resp, err := cl.send(ctx, c)
		if err != nil {
			ambiguous = true
			if ctx.Err() != nil || try >= cl.maxRetries || !c.resendable() {
				return err
			}
			if werr := sleep(ctx, backoff(try)); werr != nil {
				return err
			}
			continue
		}
		if resp.StatusCode < 300 {
			defer resp.Body.Close()
			if c.meta != nil {
				c.meta.etag = Version(strings.Trim(resp.Header.Get("ETag"), `"`))
			}
			if out == nil || resp.StatusCode == http.StatusNoContent {
				io.Copy(io.Discard, resp.Body)
				return nil
			}
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				return fmt.Errorf("%s %s: decoding the reply: %w", c.method, c.path, err)
			}
			return nil
		}
		e := readError(c, resp)
		wait, retry := e.RetryAfter, false
		switch e.Status {
		case http.StatusTooManyRequests:
			// Refused before anything was done: any request may be sent again.
			retry = c.rewind()
		case http.StatusServiceUnavailable:
			retry = c.resendable() || (c.refusedSafe && c.rewind())
			ambiguous = ambiguous || !c.refusedSafe
		case http.StatusConflict:
			// The same Idempotency-Key is under way (another try of this call whose
			// reply was lost): its reply is answered once it is done.
			retry = e.RetryAfter > 0 && c.header.Get("Idempotency-Key") != "" && c.rewind()
		case http.StatusNotFound:
			// A delete sent again after its reply was lost finds nothing left.
			if ambiguous && c.method == http.MethodDelete {
				return nil
			}
		}
		if !retry || try >= cl.maxRetries || wait > cl.maxWait {
			return e
		}
		if wait <= 0 {
			wait = backoff(try)
		}
		if err := sleep(ctx, wait); err != nil {
			return e
		}
	}
}

// rewind makes c's body ready to be sent again, and says whether it could.
func (c *call) rewind() bool {
	if c.stream == nil {
		return true
	}
	s, ok := c.stream.(io.Seeker)
	if !ok {
		return false
	}
	_, err := s.Seek(0, io.SeekStart)
	return err == nil
}

// resendable says whether sending c again after a transport error or a 503 cannot
// do twice what it asks, nor answer wrongly: a read, a write that sets rather than
// adds, or a create an Idempotency-Key guards. A write made with If-Match is not: if
// the first try was made, the second finds the version changed, and answers 412 for a
// write that was made.
func (c *call) resendable() bool {
	if c.stream != nil || c.header.Get("If-Match") != "" {
		return false
	}
	switch c.method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
		return true
	}
	return c.header.Get("Idempotency-Key") != ""
}

func (cl *Client) send(ctx context.Context, c *call) (*http.Response, error) {
	u := cl.base + c.path
	if len(c.query) > 0 {
		u += "?" + c.query.Encode()
	}
	var body io.Reader
	switch {
	case c.stream != nil:
		body = c.stream
	case c.body != nil:
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, u, body)
	if err != nil {
		return nil, err
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if c.body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+cl.token)
	req.Header.Set("User-Agent", "taskd-client-go")
	return cl.http.Do(req)
}

// backoff is the wait before try+1 when the server named none: 0.5 s, 1 s, 2 s, ...
func backoff(try int) time.Duration {
	return min(500*time.Millisecond<<try, 10*time.Second)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// jsonBody sets c's body to v as JSON.
func (c *call) jsonBody(v any) (*call, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return c, fmt.Errorf("%s %s: encoding the request: %w", c.method, c.path, err)
	}
	c.body = b
	return c, nil
}

// Errors a call may return, to test with errors.Is. Every error the server answers
// is an *Error as well, carrying its code.
var (
	// ErrNotFound: the record does not exist (404 not_found).
	ErrNotFound = errors.New("not found")
	// ErrPreconditionFailed: the record changed since the version named in IfMatch
	// (412 precondition_failed); read it again and redo the change.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrConflict: the change conflicts with the record's state (409 conflict).
	ErrConflict = errors.New("conflict")
)

// Error is a reply other than 2xx, in the API's error shape.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the API's stable error code (invalid_argument, not_found, conflict,
	// precondition_failed, params_invalid, rate_limited, unavailable, ...).
	Code string
	// Message is the server's message, often starting with the field at fault.
	Message string
	// Details is the server's structured details, if any (for params_invalid, the
	// JSON Schema validation output).
	Details json.RawMessage
	// RetryAfter is the reply's Retry-After, zero when it had none.
	RetryAfter time.Duration
	// Current is, on a 412, the record's version now.
	Current Version
	// Request is the call, as "METHOD /path".
	Request string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %d %s: %s", e.Request, e.Status, e.Code, e.Message)
}

// Is makes errors.Is(err, ErrNotFound) and its like hold for the matching codes.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == "not_found"
	case ErrPreconditionFailed:
		return e.Code == "precondition_failed"
	case ErrConflict:
		return e.Code == "conflict"
	}
	return false
}

// readError reads a reply other than 2xx.
func readError(c *call, resp *http.Response) *Error {
	defer resp.Body.Close()
	e := &Error{Status: resp.StatusCode, Request: c.method + " " + c.path}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(resp.Header.Get("Retry-After")); err == nil {
		e.RetryAfter = max(time.Until(t), 0)
	}
	if resp.StatusCode == http.StatusPreconditionFailed {
		e.Current = Version(strings.Trim(resp.Header.Get("ETag"), `"`))
	}
	var body struct {
		Error struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Details json.RawMessage `json:"details"`
		} `json:"error"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(raw, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message, e.Details = body.Error.Code, body.Error.Message, body.Error.Details
		return e
	}
	e.Code = strings.ReplaceAll(strings.ToLower(http.StatusText(resp.StatusCode)), " ", "_")
	e.Message = strings.TrimSpace(string(raw))
	if len(e.Message) > 200 {
		e.Message = e.Message[:200] + "..."
	}
	return e
}
