package admin

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// MaxScheduleOccurrences caps one schedule answer; a longer one is truncated and says so.
const MaxScheduleOccurrences = 10000

// ScheduledOccurrence is one occurrence in a schedule preview.
type ScheduledOccurrence struct {
	TaskID    string    `json:"task_id"`
	DueAt     time.Time `json:"due_at"`
	Priority  int       `json:"priority"`
	Claimed   int       `json:"claimed"`
	Remaining *int      `json:"remaining"`
	// LocalTime is due_at on the wall clock of a cron task's time_zone, with its
	// offset (a cron task only).
	LocalTime string `json:"local_time,omitempty"`
	TimeZone  string `json:"time_zone,omitempty"`
}

// localTime is at on the wall clock of cron's zone, RFC 3339 with the offset.
func localTime(c *taskd.Cron, at time.Time) (string, string) {
	if c == nil {
		return "", ""
	}
	return at.In(c.Location()).Format(time.RFC3339), c.Zone()
}

// Schedule lists the occurrences executor would be offered in [from, to), in the order
// fetch offers them, with their quota claimed and remaining. It builds them with the
// code the fetch path uses (schedule.Offer and the heap); a user's schedule includes its
// groups' tasks. truncated says the list stopped at MaxScheduleOccurrences.
func (s *Service) Schedule(ctx context.Context, executor string, from, to time.Time) (occ []ScheduledOccurrence, truncated bool, err error) {
	e, err := taskd.ParseExecutor(executor)
	if err != nil {
		return nil, false, err
	}
	executors := []string{e.String()}
	if !e.Group {
		gids, err := s.store.UserGroups(ctx, e.ID)
		if err != nil {
			return nil, false, err
		}
		for _, g := range gids {
			executors = append(executors, taskd.GroupExecutor(g))
		}
	}
	tasks, err := s.store.OfferTasks(ctx, executors, from, to)
	if err != nil {
		return nil, false, err
	}
	h := schedule.NewHeap(schedule.Offer(schedule.Source{Once: tasks.Once, Rotate: tasks.Rotate, WindowFrom: from}, from, to))
	occ = []ScheduledOccurrence{}
	for h.Len() > 0 {
		if len(occ) == MaxScheduleOccurrences {
			truncated = true
			break
		}
		en, _ := h.Pop(to)
		o := ScheduledOccurrence{TaskID: en.Task.String(), DueAt: en.DueAt, Priority: en.Priority}
		if en.Cron != "" {
			c, _ := taskd.CronOf(en.Cron)
			o.LocalTime, o.TimeZone = localTime(c, en.DueAt)
		}
		occ = append(occ, o)
	}
	keys := make([]taskd.TaskKey, 0, len(tasks.Quota))
	for k := range tasks.Quota {
		keys = append(keys, k)
	}
	claims, err := s.store.Claims(ctx, keys, from, to)
	if err != nil {
		return nil, false, err
	}
	for i := range occ {
		o := &occ[i]
		k, _ := taskd.ParseTaskKey(o.TaskID)
		o.Claimed = claims[taskd.Occurrence{Task: k, DueAt: o.DueAt}.String()]
		if q := tasks.Quota[k]; q != taskd.Unlimited {
			left := max(q-o.Claimed, 0)
			o.Remaining = &left
		}
	}
	return occ, truncated, nil
}

// ---- query parameters ----

func queryTime(q url.Values, name string, def time.Time) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return t, taskd.Errorf(taskd.CodeInvalid, "%s: want %s, got %q", name, reqTime{}.Want(), v)
	}
	// MySQL's DATETIME holds these years only: a time outside reached MySQL and
	// answered 500.
	if t = t.UTC(); t.Year() < minQueryYear || t.Year() > maxQueryYear {
		return t, taskd.Errorf(taskd.CodeInvalid, "%s: must be from %d-01-01T00:00:00Z to %d-12-31T23:59:59Z, got %q",
			name, minQueryYear, maxQueryYear, v)
	}
	return t, nil
}

// The years a time parameter may name (in UTC): those of MySQL's DATETIME.
const (
	minQueryYear = 1000
	maxQueryYear = 9999
)

func queryRange(q url.Values, defFrom, defTo time.Time) (time.Time, time.Time, error) {
	from, err := queryTime(q, "from", defFrom)
	if err != nil {
		return from, from, err
	}
	to, err := queryTime(q, "to", defTo)
	if err != nil {
		return from, to, err
	}
	if !to.After(from) {
		return from, to, taskd.Errorf(taskd.CodeInvalid, "to: must be after from")
	}
	return from, to, nil
}

func queryLimit(q url.Values) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, taskd.Errorf(taskd.CodeInvalid, "limit: must be 1..1000, got %q", v)
	}
	return n, nil
}

// known refuses query parameters the endpoint does not take: a typo should not
// silently widen a filter.
func known(q url.Values, names ...string) error {
	for k := range q {
		found := false
		for _, n := range names {
			found = found || k == n
		}
		if !found {
			return taskd.Errorf(taskd.CodeInvalid, "unknown query parameter %q", k)
		}
	}
	return nil
}

func encodeCursor(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// idCursor is the cursor of a list by descending id: the id the next page is below,
// 0 for the first page.
func idCursor(q url.Values) (int64, error) {
	cursor, err := decodeCursor(q)
	if err != nil || cursor == "" {
		return 0, err
	}
	before, err := strconv.ParseInt(cursor, 10, 64)
	if err != nil || before <= 0 {
		return 0, taskd.Errorf(taskd.CodeInvalid, "cursor: not a cursor this server gave out")
	}
	return before, nil
}

func decodeCursor(q url.Values) (string, error) {
	v := q.Get("cursor")
	if v == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return "", taskd.Errorf(taskd.CodeInvalid, "cursor: not a cursor this server gave out")
	}
	return string(b), nil
}

var (
	farPast   = time.Unix(0, 0).UTC()
	farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ListTasks is GET /v1/admin/tasks.
func (h *Handlers) ListTasks() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		q := r.URL.Query()
		var f taskd.TaskFilter
		err := known(q, "executor", "kind", "status", "template_id", "limit", "cursor")
		if err == nil && q.Get("executor") != "" {
			var e taskd.Executor
			e, err = taskd.ParseExecutor(q.Get("executor"))
			f.Executor = e.String()
		}
		if err == nil && q.Get("kind") != "" {
			f.Kind, err = taskd.ParseKind(q.Get("kind"))
		}
		if err == nil && q.Get("template_id") != "" {
			if f.TemplateID, err = strconv.ParseInt(q.Get("template_id"), 10, 64); err != nil || f.TemplateID < 1 {
				err = taskd.Errorf(taskd.CodeInvalid, "template_id: must be a template id (a positive integer)")
			}
		}
		if err == nil {
			switch q.Get("status") {
			case "":
			case "active":
				f.Status = taskd.StatusActive
			case "paused":
				f.Status = taskd.StatusPaused
			case "deleted":
				f.Status = taskd.StatusDeleted
			default:
				err = taskd.Errorf(taskd.CodeInvalid, "status: must be active, paused or deleted")
			}
		}
		limit, lerr := queryLimit(q)
		cursor, cerr := decodeCursor(q)
		var after taskd.TaskKey
		if err == nil && lerr == nil && cerr == nil && cursor != "" {
			if after, cerr = taskd.ParseTaskKey(cursor); cerr != nil {
				cerr = taskd.Errorf(taskd.CodeInvalid, "cursor: not a cursor this server gave out")
			}
		}
		for _, e := range []error{err, lerr, cerr} {
			if e != nil {
				return 0, nil, e
			}
		}
		tasks, more, err := h.svc.ListTasks(r.Context(), f, after, limit)
		if err != nil {
			return 0, nil, err
		}
		outcomes, err := h.svc.TaskOutcomes(r.Context(), tasks)
		if err != nil {
			return 0, nil, err
		}
		views := make([]taskView, len(tasks))
		for i, t := range tasks {
			views[i] = viewTask(t)
			views[i].Outcome = outcomes[t.Key]
		}
		next := ""
		if more {
			next = encodeCursor(tasks[len(tasks)-1].Key.String())
		}
		return http.StatusOK, map[string]any{"tasks": views, "next_cursor": next}, nil
	})
}

// Schedule is GET /v1/admin/schedule.
func (h *Handlers) Schedule() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		q := r.URL.Query()
		now := h.svc.now().Truncate(time.Second)
		if err := known(q, "executor", "from", "to"); err != nil {
			return 0, nil, err
		}
		if q.Get("executor") == "" {
			return 0, nil, taskd.Errorf(taskd.CodeInvalid, "executor: required (uid_<id> or gid_<id>)")
		}
		from, to, err := queryRange(q, now, now.Add(7*24*time.Hour))
		if err != nil {
			return 0, nil, err
		}
		if to.Sub(from) > 366*24*time.Hour {
			return 0, nil, taskd.Errorf(taskd.CodeInvalid, "to: at most a year after from")
		}
		occ, truncated, err := h.svc.Schedule(r.Context(), q.Get("executor"), from, to)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, map[string]any{"occurrences": occ, "truncated": truncated}, nil
	})
}

// Events is GET /v1/admin/events.
func (h *Handlers) Events() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		q := r.URL.Query()
		f := taskd.EventFilter{UID: q.Get("uid"), Type: taskd.EventType(q.Get("type"))}
		err := known(q, "uid", "task_id", "type", "from", "to", "limit", "cursor")
		if err == nil && f.UID != "" {
			err = bareID("uid", f.UID)
		}
		if err == nil && q.Get("task_id") != "" {
			f.Task, err = taskd.ParseTaskKey(q.Get("task_id"))
		}
		if err == nil {
			switch f.Type {
			case "", taskd.EventDispatch, taskd.EventComplete, taskd.EventExpire, taskd.EventRedo, taskd.EventDead, taskd.EventCancel,
				taskd.EventRetry, taskd.EventMissed:
			default:
				err = taskd.Errorf(taskd.CodeInvalid, "type: must be dispatch, complete, expire, redo, retry, dead, cancel or missed")
			}
		}
		if err == nil {
			f.From, f.To, err = queryRange(q, farPast, farFuture)
		}
		limit, lerr := queryLimit(q)
		cursor, cerr := decodeCursor(q)
		var after *taskd.EventCursor
		if cursor != "" && cerr == nil {
			at, id, ok := strings.Cut(cursor, "|")
			t, perr := time.Parse(time.RFC3339Nano, at)
			if !ok || perr != nil {
				cerr = taskd.Errorf(taskd.CodeInvalid, "cursor: not a cursor this server gave out")
			}
			after = &taskd.EventCursor{At: t, EventID: id}
		}
		for _, e := range []error{err, lerr, cerr} {
			if e != nil {
				return 0, nil, e
			}
		}
		events, err := h.svc.Events(r.Context(), f, after, limit+1)
		if err != nil {
			return 0, nil, err
		}
		next := ""
		if len(events) > limit {
			events = events[:limit]
			last := events[limit-1]
			next = encodeCursor(last.At.Format(time.RFC3339Nano) + "|" + last.EventID)
		}
		return http.StatusOK, map[string]any{"events": events, "next_cursor": next}, nil
	})
}

// dayRange reads a report's from and to, and no other query parameter; by default
// the last 24 hours.
func (h *Handlers) dayRange(r *http.Request) (from, to time.Time, err error) {
	q := r.URL.Query()
	if err := known(q, "from", "to"); err != nil {
		return from, to, err
	}
	now := h.svc.now()
	return queryRange(q, now.Add(-24*time.Hour), now.Add(time.Second))
}

// Stats is GET /v1/admin/stats.
func (h *Handlers) Stats() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		from, to, err := h.dayRange(r)
		if err != nil {
			return 0, nil, err
		}
		stats, err := h.svc.Stats(r.Context(), from, to)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, map[string]any{"tasks": stats}, nil
	})
}

// Overview is GET /v1/admin/overview (an addition to API.md): open, retry-waiting and
// dead dispatches, and the events waiting to be relayed.
func (h *Handlers) Overview() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		if err := known(r.URL.Query()); err != nil {
			return 0, nil, err
		}
		o, err := h.svc.Overview(r.Context())
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, o, nil
	})
}

// Audit is GET /v1/admin/audit.
func (h *Handlers) Audit() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		q := r.URL.Query()
		err := known(q, "from", "to", "limit", "cursor")
		from, to := farPast, farFuture
		if err == nil {
			from, to, err = queryRange(q, from, to)
		}
		limit, lerr := queryLimit(q)
		cursor, cerr := decodeCursor(q)
		var afterID int64
		if cursor != "" && cerr == nil {
			if afterID, cerr = strconv.ParseInt(cursor, 10, 64); cerr != nil || afterID <= 0 {
				cerr = taskd.Errorf(taskd.CodeInvalid, "cursor: not a cursor this server gave out")
			}
		}
		for _, e := range []error{err, lerr, cerr} {
			if e != nil {
				return 0, nil, e
			}
		}
		entries, err := h.svc.AuditPage(r.Context(), from, to, afterID, limit+1)
		if err != nil {
			return 0, nil, err
		}
		next := ""
		if len(entries) > limit {
			entries = entries[:limit]
			next = encodeCursor(strconv.FormatInt(entries[limit-1].ID, 10))
		}
		return http.StatusOK, map[string]any{"entries": entries, "next_cursor": next}, nil
	})
}
