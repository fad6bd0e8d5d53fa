package admin

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/web"
)

// This file reads what a request gives: its fields' forms and ranges, its path ids.
// Every refusal is a 400 naming the field; nothing out of a column's range reaches MySQL.

// reqInt is an integer field as the request wrote it. Decode refuses what is not a JSON
// number; in then checks that it is an integer in the field's range.
type reqInt struct{ lit string }

// Want says what a reqInt takes.
func (reqInt) Want() string { return "an integer" }

// UnmarshalJSON keeps a number as written (never through a float64, which would round
// 2^53+1 and turn 1e400 into an error without the field's name).
func (n *reqInt) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9') {
		n.lit = string(b)
		return nil
	}
	return web.WrongForm(reqInt{}, b)
}

// in returns the value when it is an integer in lo..hi, or an error naming field and
// its range as want says it.
func (n reqInt) in(field string, lo, hi int64, want string) (int64, error) {
	v, err := strconv.ParseInt(n.lit, 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, taskd.Errorf(taskd.CodeInvalid, "%s: must be %s, got %s", field, want, web.Describe([]byte(n.lit)))
	}
	return v, nil
}

// reqFloat is a number field as the request wrote it.
type reqFloat struct{ lit string }

// Want says what a reqFloat takes.
func (reqFloat) Want() string { return "a number" }

// UnmarshalJSON keeps a number as written.
func (n *reqFloat) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9') {
		n.lit = string(b)
		return nil
	}
	return web.WrongForm(reqFloat{}, b)
}

// settingsRequest are the task-type settings of a template or task request: each
// optional (absent or null: not set, so inherited).
type settingsRequest struct {
	LeaseSeconds          *reqInt   `json:"lease_seconds"`
	MaxAttempts           *reqInt   `json:"max_attempts"`
	RetryBackoffSeconds   *reqInt   `json:"retry_backoff_seconds"`
	RetryMultiplier       *reqFloat `json:"retry_multiplier"`
	RetryMaxSeconds       *reqInt   `json:"retry_max_seconds"`
	DispatchRatePerMinute *reqInt   `json:"dispatch_rate_per_minute"`
	ConfirmSeconds        *reqInt   `json:"confirm_seconds"`
}

// settingsFields are the members of settingsRequest.
var settingsFields = []string{"lease_seconds", "max_attempts", "retry_backoff_seconds", "retry_multiplier",
	"retry_max_seconds", "dispatch_rate_per_minute", "confirm_seconds"}

// settings checks each setting present against its range.
func (req settingsRequest) settings() (taskd.Settings, error) {
	var s taskd.Settings
	opt := func(dst **int, n *reqInt, field string, lo, hi int64, want string) error {
		if n == nil {
			return nil
		}
		v, err := n.in(field, lo, hi, want)
		i := int(v)
		*dst = &i
		return err
	}
	for _, err := range []error{
		opt(&s.LeaseSeconds, req.LeaseSeconds, "lease_seconds", 0, maxLeaseSeconds, "0..31536000 (0: never expires; at most a year)"),
		opt(&s.MaxAttempts, req.MaxAttempts, "max_attempts", 1, maxAttemptsLimit, "1..100"),
		opt(&s.RetryBackoffSeconds, req.RetryBackoffSeconds, "retry_backoff_seconds", 0, maxBackoffSeconds, "0..86400 (at most a day)"),
		opt(&s.RetryMaxSeconds, req.RetryMaxSeconds, "retry_max_seconds", 0, maxBackoffSeconds, "0..86400 (at most a day)"),
		opt(&s.DispatchRatePerMinute, req.DispatchRatePerMinute, "dispatch_rate_per_minute", 0, taskd.MaxRatePerMinute,
			"0..1000000 (0: no bound)"),
		opt(&s.ConfirmSeconds, req.ConfirmSeconds, "confirm_seconds", 0, taskd.MaxConfirmSeconds,
			"0..31536000 (0: a success counts at once; at most a year)"),
	} {
		if err != nil {
			return s, err
		}
	}
	if req.RetryMultiplier != nil {
		v, err := strconv.ParseFloat(req.RetryMultiplier.lit, 64)
		if err != nil || !(v >= 1 && v <= taskd.MaxRetryMultiplier) {
			return s, taskd.Errorf(taskd.CodeInvalid, "retry_multiplier: must be a number 1..%g, got %s",
				taskd.MaxRetryMultiplier, web.Describe([]byte(req.RetryMultiplier.lit)))
		}
		s.RetryMultiplier = &v
	}
	return s, nil
}

// settingsDoc is s as request members (those not set absent), for a merge patch.
func settingsDoc(s taskd.Settings, doc map[string]any) {
	for name, v := range map[string]any{"lease_seconds": s.LeaseSeconds, "max_attempts": s.MaxAttempts,
		"retry_backoff_seconds": s.RetryBackoffSeconds, "retry_multiplier": s.RetryMultiplier,
		"retry_max_seconds": s.RetryMaxSeconds, "dispatch_rate_per_minute": s.DispatchRatePerMinute,
		"confirm_seconds": s.ConfirmSeconds} {
		switch p := v.(type) {
		case *int:
			if p != nil {
				doc[name] = *p
			}
		case *float64:
			if p != nil {
				doc[name] = *p
			}
		}
	}
}

// reqTime is a time field: RFC 3339, as time.Time reads it.
type reqTime struct{ time.Time }

// Want says what a reqTime takes.
func (reqTime) Want() string { return "RFC 3339, e.g. 2026-01-02T15:04:05Z" }

// UnmarshalJSON reads an RFC 3339 string, or says what came instead.
func (t *reqTime) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' || t.Time.UnmarshalJSON(b) != nil {
		return web.WrongForm(reqTime{}, b)
	}
	return nil
}

// Bounds of task fields: the domain's (taskd.Task.Validate checks them again).
const (
	maxInt32          = taskd.MaxDispatchTimes
	maxLeaseSeconds   = taskd.MaxLeaseSeconds
	maxBackoffSeconds = taskd.MaxBackoffSeconds
	maxAttemptsLimit  = taskd.MaxAttemptsLimit
)

// reqName is a template name as the request wrote it: encoding/json would quietly turn
// bytes that are not UTF-8 into U+FFFD, so they are refused here, with the field's name.
type reqName struct{ s string }

// Want says what a reqName takes.
func (reqName) Want() string { return "a string" }

// UnmarshalJSON refuses a name that is not valid UTF-8 as sent.
func (n *reqName) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' {
		return web.WrongForm(reqName{}, b)
	}
	if !utf8.Valid(b) {
		return taskd.Errorf(taskd.CodeInvalid, "name: must be UTF-8 text")
	}
	return json.Unmarshal(b, &n.s)
}

// checkName refuses a name as every name is refused (taskd.CheckName).
func checkName(name string) error { return taskd.CheckName("name", name) }

// numeric is what a path id that is a number, if not a valid one, looks like.
var numeric = regexp.MustCompile(`^[-+]?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$`)

// pathID reads a numeric id from the path. A number outside 1..2^63-1 (or not an
// integer) is a 400 naming the parameter; anything else that is not an id names
// nothing there is: 404.
func pathID(r *http.Request, name string) (int64, error) {
	v := chi.URLParam(r, name)
	id, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err == nil && id > 0:
		return id, nil
	case numeric.MatchString(v):
		return 0, taskd.Errorf(taskd.CodeInvalid, "%s: must be an integer 1..9223372036854775807, got %s",
			name, web.Describe([]byte(v)))
	}
	return 0, taskd.Errorf(taskd.CodeNotFound, "%s %q not found", name, v)
}

// bareID checks a user or group id given where the contract wants it bare: an executor
// string there ("gid_ops" for "ops") would silently name another group or user.
func bareID(field, id string) error {
	for _, prefix := range []string{"uid_", "gid_"} {
		if rest, ok := strings.CutPrefix(id, prefix); ok && rest != "" {
			return taskd.Errorf(taskd.CodeInvalid, "%s: give the bare id, e.g. %s, not %s", field, rest, id)
		}
	}
	if !taskd.ValidID(id) {
		return taskd.Errorf(taskd.CodeInvalid, "%s: must be 1 to 64 of [A-Za-z0-9_-], got %q", field, id)
	}
	return nil
}

func pathGroup(r *http.Request) (string, error) {
	gid := chi.URLParam(r, "gid")
	return gid, bareID("gid", gid)
}

func pathUser(r *http.Request) (string, error) {
	uid := chi.URLParam(r, "uid")
	return uid, bareID("uid", uid)
}

// isObject reports whether b holds a JSON object (and not null, an array, a string...).
func isObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}
