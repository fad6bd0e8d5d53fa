// Package web holds the HTTP plumbing every handler shares: one decode and one encode
// helper, and the one place where an error kind becomes an HTTP status.
package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/jsondepth"
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
	case taskd.CodeParamsInvalid, taskd.CodeUnsatisfiable:
		return http.StatusUnprocessableEntity
	case taskd.CodeRateLimited:
		return http.StatusTooManyRequests
	case taskd.CodeUnavailable:
		return http.StatusServiceUnavailable
	case taskd.CodePreconditionFailed:
		return http.StatusPreconditionFailed
	case taskd.CodeGone:
		return http.StatusGone
	}
	return http.StatusInternalServerError
}

// Encode writes v as JSON with status.
func Encode(w http.ResponseWriter, status int, v any) {
	setJSONHeaders(w)
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	// JSON replies are read by programs, not embedded in HTML: "<" stays "<".
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// EncodeRaw writes body, JSON already encoded as Encode would (a newline at its end),
// with status and Encode's headers: for the replies sent most often, built without
// reflection.
func EncodeRaw(w http.ResponseWriter, status int, body []byte) {
	setJSONHeaders(w)
	w.WriteHeader(status)
	w.Write(body)
}

// The headers of every JSON reply, shared: Header().Set would make their values anew
// for every reply. (Header values are replaced, never changed in place.)
var (
	jsonContentType = []string{"application/json"}
	noSniff         = []string{"nosniff"}
)

func setJSONHeaders(w http.ResponseWriter) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	// A reply is JSON and nothing else, whatever a browser would sniff in it.
	h["X-Content-Type-Options"] = noSniff
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
	if !errors.As(err, &e) || e.Code == taskd.CodeInternal {
		// The detail stays in the log: it may name tables, hosts or files.
		log.ErrorContext(r.Context(), "internal error", "component", "http", "method", r.Method, "path", r.URL.Path, "err", err)
		e = &taskd.Error{Code: taskd.CodeInternal, Message: "internal error"}
	} else if e.Code == taskd.CodeUnavailable && r.Context().Err() != context.Canceled { // a client that hung up is no outage
		log.WarnContext(r.Context(), "dependency unavailable", "component", "http", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	switch e.Code {
	case taskd.CodeUnavailable, taskd.CodeRateLimited:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(e.RetryAfter)))
	case taskd.CodePreconditionFailed:
		if e.Current != "" {
			w.Header().Set("ETag", e.Current.ETag())
		}
	}
	Encode(w, Status(e.Code), errorBody{Error: errorDetail{Code: e.Code, Message: e.Message, Details: e.Details}})
}

// retryAfterSeconds is the Retry-After of a reply: the error's own hint rounded up to
// whole seconds, or 1 to 3 seconds, jittered so that clients turned away together do
// not all come back in the same second.
func retryAfterSeconds(d time.Duration) int {
	if d > 0 {
		return int((d + time.Second - 1) / time.Second)
	}
	return 1 + rand.IntN(3)
}

// Decode reads one JSON value from r's body into v, at most limit bytes, refusing
// unknown fields and trailing data. An empty body is allowed when optional is true and
// leaves v untouched.
func Decode(w http.ResponseWriter, r *http.Request, limit int64, optional bool, v any) error {
	if r.Body == nil || r.Body == http.NoBody {
		// The server's body of a request without one: nothing to read.
		if optional {
			return nil
		}
		return taskd.Errorf(taskd.CodeInvalid, "request body: required")
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return taskd.Errorf(taskd.CodeTooLarge, "request body is over %d bytes", limit)
		}
		return taskd.Errorf(taskd.CodeInvalid, "reading request body: %v", err)
	}
	if optional && len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return DecodeBytes(body, v)
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
		if want, ok := wantOf(typ.Type); ok {
			return taskd.Errorf(taskd.CodeInvalid, "%s: want %s, got %s", field, want, typ.Value)
		}
		return taskd.Errorf(taskd.CodeInvalid, "%s: must be %s, got %s", field, jsonKind(typ.Type), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return taskd.Errorf(taskd.CodeInvalid, "request body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	var e *taskd.Error
	if errors.As(err, &e) {
		return err
	}
	return taskd.Errorf(taskd.CodeInvalid, "request body: %v", fmt.Sprint(err))
}

// MaxDepth bounds how deeply a request's JSON may nest: objects and arrays within
// each other, the body itself counting as one. Agents' checkpoints, details and stage
// contexts, and admins' params, are stored as sent and shown again (the console, the
// audit log, every later dispatch), and the work each of those does can grow with the
// nesting; 64 levels is far more than any document that means something needs.
const MaxDepth = 64

// CheckDepth refuses, with 400 invalid_argument naming the body's top-level member it
// happened in, a JSON document that nests deeper than MaxDepth. It is one pass over
// the bytes, before any decoding (whose work, and a merge patch's, would grow with
// the nesting); malformed JSON is left to the decoder to name.
func CheckDepth(body []byte) error {
	field, over := jsondepth.Over(body, MaxDepth)
	if !over {
		return nil
	}
	if field == "" {
		field = "request body"
	}
	return taskd.Errorf(taskd.CodeInvalid, "%s: nested deeper than %d levels (objects and arrays within each other)", field, MaxDepth)
}

// jsonKind names the JSON a Go type takes, for an error message: never the Go type
// itself (a client has no use for "struct { Count *admin.reqInt }", and it tells an
// outsider about the code).
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "another JSON value"
}

// DecodeBytes is Decode for a body already in hand (one a merge patch produced, say):
// one JSON value into v, refusing unknown fields and trailing data. Decode decodes
// with it, so that both refuse alike.
func DecodeBytes(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return taskd.Errorf(taskd.CodeInvalid, "request body: required")
	}
	if err := CheckDepth(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	// After the value, only JSON's whitespace: the next token is the end. (Anything
	// else is a token or an error; bytes.TrimSpace would pass Unicode spaces JSON
	// does not allow.)
	if _, err := dec.Token(); err != io.EOF {
		return taskd.Errorf(taskd.CodeMalformedJSON, "request body: trailing data after the JSON value")
	}
	return nil
}

// Want is implemented, with a value receiver, by request field types that take one
// form of JSON value (a time, an integer). When such a field gets a value of another
// form, its UnmarshalJSON returns WrongForm, and Decode's error names the field, the
// form and what came: `start_time: want RFC 3339, e.g. 2026-01-02T15:04:05Z, got
// "tomorrow"`. (encoding/json fills in the field of an *json.UnmarshalTypeError only.)
type Want interface {
	// Want describes the form the type takes.
	Want() string
}

var wantType = reflect.TypeFor[Want]()

func wantOf(t reflect.Type) (string, bool) {
	if t == nil || !t.Implements(wantType) {
		return "", false
	}
	return reflect.Zero(t).Interface().(Want).Want(), true
}

// WrongForm is the error a Want type's UnmarshalJSON returns for a value it does not
// take.
func WrongForm(w Want, value []byte) error {
	return &json.UnmarshalTypeError{Value: Describe(value), Type: reflect.TypeOf(w)}
}

// Describe is how an error message shows a JSON value a client sent: a string or a
// number as written (cut short when long), anything else by its kind.
func Describe(value []byte) string {
	v := bytes.TrimSpace(value)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		const max = 64
		if len(v) <= max {
			return string(v)
		}
		cut := max
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		if v[0] == '"' {
			return string(v[:cut]) + `…"`
		}
		return string(v[:cut]) + "…"
	}
	return string(v) // true, false, null
}

// Bearer returns the bearer token of r, or "".
func Bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// CredentialProblem says what is wrong with r's Authorization header when it carries no
// bearer token, ending with what is expected (want, e.g. "<admin token>"); "" when it
// carries one. Both the admin API and the client endpoints answer with it, so a token
// pasted without "Bearer " is named as such rather than as a wrong token.
func CredentialProblem(r *http.Request, want string) string {
	expected := `expected "Authorization: Bearer ` + want + `"`
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	switch {
	case Bearer(r) != "":
		return ""
	case h == "":
		return "no Authorization header; " + expected
	case strings.EqualFold(h, "Bearer"):
		return "the Authorization header has the Bearer scheme but no token; " + expected
	case !strings.Contains(h, " "):
		return `the Authorization header has a token without the "Bearer " scheme; ` + expected
	default:
		scheme, _, _ := strings.Cut(h, " ")
		return fmt.Sprintf("the Authorization header's scheme is %q, not Bearer; %s", truncate(scheme, 20), expected)
	}
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
