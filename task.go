package taskd

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind is the kind of a task: a one-time task or a rotating one.
type Kind uint8

const (
	KindOnce   Kind = 1
	KindRotate Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindOnce:
		return "once"
	case KindRotate:
		return "rotate"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind parses "once" or "rotate".
func ParseKind(s string) (Kind, error) {
	switch s {
	case "once":
		return KindOnce, nil
	case "rotate":
		return KindRotate, nil
	}
	return 0, Errorf(CodeInvalid, "kind: must be once or rotate, got %q", s)
}

// Mode says how a limited dispatch quota is shared among users.
type Mode uint8

const (
	// ModeOncePerUser: a user gets an occurrence at most once (seed: 多次数执行任务).
	ModeOncePerUser Mode = 1
	// ModeUntilExhausted: after completing, the same user may take the occurrence
	// again while quota remains (seed: 多次数阻塞执行任务).
	ModeUntilExhausted Mode = 2
)

func (m Mode) String() string {
	switch m {
	case ModeOncePerUser:
		return "once_per_user"
	case ModeUntilExhausted:
		return "until_exhausted"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode parses a mode name; the empty string is the default, once_per_user.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "once_per_user":
		return ModeOncePerUser, nil
	case "until_exhausted":
		return ModeUntilExhausted, nil
	}
	return 0, Errorf(CodeInvalid, "mode: must be once_per_user or until_exhausted, got %q", s)
}

// Status is a task's lifecycle state.
type Status uint8

const (
	StatusActive  Status = 1
	StatusPaused  Status = 2
	StatusDeleted Status = 3
)

func (s Status) String() string {
	switch s {
	case StatusActive:
		return "active"
	case StatusPaused:
		return "paused"
	case StatusDeleted:
		return "deleted"
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Unlimited is the dispatch quota that never runs out.
const Unlimited = -1

// ValidID reports whether s may be a user or group id: 1 to 64 of A-Z, a-z, 0-9, _ and
// -. An id never starts with an executor prefix: "uid_5" as a bare id would be read as
// user 5 in one place and as user "uid_5" in another. (Every client request checks
// its key's uid: a loop, not a regular expression.)
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > 64 || strings.HasPrefix(s, "uid_") || strings.HasPrefix(s, "gid_") {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Executor is who a task targets: one user (uid_<id>) or a group (gid_<id>).
type Executor struct {
	Group bool
	ID    string
}

// ParseExecutor parses "uid_<id>" or "gid_<id>".
func ParseExecutor(s string) (Executor, error) {
	var e Executor
	switch {
	case strings.HasPrefix(s, "uid_"):
		e.ID = s[4:]
	case strings.HasPrefix(s, "gid_"):
		e = Executor{Group: true, ID: s[4:]}
	default:
		return e, Errorf(CodeInvalid, "executor: must be uid_<id> or gid_<id>, got %q", s)
	}
	if !ValidID(e.ID) {
		return e, Errorf(CodeInvalid, "executor: id must be 1 to 64 of [A-Za-z0-9_-], got %q", e.ID)
	}
	return e, nil
}

// UserExecutor is the executor string of one user.
func UserExecutor(uid string) string { return "uid_" + uid }

// GroupExecutor is the executor string of a group.
func GroupExecutor(gid string) string { return "gid_" + gid }

func (e Executor) String() string {
	if e.Group {
		return GroupExecutor(e.ID)
	}
	return UserExecutor(e.ID)
}

// TaskKey names a task across kinds: "once:12", "rotate:3".
type TaskKey struct {
	Kind Kind
	ID   int64
}

func (k TaskKey) String() string { return k.Kind.String() + ":" + strconv.FormatInt(k.ID, 10) }

// ParseTaskKey parses "once:12" or "rotate:3".
func ParseTaskKey(s string) (TaskKey, error) {
	kind, id, ok := strings.Cut(s, ":")
	if !ok {
		return TaskKey{}, Errorf(CodeInvalid, "task_id: must be <kind>:<id>, got %q", s)
	}
	k, err := ParseKind(kind)
	if err != nil {
		return TaskKey{}, err
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return TaskKey{}, Errorf(CodeInvalid, "task_id: bad id in %q", s)
	}
	return TaskKey{Kind: k, ID: n}, nil
}

// Occurrence is one due time of one task: the unit that exclusion, quotas and events
// refer to.
type Occurrence struct {
	Task  TaskKey
	DueAt time.Time // UTC, whole seconds
}

// String is the occurrence key, e.g. "once:12@2026-11-21T10:00:00Z".
func (o Occurrence) String() string {
	return o.Task.String() + "@" + o.DueAt.UTC().Format(time.RFC3339)
}

// ParseOccurrence parses an occurrence key.
func ParseOccurrence(s string) (Occurrence, error) {
	task, due, ok := strings.Cut(s, "@")
	if !ok {
		return Occurrence{}, fmt.Errorf("occurrence %q: missing @", s)
	}
	k, err := ParseTaskKey(task)
	if err != nil {
		return Occurrence{}, err
	}
	t, err := time.Parse(time.RFC3339, due)
	if err != nil {
		return Occurrence{}, fmt.Errorf("occurrence %q: %w", s, err)
	}
	return Occurrence{Task: k, DueAt: t.UTC()}, nil
}

// Rotation is when a rotate task's occurrences fall: from Start on, every Space, or at
// the wall times of Cron instead; none after End (zero: no end).
type Rotation struct {
	Start time.Time
	Space time.Duration
	Cron  *Cron
	End   time.Time
}

// Rotation is the task's rotation (a once task's, or an invalid one's, has none).
func (t Task) Rotation() Rotation {
	r := Rotation{Start: t.StartTime, Space: time.Duration(t.SpaceMinutes) * time.Minute}
	if t.EndTime != nil {
		r.End = *t.EndTime
	}
	if t.Cron != "" {
		r.Space = 0
		r.Cron, _ = ParseCron(t.Cron, t.TimeZone)
	}
	return r
}

// First is the first occurrence at or after t; false when there is none.
func (r Rotation) First(t time.Time) (time.Time, bool) {
	var at time.Time
	switch {
	case r.Cron != nil:
		if t.Before(r.Start) {
			t = r.Start
		}
		var ok bool
		if at, ok = r.Cron.First(t); !ok {
			return at, false
		}
	case r.Space > 0:
		at = FirstRotation(r.Start, r.Space, t)
	default:
		return at, false
	}
	return at, r.End.IsZero() || !at.After(r.End)
}

// After is the first occurrence after t; false when there is none.
func (r Rotation) After(t time.Time) (time.Time, bool) {
	if r.Cron == nil {
		return r.First(t.Add(time.Second)) // occurrences fall on whole seconds
	}
	return r.First(t.Add(time.Nanosecond))
}

// Has reports whether t is an occurrence.
func (r Rotation) Has(t time.Time) bool {
	if r.Cron == nil {
		return r.Space > 0 && IsRotation(r.Start, r.Space, endOrNil(r.End), t)
	}
	at, ok := r.First(t)
	return ok && at.Equal(t)
}

func endOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// FirstRotation returns the first occurrence of a rotate task at or after t:
// start + ceil((t - start) / space) * space, or start itself when t is before it.
func FirstRotation(start time.Time, space time.Duration, t time.Time) time.Time {
	if !t.After(start) {
		return start
	}
	n := (t.Sub(start) + space - 1) / space
	return start.Add(n * space)
}

// IsRotation reports whether due is one of the occurrences of a rotate task.
func IsRotation(start time.Time, space time.Duration, end *time.Time, due time.Time) bool {
	if due.Before(start) || (end != nil && due.After(*end)) {
		return false
	}
	return due.Sub(start)%space == 0
}

// Template is a named JSON Schema that task params must satisfy, with the task-type
// settings its tasks inherit where they set none, and the stages a multi-stage task of
// it goes through.
type Template struct {
	ID     int64           `json:"id"`
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	// ResultSchema, when set, is what a success's detail must be: a success whose
	// detail does not validate counts as a failure (the agent is told 200; the record
	// and its event say why). Set at create, like Schema.
	ResultSchema json.RawMessage `json:"result_schema,omitempty"`
	Settings
	// Stages are the stage names a complete's next_stage may name; a task of this
	// template starts at the first. Empty: single-stage tasks.
	Stages []string `json:"stages"`
	// Windows are the maintenance windows of the template's tasks that set none.
	Windows Windows `json:"windows,omitempty"`
	// DDI marks a template of software deployments for hawkBit DDI controllers: its
	// schema is DDISchema, and its tasks are offered to DDI polls alone. Set at create.
	DDI       bool      `json:"ddi,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Version counts the template's writes (its ETag).
	Version int64 `json:"version"`
}

// Task is a once or rotate task as admins see it.
type Task struct {
	Key          TaskKey   `json:"-"`
	Executor     string    `json:"executor"`
	StartTime    time.Time `json:"start_time"`
	SpaceMinutes int       `json:"space_minutes,omitempty"`
	// Cron, instead of SpaceMinutes, puts a rotate task's occurrences at the wall
	// times of a cron expression in TimeZone ("" and UTC: UTC), from StartTime on.
	Cron     string `json:"cron,omitempty"`
	TimeZone string `json:"time_zone,omitempty"`
	// Misfire is a rotate task's policy for the occurrences a user missed.
	Misfire       Misfire         `json:"misfire,omitempty"`
	EndTime       *time.Time      `json:"end_time,omitempty"`
	TemplateID    int64           `json:"template_id"`
	Params        json.RawMessage `json:"params"`
	DispatchTimes int             `json:"dispatch_times"`
	Mode          Mode            `json:"-"`
	Priority      int             `json:"priority"`
	Status        Status          `json:"-"`
	// Own are the task-type settings the task sets itself (null: not set); the rest
	// come from its template, or the server's defaults.
	Own Settings `json:"own"`
	// Effective are the settings its dispatches get, as read from the store; Inherited
	// names those its template gave.
	Effective
	Inherited []string `json:"inherited"`
	// Windows are the maintenance windows the task is claimed in: its own
	// (OwnWindows), else its template's (then "windows" is in Inherited); empty:
	// any time.
	Windows    Windows `json:"windows,omitempty"`
	OwnWindows Windows `json:"-"`
	// Rollout, when set, releases the quota in phases (rollout.go); nil: all at once.
	Rollout   *Rollout  `json:"rollout,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Version counts the task's writes (its ETag).
	Version int64 `json:"version"`
}

// Bounds of a task's fields: what the columns hold and what the rules allow.
const (
	MaxDispatchTimes  = 1<<31 - 1          // an INT column
	MaxLeaseSeconds   = 365 * 24 * 60 * 60 // a year
	MaxBackoffSeconds = 24 * 60 * 60       // a day
	MaxAttemptsLimit  = 100
	MaxSpaceMinutes   = 10 * 366 * 24 * 60 // ten years
)

// Task times fit a DATETIME and a Redis score.
var (
	MinTaskTime = time.Unix(0, 0).UTC()
	MaxTaskTime = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Validate checks a task as it is about to be stored (created or replaced): every
// field within its bounds, the kind's own fields only, the executor a user or a group.
// (A rollout whose gate could never pass is RolloutRefusal's to refuse.)
// The first field that is wrong is named in the error (CodeInvalid).
func (t Task) Validate() error {
	bad := func(format string, args ...any) error { return Errorf(CodeInvalid, format, args...) }
	if _, err := ParseExecutor(t.Executor); err != nil {
		return err
	}
	switch {
	case t.StartTime.Before(MinTaskTime) || !t.StartTime.Before(MaxTaskTime):
		return bad("start_time: must be between 1970 and 9999, got %s", t.StartTime.Format(time.RFC3339))
	case t.TemplateID < 1:
		return bad("template_id: must be a template id, got %d", t.TemplateID)
	case t.DispatchTimes != Unlimited && (t.DispatchTimes < 1 || t.DispatchTimes > MaxDispatchTimes):
		return bad("dispatch_times: must be -1 (unlimited) or 1..%d, got %d", MaxDispatchTimes, t.DispatchTimes)
	case t.Mode != ModeOncePerUser && t.Mode != ModeUntilExhausted:
		return bad("mode: must be once_per_user or until_exhausted, got %s", t.Mode)
	case t.Priority < 1 || t.Priority > 9:
		return bad("priority: must be 1..9, got %d", t.Priority)
	case t.Status != StatusActive && t.Status != StatusPaused:
		return bad("status: must be active or paused, got %s", t.Status)
	}
	if err := t.Own.Validate(); err != nil {
		return err
	}
	if err := t.OwnWindows.Validate(); err != nil {
		return err
	}
	if t.Rollout != nil {
		if e, _ := ParseExecutor(t.Executor); !e.Group {
			return bad("rollout: a rollout releases a group task's quota; %s is a user", t.Executor)
		}
		if err := t.Rollout.Validate(t.DispatchTimes); err != nil {
			return err
		}
	}
	switch t.Key.Kind {
	case KindOnce:
		if t.SpaceMinutes != 0 || t.EndTime != nil || t.Cron != "" || t.TimeZone != "" || t.Misfire != 0 {
			return bad("space_minutes, cron, time_zone, misfire, end_time: rotate tasks only")
		}
	case KindRotate:
		switch {
		case t.Cron != "" && t.SpaceMinutes != 0:
			return bad("cron, space_minutes: a rotate task takes one of them, not both")
		case t.Cron != "":
			if _, err := ParseCron(t.Cron, t.TimeZone); err != nil {
				return err
			}
		case t.TimeZone != "":
			return bad("time_zone: only with cron (a space_minutes period has no wall time)")
		case t.SpaceMinutes < 1 || t.SpaceMinutes > MaxSpaceMinutes:
			return bad("space_minutes: must be 1..%d (ten years), got %d", MaxSpaceMinutes, t.SpaceMinutes)
		}
		if t.Misfire > MisfireSkip { // 0 is catch_up
			return bad("misfire: must be catch_up, latest or skip")
		}
		if t.EndTime != nil && (!t.EndTime.After(t.StartTime) || !t.EndTime.Before(MaxTaskTime)) {
			return bad("end_time: must be after start_time and before 9999")
		}
	default:
		return bad("kind: must be once or rotate")
	}
	return nil
}
