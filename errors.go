package taskd

import (
	"errors"
	"fmt"
	"time"
)

// Code is a stable, machine-readable error code, as API.md lists them.
type Code string

// The error codes of the HTTP contract. Each maps to exactly one HTTP status, in
// internal/web.
const (
	CodeInvalid         Code = "invalid_argument"
	CodeMalformedJSON   Code = "malformed_json"
	CodeUnauthenticated Code = "unauthenticated"
	CodePermission      Code = "permission_denied"
	CodeNotFound        Code = "not_found"
	CodeStaleLease      Code = "stale_lease"
	CodeConflict        Code = "conflict"
	CodeTooLarge        Code = "too_large"
	CodeParamsInvalid   Code = "params_invalid"
	CodeRateLimited     Code = "rate_limited"
	// CodeUnsatisfiable is a well-formed value that can never work: a cron
	// expression that never fires.
	CodeUnsatisfiable Code = "unsatisfiable"
	// CodePreconditionFailed is a write made against a version (If-Match) the record
	// no longer has.
	CodePreconditionFailed Code = "precondition_failed"
	// CodeGone is a record that existed and has ended: a DDI action already closed.
	CodeGone        Code = "gone"
	CodeUnavailable Code = "unavailable"
	CodeInternal    Code = "internal"
)

// Error is an error the caller can act on: it carries a code, a message safe to show
// to the client, and optional structured details.
type Error struct {
	Code    Code
	Message string
	Details any
	// RetryAfter, for unavailable and rate_limited, is when the client may try again
	// (zero: the server picks a short, jittered wait).
	RetryAfter time.Duration
	// Current, for precondition_failed, is the record's version now (the reply's ETag).
	Current Version
	// Err is the underlying cause, for logs only: it is never shown to the client.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return string(e.Code) + ": " + e.Message + ": " + e.Err.Error()
	}
	return string(e.Code) + ": " + e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Unavailable wraps a dependency failure: the client sees 503 and a generic message,
// the log sees the cause.
func Unavailable(what string, err error) error {
	return &Error{Code: CodeUnavailable, Message: what + " is unavailable", Err: err}
}

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, or CodeInternal.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrNotFound is returned by lookups that find nothing; callers wrap or translate it.
var ErrNotFound = &Error{Code: CodeNotFound, Message: "not found"}
