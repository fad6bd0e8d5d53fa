package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/taskpull/taskd"
)

// A rollout's declaration is its task's (column rollout, JSON); its state one row of
// task_rollout, read in share mode by the task's claims (loadClaimTargets) and locked
// by every move, so a phase's cap is exact across nodes. A snapshot rollout keeps the
// group's members at its start in rollout_member. Every move, the server's and an
// admin's, runs in a transaction holding the row: taskd.Rollout.Step and Move decide,
// this file writes.

// rolloutArg is a task's rollout as its column holds it (NULL: none).
func rolloutArg(r *taskd.Rollout) (any, error) {
	if r == nil {
		return nil, nil
	}
	b, err := json.Marshal(r)
	return string(b), err
}

// parseRollout reads a task's rollout column.
func parseRollout(col sql.NullString) (*taskd.Rollout, error) {
	if !col.Valid {
		return nil, nil
	}
	var r taskd.Rollout
	if err := json.Unmarshal([]byte(col.String), &r); err != nil {
		return nil, fmt.Errorf("task rollout: %w", err)
	}
	return &r, nil
}

// syncRollout brings task t's rollout state in line with its declaration after a
// create or an edit (before is the declaration the task had; nil: none): a new rollout
// starts at its first phase (a snapshot one keeps the group's members now); a removed
// one goes; an edited one keeps where it is (its phase no further than its last).
func syncRollout(ctx context.Context, tx *sql.Tx, before *taskd.Rollout, t taskd.Task, now time.Time) error {
	k := t.Key
	switch {
	case t.Rollout == nil && before == nil:
		return nil
	case t.Rollout == nil:
		if _, err := tx.ExecContext(ctx, "DELETE FROM task_rollout WHERE task_kind = ? AND task_id = ?", k.Kind, k.ID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "DELETE FROM rollout_member WHERE task_kind = ? AND task_id = ?", k.Kind, k.ID)
		return err
	case before == nil:
		st := taskd.StartRollout(now)
		if _, err := tx.ExecContext(ctx, `INSERT INTO task_rollout (task_kind, task_id, state, phase, phase_started_at,
			started_at, updated_at) VALUES (?, ?, ?, 0, ?, ?, ?)`, k.Kind, k.ID, st.State, now, now, now); err != nil {
			return err
		}
		if t.Rollout.Targeting == taskd.TargetingSnapshot {
			return snapshotMembers(ctx, tx, t)
		}
		return nil
	}
	if before.Targeting != taskd.TargetingSnapshot && t.Rollout.Targeting == taskd.TargetingSnapshot {
		if err := snapshotMembers(ctx, tx, t); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, "UPDATE task_rollout SET phase = LEAST(phase, ?), updated_at = ? WHERE task_kind = ? AND task_id = ?",
		len(t.Rollout.Phases)-1, now, k.Kind, k.ID)
	return err
}

// snapshotMembers keeps the members of t's group now as its rollout's audience.
func snapshotMembers(ctx context.Context, tx *sql.Tx, t taskd.Task) error {
	e, err := taskd.ParseExecutor(t.Executor)
	if err != nil || !e.Group {
		return err
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM rollout_member WHERE task_kind = ? AND task_id = ?", t.Key.Kind, t.Key.ID); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO rollout_member (task_kind, task_id, uid)
		SELECT ?, ?, uid FROM group_member WHERE gid = ? LOCK IN SHARE MODE`, t.Key.Kind, t.Key.ID, e.ID)
	return err
}

// lockedRollout reads task key's rollout, its state row locked for update; not_found
// when the task has none.
func lockedRollout(ctx context.Context, tx *sql.Tx, key taskd.TaskKey, now time.Time) (taskd.RolloutView, taskd.Task, error) {
	return readRollout(ctx, tx, key, now, " FOR UPDATE")
}

// readRollout reads task key's rollout with lock (" FOR UPDATE", or "" for a read
// that locks nothing): its state, its declaration and its current phase's figures at
// now; not_found when the task has none.
func readRollout(ctx context.Context, tx *sql.Tx, key taskd.TaskKey, now time.Time, lock string) (taskd.RolloutView, taskd.Task, error) {
	var v taskd.RolloutView
	var bake sql.NullTime
	var state string
	var history sql.NullString
	err := tx.QueryRowContext(ctx, `SELECT state, phase, phase_started_at, bake_until, gate_failed, history, version FROM task_rollout
		WHERE task_kind = ? AND task_id = ?`+lock, key.Kind, key.ID).
		Scan(&state, &v.Status.Phase, &v.Status.PhaseStartedAt, &bake, &v.Status.GateFailed, &history, &v.Moves)
	if errors.Is(err, sql.ErrNoRows) {
		return v, taskd.Task{}, taskd.Errorf(taskd.CodeNotFound, "task %s has no rollout", key)
	}
	if err != nil {
		return v, taskd.Task{}, err
	}
	v.Status.State = taskd.RolloutState(state)
	v.History = []taskd.RolloutMoveRecord{}
	if history.Valid {
		if err := json.Unmarshal([]byte(history.String), &v.History); err != nil {
			return v, taskd.Task{}, fmt.Errorf("rollout history: %w", err)
		}
	}
	v.Status.PhaseStartedAt = v.Status.PhaseStartedAt.UTC()
	if bake.Valid {
		at := bake.Time.UTC()
		v.Status.BakeUntil = &at
	}
	t, err := getTask(ctx, tx, key)
	if err != nil {
		return v, t, err
	}
	if t.Rollout == nil {
		return v, t, taskd.Errorf(taskd.CodeNotFound, "task %s has no rollout", key)
	}
	v.TaskID, v.Rollout, v.Quota, v.TaskVersion = key.String(), t.Rollout.WithWindows(t.Windows), t.DispatchTimes, t.Version
	v.Cap = v.Rollout.Cap(v.Status, v.Quota)
	if v.Figures, err = phaseFigures(ctx, tx, key, v.Status.PhaseNumber(), now); err != nil {
		return v, t, err
	}
	// The occurrence the cap bounds now: a once task's, or the latest due of a
	// rotating one's.
	err = tx.QueryRowContext(ctx, `SELECT claimed FROM occurrence_claim WHERE task_kind = ? AND task_id = ?
		ORDER BY due_at DESC LIMIT 1`, key.Kind, key.ID).Scan(&v.Claimed)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	return v, t, err
}

// phaseFigures counts the dispatches of task key claimed in phase (1-based): claimed
// (those not resumed from a waiting one), and those finished by now: successes (done
// with success) and failures (a failed attempt, waiting for its retry, retried or dead;
// an expired one; one that died expiring). Open ones, waiting ones that did not fail,
// and cancelled ones are not finished; successes waiting for their confirmation are
// counted apart (unconfirmed, no result yet): a success once confirmed, a failure once
// lapsed, each at that time. "By now" makes a move's figures the records
// finished by its time, as an outside check counts them (a complete whose time is
// later, committed before this read, waits for the next step).
func phaseFigures(ctx context.Context, q rowQuerier, key taskd.TaskKey, phase int, now time.Time) (taskd.PhaseFigures, error) {
	var f taskd.PhaseFigures
	err := q.QueryRowContext(ctx, `SELECT COALESCE(SUM(NOT resumed), 0),
		COALESCE(SUM(cancelled_at IS NULL AND finished_at <= ? AND state = ? AND result = ?), 0),
		COALESCE(SUM(cancelled_at IS NULL AND finished_at <= ? AND (result = ? OR state = ? OR (state = ? AND result IS NULL))), 0),
		COALESCE(SUM(state = ?), 0)
		FROM dispatch WHERE task_kind = ? AND task_id = ? AND rollout_phase = ?`,
		now, taskd.StateDone, taskd.ResultSuccess, now, taskd.ResultFailure, taskd.StateExpired, taskd.StateDead,
		taskd.StateUnconfirmed, key.Kind, key.ID, phase).Scan(&f.Claimed, &f.Succeeded, &f.Failed, &f.Unconfirmed)
	f.Finished = f.Succeeded + f.Failed
	return f, err
}

// TaskRollout returns task key's rollout at now, after the server's move due by now
// (a gate decided, a bake over), so that what it shows is what holds.
func (s *Store) TaskRollout(ctx context.Context, key taskd.TaskKey, now time.Time) (taskd.RolloutView, error) {
	var v taskd.RolloutView
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		v, _, err = s.stepRollout(ctx, tx, key, now)
		return err
	})
	return v, mysqlErr("rollout "+key.String(), err)
}

// stepRollout makes the server's move of task key's rollout due at now, holding its
// row, and returns the rollout after it and whether it moved. Whether a move is due is
// read first without a lock (most steps find none, and every node steps every rollout
// each second: they must not hold the row the task's claims read); a move due is
// decided again on the row locked.
func (s *Store) stepRollout(ctx context.Context, tx *sql.Tx, key taskd.TaskKey, now time.Time) (taskd.RolloutView, bool, error) {
	v, _, err := readRollout(ctx, tx, key, now, "")
	if err != nil {
		return v, false, err
	}
	if c := v.Rollout.Step(v.Status, v.Figures, now); c.Event == "" {
		return v, false, nil
	}
	v, t, err := lockedRollout(ctx, tx, key, now)
	if err != nil {
		return v, false, err
	}
	c := v.Rollout.Step(v.Status, v.Figures, now)
	if c.Event == "" {
		return v, false, nil
	}
	v, err = s.applyRollout(ctx, tx, v, t, c, "", now)
	return v, true, err
}

// MoveRollout applies an admin's move to task key's rollout at now (audited), at a
// version ifMatch matches (precondition_failed otherwise).
func (s *Store) MoveRollout(ctx context.Context, actor string, key taskd.TaskKey, move taskd.RolloutMove, ifMatch taskd.IfMatch, now time.Time) (taskd.RolloutView, error) {
	var v taskd.RolloutView
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if _, _, err = s.stepRollout(ctx, tx, key, now); err != nil {
			return err
		}
		var t taskd.Task
		if v, t, err = lockedRollout(ctx, tx, key, now); err != nil {
			return err
		}
		// Checked after the server's own move due now: a rollout that moved by itself
		// since the admin read it is not the one the move was meant for.
		if err := ifMatch.Check("rollout of task "+key.String(), v.Version()); err != nil {
			return err
		}
		c, err := v.Rollout.Move(v.Status, move, now)
		if err != nil {
			return err
		}
		before := v.Status
		if v, err = s.applyRollout(ctx, tx, v, t, c, actor, now); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "task.rollout."+string(move), key.String(), before, v.Status, now)
	})
	return v, mysqlErr("rollout "+key.String(), err)
}

// applyRollout writes change c of rollout v (of task t) at now: the state row, with
// the history the change leaves (taskd.RolloutChange.AppendHistory), and the event; an
// abort pauses the task (its open dispatches kept parked beside their users' slots, or
// cancelled, as the rollout says). actor is the admin's ("" for the server's own moves).
func (s *Store) applyRollout(ctx context.Context, tx *sql.Tx, v taskd.RolloutView, t taskd.Task, c taskd.RolloutChange, actor string, now time.Time) (taskd.RolloutView, error) {
	k := t.Key
	to := c.To
	v.History = c.AppendHistory(v.History, v.Figures, actor, now)
	history, err := json.Marshal(v.History)
	if err != nil {
		return v, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE task_rollout SET state = ?, phase = ?, phase_started_at = ?, bake_until = ?,
		gate_failed = ?, updated_at = ?, history = ?, version = version + 1 WHERE task_kind = ? AND task_id = ?`,
		to.State, to.Phase, to.PhaseStartedAt, to.BakeUntil, to.GateFailed, now, string(history), k.Kind, k.ID); err != nil {
		return v, err
	}
	if to.State == taskd.RolloutAborted && t.Status == taskd.StatusActive {
		if _, err := tx.ExecContext(ctx, "UPDATE "+taskTable(k.Kind)+" SET status = ?, updated_at = ?, version = version + 1 WHERE id = ?",
			taskd.StatusPaused, now, k.ID); err != nil {
			return v, err
		}
		v.TaskVersion++
		if v.Rollout.OnAbort == taskd.OnAbortCancel {
			if err := s.cancelOpen(ctx, tx, k, now); err != nil {
				return v, err
			}
		}
		if err := parkTask(ctx, tx, k); err != nil {
			return v, err
		}
	}
	figures := v.Figures
	v.Status = to
	v.Moves++
	v.Cap = v.Rollout.Cap(to, v.Quota)
	if to.Phase != c.From.Phase {
		var err error
		if v.Figures, err = phaseFigures(ctx, tx, k, to.PhaseNumber(), now); err != nil {
			return v, err
		}
	}
	if !s.events.Outbox {
		return v, nil
	}
	return v, appendOutboxTx(ctx, tx, []taskd.Event{{
		EventID: taskd.RolloutEventID(k, c.Event, now),
		Type:    c.Event,
		TaskID:  k.String(),
		Kind:    k.Kind.String(),
		Node:    s.events.Node,
		At:      now,
		RolloutEvent: &taskd.RolloutEvent{FromState: string(c.From.State), State: string(to.State), Phase: to.PhaseNumber(),
			Cap: v.Cap, PhaseFigures: figures, Actor: actor},
	}})
}

// cancelOpen cancels task k's open dispatches (an abort that cancels them): ended for
// good, a late complete gets stale_lease.
func (s *Store) cancelOpen(ctx context.Context, tx *sql.Tx, k taskd.TaskKey, now time.Time) error {
	ds, err := lockedDispatches(ctx, tx, "task_kind = ? AND task_id = ? AND state = ?", k.Kind, k.ID, taskd.StateOpen)
	if err != nil {
		return err
	}
	return s.cancel(ctx, tx, ds, now)
}

// StepRollouts makes the server's moves due at now of every running or baking
// rollout, each in a transaction of its own, and returns the rollouts that moved, as
// they are after. Every node may run it: a move holds the rollout's row, and decides on
// what it reads there.
func (s *Store) StepRollouts(ctx context.Context, now time.Time) ([]taskd.RolloutView, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT task_kind, task_id FROM task_rollout WHERE state IN (?, ?)",
		taskd.RolloutRunning, taskd.RolloutBaking)
	if err != nil {
		return nil, mysqlErr("step rollouts", err)
	}
	var keys []taskd.TaskKey
	for rows.Next() {
		var k taskd.TaskKey
		if err := rows.Scan(&k.Kind, &k.ID); err != nil {
			rows.Close()
			return nil, mysqlErr("step rollouts", err)
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, mysqlErr("step rollouts", err)
	}
	var moved []taskd.RolloutView
	for _, k := range keys {
		var v taskd.RolloutView
		var stepped bool
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			var err error
			v, stepped, err = s.stepRollout(ctx, tx, k, now)
			return err
		})
		if taskd.ErrorCode(err) == taskd.CodeNotFound {
			continue // the task was deleted, or its rollout removed, meanwhile
		}
		if err != nil {
			return moved, mysqlErr("step rollout "+k.String(), err)
		}
		if stepped {
			moved = append(moved, v)
		}
	}
	return moved, nil
}

// ActiveRollouts lists the rollouts that are not completed nor aborted, for the
// dashboard: the task, its state and phase (1-based).
func (s *Store) ActiveRollouts(ctx context.Context) ([]taskd.RolloutSummary, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT task_kind, task_id, state, phase FROM task_rollout
		WHERE state NOT IN (?, ?) ORDER BY updated_at DESC LIMIT 100`, taskd.RolloutCompleted, taskd.RolloutAborted)
	if err != nil {
		return nil, mysqlErr("rollouts", err)
	}
	defer rows.Close()
	out := []taskd.RolloutSummary{}
	for rows.Next() {
		var k taskd.TaskKey
		var st taskd.RolloutStatus
		if err := rows.Scan(&k.Kind, &k.ID, &st.State, &st.Phase); err != nil {
			return nil, mysqlErr("rollouts", err)
		}
		out = append(out, taskd.RolloutSummary{TaskID: k.String(), State: st.State, Phase: st.PhaseNumber()})
	}
	return out, mysqlErr("rollouts", rows.Err())
}
