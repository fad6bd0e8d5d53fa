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

// lastCheckpoint is the checkpoint a re-take of occ by uid starts with: that of the
// user's latest record of the occurrence, if it expired (nil otherwise: a retry copies
// its own, and a take after a completion starts afresh).
func lastCheckpoint(ctx context.Context, tx *sql.Tx, occ taskd.Occurrence, uid string) (json.RawMessage, error) {
	var state taskd.DispatchState
	var cp sql.NullString
	err := tx.QueryRowContext(ctx, `SELECT state, checkpoint FROM dispatch
		WHERE task_kind = ? AND task_id = ? AND due_at = ? AND uid = ? ORDER BY dispatched_at DESC LIMIT 1`,
		occ.Task.Kind, occ.Task.ID, occ.DueAt, uid).Scan(&state, &cp)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && (state != taskd.StateExpired || !cp.Valid)) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return json.RawMessage(cp.String), nil
}

// nullJSON is a JSON value for a nullable column: NULL when absent.
func nullJSON(v json.RawMessage) any {
	if len(v) == 0 {
		return nil
	}
	return string(v)
}
