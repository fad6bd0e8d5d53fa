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
	name string
}

// TryLease tries, without waiting, to take the lease named work (per database: tests
// and tenants sharing a server do not block each other). It returns nil and no error
// when another process holds it.
func (s *Store) TryLease(ctx context.Context, work string) (*Lease, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s lease: %w", work, err)
	}
	var name string
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, "SELECT CONCAT('taskd_', ?, '_', SHA1(DATABASE()))", work).Scan(&name)
	if err == nil {
		err = conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&got)
	}
	if err != nil {
		discard(conn)
		return nil, fmt.Errorf("%s lease: %w", work, err)
	}
	if !got.Valid || got.Int64 != 1 {
		conn.Close()
		return nil, nil
	}
	return &Lease{conn: conn, name: name}, nil
}

// Release gives the lease up: the lock is released and the connection closed rather
// than returned to the pool (a pooled connection would keep holding a lock it failed
// to release).
func (l *Lease) Release() error {
	_, err := l.conn.ExecContext(context.Background(), "DO RELEASE_LOCK(?)", l.name)
	discard(l.conn)
	return err
}

// Cutoffs are what PruneBatch deletes: records finished (and last changed) before
// Dispatches whose occurrence was due before Offered (no user is offered it any more:
// it is older than the catch-up), outbox rows written before Outbox (zero: keep).
type Cutoffs struct {
	Dispatches, Offered, Outbox time.Time
}

// PruneBatch deletes up to limit rows of each kind older than its cutoff and says how
// many it deleted of each. A dispatch record is deleted only once it has ended for good:
// not open, not waiting beside its user's slot (a retry, a next stage, an expired
// attempt to be taken again), finished and last changed before the cutoff (by idx_changed).
func (s *Store) PruneBatch(ctx context.Context, c Cutoffs, limit int) (dispatches, outbox int64, err error) {
	if !c.Dispatches.IsZero() {
		// An admin's retry or cancel, or a redo, is an event of the record's too: kept as
		// long as a finish would be. A record of an occurrence still on offer decides
		// what its user may take (an until_exhausted occurrence dead for the user).
		// changed_at is the latest of the finish, retry, cancel and redo (migration 0024).
		res, err := s.db.ExecContext(ctx, `DELETE FROM dispatch WHERE changed_at < ? AND finished_at IS NOT NULL
			AND open_uid IS NULL AND waiting_uid IS NULL AND state <> ? AND due_at < ? ORDER BY changed_at LIMIT ?`,
			c.Dispatches, taskd.StateOpen, c.Offered, limit)
		if err != nil {
			return 0, 0, mysqlErr("prune dispatches", err)
		}
		dispatches, _ = res.RowsAffected()
		// Missed events are kept as long as the records' own events.
		res, err = s.db.ExecContext(ctx, "DELETE FROM missed_occurrence WHERE missed_at < ? ORDER BY missed_at LIMIT ?",
			c.Dispatches, limit)
		if err != nil {
			return dispatches, 0, mysqlErr("prune missed occurrences", err)
		}
		missed, _ := res.RowsAffected()
		dispatches += missed
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

// PruneAgents deletes up to limit client_agent rows of uids that last polled before
// cutoff (by idx_last_seen) and says how many it deleted.
func (s *Store) PruneAgents(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	res, err := s.db.ExecContext(ctx, "DELETE FROM client_agent WHERE last_seen < ? ORDER BY last_seen LIMIT ?", cutoff.UTC(), limit)
	if err != nil {
		return 0, mysqlErr("prune client agents", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
