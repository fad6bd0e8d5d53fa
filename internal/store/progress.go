package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/taskpull/taskd"
)

// Progress saves checkpoint as the latest progress of uid's open dispatch logID at now
// and, with extend, pushes its lease out to now + its lease length. One statement: the
// record is written once per call. It returns the lease's end (nil: no lease), or
// stale_lease when logID is not one of uid's open dispatches within its lease.
func (s *Store) Progress(ctx context.Context, uid, logID string, checkpoint json.RawMessage, extend bool, now time.Time) (*time.Time, error) {
	var lease *time.Time
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE dispatch SET checkpoint = COALESCE(?, checkpoint),
			lease_expires_at = IF(? AND lease_seconds > 0, ? + INTERVAL lease_seconds SECOND, lease_expires_at)
			WHERE log_id = ? AND uid = ? AND state = ? AND (lease_expires_at IS NULL OR lease_expires_at > ?)`,
			nullJSON(checkpoint), extend, now, logID, uid, taskd.StateOpen, now)
		if err != nil {
			return err
		}
		// Rows affected is 0 for a record found but left as it was (the same checkpoint
		// again): the read tells that from a stale log id.
		err = tx.QueryRowContext(ctx, `SELECT lease_expires_at FROM dispatch
			WHERE log_id = ? AND uid = ? AND state = ? AND (lease_expires_at IS NULL OR lease_expires_at > ?)`,
			logID, uid, taskd.StateOpen, now).Scan(&lease)
		if errors.Is(err, sql.ErrNoRows) {
			return taskd.Errorf(taskd.CodeStaleLease, "log_id %s is not your open dispatch", logID)
		}
		return err
	})
	if err != nil {
		return nil, mysqlErr("progress", err)
	}
	if lease != nil {
		l := lease.UTC()
		lease = &l
	}
	return lease, nil
}

// takeUp copies into d, a re-take of its occurrence by its user after an expiry, what
// the user's latest record of it carried: its checkpoint, and the stage it was at with
// that stage's context. Nothing when that record did not expire (a retry copies its
// own; a take after a completion starts afresh).
func takeUp(ctx context.Context, tx *sql.Tx, d *taskd.Dispatch) (found bool, err error) {
	var state taskd.DispatchState
	var cp, context sql.NullString
	var stage string
	occ := d.Occurrence
	err = tx.QueryRowContext(ctx, `SELECT state, checkpoint, COALESCE(stage, ''), context FROM dispatch
		WHERE task_kind = ? AND task_id = ? AND due_at = ? AND uid = ? ORDER BY dispatched_at DESC, log_id DESC LIMIT 1`,
		occ.Task.Kind, occ.Task.ID, occ.DueAt, d.UID).Scan(&state, &cp, &stage, &context)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && state != taskd.StateExpired) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	d.Checkpoint = rawJSON(cp)
	if stage != "" {
		d.Stage, d.Context = stage, rawJSON(context)
	}
	return true, nil
}

// rawJSON is a nullable JSON column's value (nil for NULL).
func rawJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

// nullString is a nullable string column's value (NULL for "").
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nullJSON is a JSON value for a nullable column: NULL when absent.
func nullJSON(v json.RawMessage) any {
	if len(v) == 0 {
		return nil
	}
	return string(v)
}
