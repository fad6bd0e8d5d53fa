package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/taskpull/taskd"
)

// Idempotency keys (idempotency_key): the replies of admin creates, by admin token and
// key, so that a create sent again answers as the first did.

// BeginIdempotent records that actor's request with key and hash starts at now, and
// reports true; or, when the key has a record younger than expiry (and not abandoned:
// under way for longer than abandon), returns it and false. An older one is replaced.
func (s *Store) BeginIdempotent(ctx context.Context, actor, key, hash string, now time.Time, expiry, abandon time.Duration) (*taskd.IdempotentReply, bool, error) {
	var prev *taskd.IdempotentReply
	began := false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		prev, began = nil, false
		r, err := scanReply(tx.QueryRowContext(ctx, "SELECT "+replyColumns+" FROM idempotency_key WHERE actor = ? AND idem_key = ? FOR UPDATE",
			actor, key))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err := tx.ExecContext(ctx, "INSERT INTO idempotency_key (actor, idem_key, request_hash, created_at) VALUES (?, ?, ?, ?)",
				actor, key, hash, now)
			began = err == nil
			return err
		case err != nil:
			return err
		}
		expired := !r.CreatedAt.After(now.Add(-expiry))
		abandoned := r.Status == 0 && !r.CreatedAt.After(now.Add(-abandon))
		if !expired && !abandoned {
			prev = r
			return nil
		}
		_, err = tx.ExecContext(ctx, `UPDATE idempotency_key SET request_hash = ?, status = NULL, headers = NULL, body = NULL,
			created_at = ? WHERE actor = ? AND idem_key = ?`, hash, now, actor, key)
		began = err == nil
		return err
	})
	if isDuplicate(err) {
		// Begun by another request meanwhile: its record.
		return s.BeginIdempotent(ctx, actor, key, hash, now, expiry, abandon)
	}
	return prev, began, mysqlErr("idempotency key", err)
}

// replyColumns are what scanReply scans.
const replyColumns = "request_hash, status, headers, body, created_at"

// scanReply scans replyColumns.
func scanReply(row scanner) (*taskd.IdempotentReply, error) {
	var r taskd.IdempotentReply
	var status sql.NullInt64
	var header sql.NullString
	if err := row.Scan(&r.RequestHash, &status, &header, &r.Body, &r.CreatedAt); err != nil {
		return nil, err
	}
	r.Status = int(status.Int64)
	if header.Valid {
		if err := json.Unmarshal([]byte(header.String), &r.Header); err != nil {
			return nil, err
		}
	}
	return &r, nil
}

// KeptReply returns the reply kept under actor's key when a request with it succeeded
// within expiry of now; nil when there is none (never used, expired, or a request with
// it under way). It reads without a lock: BeginIdempotent decides.
func (s *Store) KeptReply(ctx context.Context, actor, key string, now time.Time, expiry time.Duration) (*taskd.IdempotentReply, error) {
	r, err := scanReply(s.db.QueryRowContext(ctx, "SELECT "+replyColumns+" FROM idempotency_key WHERE actor = ? AND idem_key = ?",
		actor, key))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, mysqlErr("idempotency key", err)
	case r.Status == 0 || !r.CreatedAt.After(now.Add(-expiry)):
		return nil, nil
	}
	return r, nil
}

// FinishIdempotent keeps the reply of actor's request with key.
func (s *Store) FinishIdempotent(ctx context.Context, actor, key string, status int, header map[string][]string, body []byte) error {
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, "UPDATE idempotency_key SET status = ?, headers = ?, body = ? WHERE actor = ? AND idem_key = ?",
		status, string(h), body, actor, key)
	return mysqlErr("idempotency key", err)
}

// DropIdempotent forgets actor's request with key (it failed: the key may be used
// again).
func (s *Store) DropIdempotent(ctx context.Context, actor, key string) error {
	_, err := s.db.ExecContext(ctx, "DELETE FROM idempotency_key WHERE actor = ? AND idem_key = ? AND status IS NULL", actor, key)
	return mysqlErr("idempotency key", err)
}

// PruneIdempotency deletes up to limit records begun before cutoff.
func (s *Store) PruneIdempotency(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	res, err := s.db.ExecContext(ctx, "DELETE FROM idempotency_key WHERE created_at < ? ORDER BY created_at LIMIT ?", cutoff.UTC(), limit)
	if err != nil {
		return 0, mysqlErr("prune idempotency keys", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
