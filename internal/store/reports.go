package store

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// ListTasks returns up to limit tasks matching f in (kind, id) order, after the task
// key after (zero: from the start), and whether more follow.
func (s *Store) ListTasks(ctx context.Context, f taskd.TaskFilter, after taskd.TaskKey, limit int) ([]taskd.Task, bool, error) {
	out := []taskd.Task{}
	for _, kind := range []taskd.Kind{taskd.KindOnce, taskd.KindRotate} {
		if (f.Kind != 0 && f.Kind != kind) || (after.Kind != 0 && kind < after.Kind) {
			continue
		}
		q := selectTask(kind) + " WHERE 1 = 1"
		var args []any
		if f.Executor != "" {
			q += " AND t.executor = ?"
			args = append(args, f.Executor)
		}
		if f.TemplateID != 0 {
			q += " AND t.template_id = ?"
			args = append(args, f.TemplateID)
		}
		if f.Status != 0 {
			q += " AND t.status = ?"
			args = append(args, f.Status)
		} else {
			q += " AND t.status <> ?"
			args = append(args, taskd.StatusDeleted)
		}
		if after.Kind == kind {
			q += " AND t.id > ?"
			args = append(args, after.ID)
		}
		q += " ORDER BY t.id LIMIT ?"
		args = append(args, limit+1-len(out))
		rows, err := s.db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, false, mysqlErr("list tasks", err)
		}
		for rows.Next() {
			t, err := scanTask(rows, kind)
			if err != nil {
				rows.Close()
				return nil, false, mysqlErr("list tasks", err)
			}
			out = append(out, t)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, false, mysqlErr("list tasks", err)
		}
		if len(out) > limit {
			return out[:limit], true, nil
		}
	}
	return out, false, nil
}

// Claims returns the claimed counts of the given tasks' occurrences due in [from, to),
// by occurrence key.
func (s *Store) Claims(ctx context.Context, tasks []taskd.TaskKey, from, to time.Time) (map[string]int, error) {
	out := map[string]int{}
	byKind := map[taskd.Kind][]any{}
	for _, k := range tasks {
		byKind[k.Kind] = append(byKind[k.Kind], k.ID)
	}
	for kind, ids := range byKind {
		args := append([]any{kind}, ids...)
		args = append(args, from, to)
		rows, err := s.db.QueryContext(ctx, `SELECT task_id, due_at, claimed FROM occurrence_claim
			WHERE task_kind = ? AND task_id IN (?`+strings.Repeat(", ?", len(ids)-1)+`) AND due_at >= ? AND due_at < ?`, args...)
		if err != nil {
			return nil, mysqlErr("claims", err)
		}
		for rows.Next() {
			var o taskd.Occurrence
			var n int
			if err := rows.Scan(&o.Task.ID, &o.DueAt, &n); err != nil {
				rows.Close()
				return nil, mysqlErr("claims", err)
			}
			o.Task.Kind, o.DueAt = kind, o.DueAt.UTC()
			out[o.String()] = n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, mysqlErr("claims", err)
		}
	}
	return out, nil
}

// Overview counts the active tasks due in the hour before now and the hour after, the
// open, retry-waiting and dead dispatches (through the state index) and the events
// waiting in the outbox.
func (s *Store) Overview(ctx context.Context, now time.Time) (taskd.Overview, error) {
	var o taskd.Overview
	from, to := now.Add(-time.Hour), now.Add(time.Hour)
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(CASE WHEN start_time <= ? THEN 1 END), COUNT(CASE WHEN start_time > ? THEN 1 END)
		FROM task_once WHERE status = ? AND start_time > ? AND start_time <= ?`,
		now, now, taskd.StatusActive, from, to).Scan(&o.DueNow, &o.DueNextHour)
	if err != nil {
		return o, mysqlErr("overview", err)
	}
	rotates, err := s.db.QueryContext(ctx, `SELECT start_time, space_minutes, end_time, cron, time_zone FROM task_rotate
		WHERE status = ? AND start_time <= ? AND (end_time IS NULL OR end_time > ?)`, taskd.StatusActive, to, from)
	if err != nil {
		return o, mysqlErr("overview", err)
	}
	defer rotates.Close()
	for rotates.Next() {
		var space int
		var end sql.NullTime
		var cron, zone sql.NullString
		r := taskd.Rotation{}
		if err := rotates.Scan(&r.Start, &space, &end, &cron, &zone); err != nil {
			return o, mysqlErr("overview", err)
		}
		r.Start, r.Space = r.Start.UTC(), time.Duration(space)*time.Minute
		if end.Valid {
			r.End = end.Time.UTC()
		}
		if cron.Valid {
			if r.Cron, err = taskd.CronOf(cron.String + ";" + zone.String); err != nil {
				return o, err
			}
		}
		within := func(a, b time.Time) bool { // an occurrence in (a, b]?
			at, ok := r.After(a)
			return ok && !at.After(b)
		}
		if within(from, now) {
			o.DueNow++
		}
		if within(now, to) {
			o.DueNextHour++
		}
	}
	if err := rotates.Err(); err != nil {
		return o, mysqlErr("overview", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT state, COUNT(*) FROM dispatch WHERE state IN (1, 2, 6) GROUP BY state`)
	if err != nil {
		return o, mysqlErr("overview", err)
	}
	defer rows.Close()
	for rows.Next() {
		var state, n int
		if err := rows.Scan(&state, &n); err != nil {
			return o, mysqlErr("overview", err)
		}
		switch state {
		case 1:
			o.OpenDispatches = n
		case 2:
			o.RetryWaiting = n
		case 6:
			o.Dead = n
		}
	}
	if err := rows.Err(); err != nil {
		return o, mysqlErr("overview", err)
	}
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_outbox`).Scan(&o.OutboxPending); err != nil {
		return o, mysqlErr("overview", err)
	}
	// The oldest by the primary key (ids grow with time), not a scan for MIN(created_at).
	var oldest sql.NullTime
	err = s.db.QueryRowContext(ctx, `SELECT created_at FROM event_outbox ORDER BY id LIMIT 1`).Scan(&oldest)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return o, mysqlErr("overview", err)
	}
	if oldest.Valid {
		t := oldest.Time.UTC()
		o.OutboxOldestAt = &t
	}
	return o, nil
}

// Stats summarises every task with activity in [from, to): dispatches made in the
// range, open ones included (and their redos), completions (success), failures,
// expiries and dead occurrences that happened in it, completion latency percentiles, and the quota claimed and remaining over the
// occurrences due in it (remaining is null for unlimited tasks).
func (s *Store) Stats(ctx context.Context, from, to time.Time) ([]taskd.TaskStats, error) {
	byKey := map[taskd.TaskKey]*taskd.TaskStats{}
	get := func(k taskd.TaskKey) *taskd.TaskStats {
		st, ok := byKey[k]
		if !ok {
			st = &taskd.TaskStats{TaskID: k.String()}
			byKey[k] = st
		}
		return st
	}
	rows, err := s.db.QueryContext(ctx, `SELECT task_kind, task_id,
		COUNT(CASE WHEN dispatched_at >= ? AND dispatched_at < ? THEN 1 END),
		COUNT(CASE WHEN result = 1 AND finished_at >= ? AND finished_at < ? THEN 1 END),
		COUNT(CASE WHEN result = 2 AND finished_at >= ? AND finished_at < ? THEN 1 END),
		COUNT(CASE WHEN (state = 4 OR (state = 6 AND result IS NULL)) AND finished_at >= ? AND finished_at < ? THEN 1 END),
		COUNT(CASE WHEN state = 6 AND finished_at >= ? AND finished_at < ? THEN 1 END),
		COALESCE(SUM(CASE WHEN dispatched_at >= ? AND dispatched_at < ? THEN redo_count ELSE 0 END), 0)
		FROM dispatch
		WHERE `+inWindow("")+`
		GROUP BY task_kind, task_id`,
		append([]any{from, to, from, to, from, to, from, to, from, to, from, to}, windowArgs(from, to)...)...)
	if err != nil {
		return nil, mysqlErr("stats", err)
	}
	for rows.Next() {
		var k taskd.TaskKey
		var d, c, f, x, dead, r int
		if err := rows.Scan(&k.Kind, &k.ID, &d, &c, &f, &x, &dead, &r); err != nil {
			rows.Close()
			return nil, mysqlErr("stats", err)
		}
		st := get(k)
		st.Dispatched, st.Completed, st.Failed, st.Expired, st.Dead, st.Redo = d, c, f, x, dead, r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, mysqlErr("stats", err)
	}

	rows, err = s.db.QueryContext(ctx, `SELECT task_kind, task_id,
		TIMESTAMPDIFF(MICROSECOND, dispatched_at, finished_at) DIV 1000 FROM dispatch
		WHERE changed_at >= ? AND result IS NOT NULL AND finished_at >= ? AND finished_at < ?`, from, from, to)
	if err != nil {
		return nil, mysqlErr("stats", err)
	}
	latencies := map[taskd.TaskKey][]int64{}
	for rows.Next() {
		var k taskd.TaskKey
		var ms int64
		if err := rows.Scan(&k.Kind, &k.ID, &ms); err != nil {
			rows.Close()
			return nil, mysqlErr("stats", err)
		}
		latencies[k] = append(latencies[k], ms)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, mysqlErr("stats", err)
	}
	for k, ls := range latencies {
		sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
		st := get(k)
		st.LatencyMSP50, st.LatencyMSP95 = percentile(ls, 50), percentile(ls, 95)
	}

	// Occurrences missed by a misfire policy, by the time their run was recorded.
	rows, err = s.db.QueryContext(ctx, `SELECT task_kind, task_id, SUM(missed) FROM missed_occurrence
		WHERE missed_at >= ? AND missed_at < ? GROUP BY task_kind, task_id`, from, to)
	if err != nil {
		return nil, mysqlErr("stats", err)
	}
	for rows.Next() {
		var k taskd.TaskKey
		var n int
		if err := rows.Scan(&k.Kind, &k.ID, &n); err != nil {
			rows.Close()
			return nil, mysqlErr("stats", err)
		}
		get(k).Missed = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, mysqlErr("stats", err)
	}

	for _, kind := range []taskd.Kind{taskd.KindOnce, taskd.KindRotate} {
		rows, err := s.db.QueryContext(ctx, `SELECT c.task_id, SUM(c.claimed),
			SUM(GREATEST(t.dispatch_times - c.claimed, 0)), MIN(t.dispatch_times)
			FROM occurrence_claim c JOIN `+taskTable(kind)+` t ON t.id = c.task_id
			WHERE c.task_kind = ? AND c.due_at >= ? AND c.due_at < ?
			GROUP BY c.task_id`, kind, from, to)
		if err != nil {
			return nil, mysqlErr("stats", err)
		}
		for rows.Next() {
			k := taskd.TaskKey{Kind: kind}
			var claimed, remaining, quota int
			if err := rows.Scan(&k.ID, &claimed, &remaining, &quota); err != nil {
				rows.Close()
				return nil, mysqlErr("stats", err)
			}
			st := get(k)
			st.Claimed = claimed
			if quota != taskd.Unlimited {
				st.Remaining = &remaining
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, mysqlErr("stats", err)
		}
	}

	keys := make([]taskd.TaskKey, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a.Kind < b.Kind || (a.Kind == b.Kind && a.ID < b.ID)
	})
	out := make([]taskd.TaskStats, len(keys))
	for i, k := range keys {
		out[i] = *byKey[k]
	}
	return out, nil
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []int64, p int) *int64 {
	if len(sorted) == 0 {
		return nil
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	v := sorted[max(rank, 1)-1]
	return &v
}

// inWindow is the condition of the records (of table alias a, "" for none) dispatched
// or finished in a window, with windowArgs's arguments: each half walks a key (the
// primary key's range of ids, idx_changed from the window's start), and MySQL merges
// the two.
func inWindow(a string) string {
	if a != "" {
		a += "."
	}
	return "((" + a + "log_id >= ? AND " + a + "log_id <= ? AND " + a + "dispatched_at >= ? AND " + a + "dispatched_at < ?) OR (" +
		a + "changed_at >= ? AND " + a + "finished_at >= ? AND " + a + "finished_at < ?))"
}

// windowArgs are inWindow's arguments for [from, to).
func windowArgs(from, to time.Time) []any {
	return []any{logIDFloor(from), logIDCeiling(to), from, to, from, from, to}
}
