package store

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// Events. A state change's event is written to the outbox in the change's own
// transaction where Kafka is configured (emit); the events API derives events from the
// dispatch records (Events), which are their durable form.

// emit writes the event for d to the outbox, in the caller's transaction, when a relay
// is configured; otherwise the dispatch record itself is the event's durable form.
func (s *Store) emit(ctx context.Context, tx *sql.Tx, d *taskd.Dispatch, typ taskd.EventType, now time.Time) error {
	return s.emitAll(ctx, tx, s.withEvent(nil, d, typ, now))
}

// withEvent appends d's event of type typ at now to evs, if events are written at all
// (without an outbox, nothing is built).
func (s *Store) withEvent(evs []taskd.Event, d *taskd.Dispatch, typ taskd.EventType, now time.Time) []taskd.Event {
	if !s.events.Outbox {
		return evs
	}
	return append(evs, s.event(d, typ, now))
}

// emitAll writes events to the outbox as emit does, in one statement.
func (s *Store) emitAll(ctx context.Context, tx *sql.Tx, evs []taskd.Event) error {
	if !s.events.Outbox || len(evs) == 0 {
		return nil
	}
	return appendOutboxTx(ctx, tx, evs)
}

// event is d's event of type typ at now.
func (s *Store) event(d *taskd.Dispatch, typ taskd.EventType, now time.Time) taskd.Event {
	ev := taskd.Event{
		EventID: taskd.EventID(d.LogID, typ, d.RedoCount),
		Type:    typ,
		LogID:   d.LogID,
		UID:     d.UID,
		TaskID:  d.Occurrence.Task.String(),
		Kind:    d.Occurrence.Task.Kind.String(),
		DueAt:   d.Occurrence.DueAt,
		Attempt: d.Attempt,
		Stage:   d.Stage,
		Reason:  d.Reason,
		Node:    s.events.Node,
		At:      now,
	}
	if typ == taskd.EventComplete || typ == taskd.EventDead {
		ev.Final = d.Final
	}
	if typ == taskd.EventComplete {
		ev.Result = d.Result.String()
		ms := now.Sub(d.DispatchedAt).Milliseconds()
		ev.LatencyMS = &ms
	}
	return ev
}

// EventsConfig says whether state changes also write outbox events, and the node name
// they carry.
type EventsConfig struct {
	Outbox bool
	Node   string
}

// SetEvents configures event emission; call before serving.
func (s *Store) SetEvents(c EventsConfig) { s.events = c }

// laterEvents are the events of a record after its dispatch: the column of their time,
// and what the record must be to have had one.
var laterEvents = []struct {
	typ      taskd.EventType
	at, cond string
}{
	{taskd.EventComplete, "finished_at", "result IS NOT NULL"},
	{taskd.EventExpire, "finished_at", "state = 4 OR (state = 6 AND result IS NULL)"},
	{taskd.EventDead, "finished_at", "state = 6"},
	{taskd.EventCancel, "cancelled_at", "TRUE"},
	{taskd.EventRetry, "retried_at", "TRUE"},
	{taskd.EventRedo, "last_redo_at", "TRUE"},
}

// Events derives events from the dispatch records, newest first: each record is a
// dispatch event, its completion a complete event, its expiry an expire event and its
// latest redo a redo event; a dead one a dead event, a cancelled one a cancel event
// (at its cancel), a dead one an admin retried a retry event (at the retry). Event ids are taskd.EventID's: the same the outbox gives the event.
// The complete and dead events of a record that died of a final failure say so (Final).
func (s *Store) Events(ctx context.Context, f taskd.EventFilter, after *taskd.EventCursor, limit int) ([]taskd.StoredEvent, error) {
	where := ""
	var common []any
	if f.UID != "" {
		where += " AND uid = ?"
		common = append(common, f.UID)
	}
	if f.Task.Kind != 0 {
		where += " AND task_kind = ? AND task_id = ?"
		common = append(common, f.Task.Kind, f.Task.ID)
	}
	// A record's dispatch event lies in a range of ids; its later events among the
	// records changed since the window's start (logid.go, migration 0024), read in one
	// walk of idx_changed joined with the kinds asked for: each kind's time, condition,
	// result, reason and final as a CASE on the kind.
	var selects []string
	var args []any
	if f.Type == "" || f.Type == taskd.EventDispatch {
		selects = append(selects, `SELECT CONCAT(log_id, ':dispatch') AS event_id, 'dispatch' AS type,
			log_id, uid, task_kind, task_id, due_at, attempt, NULL AS result, dispatched_at AS at, stage, NULL AS reason, 0 AS final,
			0 AS missed, NULL AS last_due_at
			FROM dispatch WHERE log_id >= ? AND log_id <= ? AND dispatched_at >= ? AND dispatched_at < ?`+where)
		args = append(args, logIDFloor(f.From), logIDCeiling(f.To), f.From, f.To)
		args = append(args, common...)
	}
	var kinds []string
	for _, k := range laterEvents {
		if f.Type == "" || f.Type == k.typ {
			kinds = append(kinds, "SELECT '"+string(k.typ)+"' AS k")
		}
	}
	if len(kinds) > 0 {
		at, cond := "CASE k.k", "CASE k.k"
		for _, k := range laterEvents {
			at += " WHEN '" + string(k.typ) + "' THEN " + k.at
			cond += " WHEN '" + string(k.typ) + "' THEN " + k.cond
		}
		at, cond = at+" END", cond+" END"
		selects = append(selects, `SELECT IF(k.k = 'redo', CONCAT(log_id, ':redo:', redo_count), CONCAT(log_id, ':', k.k)) AS event_id,
			k.k AS type, log_id, uid, task_kind, task_id, due_at, attempt, IF(k.k = 'complete', result, NULL) AS result,
			`+at+` AS at, stage, IF(k.k = 'complete', reason, NULL) AS reason,
			IF(k.k IN ('complete', 'dead'), final, 0) AS final, 0 AS missed, NULL AS last_due_at
			FROM dispatch JOIN (`+strings.Join(kinds, " UNION ALL ")+`) k
			WHERE changed_at >= ? AND `+at+` >= ? AND `+at+` < ? AND `+cond+where)
		args = append(args, f.From, f.From, f.To)
		args = append(args, common...)
	}
	if f.Type == "" || f.Type == taskd.EventMissed {
		// Runs of occurrences missed by a misfire policy: their own table.
		selects = append(selects, `SELECT CONCAT(IF(task_kind = 1, 'once', 'rotate'), ':', task_id, '@',
			DATE_FORMAT(due_at, '%Y-%m-%dT%H:%i:%sZ'), ':', uid, ':missed') AS event_id, 'missed' AS type,
			'' AS log_id, uid, task_kind, task_id, due_at, 0 AS attempt, NULL AS result, missed_at AS at, NULL AS stage,
			NULL AS reason, 0 AS final, missed, last_due_at
			FROM missed_occurrence WHERE missed_at >= ? AND missed_at < ?`+where)
		args = append(args, f.From, f.To)
		args = append(args, common...)
	}
	if len(selects) == 0 {
		return []taskd.StoredEvent{}, nil
	}
	q := "SELECT event_id, type, log_id, uid, task_kind, task_id, due_at, attempt, result, at, stage, reason, final, missed, last_due_at FROM (" +
		strings.Join(selects, " UNION ALL ") + ") e"
	if after != nil {
		q += " WHERE at < ? OR (at = ? AND event_id < ?)"
		args = append(args, after.At, after.At, after.EventID)
	}
	q += " ORDER BY at DESC, event_id DESC LIMIT ?"
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mysqlErr("events", err)
	}
	defer rows.Close()
	out := []taskd.StoredEvent{}
	for rows.Next() {
		var e taskd.StoredEvent
		var k taskd.TaskKey
		var result sql.NullInt64
		var stage, reason sql.NullString
		var lastDue sql.NullTime
		if err := rows.Scan(&e.EventID, &e.Type, &e.LogID, &e.UID, &k.Kind, &k.ID, &e.DueAt, &e.Attempt, &result, &e.At,
			&stage, &reason, &e.Final, &e.Missed, &lastDue); err != nil {
			return nil, mysqlErr("events", err)
		}
		e.TaskID, e.DueAt, e.At, e.Stage, e.Reason = k.String(), e.DueAt.UTC(), e.At.UTC(), stage.String, reason.String
		if result.Valid {
			e.Result = taskd.Result(result.Int64).String()
		}
		if lastDue.Valid {
			last := lastDue.Time.UTC()
			e.LastDueAt = &last
		}
		out = append(out, e)
	}
	return out, mysqlErr("events", rows.Err())
}

// RecordMissed records runs of occurrences users will never get because of their
// tasks' misfire policies, at now, with their events (in the outbox where a relay is
// configured), in one transaction. A run is keyed by its user, task and first
// occurrence: recorded again (two nodes, or a fetch again after Redis refused the
// heap's step) it keeps the longest.
func (s *Store) RecordMissed(ctx context.Context, runs []taskd.Missed, now time.Time) error {
	if len(runs) == 0 {
		return nil
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		args := make([]any, 0, 7*len(runs))
		var evs []taskd.Event
		for _, r := range runs {
			args = append(args, r.Task.Kind, r.Task.ID, r.First, r.UID, r.Last, r.Count, now)
			if s.events.Outbox {
				last := r.Last
				first := taskd.Occurrence{Task: r.Task, DueAt: r.First}
				evs = append(evs, taskd.Event{EventID: taskd.MissedEventID(first, r.UID), Type: taskd.EventMissed,
					UID: r.UID, TaskID: r.Task.String(), Kind: r.Task.Kind.String(), DueAt: r.First,
					Missed: r.Count, LastDueAt: &last, Node: s.events.Node, At: now})
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO missed_occurrence (task_kind, task_id, due_at, uid, last_due_at, missed, missed_at)
			VALUES `+tuples(len(runs), 7)+`
			ON DUPLICATE KEY UPDATE last_due_at = GREATEST(last_due_at, VALUES(last_due_at)), missed = GREATEST(missed, VALUES(missed))`,
			args...)
		if err != nil {
			return err
		}
		return s.emitAll(ctx, tx, evs)
	})
	return mysqlErr("record missed", err)
}
