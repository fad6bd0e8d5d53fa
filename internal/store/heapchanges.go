package store

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/taskpull/taskd"
)

// Heap changes: every admin change that invalidates cached heaps after its commit (a
// task created, edited or deleted; a membership change; an intervention on a dispatch
// record) also notes, in its own transaction, what it invalidates: an executor (uid_<id>
// or gid_<id>) and the change's time. Every node reads the recent ones (HeapChanges)
// and applies again in Redis each invalidation that is missing, so that one lost between
// the commit and Redis (a process that died, a Redis failover) reaches the cache within
// seconds rather than when the heap's window renews.

// noteHeapChanges notes that the change tx makes at now invalidates the heaps of
// targets (executors; repeats and empty strings are dropped), in one multi-row
// statement per memberChunk targets.
func noteHeapChanges(ctx context.Context, tx *sql.Tx, now time.Time, targets ...string) error {
	targets = slices.DeleteFunc(slices.Clone(targets), func(t string) bool { return t == "" })
	slices.Sort(targets)
	targets = slices.Compact(targets)
	for chunk := range slices.Chunk(targets, memberChunk) {
		args := make([]any, 0, 2*len(chunk))
		for _, t := range chunk {
			args = append(args, t, now)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO heap_change (target, at) VALUES "+tuples(len(chunk), 2), args...); err != nil {
			return err
		}
	}
	return nil
}

// NoteHeapChanges notes, in a transaction of its own, that heaps of targets went stale
// at now: for a change already committed whose invalidation Redis refused (the
// dispatch path's: an expiry, a retry's wait), so that the feed applies it once Redis
// answers again.
func (s *Store) NoteHeapChanges(ctx context.Context, now time.Time, targets ...string) error {
	return mysqlErr("note heap changes", s.inTx(ctx, func(tx *sql.Tx) error { return noteHeapChanges(ctx, tx, now, targets...) }))
}

// userTargets are the executors of uids.
func userTargets(uids []string) []string {
	out := make([]string, len(uids))
	for i, u := range uids {
		out[i] = taskd.UserExecutor(u)
	}
	return out
}

// HeapChanges returns the heap changes noted after (at, id), in that order, at most
// limit of them: a caller pages through them by passing the last one back. One
// statement on idx_at.
func (s *Store) HeapChanges(ctx context.Context, at time.Time, id int64, limit int) ([]taskd.HeapChange, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, target, at FROM heap_change FORCE INDEX (idx_at)
		WHERE at >= ? AND (at > ? OR id > ?) ORDER BY at, id LIMIT ?`, at.UTC(), at.UTC(), id, limit)
	if err != nil {
		return nil, mysqlErr("heap changes", err)
	}
	defer rows.Close()
	var out []taskd.HeapChange
	for rows.Next() {
		var c taskd.HeapChange
		if err := rows.Scan(&c.ID, &c.Target, &c.At); err != nil {
			return nil, mysqlErr("heap changes", err)
		}
		c.At = c.At.UTC()
		out = append(out, c)
	}
	return out, mysqlErr("heap changes", rows.Err())
}

// PruneHeapChanges deletes up to limit heap changes noted before cutoff (by idx_at)
// and says how many it deleted.
func (s *Store) PruneHeapChanges(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	res, err := s.db.ExecContext(ctx, "DELETE FROM heap_change WHERE at < ? ORDER BY at LIMIT ?", cutoff.UTC(), limit)
	if err != nil {
		return 0, mysqlErr("prune heap changes", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
