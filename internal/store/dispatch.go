package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

const dispatchColumns = `log_id, uid, task_kind, task_id, due_at, mode, attempt, max_attempts,
	retry_backoff_seconds, retry_multiplier, retry_max_seconds, lease_seconds, state, COALESCE(result, 0), template_id, params,
	dispatched_at, lease_expires_at, retry_at, finished_at, redo_count, checkpoint, COALESCE(stage, ''), context,
	COALESCE(next_stage, ''), next_context, resumed, retried_at IS NOT NULL, cancelled_at IS NOT NULL, COALESCE(rollout_phase, 0),
	judged, COALESCE(reason, ''), final, confirm_seconds, confirm_by`

// scanDispatch scans dispatchColumns, then any extra columns into extra.
func scanDispatch(row scanner, extra ...any) (*taskd.Dispatch, error) {
	var d taskd.Dispatch
	var params string
	var checkpoint, context, nextContext sql.NullString
	dest := []any{&d.LogID, &d.UID, &d.Occurrence.Task.Kind, &d.Occurrence.Task.ID, &d.Occurrence.DueAt,
		&d.Mode, &d.Attempt, &d.MaxAttempts, &d.BackoffSeconds, &d.RetryMultiplier, &d.RetryMaxSeconds, &d.LeaseSeconds, &d.State, &d.Result,
		&d.TemplateID, &params, &d.DispatchedAt, &d.LeaseExpiresAt, &d.RetryAt, &d.FinishedAt, &d.RedoCount, &checkpoint, &d.Stage, &context,
		&d.NextStage, &nextContext, &d.Resumed, &d.Retried, &d.Cancelled, &d.RolloutPhase, &d.Judged, &d.Reason, &d.Final,
		&d.ConfirmSeconds, &d.ConfirmBy}
	err := row.Scan(append(dest, extra...)...)
	if err != nil {
		return nil, err
	}
	d.Params = json.RawMessage(params)
	d.Checkpoint, d.Context, d.NextContext = rawJSON(checkpoint), rawJSON(context), rawJSON(nextContext)
	d.Occurrence.DueAt = d.Occurrence.DueAt.UTC()
	if d.ConfirmBy != nil {
		by := d.ConfirmBy.UTC()
		d.ConfirmBy = &by
	}
	return &d, nil
}

// OpenDispatch returns the dispatch holding uid's open slot 1 (a fetch without max
// uses no other), or nil.
func (s *Store) OpenDispatch(ctx context.Context, uid string) (*taskd.Dispatch, error) {
	d, err := scanDispatch(s.db.QueryRowContext(ctx,
		"SELECT "+dispatchColumns+" FROM dispatch WHERE open_uid = ? AND open_slot = 1", uid))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, mysqlErr("open dispatch", err)
	}
	return d, nil
}

// GetDispatch returns the dispatch with logID or taskd.ErrNotFound.
func (s *Store) GetDispatch(ctx context.Context, logID string) (*taskd.Dispatch, error) {
	d, err := scanDispatch(s.db.QueryRowContext(ctx,
		"SELECT "+dispatchColumns+" FROM dispatch WHERE log_id = ?", logID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, taskd.ErrNotFound
	}
	if err != nil {
		return nil, mysqlErr("get dispatch", err)
	}
	return d, nil
}

// Redo records that uid's open dispatch was handed out again. It reports false if the
// dispatch is no longer open (completed or expired meanwhile).
func (s *Store) Redo(ctx context.Context, d *taskd.Dispatch, now time.Time) (bool, error) {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			"UPDATE dispatch SET redo_count = redo_count + 1, last_redo_at = ? WHERE log_id = ? AND state = ? AND open_uid IS NOT NULL",
			now, d.LogID, taskd.StateOpen)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errAbort
		}
		d.RedoCount++
		return s.emit(ctx, tx, d, taskd.EventRedo, now)
	})
	if errors.Is(err, errAbort) {
		return false, nil
	}
	if err != nil {
		return false, mysqlErr("redo", err)
	}
	return true, nil
}

// Resume brings a waiting dispatch of uid back when its heap entry falls due: a failed
// attempt whose backoff is over becomes the next attempt (a new open record for the
// same occurrence, keeping the quota slot, with the task's current params and lease),
// and an open dispatch parked while its task was paused takes the user's open slot
// again and is handed out as a redo. It answers Claimed with the dispatch to hand out
// (redo says which kind), UserBusy when the user holds another open dispatch (the
// entry stays), NotDue when the backoff is not over (the entry stays), and Gone when
// there is nothing to resume (finished meanwhile, its task paused again or deleted).
// The dispatch takes the open slot take names (UserBusy: another dispatch holds it),
// and Filtered leaves a dispatch of a template take does not allow waiting.
func (s *Store) Resume(ctx context.Context, uid, logID string, now time.Time, take taskd.Take) (outcome taskd.ClaimOutcome, d *taskd.Dispatch, redo bool, err error) {
	var reclaim *taskd.Occurrence
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		outcome, d, redo, reclaim = taskd.Gone, nil, false, nil
		var waiting sql.NullString
		prev, err := scanDispatch(tx.QueryRowContext(ctx,
			"SELECT "+dispatchColumns+", waiting_uid FROM dispatch WHERE log_id = ? FOR UPDATE", logID), &waiting)
		if errors.Is(err, sql.ErrNoRows) {
			return errAbort
		}
		if err != nil {
			return err
		}
		if prev.UID != uid || waiting.String != uid {
			return errAbort
		}
		t, err := loadClaimTask(ctx, tx, prev.Occurrence.Task)
		if err != nil {
			return err
		}
		switch taskd.DecideResume(prev, t, take, now) {
		case taskd.ResumeUnpark:
			_, err := tx.ExecContext(ctx, "UPDATE dispatch SET waiting_uid = NULL WHERE log_id = ?", logID)
			return err
		case taskd.ResumeCancel:
			return s.cancel(ctx, tx, []*taskd.Dispatch{prev}, now)
		case taskd.ResumeFiltered:
			outcome = taskd.Filtered
		case taskd.ResumeReclaim:
			reclaim = &prev.Occurrence // claimed below, in a transaction of its own
		case taskd.ResumeNotDue:
			outcome = taskd.NotDue
		case taskd.ResumeOutsideWindow:
			outcome = taskd.OutsideWindow
		case taskd.ResumeNext:
			if _, err := tx.ExecContext(ctx,
				"UPDATE dispatch SET state = ?, waiting_uid = NULL WHERE log_id = ?", prev.Superseded(), logID); err != nil {
				return err
			}
			next := prev.NextAttempt(newLogID(now), t, take, now)
			if err := insertDispatches(ctx, tx, []*taskd.Dispatch{next}); err != nil {
				if isDuplicate(err) {
					outcome = busyOutcome(err)
					return errAbort
				}
				return err
			}
			outcome, d = taskd.Claimed, next
			return s.emit(ctx, tx, d, taskd.EventDispatch, now)
		case taskd.ResumeRedo:
			if _, err := tx.ExecContext(ctx, `UPDATE dispatch SET open_uid = uid, open_slot = ?, waiting_uid = NULL,
				redo_count = redo_count + 1, last_redo_at = ? WHERE log_id = ?`, take.OpenSlot(), now, logID); err != nil {
				if isDuplicate(err) {
					outcome = busyOutcome(err)
					return errAbort
				}
				return err
			}
			prev.RedoCount++
			prev.Slot = take.OpenSlot()
			outcome, d, redo = taskd.Claimed, prev, true
			return s.emit(ctx, tx, d, taskd.EventRedo, now)
		}
		return errAbort
	})
	if errors.Is(err, errAbort) {
		err = nil
	}
	if err != nil {
		return 0, nil, false, mysqlErr("resume "+logID, err)
	}
	if reclaim != nil {
		return s.reclaim(ctx, uid, logID, *reclaim, now, take)
	}
	if outcome != taskd.Claimed {
		d, redo = nil, false
	}
	return outcome, d, redo, nil
}

// reclaim claims again, for uid, the occurrence of its expired dispatch logID (as its
// next attempt, by the rules of any claim), then ends the record's wait whatever the
// claim came to, but for UserBusy, Holding, Filtered and RateBound (it waits on). A crash between the two leaves the
// wait, and the next resume finds the claim already made.
func (s *Store) reclaim(ctx context.Context, uid, logID string, occ taskd.Occurrence, now time.Time, take taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, bool, error) {
	outcome, d, err := s.Claim(ctx, uid, occ, now, take)
	if err != nil || outcome == taskd.UserBusy || outcome == taskd.Holding || outcome == taskd.Filtered || outcome == taskd.RateBound {
		return outcome, d, false, err
	}
	if _, err := s.db.ExecContext(ctx, "UPDATE dispatch SET waiting_uid = NULL WHERE log_id = ? AND waiting_uid = ?",
		logID, uid); err != nil {
		return 0, nil, false, mysqlErr("resume "+logID, err)
	}
	if outcome != taskd.Claimed {
		d = nil
	}
	return outcome, d, false, nil
}

// cancel ends dispatches of a deleted task: open or waiting, they are closed for good
// (a late complete gets stale_lease) with a cancel event each. Their slots stay taken:
// the task is gone.
func (s *Store) cancel(ctx context.Context, tx *sql.Tx, ds []*taskd.Dispatch, now time.Time) error {
	for _, d := range ds {
		// A record that finished before (a failed attempt or a completed stage waiting
		// for what follows) keeps its time: its complete event stays where it was.
		if _, err := tx.ExecContext(ctx, `UPDATE dispatch SET state = ?, finished_at = COALESCE(finished_at, ?),
			cancelled_at = ?, open_uid = NULL, waiting_uid = NULL WHERE log_id = ?`, taskd.StateCancelled, now, now, d.LogID); err != nil {
			return err
		}
		if d.FinishedAt == nil {
			d.FinishedAt = &now
		}
		d.State, d.Cancelled = taskd.StateCancelled, true
		if err := s.emit(ctx, tx, d, taskd.EventCancel, now); err != nil {
			return err
		}
	}
	return nil
}

// cancelTask cancels every open or waiting dispatch of a task being deleted.
func (s *Store) cancelTask(ctx context.Context, tx *sql.Tx, key taskd.TaskKey, now time.Time) error {
	ds, err := lockedDispatches(ctx, tx, "task_kind = ? AND task_id = ? AND (state IN (?, ?) OR (state = ? AND waiting_uid IS NOT NULL))",
		key.Kind, key.ID, taskd.StateOpen, taskd.StateRetryWait, taskd.StateStaged)
	if err != nil {
		return err
	}
	// Expired attempts waiting to be taken again, and dead ones waiting for an admin's
	// retry, just stop waiting.
	if _, err := tx.ExecContext(ctx, `UPDATE dispatch SET waiting_uid = NULL
		WHERE task_kind = ? AND task_id = ? AND state IN (?, ?) AND waiting_uid IS NOT NULL`,
		key.Kind, key.ID, taskd.StateExpired, taskd.StateDead); err != nil {
		return err
	}
	return s.cancel(ctx, tx, ds, now)
}

// lockedDispatches reads the records matching where (with args) for update.
func lockedDispatches(ctx context.Context, tx *sql.Tx, where string, args ...any) ([]*taskd.Dispatch, error) {
	rows, err := tx.QueryContext(ctx, "SELECT "+dispatchColumns+" FROM dispatch WHERE "+where+" FOR UPDATE", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ds []*taskd.Dispatch
	for rows.Next() {
		d, err := scanDispatch(rows)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, rows.Err()
}

// parkTask moves the open dispatches of a task being paused out of their users' open
// slots, so the users' other tasks flow; a complete still counts, and the task's resume
// hands them out again (Resume).
func parkTask(ctx context.Context, tx *sql.Tx, key taskd.TaskKey) error {
	_, err := tx.ExecContext(ctx, `UPDATE dispatch SET waiting_uid = open_uid, open_uid = NULL
		WHERE task_kind = ? AND task_id = ? AND state = ? AND open_uid IS NOT NULL`, key.Kind, key.ID, taskd.StateOpen)
	return err
}

// userState reads uid's cursor and exclude set (zero and empty for a new user).
func userState(ctx context.Context, q rowQuerier, uid string) (time.Time, []string, error) {
	var cursor time.Time
	var raw string
	err := q.QueryRowContext(ctx, "SELECT cursor_at, exclude_keys FROM user_state WHERE uid = ?", uid).
		Scan(&cursor, &raw)
	exclude := []string{}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, exclude, nil
	case err != nil:
		return time.Time{}, nil, err
	}
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &exclude); err != nil {
			return time.Time{}, nil, fmt.Errorf("user_state %s: exclude_keys: %w", uid, err)
		}
	}
	return cursor.UTC(), exclude, nil
}

// Expire expires dispatch logID if it is still open past its lease at now, returning
// its quota slot to the pool. It returns the expired record, or nil if there was
// nothing to expire.
func (s *Store) Expire(ctx context.Context, logID string, now time.Time) (*taskd.Dispatch, error) {
	var d *taskd.Dispatch
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		d, err = scanDispatch(tx.QueryRowContext(ctx,
			"SELECT "+dispatchColumns+" FROM dispatch WHERE log_id = ? FOR UPDATE", logID))
		if errors.Is(err, sql.ErrNoRows) {
			d = nil
			return errAbort
		}
		if err != nil {
			return err
		}
		if !d.LeaseExpired(now) {
			d = nil
			return errAbort
		}
		return s.expire(ctx, tx, d, now)
	})
	if errors.Is(err, errAbort) {
		return nil, nil
	}
	if err != nil {
		return nil, mysqlErr("expire", err)
	}
	return d, nil
}

// expire closes an open dispatch whose lease ran out. The expiry counts as an attempt.
// With attempts left it gives the slot back: the claim counter goes down and a
// once_per_user claim row is removed, so the occurrence can be dispatched again (to
// this user too, as its next attempt). On the last attempt the occurrence is dead for
// the user: the slot stays taken, the user's cursor moves past it, and a dead event
// follows the expire event.
func (s *Store) expire(ctx context.Context, tx *sql.Tx, d *taskd.Dispatch, now time.Time) error {
	return s.expireAs(ctx, tx, d, now, false)
}

// expireAs is expire, or with byAdmin an admin's expire: on the last attempt the
// record is expired rather than dead, and the slot goes back to the pool all the same
// (the user's cursor moves past the occurrence, and its used-up attempts keep it from
// taking it again).
func (s *Store) expireAs(ctx context.Context, tx *sql.Tx, d *taskd.Dispatch, now time.Time, byAdmin bool) error {
	state := d.ExpiryState()
	last := state == taskd.StateDead
	if byAdmin {
		state = taskd.StateExpired
	}
	dead := state == taskd.StateDead
	// With attempts left, the expired record waits beside the user's slot (waiting_uid)
	// until the user takes the occurrence again: its heap may no longer offer it (the
	// cursor moved past it while a retry waited, or it is older than the catch-up).
	if _, err := tx.ExecContext(ctx,
		"UPDATE dispatch SET state = ?, finished_at = ?, open_uid = NULL, waiting_uid = IF(?, NULL, uid) WHERE log_id = ?",
		state, now, last, d.LogID); err != nil {
		return err
	}
	d.State, d.FinishedAt = state, &now
	if dead {
		if err := advanceCursors(ctx, tx, []*taskd.Dispatch{d}); err != nil {
			return err
		}
		if err := s.emit(ctx, tx, d, taskd.EventExpire, now); err != nil {
			return err
		}
		return s.emit(ctx, tx, d, taskd.EventDead, now)
	}
	o := d.Occurrence
	var claimed, quota int
	err := tx.QueryRowContext(ctx, `SELECT c.claimed, t.dispatch_times FROM occurrence_claim c
		JOIN `+taskTable(o.Task.Kind)+` t ON t.id = c.task_id
		WHERE c.task_kind = ? AND c.task_id = ? AND c.due_at = ? FOR UPDATE`,
		o.Task.Kind, o.Task.ID, o.DueAt).Scan(&claimed, &quota)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	d.Reopened = quota != taskd.Unlimited && claimed >= quota
	if _, err := tx.ExecContext(ctx,
		"UPDATE occurrence_claim SET claimed = claimed - 1 WHERE task_kind = ? AND task_id = ? AND due_at = ? AND claimed > 0",
		o.Task.Kind, o.Task.ID, o.DueAt); err != nil {
		return err
	}
	if d.Mode == taskd.ModeOncePerUser {
		// Released, not deleted: a re-take by this user is its next attempt.
		if _, err := tx.ExecContext(ctx, `UPDATE occurrence_user SET released = 1, attempts = ?
			WHERE task_kind = ? AND task_id = ? AND due_at = ? AND uid = ?`,
			d.Attempt, o.Task.Kind, o.Task.ID, o.DueAt, d.UID); err != nil {
			return err
		}
	}
	if err := tx.QueryRowContext(ctx, "SELECT executor FROM "+taskTable(o.Task.Kind)+" WHERE id = ?",
		o.Task.ID).Scan(&d.Executor); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if last {
		// An admin's expire of the last attempt: the user is done with the occurrence.
		if err := advanceCursors(ctx, tx, []*taskd.Dispatch{d}); err != nil {
			return err
		}
	}
	return s.emit(ctx, tx, d, taskd.EventExpire, now)
}

// ExpiredLeases lists up to limit open dispatches whose lease ran out before now, of
// the users whose uid's CRC-32 modulo of is one of parts (of 0: of every user). The
// index on (state, lease_expires_at) finds the expired ones; the hash filters them.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time, limit, of int, parts []int) ([]string, error) {
	return s.swept(ctx, "expired leases", taskd.StateOpen, "lease_expires_at <= ?", now, limit, of, parts)
}

// swept lists up to limit log ids of the records in state whose deadline condition
// (a column compared with now, the column first) holds, oldest deadline first, of the
// users whose uid's CRC-32 modulo of is one of parts (of 0: of every user): what a
// sweep of its shards finds to do. op names it in errors.
func (s *Store) swept(ctx context.Context, op string, state taskd.DispatchState, deadline string, now time.Time,
	limit, of int, parts []int) ([]string, error) {
	q := "SELECT log_id FROM dispatch WHERE state = ? AND " + deadline
	args := []any{state, now}
	if of > 0 {
		if len(parts) == 0 {
			return nil, nil
		}
		q += " AND CRC32(uid) % ? IN (?" + strings.Repeat(", ?", len(parts)-1) + ")"
		args = append(args, of)
		for _, p := range parts {
			args = append(args, p)
		}
	}
	col, _, _ := strings.Cut(deadline, " ")
	rows, err := s.db.QueryContext(ctx, q+" ORDER BY "+col+" LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, mysqlErr(op, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, mysqlErr(op, err)
		}
		ids = append(ids, id)
	}
	return ids, mysqlErr(op, rows.Err())
}

// cursorBatch bounds the uids of one query of Cursors.
const cursorBatch = 1000

// Cursors returns the cursors of those of uids that have one (a user that never
// completed anything has none), for a preview: an occurrence already due is on a
// user's offer only from its cursor on.
func (s *Store) Cursors(ctx context.Context, uids []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(uids))
	for len(uids) > 0 {
		n := min(len(uids), cursorBatch)
		args := make([]any, n)
		for i, u := range uids[:n] {
			args[i] = u
		}
		uids = uids[n:]
		rows, err := s.db.QueryContext(ctx, "SELECT uid, cursor_at FROM user_state WHERE uid IN ("+marks(n)+")", args...)
		if err != nil {
			return nil, mysqlErr("cursors", err)
		}
		for rows.Next() {
			var uid string
			var at time.Time
			if err := rows.Scan(&uid, &at); err != nil {
				rows.Close()
				return nil, mysqlErr("cursors", err)
			}
			out[uid] = at.UTC()
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, mysqlErr("cursors", err)
		}
	}
	return out, nil
}
