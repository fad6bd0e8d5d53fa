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

// Templates: the parameter schema, settings and stages a task names.

// CreateTemplate stores t (its name, schema, settings and stages) and returns it with
// its id.
func (s *Store) CreateTemplate(ctx context.Context, actor string, t taskd.Template, now time.Time) (taskd.Template, error) {
	t.CreatedAt, t.UpdatedAt, t.Version = now, now, 1
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		args := append([]any{t.Name, string(t.Schema)}, settingsArgs(t.Settings)...)
		res, err := tx.ExecContext(ctx, `INSERT INTO task_params_template (name, schema_json, `+strings.Join(settingsNames, ", ")+`,
			stages, status, created_at, updated_at, result_schema, windows, ddi) VALUES (?, ?, `+marks(len(settingsNames))+`, ?, 1, ?, ?, ?, ?, ?)`,
			append(args, stagesArg(t.Stages), now, now, nullJSON(t.ResultSchema), windowsArg(t.Windows), t.DDI)...)
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
	", p.stages, p.created_at, p.updated_at, p.version, p.result_schema, p.windows, p.ddi FROM task_params_template p"

func scanTemplate(row scanner) (taskd.Template, error) {
	var t taskd.Template
	var schema string
	var stages *string
	var result, windows sql.NullString
	dest := append([]any{&t.ID, &t.Name, &schema}, settingsDest(&t.Settings)...)
	if err := row.Scan(append(dest, &stages, &t.CreatedAt, &t.UpdatedAt, &t.Version, &result, &windows, &t.DDI)...); err != nil {
		return t, err
	}
	t.Schema, t.ResultSchema = json.RawMessage(schema), rawJSON(result)
	var err error
	if t.Windows, err = taskd.ParseWindows(windows.String); err != nil {
		return t, err
	}
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
		after.ResultSchema, after.DDI = before.ResultSchema, before.DDI
		after.Version = before.Version + 1
		args := append([]any{after.Name}, settingsArgs(after.Settings)...)
		if _, err := tx.ExecContext(ctx, "UPDATE task_params_template SET name = ?, "+settingsSet()+
			", stages = ?, windows = ?, updated_at = ?, version = version + 1 WHERE id = ?",
			append(args, stagesArg(after.Stages), windowsArg(after.Windows), now, id)...); err != nil {
			return err
		}
		if before.Windows.Key() != after.Windows.Key() {
			// The users' heaps carry their tasks' windows: those of the tasks that take
			// the template's are stale.
			if err := noteTemplateTasks(ctx, tx, id, now); err != nil {
				return err
			}
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

// noteTemplateTasks notes, for the heap-change feed, the executors of the live tasks of
// template id that take its windows.
func noteTemplateTasks(ctx context.Context, tx *sql.Tx, id int64, now time.Time) error {
	executors, err := windowTakers(ctx, tx, id)
	if err != nil || len(executors) == 0 {
		return err
	}
	return noteHeapChanges(ctx, tx, now, executors...)
}

// WindowTakers returns the executors of the live tasks of template id that take its
// windows (set none of their own): whose users' heaps a change of them makes stale.
func (s *Store) WindowTakers(ctx context.Context, id int64) ([]string, error) {
	executors, err := windowTakers(ctx, s.db, id)
	return executors, mysqlErr("window takers", err)
}

func windowTakers(ctx context.Context, q querier, id int64) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT executor FROM task_once WHERE template_id = ? AND status <> ? AND windows IS NULL
		UNION SELECT executor FROM task_rotate WHERE template_id = ? AND status <> ? AND windows IS NULL`,
		id, taskd.StatusDeleted, id, taskd.StatusDeleted)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var executors []string
	for rows.Next() {
		var e string
		if err := rows.Scan(&e); err != nil {
			return nil, err
		}
		executors = append(executors, e)
	}
	return executors, rows.Err()
}
