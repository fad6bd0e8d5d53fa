package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/taskpull/taskd"
)

// audit records a change in the caller's transaction, so a change and its record
// commit together or not at all. before and after are marshalled to JSON (nil: null).
func audit(ctx context.Context, tx *sql.Tx, actor, action, target string, before, after any, now time.Time) error {
	enc := func(v any) (any, error) {
		if v == nil {
			return nil, nil
		}
		b, err := json.Marshal(v)
		return string(b), err
	}
	b, err := enc(before)
	if err != nil {
		return err
	}
	a, err := enc(after)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO audit_log (at, actor, action, target, before_json, after_json)
		VALUES (?, ?, ?, ?, ?, ?)`, now, actor, action, target, b, a)
	return err
}

// AuditPage lists audit entries newest first in [from, to), after the cursor (the id
// of the last entry of the previous page; 0 for the first page).
func (s *Store) AuditPage(ctx context.Context, from, to time.Time, afterID int64, limit int) ([]taskd.AuditEntry, error) {
	q := `SELECT id, at, actor, action, target, before_json, after_json FROM audit_log
		WHERE at >= ? AND at < ?`
	args := []any{from, to}
	if afterID > 0 {
		q += " AND id < ?"
		args = append(args, afterID)
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mysqlErr("audit", err)
	}
	defer rows.Close()
	out := []taskd.AuditEntry{}
	for rows.Next() {
		var e taskd.AuditEntry
		var before, after sql.NullString
		if err := rows.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Target, &before, &after); err != nil {
			return nil, mysqlErr("audit", err)
		}
		e.At = e.At.UTC()
		e.Before, e.After = rawOrNull(before), rawOrNull(after)
		out = append(out, e)
	}
	return out, mysqlErr("audit", rows.Err())
}

func rawOrNull(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return json.RawMessage("null")
	}
	return json.RawMessage(s.String)
}

// taskAudit is how a task appears in the audit log.
func taskAudit(t taskd.Task) map[string]any {
	m := map[string]any{
		"task_id": t.Key.String(), "executor": t.Executor, "start_time": t.StartTime, "template_id": t.TemplateID,
		"params": t.Params, "dispatch_times": t.DispatchTimes, "mode": t.Mode.String(), "priority": t.Priority,
		"status": t.Status.String(),
	}
	// The task's own settings (null: inherited or the default).
	for i, v := range settingsArgs(t.Own) {
		m[settingsNames[i]] = v
	}
	if t.Key.Kind == taskd.KindRotate {
		m["space_minutes"] = t.SpaceMinutes
		m["end_time"] = t.EndTime
		if t.Cron != "" {
			m["cron"], m["time_zone"] = t.Cron, t.TimeZone
		}
		m["misfire"] = t.Misfire.String()
	}
	return m
}
