package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// Tasks: once and rotate tasks, a table each (taskTable), written by admins and read
// by id; the claim path reads them locked through loadClaimTargets.

func taskTable(k taskd.Kind) string {
	if k == taskd.KindRotate {
		return "task_rotate"
	}
	return "task_once"
}

// CreateTask stores t (its Key.Kind says which table) and returns it with its id. The
// template must be live.
func (s *Store) CreateTask(ctx context.Context, actor string, t taskd.Task, now time.Time) (taskd.Task, error) {
	t.CreatedAt, t.UpdatedAt = now, now
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := templateLive(ctx, tx, t.TemplateID); err != nil {
			return err
		}
		s.between(ctx, "task.create")
		rollout, err := rolloutArg(t.Rollout)
		if err != nil {
			return err
		}
		cols := "executor, start_time, template_id, params, dispatch_times, mode, priority, status, " +
			strings.Join(settingsNames, ", ") + ", created_at, updated_at, rollout, windows"
		args := append([]any{t.Executor, t.StartTime, t.TemplateID, string(t.Params), t.DispatchTimes, t.Mode,
			t.Priority, t.Status}, settingsArgs(t.Own)...)
		args = append(args, now, now, rollout, windowsArg(t.OwnWindows))
		if t.Key.Kind == taskd.KindRotate {
			cols += ", space_minutes, end_time, cron, time_zone, misfire"
			args = append(args, t.SpaceMinutes, t.EndTime, nullString(t.Cron), nullString(t.TimeZone), max(t.Misfire, taskd.MisfireCatchUp))
		}
		res, err := tx.ExecContext(ctx, "INSERT INTO "+taskTable(t.Key.Kind)+" ("+cols+") VALUES ("+marks(len(args))+")", args...)
		if err != nil {
			return err
		}
		if t.Key.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		if err := syncRollout(ctx, tx, nil, t, now); err != nil {
			return err
		}
		if t, err = getTask(ctx, tx, t.Key); err != nil {
			return err
		}
		if err := noteHeapChanges(ctx, tx, now, t.Executor); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "task.create", t.Key.String(), nil, taskAudit(t), now)
	})
	return t, mysqlErr("create task", err)
}

// templateLive refuses a template that is not live, and share-locks its row to the end
// of the transaction, so that a concurrent delete of the template waits for the task
// written with it and then sees it (and refuses). Claims lock a task's row, then its
// template's; edits of a task do the same, and a template's delete locks its row alone
// (it counts the tasks without locking), so no order of them closes a cycle.
func templateLive(ctx context.Context, tx *sql.Tx, id int64) error {
	q := "SELECT 1 FROM task_params_template WHERE id = ? AND status = 1 LOCK IN SHARE MODE"
	var one int
	err := tx.QueryRowContext(ctx, q, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return taskd.Errorf(taskd.CodeInvalid, "template_id: template %d does not exist", id)
	}
	return err
}

// taskColumns are a task's columns (alias t) and its template's settings (alias p).
var taskColumns = `t.id, t.executor, t.start_time, t.template_id, t.params, t.dispatch_times, t.mode, t.priority,
	t.status, t.created_at, t.updated_at, t.version, t.rollout, t.windows, p.windows, ` + settingsCols("t") + ", " + settingsCols("p")

// scanTask scans selectTask's columns; the effective settings are resolved from the
// task's own and its template's.
func scanTask(row scanner, kind taskd.Kind) (taskd.Task, error) {
	t := taskd.Task{Key: taskd.TaskKey{Kind: kind}}
	var params string
	var space sql.NullInt64
	var end sql.NullTime
	var cron, zone sql.NullString
	var tpl taskd.Settings
	var rollout, own, inherited sql.NullString
	dest := []any{&t.Key.ID, &t.Executor, &t.StartTime, &t.TemplateID, &params, &t.DispatchTimes, &t.Mode,
		&t.Priority, &t.Status, &t.CreatedAt, &t.UpdatedAt, &t.Version, &rollout, &own, &inherited}
	dest = append(append(dest, settingsDest(&t.Own)...), settingsDest(&tpl)...)
	if kind == taskd.KindRotate {
		dest = append(dest, &space, &end, &cron, &zone, &t.Misfire)
	}
	if err := row.Scan(dest...); err != nil {
		return t, err
	}
	var err error
	if t.Rollout, err = parseRollout(rollout); err != nil {
		return t, err
	}
	t.Effective, t.Inherited = taskd.Resolve(t.Own.WithRollout(t.Rollout), tpl)
	if t.OwnWindows, err = taskd.ParseWindows(own.String); err != nil {
		return t, err
	}
	t.Windows = t.OwnWindows
	if !own.Valid {
		if t.Windows, err = taskd.ParseWindows(inherited.String); err != nil {
			return t, err
		}
		if len(t.Windows) > 0 {
			t.Inherited = append(t.Inherited, "windows")
		}
	}
	t.Params = json.RawMessage(params)
	t.StartTime = t.StartTime.UTC()
	t.SpaceMinutes = int(space.Int64)
	t.Cron, t.TimeZone = cron.String, zone.String
	if end.Valid {
		e := end.Time.UTC()
		t.EndTime = &e
	}
	return t, nil
}

// selectTask reads tasks of kind k (alias t) with their template's settings (alias p).
func selectTask(k taskd.Kind) string {
	cols := taskColumns
	if k == taskd.KindRotate {
		cols += ", t.space_minutes, t.end_time, t.cron, t.time_zone, t.misfire"
	}
	return "SELECT " + cols + " FROM " + taskTable(k) + " t LEFT JOIN task_params_template p ON p.id = t.template_id"
}

// GetTask returns a task that is not deleted, or not_found.
func (s *Store) GetTask(ctx context.Context, key taskd.TaskKey) (taskd.Task, error) {
	t, err := getTask(ctx, s.db, key)
	return t, mysqlErr("get task", err)
}

// LookupTask returns a task, deleted or not; not_found for an id that never named
// one.
func (s *Store) LookupTask(ctx context.Context, key taskd.TaskKey) (taskd.Task, error) {
	t, err := scanTask(s.db.QueryRowContext(ctx, selectTask(key.Kind)+" WHERE t.id = ?", key.ID), key.Kind)
	if errors.Is(err, sql.ErrNoRows) {
		return t, taskd.Errorf(taskd.CodeNotFound, "task %s not found", key)
	}
	return t, mysqlErr("look up task", err)
}

// getTask reads a task that is not deleted (not_found otherwise).
func getTask(ctx context.Context, q rowQuerier, key taskd.TaskKey) (taskd.Task, error) {
	t, err := scanTask(q.QueryRowContext(ctx, selectTask(key.Kind)+" WHERE t.id = ? AND t.status <> ?",
		key.ID, taskd.StatusDeleted), key.Kind)
	if errors.Is(err, sql.ErrNoRows) {
		return t, taskd.Errorf(taskd.CodeNotFound, "task %s not found", key)
	}
	return t, err
}

// lockTask locks a task that is not deleted for an edit and reads it; its version
// must be one ifMatch matches. The task row alone is locked: its template's row, which
// every claim of the template's tasks reads in share mode, is not.
func lockTask(ctx context.Context, tx *sql.Tx, key taskd.TaskKey, ifMatch taskd.IfMatch) (taskd.Task, error) {
	var one int
	err := tx.QueryRowContext(ctx, "SELECT 1 FROM "+taskTable(key.Kind)+" WHERE id = ? AND status <> ? FOR UPDATE",
		key.ID, taskd.StatusDeleted).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return taskd.Task{}, taskd.Errorf(taskd.CodeNotFound, "task %s not found", key)
	}
	if err != nil {
		return taskd.Task{}, err
	}
	t, err := getTask(ctx, tx, key)
	if err != nil {
		return t, err
	}
	return t, ifMatch.Check("task "+key.String(), taskd.Count(t.Version))
}

// ReplaceTask replaces the editable fields of live task key with those edit makes of
// it as it is, held locked and at a version ifMatch matches, and returns the task
// before and after. Claims already made are kept: a lower quota only stops further
// dispatch. Pausing parks the task's open dispatches beside their users' open slots.
// action is the audit entry's: what the admin did (task.replace for a PUT, task.patch
// for a PATCH).
func (s *Store) ReplaceTask(ctx context.Context, actor, action string, key taskd.TaskKey, ifMatch taskd.IfMatch,
	edit func(taskd.Task) (taskd.Task, error), now time.Time) (before, after taskd.Task, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if before, err = lockTask(ctx, tx, key, ifMatch); err != nil {
			return err
		}
		t, err := edit(before)
		if err != nil {
			return err
		}
		t.Key = key
		if err := templateLive(ctx, tx, t.TemplateID); err != nil {
			return err
		}
		rollout, err := rolloutArg(t.Rollout)
		if err != nil {
			return err
		}
		set := "executor = ?, start_time = ?, template_id = ?, params = ?, dispatch_times = ?, mode = ?, priority = ?, " +
			"status = ?, " + settingsSet() + ", updated_at = ?, version = version + 1, rollout = ?, windows = ?"
		args := append([]any{t.Executor, t.StartTime, t.TemplateID, string(t.Params), t.DispatchTimes, t.Mode,
			t.Priority, t.Status}, settingsArgs(t.Own)...)
		args = append(args, now, rollout, windowsArg(t.OwnWindows))
		if t.Key.Kind == taskd.KindRotate {
			set += ", space_minutes = ?, end_time = ?, cron = ?, time_zone = ?, misfire = ?"
			args = append(args, t.SpaceMinutes, t.EndTime, nullString(t.Cron), nullString(t.TimeZone), max(t.Misfire, taskd.MisfireCatchUp))
		}
		if _, err := tx.ExecContext(ctx, "UPDATE "+taskTable(t.Key.Kind)+" SET "+set+" WHERE id = ?", append(args, t.Key.ID)...); err != nil {
			return err
		}
		if before.Status == taskd.StatusActive && t.Status != taskd.StatusActive {
			if err := parkTask(ctx, tx, t.Key); err != nil {
				return err
			}
		}
		if err := syncRollout(ctx, tx, before.Rollout, t, now); err != nil {
			return err
		}
		if after, err = getTask(ctx, tx, t.Key); err != nil {
			return err
		}
		if err := noteHeapChanges(ctx, tx, now, before.Executor, after.Executor); err != nil {
			return err
		}
		return audit(ctx, tx, actor, action, t.Key.String(), taskAudit(before), taskAudit(after), now)
	})
	return before, after, mysqlErr("replace task", err)
}

// DeleteTask soft-deletes a task, at a version ifMatch matches, and returns it as it
// was. Its open and retry-waiting dispatches are cancelled in the same transaction.
func (s *Store) DeleteTask(ctx context.Context, actor string, key taskd.TaskKey, ifMatch taskd.IfMatch, now time.Time) (taskd.Task, error) {
	var before taskd.Task
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if before, err = lockTask(ctx, tx, key, ifMatch); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE "+taskTable(key.Kind)+" SET status = ?, updated_at = ?, version = version + 1 WHERE id = ?",
			taskd.StatusDeleted, now, key.ID)
		if err != nil {
			return err
		}
		if err := s.cancelTask(ctx, tx, key, now); err != nil {
			return err
		}
		// A deleted task's rollout ends with it (nothing steps or lists it any more).
		if err := syncRollout(ctx, tx, before.Rollout, taskd.Task{Key: key}, now); err != nil {
			return err
		}
		if err := noteHeapChanges(ctx, tx, now, before.Executor); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "task.delete", key.String(), taskAudit(before), nil, now)
	})
	return before, mysqlErr("delete task", err)
}

// windowsArg is the windows column of ws: JSON, NULL for none set.
func windowsArg(ws taskd.Windows) any {
	if ws == nil {
		return nil
	}
	b, _ := json.Marshal(ws)
	return string(b)
}
