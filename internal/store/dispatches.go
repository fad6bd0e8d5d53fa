package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// The dispatch lists (an agent's own records, an admin's view of any) and an admin's
// interventions on one record: expire an open dispatch now, retry a dead occurrence,
// cancel a dispatch for good. Each intervention is audited in its own transaction and
// emits its events as the lifecycle's own changes do.

// recordColumns are what a list shows of a record, as scanRecord scans them.
const recordColumns = `log_id, uid, task_kind, task_id, due_at, attempt, state, result,
	detail, checkpoint, stage, dispatched_at, lease_expires_at, retry_at, finished_at, retried_at, cancelled_at,
	resumed, rollout_phase, COALESCE(reason, ''), final, confirm_by`

// scanRecord scans recordColumns.
func scanRecord(row scanner) (taskd.DispatchRecord, error) {
	var r taskd.DispatchRecord
	var k taskd.TaskKey
	var state taskd.DispatchState
	var result sql.NullInt64
	var detail, checkpoint, stage sql.NullString
	if err := row.Scan(&r.LogID, &r.UID, &k.Kind, &k.ID, &r.DueAt, &r.Attempt, &state, &result, &detail, &checkpoint,
		&stage, &r.DispatchedAt, &r.LeaseExpiresAt, &r.RetryAt, &r.FinishedAt, &r.RetriedAt, &r.CancelledAt,
		&r.Resumed, &r.RolloutPhase, &r.Reason, &r.Final, &r.ConfirmBy); err != nil {
		return r, err
	}
	r.TaskID, r.State = k.String(), taskd.DispatchStateName(state)
	r.DueAt, r.DispatchedAt = r.DueAt.UTC(), r.DispatchedAt.UTC()
	for _, t := range []*time.Time{r.LeaseExpiresAt, r.RetryAt, r.FinishedAt, r.RetriedAt, r.CancelledAt, r.ConfirmBy} {
		if t != nil {
			*t = t.UTC()
		}
	}
	if result.Valid {
		res := taskd.Result(result.Int64).String()
		r.Result = &res
	}
	r.Detail, r.Checkpoint = rawJSON(detail), rawJSON(checkpoint)
	if stage.Valid {
		r.Stage = &stage.String
	}
	return r, nil
}

// dispatchList is the query of a page of records matching f, newest first, after the
// cursor after (nil: the first page).
//
// The page is a walk down one key from its newest entry, never a sort: a log id
// carries its record's dispatch time (logid.go), so the primary key's order is the
// page's order, and a user's records go by idx_uid, which is (uid, log_id). The cursor
// and the time range are ranges of ids (the range exact on dispatched_at too). The
// query names the key (FORCE INDEX), lest the optimizer take a scan and a sort for a
// small table or a wide range. A task's or a state's records are found on the walk, so
// a page of a rare state reads the records newer than its last one.
func dispatchList(f taskd.DispatchFilter, after *taskd.DispatchCursor, limit int) (string, []any) {
	key := "PRIMARY"
	var where []string
	var args []any
	if f.UID != "" {
		key, where, args = "idx_uid", append(where, "uid = ?"), append(args, f.UID)
	}
	if f.Task.Kind != 0 {
		where = append(where, "task_kind = ? AND task_id = ?")
		args = append(args, f.Task.Kind, f.Task.ID)
	}
	if f.State != 0 {
		where, args = append(where, "state = ?"), append(args, f.State)
	}
	if !f.From.IsZero() {
		where = append(where, "log_id >= ? AND dispatched_at >= ?")
		args = append(args, logIDFloor(f.From), f.From)
	}
	if !f.To.IsZero() {
		where = append(where, "log_id <= ? AND dispatched_at < ?")
		args = append(args, logIDCeiling(f.To), f.To)
	}
	if after != nil {
		where, args = append(where, "log_id < ?"), append(args, after.LogID)
	}
	q := "SELECT " + recordColumns + " FROM dispatch FORCE INDEX (" + key + ")"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q + " ORDER BY log_id DESC LIMIT ?", append(args, limit)
}

// ListDispatches returns up to limit records matching f, newest first (by log id, which
// is by dispatched_at and then the id), after the cursor after (nil: from the newest).
func (s *Store) ListDispatches(ctx context.Context, f taskd.DispatchFilter, after *taskd.DispatchCursor, limit int) ([]taskd.DispatchRecord, error) {
	q, args := dispatchList(f, after, limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mysqlErr("list dispatches", err)
	}
	defer rows.Close()
	out := []taskd.DispatchRecord{}
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, mysqlErr("list dispatches", err)
		}
		out = append(out, r)
	}
	return out, mysqlErr("list dispatches", rows.Err())
}

// readRecord reads logID's record as the lists show it.
func readRecord(ctx context.Context, q rowQuerier, logID string) (taskd.DispatchRecord, error) {
	return scanRecord(q.QueryRowContext(ctx, "SELECT "+recordColumns+" FROM dispatch WHERE log_id = ?", logID))
}

// An intervention's audit entry: action "dispatch.<action>", target "dispatch:<log_id>".
const (
	auditActionPrefix = "dispatch."
	auditTargetPrefix = "dispatch:"
)

// lockedRecord is a record an intervention holds locked.
type lockedRecord struct {
	d       *taskd.Dispatch
	view    taskd.DispatchRecord // as the lists show it, before the change
	waiting bool                 // it waits beside its user's open slot (waiting_uid)
}

// intervene runs an admin's change to record logID in one transaction with its audit
// entry (the record before and after): change acts on the locked record, or refuses
// with a conflict. Not found for an unknown log id.
func (s *Store) intervene(ctx context.Context, actor, action, logID string, now time.Time,
	change func(tx *sql.Tx, r *lockedRecord, c *taskd.DispatchChange) error) (taskd.DispatchChange, error) {
	var c taskd.DispatchChange
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		c = taskd.DispatchChange{}
		var waiting sql.NullString
		d, err := scanDispatch(tx.QueryRowContext(ctx,
			"SELECT "+dispatchColumns+", waiting_uid FROM dispatch WHERE log_id = ? FOR UPDATE", logID), &waiting)
		if errors.Is(err, sql.ErrNoRows) {
			return taskd.Errorf(taskd.CodeNotFound, "dispatch %s not found", logID)
		}
		if err != nil {
			return err
		}
		r := &lockedRecord{d: d, waiting: waiting.Valid}
		if r.view, err = readRecord(ctx, tx, logID); err != nil {
			return err
		}
		c.WasOpen = d.State == taskd.StateOpen
		if err := change(tx, r, &c); err != nil {
			return err
		}
		// The admin service invalidates the user's heap after the commit, and, when the
		// change gave a slot back to a group task's exhausted occurrence, the group's.
		targets := []string{taskd.UserExecutor(d.UID)}
		if e, err := taskd.ParseExecutor(c.Executor); err == nil && e.Group && c.Reopened {
			targets = append(targets, e.String())
		}
		if err := noteHeapChanges(ctx, tx, now, targets...); err != nil {
			return err
		}
		if c.Record, err = readRecord(ctx, tx, logID); err != nil {
			return err
		}
		return audit(ctx, tx, actor, auditActionPrefix+action, auditTargetPrefix+logID, r.view, c.Record, now)
	})
	return c, mysqlErr(action+" dispatch", err)
}

// ExpireDispatch ends open dispatch logID at now as if its lease ran out then, and
// gives its quota slot back to the pool: the expiry counts as an attempt, and while the
// user has attempts left it takes the occurrence again later as its next attempt. On
// the last attempt the record is expired, not dead as a lease running out would leave
// it: the slot goes back all the same (another target may take it) and the user's
// cursor moves past the occurrence. Conflict for a record that is not open.
func (s *Store) ExpireDispatch(ctx context.Context, actor, logID string, now time.Time) (taskd.DispatchChange, error) {
	return s.intervene(ctx, actor, "expire", logID, now, func(tx *sql.Tx, r *lockedRecord, c *taskd.DispatchChange) error {
		if r.d.State != taskd.StateOpen {
			return taskd.Errorf(taskd.CodeConflict, "dispatch %s is %s, not open", logID, r.view.State)
		}
		if err := s.expireAs(ctx, tx, r.d, now, true); err != nil {
			return err
		}
		c.Executor, c.Reopened = r.d.Executor, r.d.Reopened
		return nil
	})
}

// RetryDispatch sends dead record logID's occurrence back to its user with its
// attempts counted afresh: the record stays dead (its history stands) and is marked
// retried; it waits beside the user's open slot, due now, and the user's next fetch
// (once the heap is rebuilt) dispatches the occurrence as attempt 1, a new record with
// the dead one's checkpoint, stage and context. The quota slot the dead record kept
// stays the user's. A retry event follows.
//
// Only a dead record, and only once (its next attempt may die too: retry that one). A
// failed attempt with attempts left is retried anyway, after its backoff: the
// conflict says so, and names the occurrence's dead last attempt when there is one. A
// record of a deleted task is a conflict too; one of a paused task waits for the
// task's resume.
func (s *Store) RetryDispatch(ctx context.Context, actor, logID string, now time.Time) (taskd.DispatchChange, error) {
	return s.intervene(ctx, actor, "retry", logID, now, func(tx *sql.Tx, r *lockedRecord, c *taskd.DispatchChange) error {
		d := r.d
		switch {
		case d.State != taskd.StateDead:
			return notDead(ctx, tx, r)
		case d.Retried:
			return taskd.Errorf(taskd.CodeConflict, "dispatch %s was retried already", logID)
		case d.Cancelled:
			return taskd.Errorf(taskd.CodeConflict, "dispatch %s was cancelled", logID)
		}
		t, err := loadClaimTask(ctx, tx, d.Occurrence.Task)
		if err != nil {
			return err
		}
		if t == nil || t.Status == taskd.StatusDeleted {
			return taskd.Errorf(taskd.CodeConflict, "dispatch %s: task %s is deleted", logID, d.Occurrence.Task)
		}
		// Due at once: on a whole second, so that the heap (which keeps whole seconds)
		// offers it now rather than at the next second.
		if _, err := tx.ExecContext(ctx, `UPDATE dispatch SET retried_at = ?, retry_at = ?, waiting_uid = uid
			WHERE log_id = ?`, now, now.Truncate(time.Second), logID); err != nil {
			return err
		}
		return s.emit(ctx, tx, d, taskd.EventRetry, now)
	})
}

// notDead is the conflict of a retry of a record that is not dead; when a later
// attempt of the same occurrence by the same user is dead, it names that one.
func notDead(ctx context.Context, tx *sql.Tx, r *lockedRecord) error {
	d := r.d
	var last string
	var state taskd.DispatchState
	err := tx.QueryRowContext(ctx, `SELECT log_id, state FROM dispatch
		WHERE task_kind = ? AND task_id = ? AND due_at = ? AND uid = ? ORDER BY dispatched_at DESC, log_id DESC LIMIT 1`,
		d.Occurrence.Task.Kind, d.Occurrence.Task.ID, d.Occurrence.DueAt, d.UID).Scan(&last, &state)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if err == nil && state == taskd.StateDead && last != d.LogID {
		return taskd.Errorf(taskd.CodeConflict, "dispatch %s is %s, not dead; the last attempt of its occurrence by user %s, %s, is dead: retry that one",
			d.LogID, r.view.State, d.UID, last)
	}
	if d.State == taskd.StateRetryWait {
		return taskd.Errorf(taskd.CodeConflict, "dispatch %s failed with attempts left: its retry comes after its backoff; only a dead dispatch can be retried", d.LogID)
	}
	return taskd.Errorf(taskd.CodeConflict, "dispatch %s is %s: only a dead dispatch can be retried", d.LogID, r.view.State)
}

// CancelDispatch ends record logID for good: an open dispatch (holding its user's slot
// or parked), a failed attempt waiting for its retry, or a completed stage waiting for
// the next is cancelled (a late complete gets stale_lease) and keeps its quota slot
// taken; an expired attempt waiting to be taken again (its slot went back to the pool
// at the expiry), or a dead one waiting for an admin's retry, stops waiting and keeps
// its state. Each is marked cancelled, and a cancel event follows. The occurrence
// leaves the user's offer for good, in MySQL and not only in the cache: the user's
// cursor moves up to it and its key joins the exclude set, a once_per_user hold is
// taken back, and an until_exhausted claim reads the mark. Conflict for a record that
// has ended.
func (s *Store) CancelDispatch(ctx context.Context, actor, logID string, now time.Time) (taskd.DispatchChange, error) {
	return s.intervene(ctx, actor, "cancel", logID, now, func(tx *sql.Tx, r *lockedRecord, c *taskd.DispatchChange) error {
		d := r.d
		switch {
		case d.State == taskd.StateOpen, d.State == taskd.StateRetryWait, d.State == taskd.StateStaged && r.waiting:
			if err := s.cancel(ctx, tx, []*taskd.Dispatch{d}, now); err != nil {
				return err
			}
		case (d.State == taskd.StateExpired || d.State == taskd.StateDead) && r.waiting:
			if _, err := tx.ExecContext(ctx, "UPDATE dispatch SET waiting_uid = NULL, cancelled_at = ? WHERE log_id = ?",
				now, logID); err != nil {
				return err
			}
			o := d.Occurrence
			if _, err := tx.ExecContext(ctx, `UPDATE occurrence_user SET released = 0
				WHERE task_kind = ? AND task_id = ? AND due_at = ? AND uid = ?`, o.Task.Kind, o.Task.ID, o.DueAt, d.UID); err != nil {
				return err
			}
			if err := s.emit(ctx, tx, d, taskd.EventCancel, now); err != nil {
				return err
			}
		default:
			return taskd.Errorf(taskd.CodeConflict, "dispatch %s is %s: it has ended", logID, r.view.State)
		}
		return endForUser(ctx, tx, d, now)
	})
}

// endForUser takes d's occurrence out of its user's offer for good: the user's cursor
// moves up to its due time (never back) and its key joins the exclude set, as a
// once_per_user completion does, whatever the task's mode (an until_exhausted
// occurrence would otherwise stay on offer to the user while its quota lasts).
func endForUser(ctx context.Context, tx *sql.Tx, d *taskd.Dispatch, now time.Time) error {
	end := *d
	end.Mode, end.FinishedAt = taskd.ModeOncePerUser, &now
	return advanceCursors(ctx, tx, []*taskd.Dispatch{&end})
}
