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
	// The newest with its dispatch (one the janitor deleted is passed by).
	a, err := scanAction(s.db.QueryRowContext(ctx, fmt.Sprintf(actionsSQL,
		"WHERE uid = ? AND closed_at IS NULL")+" ORDER BY a.id DESC LIMIT 1", uid))
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
// the first's number. uid's older actions still open are closed: the controller holds
// one at a time, and this one took its slot.
// An action closed because another took the slot (superseded) is opened again: its
// dispatch is handed out again (a parked one, back after its task's resume).
func (s *Store) NumberAction(ctx context.Context, uid, logID string, now time.Time) (int64, error) {
	var id int64
	number := func(tx *sql.Tx) error {
		var closed bool
		err := tx.QueryRowContext(ctx, "SELECT action_id, closed_at IS NOT NULL FROM ddi_action WHERE log_id = ? FOR UPDATE",
			logID).Scan(&id, &closed)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err == nil && !closed {
			return nil
		}
		if err := supersede(ctx, tx, []any{uid}, now); err != nil {
			return err
		}
		if err == nil {
			_, err := tx.ExecContext(ctx, "UPDATE ddi_action SET closed_at = NULL WHERE action_id = ?", id)
			return err
		}
		res, err := tx.ExecContext(ctx, "INSERT INTO ddi_action (log_id, uid, created_at) VALUES (?, ?, ?)", logID, uid, now)
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	}
	err := s.inTx(ctx, number)
	if isDuplicate(err) {
		err = s.inTx(ctx, number) // numbered meanwhile: read it
	}
	return id, mysqlErr("number action", err)
}

// supersede closes the open actions of uids, whose slot a new action takes.
func supersede(ctx context.Context, tx *sql.Tx, uids []any, now time.Time) error {
	_, err := tx.ExecContext(ctx, "UPDATE ddi_action SET closed_at = ? WHERE uid IN ("+marks(len(uids))+") AND closed_at IS NULL",
		append([]any{now}, uids...)...)
	return err
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
