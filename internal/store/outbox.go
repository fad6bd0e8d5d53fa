package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// The event outbox: the dispatch path appends rows in the same transaction as the state
// change; one relay process at a time reads them in id order, sends them to Kafka and
// deletes what Kafka acknowledged.

// ErrOutboxLeaseLost reports that the relay lock was no longer held when the outbox was
// read: another process may be relaying, so this one must stop and try again.
var ErrOutboxLeaseLost = errors.New("outbox relay lock lost")

// OutboxRow is one event waiting in the outbox.
type OutboxRow struct {
	ID        int64
	EventID   string
	UID       string
	Payload   []byte // JSON of taskd.Event
	CreatedAt time.Time
}

// OutboxBacklog describes the rows not yet relayed.
type OutboxBacklog struct {
	Rows int64
	// Oldest is the created_at of the lowest id still waiting; zero when empty.
	Oldest time.Time
}

// outboxChunk bounds the placeholders in one statement, far below MySQL's 65,535.
const outboxChunk = 500

// AppendOutbox writes events to the outbox in one transaction of its own. The dispatch
// path writes them inside its own transaction with appendOutboxTx instead; this is for
// tools and tests.
func (s *Store) AppendOutbox(ctx context.Context, evs ...taskd.Event) error {
	return s.inTx(ctx, func(tx *sql.Tx) error { return appendOutboxTx(ctx, tx, evs) })
}

// appendOutboxTx inserts events into the outbox inside tx. created_at is the event's own
// time: the event and its state change commit together, so they are the same moment.
func appendOutboxTx(ctx context.Context, tx *sql.Tx, evs []taskd.Event) error {
	for len(evs) > 0 {
		n := min(len(evs), outboxChunk)
		var q strings.Builder
		q.WriteString("INSERT INTO event_outbox (event_id, uid, payload, created_at) VALUES ")
		args := make([]any, 0, 4*n)
		for i, ev := range evs[:n] {
			payload, err := json.Marshal(ev)
			if err != nil {
				return fmt.Errorf("outbox event %s: %w", ev.EventID, err)
			}
			if i > 0 {
				q.WriteString(",")
			}
			q.WriteString("(?, ?, ?, ?)")
			args = append(args, ev.EventID, ev.UID, payload, ev.At.UTC())
		}
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("insert outbox: %w", err)
		}
		evs = evs[n:]
	}
	return nil
}

// OutboxBacklog counts the rows waiting and finds the oldest. COUNT(*) walks the
// primary key, which is fine for a backlog of millions every few seconds, not per event.
func (s *Store) OutboxBacklog(ctx context.Context) (OutboxBacklog, error) {
	var b OutboxBacklog
	if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM event_outbox").Scan(&b.Rows); err != nil {
		return b, fmt.Errorf("outbox backlog: %w", err)
	}
	err := s.db.QueryRowContext(ctx, "SELECT created_at FROM event_outbox ORDER BY id LIMIT 1").Scan(&b.Oldest)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return b, fmt.Errorf("outbox oldest: %w", err)
	}
	return b, nil
}

// OutboxLease is this process's exclusive right to relay the outbox: a MySQL advisory
// lock (GET_LOCK) held on a dedicated connection. MySQL frees it when that connection
// ends, so a crashed relay blocks the others only until the server notices. Every read
// and delete runs on the same connection, and a read first checks the lock is still
// ours, so a relay whose connection was killed cannot go on reading beside a successor.
// An OutboxLease is used by one goroutine at a time.
type OutboxLease struct {
	conn *sql.Conn
	name string
}

// TryLeaseOutbox tries, without waiting, to become this database's only relay. It
// returns nil and no error when another process holds the lease.
func (s *Store) TryLeaseOutbox(ctx context.Context) (*OutboxLease, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox lease: %w", err)
	}
	// Advisory locks are server-wide, so the name carries the database: tests (and
	// tenants) on one server must not block each other. SHA1 keeps it under MySQL 8's
	// 64-character limit whatever the database name.
	var name string
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, "SELECT CONCAT('taskd_relay_', SHA1(DATABASE()))").Scan(&name)
	if err == nil {
		err = conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&got)
	}
	if err != nil {
		discard(conn)
		return nil, fmt.Errorf("outbox lease: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		conn.Close()
		return nil, nil
	}
	return &OutboxLease{conn: conn, name: name}, nil
}

// ReadOutbox returns up to limit rows in id order. It always starts from the lowest id
// left: ids are allocated before commit, so a lower id may become visible after a higher
// one was relayed, and a cursor past it would skip that row forever.
func (l *OutboxLease) ReadOutbox(ctx context.Context, limit int) ([]OutboxRow, error) {
	var held sql.NullBool
	if err := l.conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", l.name).Scan(&held); err != nil {
		return nil, fmt.Errorf("outbox lease check: %w", err)
	}
	if !held.Valid || !held.Bool {
		return nil, ErrOutboxLeaseLost
	}
	rows, err := l.conn.QueryContext(ctx,
		"SELECT id, event_id, uid, payload, created_at FROM event_outbox ORDER BY id LIMIT ?", limit)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	defer rows.Close()
	var out []OutboxRow
	for rows.Next() {
		var r OutboxRow
		if err := rows.Scan(&r.ID, &r.EventID, &r.UID, &r.Payload, &r.CreatedAt); err != nil {
			return nil, fmt.Errorf("read outbox: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	return out, nil
}

// DeleteOutbox removes relayed rows. Deleting an id that is already gone is not an error.
func (l *OutboxLease) DeleteOutbox(ctx context.Context, ids []int64) error {
	for len(ids) > 0 {
		n := min(len(ids), outboxChunk)
		q := "DELETE FROM event_outbox WHERE id IN (?" + strings.Repeat(", ?", n-1) + ")"
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		if _, err := l.conn.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("delete outbox: %w", err)
		}
		ids = ids[n:]
	}
	return nil
}

// Release gives the lease up. The connection is closed rather than returned to the pool,
// so even if RELEASE_LOCK fails no pooled connection keeps holding the lock.
func (l *OutboxLease) Release(ctx context.Context) error {
	_, err := l.conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", l.name)
	discard(l.conn)
	if err != nil {
		return fmt.Errorf("outbox lease release: %w", err)
	}
	return nil
}

// discard closes the connection instead of pooling it: returning driver.ErrBadConn from
// Raw makes database/sql drop the underlying connection.
func discard(conn *sql.Conn) {
	conn.Raw(func(any) error { return driver.ErrBadConn })
	conn.Close()
}
