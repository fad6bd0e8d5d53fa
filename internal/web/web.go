// Package web holds the HTTP plumbing every handler shares: one decode and one encode
// helper, and the one place where an error kind becomes an HTTP status.
package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/taskpull/taskd"
)

// Status maps an error code to its HTTP status. It is the only such mapping.
func Status(code taskd.Code) int {
	switch code {
	case taskd.CodeInvalid, taskd.CodeMalformedJSON:
		return http.StatusBadRequest
	case taskd.CodeUnauthenticated:
		return http.StatusUnauthorized
	case taskd.CodePermission:
		return http.StatusForbidden
	case taskd.CodeNotFound:
		return http.StatusNotFound
	case taskd.CodeStaleLease, taskd.CodeConflict:
		return http.StatusConflict
	case taskd.CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case taskd.CodeParamsInvalid:
		return http.StatusUnprocessableEntity
	case taskd.CodeRateLimited:
		return http.StatusTooManyRequests
	case taskd.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Encode writes v as JSON with status.
func Encode(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    taskd.Code `json:"code"`
	Message string     `json:"message"`
	Details any        `json:"details,omitempty"`
}

// Error writes err in the API's error shape. Errors without a kind are internal: they
// are logged here, once, and the client sees a generic message.
func Error(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var e *taskd.Error
	if !errors.As(err, &e) {
		log.ErrorContext(r.Context(), "internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		e = &taskd.Error{Code: taskd.CodeInternal, Message: "internal error"}
	} else if e.Code == taskd.CodeUnavailable {
		log.WarnContext(r.Context(), "dependency unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	Encode(w, Status(e.Code), errorBody{Error: errorDetail{Code: e.Code, Message: e.Message, Details: e.Details}})
}

// Decode reads one JSON value from r's body into v, at most limit bytes, refusing
// unknown fields and trailing data. An empty body is allowed when optional is true and
// leaves v untouched.
func Decode(w http.ResponseWriter, r *http.Request, limit int64, optional bool, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return taskd.Errorf(taskd.CodeTooLarge, "request body is over %d bytes", limit)
		}
		return taskd.Errorf(taskd.CodeInvalid, "reading request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return taskd.Errorf(taskd.CodeInvalid, "request body: required")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return taskd.Errorf(taskd.CodeMalformedJSON, "request body: trailing data after the JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return taskd.Errorf(taskd.CodeMalformedJSON, "request body: trailing data after the JSON value")
	}
	return nil
}

func decodeError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return taskd.Errorf(taskd.CodeMalformedJSON, "request body: malformed JSON: %v", err)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "request body"
		}
		return taskd.Errorf(taskd.CodeInvalid, "%s: must be %s, got %s", field, typ.Type, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return taskd.Errorf(taskd.CodeInvalid, "request body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	var e *taskd.Error
	if errors.As(err, &e) {
		return err
	}
	return taskd.Errorf(taskd.CodeInvalid, "request body: %v", fmt.Sprint(err))
}

// Bearer returns the bearer token of r, or "".
func Bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}
