package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// ---- templates ----

// CreateTemplate stores t (its name, schema, settings and stages) and returns it with
// its id.
func (s *Store) CreateTemplate(ctx context.Context, actor string, t taskd.Template, now time.Time) (taskd.Template, error) {
	t.CreatedAt, t.UpdatedAt, t.Version = now, now, 1
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		args := append([]any{t.Name, string(t.Schema)}, settingsArgs(t.Settings)...)
		res, err := tx.ExecContext(ctx, `INSERT INTO task_params_template (name, schema_json, `+strings.Join(settingsNames, ", ")+`,
			stages, status, created_at, updated_at, result_schema) VALUES (?, ?, `+marks(len(settingsNames))+`, ?, 1, ?, ?, ?)`,
			append(args, stagesArg(t.Stages), now, now, nullJSON(t.ResultSchema))...)
		if err != nil {
			return err
		}
		if t.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "template.create", templateTarget(t.ID), nil, t, now)
	})
	return t, mysqlErr("create template", err)
}

func templateTarget(id int64) string { return "template:" + strconv.FormatInt(id, 10) }

// selectTemplate reads templates as scanTemplate scans them.
var selectTemplate = "SELECT p.id, p.name, p.schema_json, " + settingsCols("p") +
	", p.stages, p.created_at, p.updated_at, p.version, p.result_schema FROM task_params_template p"

func scanTemplate(row scanner) (taskd.Template, error) {
	var t taskd.Template
	var schema string
	var stages *string
	var result sql.NullString
	dest := append([]any{&t.ID, &t.Name, &schema}, settingsDest(&t.Settings)...)
	if err := row.Scan(append(dest, &stages, &t.CreatedAt, &t.UpdatedAt, &t.Version, &result)...); err != nil {
		return t, err
	}
	t.Schema, t.ResultSchema = json.RawMessage(schema), rawJSON(result)
	var err error
	t.Stages, err = parseStages(stages)
	return t, err
}

// GetTemplate returns a live template or not_found.
func (s *Store) GetTemplate(ctx context.Context, id int64) (taskd.Template, error) {
	t, err := scanTemplate(s.db.QueryRowContext(ctx, selectTemplate+" WHERE p.id = ? AND p.status = 1", id))
	if errors.Is(err, sql.ErrNoRows) {
		return t, taskd.Errorf(taskd.CodeNotFound, "template %d not found", id)
	}
	return t, mysqlErr("get template", err)
}

// ListTemplates returns the live templates by id.
func (s *Store) ListTemplates(ctx context.Context) ([]taskd.Template, error) {
	rows, err := s.db.QueryContext(ctx, selectTemplate+" WHERE p.status = 1 ORDER BY p.id")
	if err != nil {
		return nil, mysqlErr("list templates", err)
	}
	defer rows.Close()
	out := []taskd.Template{}
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, mysqlErr("list templates", err)
		}
		out = append(out, t)
	}
	return out, mysqlErr("list templates", rows.Err())
}

// UpdateTemplate applies edit to live template id, held locked and at a version
// ifMatch matches, and stores its name, settings and stages (the schema stays: tasks'
// params were checked against it). It returns the template before and after. Claims
// read a template's settings in the same transaction as the claim, so the next
// dispatch has them.
func (s *Store) UpdateTemplate(ctx context.Context, actor string, id int64, ifMatch taskd.IfMatch, edit func(*taskd.Template) error, now time.Time) (before, after taskd.Template, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		before, err = scanTemplate(tx.QueryRowContext(ctx, selectTemplate+" WHERE p.id = ? AND p.status = 1 FOR UPDATE", id))
		if errors.Is(err, sql.ErrNoRows) {
			return taskd.Errorf(taskd.CodeNotFound, "template %d not found", id)
		}
		if err != nil {
			return err
		}
		if err := ifMatch.Check(templateTarget(id), taskd.Count(before.Version)); err != nil {
			return err
		}
		after = before
		after.Stages = slices.Clone(before.Stages)
		if err := edit(&after); err != nil {
			return err
		}
		after.ID, after.Schema, after.CreatedAt, after.UpdatedAt = before.ID, before.Schema, before.CreatedAt, now
		after.ResultSchema = before.ResultSchema
		after.Version = before.Version + 1
		args := append([]any{after.Name}, settingsArgs(after.Settings)...)
		if _, err := tx.ExecContext(ctx, "UPDATE task_params_template SET name = ?, "+settingsSet()+
			", stages = ?, updated_at = ?, version = version + 1 WHERE id = ?", append(args, stagesArg(after.Stages), now, id)...); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "template.update", templateTarget(id), before, after, now)
	})
	return before, after, mysqlErr("update template", err)
}

// DeleteTemplate soft-deletes a template no live task uses (conflict otherwise), at a
// version ifMatch matches.
func (s *Store) DeleteTemplate(ctx context.Context, actor string, id int64, ifMatch taskd.IfMatch, now time.Time) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var version int64
		err := tx.QueryRowContext(ctx, "SELECT version FROM task_params_template WHERE id = ? AND status = 1 FOR UPDATE", id).Scan(&version)
		if errors.Is(err, sql.ErrNoRows) {
			return taskd.Errorf(taskd.CodeNotFound, "template %d not found", id)
		}
		if err != nil {
			return err
		}
		if err := ifMatch.Check(templateTarget(id), taskd.Count(version)); err != nil {
			return err
		}
		var used int
		err = tx.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM task_once WHERE template_id = ? AND status <> ?) +
			(SELECT COUNT(*) FROM task_rotate WHERE template_id = ? AND status <> ?)`,
			id, taskd.StatusDeleted, id, taskd.StatusDeleted).Scan(&used)
		if err != nil {
			return err
		}
		if used > 0 {
			return taskd.Errorf(taskd.CodeConflict, "template %d is used by %d task(s)", id, used)
		}
		if _, err := tx.ExecContext(ctx,
			"UPDATE task_params_template SET status = 3, updated_at = ?, version = version + 1 WHERE id = ?", now, id); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "template.delete", templateTarget(id), map[string]int64{"id": id}, nil, now)
	})
	return mysqlErr("delete template", err)
}

// ---- tasks ----

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
			strings.Join(settingsNames, ", ") + ", created_at, updated_at, rollout"
		args := append([]any{t.Executor, t.StartTime, t.TemplateID, string(t.Params), t.DispatchTimes, t.Mode,
			t.Priority, t.Status}, settingsArgs(t.Own)...)
		args = append(args, now, now, rollout)
		if t.Key.Kind == taskd.KindRotate {
			cols += ", space_minutes, end_time"
			args = append(args, t.SpaceMinutes, t.EndTime)
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
	t.status, t.created_at, t.updated_at, t.version, t.rollout, ` + settingsCols("t") + ", " + settingsCols("p")

// scanTask scans selectTask's columns; the effective settings are resolved from the
// task's own and its template's.
func scanTask(row scanner, kind taskd.Kind) (taskd.Task, error) {
	t := taskd.Task{Key: taskd.TaskKey{Kind: kind}}
	var params string
	var space sql.NullInt64
	var end sql.NullTime
	var tpl taskd.Settings
	var rollout sql.NullString
	dest := []any{&t.Key.ID, &t.Executor, &t.StartTime, &t.TemplateID, &params, &t.DispatchTimes, &t.Mode,
		&t.Priority, &t.Status, &t.CreatedAt, &t.UpdatedAt, &t.Version, &rollout}
	dest = append(append(dest, settingsDest(&t.Own)...), settingsDest(&tpl)...)
	if kind == taskd.KindRotate {
		dest = append(dest, &space, &end)
	}
	if err := row.Scan(dest...); err != nil {
		return t, err
	}
	t.Effective, t.Inherited = taskd.Resolve(t.Own, tpl)
	var err error
	if t.Rollout, err = parseRollout(rollout); err != nil {
		return t, err
	}
	t.Params = json.RawMessage(params)
	t.StartTime = t.StartTime.UTC()
	t.SpaceMinutes = int(space.Int64)
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
		cols += ", t.space_minutes, t.end_time"
	}
	return "SELECT " + cols + " FROM " + taskTable(k) + " t LEFT JOIN task_params_template p ON p.id = t.template_id"
}

// GetTask returns a task that is not deleted, or not_found.
func (s *Store) GetTask(ctx context.Context, key taskd.TaskKey) (taskd.Task, error) {
	t, err := getTask(ctx, s.db, key)
	return t, mysqlErr("get task", err)
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
func (s *Store) ReplaceTask(ctx context.Context, actor string, key taskd.TaskKey, ifMatch taskd.IfMatch,
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
			"status = ?, " + settingsSet() + ", updated_at = ?, version = version + 1, rollout = ?"
		args := append([]any{t.Executor, t.StartTime, t.TemplateID, string(t.Params), t.DispatchTimes, t.Mode,
			t.Priority, t.Status}, settingsArgs(t.Own)...)
		args = append(args, now, rollout)
		if t.Key.Kind == taskd.KindRotate {
			set += ", space_minutes = ?, end_time = ?"
			args = append(args, t.SpaceMinutes, t.EndTime)
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
		return audit(ctx, tx, actor, "task.replace", t.Key.String(), taskAudit(before), taskAudit(after), now)
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

// ---- groups ----

// Every change of a group's members takes its turn on the group's row (lockGroup),
// then reads and writes the members without locking reads, in key order and in
// multi-row statements of memberChunk rows.

// memberChunk is the most members one statement adds or removes.
const memberChunk = 500

// lockGroup locks gid's row, creating it if gid has none: an upsert on the primary
// key, which takes a record lock and no gap lock, found or not.
func lockGroup(ctx context.Context, tx *sql.Tx, gid string, now time.Time) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO member_group (gid, created_at) VALUES (?, ?) ON DUPLICATE KEY UPDATE gid = gid", gid, now)
	return err
}

// writeMembers inserts (or, with remove, deletes) uids of gid, sorted, memberChunk at a
// time.
func writeMembers(ctx context.Context, tx *sql.Tx, gid string, uids []string, remove bool, now time.Time) error {
	for chunk := range slices.Chunk(uids, memberChunk) {
		var err error
		if remove {
			_, err = tx.ExecContext(ctx, "DELETE FROM group_member WHERE gid = ? AND uid IN ("+marks(len(chunk))+")",
				append([]any{gid}, anys(chunk)...)...)
		} else {
			args := make([]any, 0, 3*len(chunk))
			for _, u := range chunk {
				args = append(args, gid, u, now)
			}
			_, err = tx.ExecContext(ctx, "INSERT INTO group_member (gid, uid, created_at) VALUES "+tuples(len(chunk), 3), args...)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sortedSet is uids sorted, without repeats. Ids compare as the id columns' collation
// does, without regard to case ("Alice" is "alice"): of ids that differ only in case,
// the first given stays.
func sortedSet(uids []string) []string {
	seen := make(map[string]bool, len(uids))
	out := make([]string, 0, len(uids))
	for _, u := range uids {
		if k := strings.ToLower(u); !seen[k] {
			seen[k] = true
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	return out
}

// AddMembers adds uids to gid and returns those that were not members yet, sorted.
func (s *Store) AddMembers(ctx context.Context, actor, gid string, uids []string, now time.Time) ([]string, error) {
	want := sortedSet(uids)
	var added []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := lockGroup(ctx, tx, gid, now); err != nil {
			return err
		}
		have := make(map[string]bool)
		for chunk := range slices.Chunk(want, memberChunk) {
			rows, err := tx.QueryContext(ctx, "SELECT uid FROM group_member WHERE gid = ? AND uid IN ("+marks(len(chunk))+")",
				append([]any{gid}, anys(chunk)...)...)
			if err != nil {
				return err
			}
			for rows.Next() {
				var u string
				if err := rows.Scan(&u); err != nil {
					rows.Close()
					return err
				}
				have[strings.ToLower(u)] = true
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		added = slices.DeleteFunc(slices.Clone(want), func(u string) bool { return have[strings.ToLower(u)] })
		s.between(ctx, "group_member.write")
		if err := writeMembers(ctx, tx, gid, added, false, now); err != nil {
			return err
		}
		if err := noteHeapChanges(ctx, tx, now, userTargets(added)...); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "group.add_members", "group:"+gid, nil, map[string]any{"added": added}, now)
	})
	return added, mysqlErr("add members", err)
}

// RemoveMember removes uid from gid; it reports whether uid was a member.
func (s *Store) RemoveMember(ctx context.Context, actor, gid, uid string, now time.Time) (bool, error) {
	var removed bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := lockGroup(ctx, tx, gid, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, "DELETE FROM group_member WHERE gid = ? AND uid = ?", gid, uid)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		if removed = n > 0; !removed {
			return nil
		}
		if err := noteHeapChanges(ctx, tx, now, taskd.UserExecutor(uid)); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "group.remove_member", "group:"+gid, map[string]string{"uid": uid}, nil, now)
	})
	return removed, mysqlErr("remove member", err)
}

// ReplaceMembers makes uids the members of gid and returns every uid whose membership
// changed (added or removed), sorted.
func (s *Store) ReplaceMembers(ctx context.Context, actor, gid string, uids []string, now time.Time) ([]string, error) {
	after := sortedSet(uids)
	var changed []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := lockGroup(ctx, tx, gid, now); err != nil {
			return err
		}
		current, err := members(ctx, tx, gid)
		if err != nil {
			return err
		}
		want := make(map[string]bool, len(after))
		for _, u := range after {
			want[strings.ToLower(u)] = true
		}
		have := make(map[string]bool, len(current))
		var gone, fresh []string
		for _, u := range current {
			have[strings.ToLower(u)] = true
			if !want[strings.ToLower(u)] {
				gone = append(gone, u)
			}
		}
		for _, u := range after {
			if !have[strings.ToLower(u)] {
				fresh = append(fresh, u)
			}
		}
		s.between(ctx, "group_member.write")
		if err := writeMembers(ctx, tx, gid, gone, true, now); err != nil {
			return err
		}
		if err := writeMembers(ctx, tx, gid, fresh, false, now); err != nil {
			return err
		}
		changed = sortedSet(append(gone, fresh...))
		if err := noteHeapChanges(ctx, tx, now, userTargets(changed)...); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "group.replace_members", "group:"+gid,
			map[string]any{"uids": current}, map[string]any{"uids": after}, now)
	})
	return changed, mysqlErr("replace members", err)
}

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func members(ctx context.Context, q querier, gid string) ([]string, error) {
	rows, err := q.QueryContext(ctx, "SELECT uid FROM group_member WHERE gid = ? ORDER BY uid", gid)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	uids := []string{}
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			return nil, err
		}
		uids = append(uids, u)
	}
	return uids, rows.Err()
}

// Members returns the uids in gid.
func (s *Store) Members(ctx context.Context, gid string) ([]string, error) {
	uids, err := members(ctx, s.db, gid)
	return uids, mysqlErr("members", err)
}
