package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/taskpull/taskd"
)

// DDI actions: the numbers DDI controllers know their dispatches by (ddi_action).

// actionsSQL reads the actions the condition (%s, on ddi_action) picks, each with its
// dispatch, as scanAction scans them: the actions' columns are renamed in a derived
// table, so that the dispatch's stay as dispatchColumns names them.
const actionsSQL = "SELECT " + dispatchColumns + ", a.id, a.auid, a.closed FROM dispatch" +
	" JOIN (SELECT action_id AS id, log_id AS alog, uid AS auid, closed_at IS NOT NULL AS closed FROM ddi_action %s) a ON log_id = a.alog"

func scanAction(row scanner) (*taskd.DDIAction, error) {
	var a taskd.DDIAction
	d, err := scanDispatch(row, &a.ID, &a.UID, &a.Closed)
	if err != nil {
		return nil, err
	}
	a.Dispatch = d
	return &a, nil
}

// TemplateDDI reports whether template id is a DDI template (false for none).
func (s *Store) TemplateDDI(ctx context.Context, id int64) (bool, error) {
	var ddi bool
	err := s.db.QueryRowContext(ctx, "SELECT ddi FROM task_params_template WHERE id = ?", id).Scan(&ddi)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return ddi, mysqlErr("template ddi", err)
}

// OpenAction returns uid's latest action its controller has not closed, with its
// dispatch, or nil.
func (s *Store) OpenAction(ctx context.Context, uid string) (*taskd.DDIAction, error) {
	a, err := scanAction(s.db.QueryRowContext(ctx, fmt.Sprintf(actionsSQL,
		"WHERE uid = ? AND closed_at IS NULL ORDER BY action_id DESC LIMIT 1"), uid))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return a, mysqlErr("open action", err)
}

// Action returns action id with its dispatch, or taskd.ErrNotFound.
func (s *Store) Action(ctx context.Context, id int64) (*taskd.DDIAction, error) {
	a, err := scanAction(s.db.QueryRowContext(ctx, fmt.Sprintf(actionsSQL, "WHERE action_id = ?"), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, taskd.ErrNotFound
	}
	return a, mysqlErr("action", err)
}

// NumberAction gives dispatch logID of uid its action id, once: a second call answers
// the first's number.
func (s *Store) NumberAction(ctx context.Context, uid, logID string, now time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, "INSERT IGNORE INTO ddi_action (log_id, uid, created_at) VALUES (?, ?, ?)",
		logID, uid, now)
	if err != nil {
		return 0, mysqlErr("number action", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return res.LastInsertId()
	}
	var id int64
	err = s.db.QueryRowContext(ctx, "SELECT action_id FROM ddi_action WHERE log_id = ?", logID).Scan(&id)
	return id, mysqlErr("number action", err)
}

// CloseAction records that action id is closed, if it is not yet; it reports whether
// this call closed it.
func (s *Store) CloseAction(ctx context.Context, id int64, now time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, "UPDATE ddi_action SET closed_at = ? WHERE action_id = ? AND closed_at IS NULL", now, id)
	if err != nil {
		return false, mysqlErr("close action", err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}
