package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/taskpull/taskd"
)

// Confirmed success (taskd.Dispatch.ConfirmStep). An unconfirmed success waits beside
// its user's slot (waiting_uid) with its deadline (confirm_by) and no result: the user's
// heap holds a confirm entry for it, so that a fetch of a user with one, and only such
// a fetch, asks MySQL to settle it (ConfirmSuccesses); the sweep settles those whose
// user did not come back in time (LapsedConfirms, Lapse). A settled record gets its
// result and its complete event at the settling, and finished_at moves there: the
// complete event, the stats and the rollout figures count it from then on.

// ConfirmSuccesses settles uid's unconfirmed successes for a fetch of uid that began at
// began, at now: those completed before began are confirmed (done, a success), those
// past their deadline lapse (a failure with reason unconfirmed: retried while attempts
// are left, dead otherwise); those completed since the fetch began wait for a later
// one. It returns the records it settled and the log ids of those that wait.
func (s *Store) ConfirmSuccesses(ctx context.Context, uid string, began, now time.Time) (settled []*taskd.Dispatch, waiting []string, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		settled, waiting = nil, nil
		ds, err := lockedDispatches(ctx, tx, "waiting_uid = ? AND state = ?", uid, taskd.StateUnconfirmed)
		if err != nil {
			return err
		}
		for _, d := range ds {
			switch d.ConfirmStep(began, now) {
			case taskd.ConfirmWait:
				waiting = append(waiting, d.LogID)
				continue
			case taskd.ConfirmNow:
				d.Confirm(now)
			case taskd.ConfirmLapse:
				d.Lapse(now)
			}
			settled = append(settled, d)
		}
		return s.settle(ctx, tx, settled, now)
	})
	if err != nil {
		return nil, nil, mysqlErr("confirm", err)
	}
	return settled, waiting, nil
}

// Lapse settles the unconfirmed success logID if its deadline passed by now: a
// failure with reason unconfirmed, retried while attempts are left, dead otherwise. It
// returns the record, or nil when there was nothing to settle (confirmed meanwhile).
func (s *Store) Lapse(ctx context.Context, logID string, now time.Time) (*taskd.Dispatch, error) {
	var d *taskd.Dispatch
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		d, err = scanDispatch(tx.QueryRowContext(ctx,
			"SELECT "+dispatchColumns+" FROM dispatch WHERE log_id = ? FOR UPDATE", logID))
		if errors.Is(err, sql.ErrNoRows) || (err == nil && (d.State != taskd.StateUnconfirmed ||
			d.ConfirmStep(now, now) != taskd.ConfirmLapse)) {
			d = nil
			return errAbort
		}
		if err != nil {
			return err
		}
		d.Lapse(now)
		return s.settle(ctx, tx, []*taskd.Dispatch{d}, now)
	})
	if errors.Is(err, errAbort) {
		return nil, nil
	}
	if err != nil {
		return nil, mysqlErr("lapse", err)
	}
	return d, nil
}

// settle writes what Confirm or Lapse decided for unconfirmed records held locked, at
// now, in one statement, and their events: the complete event with the result now
// known, and a dead event for a lapse on the last attempt. A retry waits beside the
// slot as it did; the user's cursor moved at the complete already.
func (s *Store) settle(ctx context.Context, tx *sql.Tx, ds []*taskd.Dispatch, now time.Time) error {
	if len(ds) == 0 {
		return nil
	}
	u := caseUpdate{key: "log_id"}
	var evs []taskd.Event
	for _, d := range ds {
		u.keys = append(u.keys, d.LogID)
		u.set("state", d.State)
		u.set("result", nullResult(d.Result))
		u.set("finished_at", now)
		u.set("reason", nullString(d.Reason))
		if d.State == taskd.StateRetryWait {
			u.set("retry_at", *d.RetryAt)
			u.set("waiting_uid", d.UID)
		} else {
			u.keep("retry_at")
			u.set("waiting_uid", nil)
		}
		evs = s.withEvent(evs, d, taskd.EventComplete, now)
		if d.State == taskd.StateDead {
			evs = s.withEvent(evs, d, taskd.EventDead, now)
		}
	}
	q, args := u.statement("dispatch")
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return err
	}
	return s.emitAll(ctx, tx, evs)
}

// LapsedConfirms lists up to limit unconfirmed successes whose deadline passed before
// now, of the users whose uid's CRC-32 modulo of is one of parts (of 0: of every
// user), as ExpiredLeases lists expired leases. The leading state column of idx_lease
// finds the unconfirmed records, few at any time.
func (s *Store) LapsedConfirms(ctx context.Context, now time.Time, limit, of int, parts []int) ([]string, error) {
	return s.swept(ctx, "lapsed confirms", taskd.StateUnconfirmed, "confirm_by < ?", now, limit, of, parts)
}
