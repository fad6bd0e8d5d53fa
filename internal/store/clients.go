package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/taskpull/taskd"
)

// A client's settings (max_in_flight) and the open slots a batch fetch reads.

// ClientSetting returns uid's settings, with the defaults for a client no admin set,
// and how many dispatches it holds open.
func (s *Store) ClientSetting(ctx context.Context, uid string) (taskd.ClientSetting, error) {
	c, err := clientSetting(ctx, s.db, uid)
	return c, mysqlErr("client setting", err)
}

func clientSetting(ctx context.Context, q rowQuerier, uid string) (taskd.ClientSetting, error) {
	c := taskd.ClientSetting{UID: uid, MaxInFlight: taskd.DefaultMaxInFlight}
	var mif, version sql.NullInt64
	var seen sql.NullTime
	var agentVersion, host, labels sql.NullString
	err := q.QueryRowContext(ctx, `SELECT c.max_in_flight, c.updated_at, c.version,
		(SELECT COUNT(*) FROM dispatch WHERE open_uid = ?),
		(SELECT COUNT(*) FROM client_key WHERE uid = ? AND revoked_at IS NULL),
		a.last_seen, a.version, a.hostname, a.labels
		FROM (SELECT 1) one LEFT JOIN client_setting c ON c.uid = ? LEFT JOIN client_agent a ON a.uid = ?`,
		uid, uid, uid, uid).Scan(&mif, &c.UpdatedAt, &version, &c.Open, &c.Keys, &seen, &agentVersion, &host, &labels)
	if err != nil {
		return c, err
	}
	if c.LastSeen, c.Agent, err = agentOf(seen, agentVersion, host, labels); err != nil {
		return c, fmt.Errorf("client %s: %w", uid, err)
	}
	if mif.Valid {
		c.MaxInFlight, c.Version = int(mif.Int64), version.Int64
	}
	if c.UpdatedAt != nil {
		*c.UpdatedAt = c.UpdatedAt.UTC()
	}
	return c, nil
}

// SetMaxInFlight sets how many dispatches uid may hold open at once, audited
// (client.update), if uid's settings are at a version ifMatch matches (0 while it has
// the defaults). Writers of one client take turns on its client row. Lowering the
// limit takes nothing back: dispatches open in slots above the new limit run to their
// end, and their slots are not handed out again.
func (s *Store) SetMaxInFlight(ctx context.Context, actor, uid string, n int, ifMatch taskd.IfMatch, now time.Time) (taskd.ClientSetting, error) {
	var after taskd.ClientSetting
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := lockClient(ctx, tx, uid, now); err != nil {
			return err
		}
		before, err := clientSetting(ctx, tx, uid)
		if err != nil {
			return err
		}
		if err := ifMatch.Check("the settings of client "+uid, taskd.Count(before.Version)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO client_setting (uid, max_in_flight, updated_at) VALUES (?, ?, ?)
			ON DUPLICATE KEY UPDATE max_in_flight = VALUES(max_in_flight), updated_at = VALUES(updated_at), version = version + 1`,
			uid, n, now); err != nil {
			return err
		}
		after = before
		after.MaxInFlight, after.UpdatedAt, after.Version = n, &now, before.Version+1
		type setting struct {
			MaxInFlight int `json:"max_in_flight"`
		}
		return audit(ctx, tx, actor, "client.update", "user:"+uid, setting{before.MaxInFlight}, setting{n}, now)
	})
	return after, mysqlErr("set max_in_flight", err)
}

// OpenSlots returns uid's max_in_flight and the slots of its open dispatches, in one
// read (the dispatches' open-slot key).
func (s *Store) OpenSlots(ctx context.Context, uid string) (int, []taskd.OpenSlot, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT c.max_in_flight, d.open_slot, d.log_id, d.lease_expires_at
		FROM (SELECT 1) one LEFT JOIN client_setting c ON c.uid = ? LEFT JOIN dispatch d ON d.open_uid = ?`, uid, uid)
	if err != nil {
		return 0, nil, mysqlErr("open slots", err)
	}
	defer rows.Close()
	mif := taskd.DefaultMaxInFlight
	var open []taskd.OpenSlot
	for rows.Next() {
		var n, slot sql.NullInt64
		var logID sql.NullString
		var lease *time.Time
		if err := rows.Scan(&n, &slot, &logID, &lease); err != nil {
			return 0, nil, mysqlErr("open slots", err)
		}
		if n.Valid {
			mif = int(n.Int64)
		}
		if logID.Valid {
			open = append(open, taskd.OpenSlot{Slot: int(slot.Int64), LogID: logID.String, LeaseExpiresAt: lease})
		}
	}
	return mif, open, mysqlErr("open slots", rows.Err())
}

// TaskTemplates returns the template of each of keys that exists (a batch fetch with
// template_ids leaves out, before any claim, the entries of tasks of other templates;
// the claim checks again, in its transaction).
func (s *Store) TaskTemplates(ctx context.Context, keys []taskd.TaskKey) (map[taskd.TaskKey]int64, error) {
	out := make(map[taskd.TaskKey]int64, len(keys))
	for _, kind := range []taskd.Kind{taskd.KindOnce, taskd.KindRotate} {
		var ids []any
		for _, k := range keys {
			if k.Kind == kind {
				ids = append(ids, k.ID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		rows, err := s.db.QueryContext(ctx, "SELECT id, template_id FROM "+taskTable(kind)+" WHERE id IN ("+marks(len(ids))+")", ids...)
		if err != nil {
			return nil, mysqlErr("task templates", err)
		}
		for rows.Next() {
			var id, tpl int64
			if err := rows.Scan(&id, &tpl); err != nil {
				rows.Close()
				return nil, mysqlErr("task templates", err)
			}
			out[taskd.TaskKey{Kind: kind, ID: id}] = tpl
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, mysqlErr("task templates", err)
		}
	}
	return out, nil
}

// Client keys.

// CreateClientKey stores the hash of a client key an admin issued to uid and revokes
// uid's oldest live admin-issued keys beyond keep (the new one included). Keys uid's
// agents enrolled are not touched: they have a cap of their own (EnrollClientKey). It
// returns how many keys it revoked.
func (s *Store) CreateClientKey(ctx context.Context, actor, uid, hash string, keep int, now time.Time) (int, error) {
	return s.createClientKey(ctx, actor, uid, hash, false, keep, now)
}

// EnrollClientKey stores the hash of a client key uid's agent enrolled for itself
// (audited with the actor "enroll") and revokes uid's oldest live enrolled keys beyond
// keep (the new one included), so that enrolling again and again does not pile keys
// up. A key an admin issued is never revoked by an enrollment. It returns how many keys
// it revoked.
func (s *Store) EnrollClientKey(ctx context.Context, uid, hash string, keep int, now time.Time) (int, error) {
	return s.createClientKey(ctx, "enroll", uid, hash, true, keep, now)
}

// createClientKey stores a key of uid, enrolled or admin-issued, and revokes the oldest
// live keys of the same kind beyond keep.
//
// Issues for one uid take turns on uid's client row (lockClient); issues for different
// uids share no lock: every later statement reaches rows by the uid's index or by
// primary key, never by a scan that would wait on another uid's fresh key.
func (s *Store) createClientKey(ctx context.Context, actor, uid, hash string, enrolled bool, keep int, now time.Time) (int, error) {
	var revoked int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		revoked = 0 // a try that met a concurrent transaction counted for nothing
		if err := lockClientKeys(ctx, tx, uid, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx,
			"INSERT INTO client_key (uid, key_hash, created_at, enrolled) VALUES (?, ?, ?, ?)", uid, hash, now, enrolled)
		if err != nil {
			return err
		}
		id, _ := res.LastInsertId()
		s.between(ctx, "client_key.create")
		// The client row is held: every other live key of uid is committed, and this
		// read (at READ COMMITTED, locking nothing) sees them all.
		old, err := int64s(ctx, tx, `SELECT id FROM client_key FORCE INDEX (idx_uid)
			WHERE uid = ? AND revoked_at IS NULL AND enrolled = ? ORDER BY id DESC LIMIT 18446744073709551615 OFFSET ?`,
			uid, enrolled, keep)
		if err != nil {
			return err
		}
		if len(old) > 0 {
			args := append([]any{now}, anys(old)...)
			res, err = tx.ExecContext(ctx, "UPDATE client_key SET revoked_at = ? WHERE id IN ("+marks(len(old))+")", args...)
			if err != nil {
				return err
			}
			revoked, _ = res.RowsAffected()
		}
		return audit(ctx, tx, actor, "client_key.create", "user:"+uid, nil,
			map[string]int64{"key_id": id, "replaced": revoked}, now)
	})
	return int(revoked), mysqlErr("create client key", err)
}

// lockClient locks uid's client row, creating it if uid has none: an upsert on the
// primary key, which takes a record lock on the row and no gap lock, found or not.
// Writers of a client's keys and settings take turns on it.
func lockClient(ctx context.Context, tx *sql.Tx, uid string, now time.Time) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO client (uid, created_at) VALUES (?, ?) ON DUPLICATE KEY UPDATE uid = uid", uid, now)
	return err
}

// lockClientKeys is lockClient for a change of uid's keys: it also notes the change's
// time, which KeyChanges reports to every node, in the same statement. A uid's change
// times only rise (a change after another, on a node whose clock is behind, is noted a
// microsecond after it), so a cached set noting the time of the keys it holds is older
// than any later change (KeysChangedAt).
func lockClientKeys(ctx context.Context, tx *sql.Tx, uid string, now time.Time) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO client (uid, created_at, keys_at) VALUES (?, ?, ?)
		ON DUPLICATE KEY UPDATE keys_at = GREATEST(VALUES(keys_at), COALESCE(keys_at + INTERVAL 1 MICROSECOND, VALUES(keys_at)))`, uid, now, now)
	return err
}

// int64s reads a one-column list of integers.
func int64s(ctx context.Context, q querier, query string, args ...any) ([]int64, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// RevokeClientKeys revokes every key of uid and returns how many were live. It takes
// its turn on uid's client row, as issues do.
func (s *Store) RevokeClientKeys(ctx context.Context, actor, uid string, now time.Time) (int, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := lockClientKeys(ctx, tx, uid, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx,
			"UPDATE client_key FORCE INDEX (idx_uid) SET revoked_at = ? WHERE uid = ? AND revoked_at IS NULL", now, uid)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return audit(ctx, tx, actor, "client_key.revoke_all", "user:"+uid, nil, map[string]int64{"revoked": n}, now)
	})
	return int(n), mysqlErr("revoke client keys", err)
}

// ClientKeyHashes returns the hashes of uid's live keys, and the time of their last
// change (KeyChanges; zero when none was noted), read in one statement.
func (s *Store) ClientKeyHashes(ctx context.Context, uid string) ([]string, time.Time, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT NULL, keys_at FROM client WHERE uid = ?
		UNION ALL SELECT key_hash, NULL FROM client_key WHERE uid = ? AND revoked_at IS NULL`, uid, uid)
	if err != nil {
		return nil, time.Time{}, mysqlErr("client keys", err)
	}
	defer rows.Close()
	var out []string
	var changed time.Time
	for rows.Next() {
		var h sql.NullString
		var at sql.NullTime
		if err := rows.Scan(&h, &at); err != nil {
			return nil, time.Time{}, mysqlErr("client keys", err)
		}
		if h.Valid {
			out = append(out, h.String)
		} else if at.Valid {
			changed = at.Time
		}
	}
	return out, changed, mysqlErr("client keys", rows.Err())
}

// KeyChanges returns the changes of client keys noted after (at, uid), in that order,
// at most limit of them: a caller pages through them by passing the last one back.
func (s *Store) KeyChanges(ctx context.Context, at time.Time, uid string, limit int) ([]taskd.KeyChange, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT uid, keys_at FROM client FORCE INDEX (idx_keys_at)
		WHERE keys_at >= ? AND (keys_at > ? OR uid > ?) ORDER BY keys_at, uid LIMIT ?`, at, at, uid, limit)
	if err != nil {
		return nil, mysqlErr("key changes", err)
	}
	defer rows.Close()
	var out []taskd.KeyChange
	for rows.Next() {
		var c taskd.KeyChange
		if err := rows.Scan(&c.UID, &c.At); err != nil {
			return nil, mysqlErr("key changes", err)
		}
		out = append(out, c)
	}
	return out, mysqlErr("key changes", rows.Err())
}
