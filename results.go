package taskd

import (
	"encoding/base64"
	"strconv"
	"strings"
)

// A task's results (GET /v1/admin/tasks/{kind}/{id}/results): its dispatch records
// that finished, each once, in the order they became visible. A finished record is
// given a number among its task's results after its commit (the database package
// explains how); a reader pages by that number, which, unlike a finish time, no late
// commit can fall behind.

// NumberedRecord is a finished dispatch record with its number among its task's
// results.
type NumberedRecord struct {
	Seq    int64
	Record DispatchRecord
}

// ResultsCursor is where a reader of a task's results is: the results numbered up to
// Seq are behind it.
type ResultsCursor struct {
	Task TaskKey
	Seq  int64
}

// Encode is the cursor as the API hands it out: opaque to clients, never empty.
func (c ResultsCursor) Encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.Task.String() + "|" + strconv.FormatInt(c.Seq, 10)))
}

// ParseResultsCursor parses a cursor Encode gave out for task's results; "" is the
// start (every result). A cursor of another task is refused too.
func ParseResultsCursor(s string, task TaskKey) (ResultsCursor, error) {
	if s == "" {
		return ResultsCursor{Task: task}, nil
	}
	bad := Errorf(CodeInvalid, "cursor: not a cursor this server gave out for the results of %s", task)
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return ResultsCursor{}, bad
	}
	key, seq, ok := strings.Cut(string(raw), "|")
	n, err := strconv.ParseInt(seq, 10, 64)
	if !ok || err != nil || n < 0 || key != task.String() {
		return ResultsCursor{}, bad
	}
	return ResultsCursor{Task: task, Seq: n}, nil
}

// ResultsMark is what changes when a task's results or its standing do: the last
// number given to one of its results, whether a finished record waits for its number
// (Pending), and the task's status and version. A waiter for the results looks again
// when it changes.
type ResultsMark struct {
	Seq     int64
	Pending bool
	Status  Status
	Version int64
}
