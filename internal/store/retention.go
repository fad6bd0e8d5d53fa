package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/taskpull/taskd"
)

// Retention: finished dispatch records and outbox rows older than their ages are
// deleted in small batches, each its own short statement (no long locks), by one node
// at a time (a MySQL advisory lock).

// Lease is this process's exclusive right to some background work of the database: a
// MySQL advisory lock held on a dedicated connection, freed by Release or when the
// connection ends (a crashed holder blocks the others only until MySQL notices).
type Lease struct {
	conn *sql.Conn
}

// TryLease tries, without waiting, to take the lease named work (per database: tests
// and tenants sharing a server do not block each other). It returns nil and no error
// when another process holds it.
func (s *Store) TryLease(ctx context.Context, work string) (*Lease, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s lease: %w", work, err)
	}
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, "SELECT GET_LOCK(CONCAT('taskd_', ?, '_', SHA1(DATABASE())), 0)", work).Scan(&got)
	if err != nil {
		discard(conn)
		return nil, fmt.Errorf("%s lease: %w", work, err)
	}
	if !got.Valid || got.Int64 != 1 {
		conn.Close()
		return nil, nil
	}
	return &Lease{conn: conn}, nil
}

// Release gives the lease up (the connection is closed, which frees the lock).
func (l *Lease) Release() error { return l.conn.Close() }

// Cutoffs are what PruneBatch deletes: records finished before Dispatches, outbox rows
// written before Outbox (zero: keep).
type Cutoffs struct {
	Dispatches, Outbox time.Time
}

// PruneBatch deletes up to limit rows of each kind older than its cutoff and says how
// many it deleted of each. A dispatch record is deleted only once it has ended for good:
// not open, not waiting beside its user's slot (a retry, a next stage, an expired
// attempt to be taken again), finished before the cutoff (by idx_finished).
func (s *Store) PruneBatch(ctx context.Context, c Cutoffs, limit int) (dispatches, outbox int64, err error) {
	if !c.Dispatches.IsZero() {
		res, err := s.db.ExecContext(ctx, `DELETE FROM dispatch WHERE finished_at < ? AND open_uid IS NULL
			AND waiting_uid IS NULL AND state <> ? ORDER BY finished_at LIMIT ?`, c.Dispatches, taskd.StateOpen, limit)
		if err != nil {
			return 0, 0, mysqlErr("prune dispatches", err)
		}
		dispatches, _ = res.RowsAffected()
	}
	if !c.Outbox.IsZero() {
		// The oldest rows have the lowest ids: read the first ids and delete the prefix
		// written before the cutoff (created_at has no key of its own).
		rows, err := s.db.QueryContext(ctx, "SELECT id, created_at FROM event_outbox ORDER BY id LIMIT ?", limit)
		if err != nil {
			return dispatches, 0, mysqlErr("prune outbox", err)
		}
		var ids []any
		for rows.Next() {
			var id int64
			var at time.Time
			if err := rows.Scan(&id, &at); err != nil {
				rows.Close()
				return dispatches, 0, mysqlErr("prune outbox", err)
			}
			if !at.Before(c.Outbox) {
				break
			}
			ids = append(ids, id)
		}
		rows.Close()
		if len(ids) > 0 {
			res, err := s.db.ExecContext(ctx, "DELETE FROM event_outbox WHERE id IN ("+marks(len(ids))+")", ids...)
			if err != nil {
				return dispatches, 0, mysqlErr("prune outbox", err)
			}
			outbox, _ = res.RowsAffected()
		}
	}
	return dispatches, outbox, nil
}
