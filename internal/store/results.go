package store

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"

	"github.com/taskpull/taskd"
)

// A task's results (GET /v1/admin/tasks/{kind}/{id}/results): its finished dispatch
// records, numbered in the order they became visible. The numbers are given after the
// commits, by the readers, one numbering of a task at a time (migration 0036 tells
// why): NumberResults numbers what finished since, ResultsAfter reads by number, and
// ResultsMarks tells a waiter when to look again.
//
// A finished record is one with finished_at set that is not an unconfirmed success
// (which has no result yet: it becomes one when its user confirms it or it lapses, and
// its finished_at moves there). Each finished record is numbered once, whatever
// becomes of it later (a failure waiting for its retry that is retried or cancelled
// keeps its number).

// unnumbered are the finished records of a task without a number, found on
// idx_results: those of (task_kind, task_id, NULL) with finished_at set.
const unnumbered = "task_kind = ? AND task_id = ? AND result_seq IS NULL AND finished_at IS NOT NULL AND state <> ?"

// NumberResults numbers up to limit of task's finished records that have no number
// yet, in the order they finished (finished_at, then log id), after the last number
// the task gave, and says how many it numbered. It reads without a lock first: a task
// with nothing to number costs one index probe.
func (s *Store) NumberResults(ctx context.Context, task taskd.TaskKey, limit int) (int, error) {
	args := []any{task.Kind, task.ID, taskd.StateUnconfirmed}
	var one int
	err := s.db.QueryRowContext(ctx, "SELECT 1 FROM dispatch FORCE INDEX (idx_results) WHERE "+unnumbered+" LIMIT 1",
		args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, mysqlErr("number results", err)
	}
	n := 0
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		n = 0
		// The counter row, made by the task's first numbering, held until the commit:
		// numberings of the task run one at a time.
		if _, err := tx.ExecContext(ctx, `INSERT INTO result_sequence (task_kind, task_id, seq) VALUES (?, ?, 0)
			ON DUPLICATE KEY UPDATE seq = seq`, task.Kind, task.ID); err != nil {
			return err
		}
		var seq int64
		if err := tx.QueryRowContext(ctx, "SELECT seq FROM result_sequence WHERE task_kind = ? AND task_id = ? FOR UPDATE",
			task.Kind, task.ID).Scan(&seq); err != nil {
			return err
		}
		// At READ COMMITTED this sees every commit so far, a numbering's that held the
		// lock before this one among them.
		rows, err := tx.QueryContext(ctx, "SELECT log_id FROM dispatch FORCE INDEX (idx_results) WHERE "+unnumbered+
			" ORDER BY finished_at, log_id LIMIT ?", append(args, limit)...)
		if err != nil {
			return err
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		u := caseUpdate{key: "log_id"}
		for _, id := range ids {
			seq++
			u.keys = append(u.keys, id)
			u.set("result_seq", seq)
		}
		q, qargs := u.statement("dispatch")
		if _, err := tx.ExecContext(ctx, q, qargs...); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE result_sequence SET seq = ? WHERE task_kind = ? AND task_id = ?",
			seq, task.Kind, task.ID); err != nil {
			return err
		}
		n = len(ids)
		return nil
	})
	return n, mysqlErr("number results", err)
}

// ResultsAfter returns up to limit of task's results numbered above after, in their
// numbers' order: one range of idx_results.
func (s *Store) ResultsAfter(ctx context.Context, task taskd.TaskKey, after int64, limit int) ([]taskd.NumberedRecord, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT "+recordColumns+`, result_seq FROM dispatch FORCE INDEX (idx_results)
		WHERE task_kind = ? AND task_id = ? AND result_seq > ? ORDER BY result_seq LIMIT ?`, task.Kind, task.ID, after, limit)
	if err != nil {
		return nil, mysqlErr("task results", err)
	}
	defer rows.Close()
	out := []taskd.NumberedRecord{}
	for rows.Next() {
		var n taskd.NumberedRecord
		if n.Record, err = scanRecord(withSeq{rows, &n.Seq}); err != nil {
			return nil, mysqlErr("task results", err)
		}
		out = append(out, n)
	}
	return out, mysqlErr("task results", rows.Err())
}

// withSeq scans recordColumns and then the result's number.
type withSeq struct {
	rows *sql.Rows
	seq  *int64
}

func (w withSeq) Scan(dest ...any) error { return w.rows.Scan(append(dest, w.seq)...) }

// ResultsMarks returns the results mark (taskd.ResultsMark) of each of tasks that
// exists, deleted or not, in four statements per memberChunk tasks whatever their
// number: the tasks' rows, their counters, and the finished records waiting for a
// number (few: they wait only until a reader numbers them).
func (s *Store) ResultsMarks(ctx context.Context, tasks []taskd.TaskKey) (map[taskd.TaskKey]taskd.ResultsMark, error) {
	out := make(map[taskd.TaskKey]taskd.ResultsMark, len(tasks))
	for chunk := range slices.Chunk(tasks, memberChunk) {
		if err := s.resultsMarks(ctx, chunk, out); err != nil {
			return nil, mysqlErr("results marks", err)
		}
	}
	return out, nil
}

func (s *Store) resultsMarks(ctx context.Context, tasks []taskd.TaskKey, out map[taskd.TaskKey]taskd.ResultsMark) error {
	ids := map[taskd.Kind][]any{}
	var pairs []any
	for _, k := range tasks {
		ids[k.Kind] = append(ids[k.Kind], k.ID)
		pairs = append(pairs, k.Kind, k.ID)
	}
	scan := func(q string, args []any, each func(rows *sql.Rows) error) error {
		rows, err := s.db.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := each(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	for _, kind := range []taskd.Kind{taskd.KindOnce, taskd.KindRotate} {
		if len(ids[kind]) == 0 {
			continue
		}
		err := scan("SELECT id, status, version FROM "+taskTable(kind)+" WHERE id IN ("+marks(len(ids[kind]))+")", ids[kind],
			func(rows *sql.Rows) error {
				k := taskd.TaskKey{Kind: kind}
				var m taskd.ResultsMark
				if err := rows.Scan(&k.ID, &m.Status, &m.Version); err != nil {
					return err
				}
				out[k] = m
				return nil
			})
		if err != nil {
			return err
		}
	}
	update := func(rows *sql.Rows, set func(*taskd.ResultsMark, int64)) error {
		var k taskd.TaskKey
		var v int64
		if err := rows.Scan(&k.Kind, &k.ID, &v); err != nil {
			return err
		}
		if m, ok := out[k]; ok {
			set(&m, v)
			out[k] = m
		}
		return nil
	}
	err := scan("SELECT task_kind, task_id, seq FROM result_sequence WHERE "+anyOf(len(tasks), "task_kind", "task_id"), pairs,
		func(rows *sql.Rows) error {
			return update(rows, func(m *taskd.ResultsMark, seq int64) { m.Seq = seq })
		})
	if err != nil {
		return err
	}
	pending := make([]string, len(tasks))
	for i := range tasks {
		pending[i] = "(task_kind = ? AND task_id = ? AND result_seq IS NULL AND finished_at IS NOT NULL)"
	}
	return scan(`SELECT task_kind, task_id, 1 FROM dispatch FORCE INDEX (idx_results)
		WHERE (`+strings.Join(pending, " OR ")+`) AND state <> ? GROUP BY task_kind, task_id`,
		append(pairs, taskd.StateUnconfirmed), func(rows *sql.Rows) error {
			return update(rows, func(m *taskd.ResultsMark, _ int64) { m.Pending = true })
		})
}
