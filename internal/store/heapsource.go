package store

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// The heap's source (queue.Loader): what a user's heap is built from, its groups, its
// cursor, the tasks offered to its executors and its waiting dispatches.

// UserGroups returns the ids of the groups uid belongs to.
func (s *Store) UserGroups(ctx context.Context, uid string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT gid FROM group_member WHERE uid = ? ORDER BY gid", uid)
	if err != nil {
		return nil, mysqlErr("user groups", err)
	}
	defer rows.Close()
	var gids []string
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return nil, mysqlErr("user groups", err)
		}
		gids = append(gids, g)
	}
	return gids, mysqlErr("user groups", rows.Err())
}

// LoadSource reads uid's cursor and exclude set and (see OfferTasks) the active tasks
// targeted at uid or its groups that can have an occurrence in [from, until).
func (s *Store) LoadSource(ctx context.Context, uid string, groups []string, from, until time.Time) (schedule.Source, error) {
	var src schedule.Source
	cursor, keys, err := userState(ctx, s.db, uid)
	if err != nil {
		return src, mysqlErr("load source", err)
	}
	src.Cursor = cursor
	src.Exclude = make(map[string]bool, len(keys))
	for _, k := range keys {
		src.Exclude[k] = true
	}

	executors := make([]string, 0, 1+len(groups))
	executors = append(executors, taskd.UserExecutor(uid))
	for _, g := range groups {
		executors = append(executors, taskd.GroupExecutor(g))
	}
	tasks, err := s.OfferTasks(ctx, executors, from, until)
	if err != nil {
		return src, err
	}
	src.Once, src.Rotate = tasks.Once, tasks.Rotate
	src.WindowFrom = from.Add(-taskd.MaxWindowWait)
	if src.Once, err = s.leaveHeld(ctx, uid, src.Once, from); err != nil {
		return src, err
	}
	if src.Waiting, err = s.waiting(ctx, uid); err != nil {
		return src, err
	}
	return src, nil
}

// leaveHeld drops from once the tasks with windows due before from (offered past the
// catch-up only because they wait for a window) that uid holds already (its
// once_per_user hold, taken when it was handed out to uid): they would cost a claim
// each, refused, at every rebuild for a week, and crowd a cut heap.
func (s *Store) leaveHeld(ctx context.Context, uid string, once []schedule.OnceTask, from time.Time) ([]schedule.OnceTask, error) {
	var args []any
	for _, t := range once {
		if t.Windows != "" && t.Start.Before(from) {
			args = append(args, t.ID, t.Start)
		}
	}
	if len(args) == 0 {
		return once, nil
	}
	rows, err := s.db.QueryContext(ctx, `SELECT task_id, due_at FROM occurrence_user
		WHERE task_kind = 1 AND uid = ? AND released = 0 AND (task_id, due_at) IN (`+tuples(len(args)/2, 2)+`)`,
		append([]any{uid}, args...)...)
	if err != nil {
		return nil, mysqlErr("held once tasks", err)
	}
	defer rows.Close()
	held := map[int64]bool{}
	for rows.Next() {
		var id int64
		var due time.Time
		if err := rows.Scan(&id, &due); err != nil {
			return nil, mysqlErr("held once tasks", err)
		}
		held[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, mysqlErr("held once tasks", err)
	}
	return slices.DeleteFunc(once, func(t schedule.OnceTask) bool { return held[t.ID] }), nil
}

// waiting lists uid's dispatches waiting beside its open slot: retries, next stages
// and dead attempts an admin retried (from their retry time), and, when their task is active, parked open dispatches and expired ones
// with attempts left (at once), and successes waiting for their confirmation (confirm
// entries).
func (s *Store) waiting(ctx context.Context, uid string) ([]schedule.WaitingDispatch, error) {
	return s.waitingWhere(ctx, "d.waiting_uid = ?", uid)
}

// WaitingOf is uid's dispatch logID as the user's heap offers it while it waits
// (waiting): ok is false when it does not wait for uid, or its heap would not offer
// it (its task is paused).
func (s *Store) WaitingOf(ctx context.Context, uid, logID string) (w schedule.WaitingDispatch, ok bool, err error) {
	ws, err := s.waitingWhere(ctx, "d.log_id = ? AND d.waiting_uid = ?", logID, uid)
	if err != nil || len(ws) == 0 {
		return w, false, err
	}
	return ws[0], true, nil
}

// waitingWhere reads the waiting dispatches where says, as waiting answers them.
func (s *Store) waitingWhere(ctx context.Context, where string, args ...any) ([]schedule.WaitingDispatch, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT d.log_id, d.state, d.due_at, d.retry_at,
		COALESCE(o.status, r.status, 3), COALESCE(o.priority, r.priority, 5), COALESCE(o.windows, r.windows, p.windows)
		FROM dispatch d
		LEFT JOIN task_once o ON d.task_kind = 1 AND o.id = d.task_id
		LEFT JOIN task_rotate r ON d.task_kind = 2 AND r.id = d.task_id
		LEFT JOIN task_params_template p ON p.id = d.template_id
		WHERE `+where, args...)
	if err != nil {
		return nil, mysqlErr("waiting dispatches", err)
	}
	defer rows.Close()
	var out []schedule.WaitingDispatch
	for rows.Next() {
		var w schedule.WaitingDispatch
		var state taskd.DispatchState
		var due time.Time
		var retryAt sql.NullTime
		var status taskd.Status
		var windows sql.NullString
		if err := rows.Scan(&w.LogID, &state, &due, &retryAt, &status, &w.Priority, &windows); err != nil {
			return nil, mysqlErr("waiting dispatches", err)
		}
		ws, err := taskd.ParseWindows(windows.String)
		if err != nil {
			return nil, err
		}
		w.Windows = ws.Key() // a retry waits for its task's windows too
		switch {
		case state == taskd.StateUnconfirmed:
			// A success waiting for the user's next fetch: a confirm entry at the
			// front of the heap, whatever its task's status (the user came back or
			// not, whatever became of the task).
			w.Confirm, w.Priority, w.Windows = true, 9, "" // confirmed by any fetch, window or not
		case (state == taskd.StateRetryWait || state == taskd.StateStaged || state == taskd.StateDead) && retryAt.Valid &&
			status != taskd.StatusPaused:
			w.At = retryAt.Time.UTC()
		case (state == taskd.StateOpen || state == taskd.StateExpired) && status == taskd.StatusActive:
			w.At = due.UTC()
		default:
			continue // its task is paused: the resume rebuilds the heap
		}
		out = append(out, w)
	}
	return out, mysqlErr("waiting dispatches", rows.Err())
}

// OfferTasks reads the active tasks targeted at executors that can have an occurrence
// in [from, until): once tasks starting in the range, rotate tasks started before until
// and not ended before from. Both queries lead with executor, the index's first column.
func (s *Store) OfferTasks(ctx context.Context, executors []string, from, until time.Time) (schedule.TaskSet, error) {
	out := schedule.TaskSet{Quota: map[taskd.TaskKey]int{}}
	in := "?" + strings.Repeat(", ?", len(executors)-1)
	args := make([]any, 0, 2*len(executors)+6)
	for _, e := range executors {
		args = append(args, e)
	}
	// A once task with windows stays on offer past the catch-up window, waiting for
	// one to open (taskd.MaxWindowWait).
	args = append(args, from.Add(-taskd.MaxWindowWait), until, taskd.StatusActive, from)
	for _, e := range executors {
		args = append(args, e)
	}
	args = append(args, until, from, taskd.StatusActive)
	rows, err := s.db.QueryContext(ctx, `
		SELECT 1, t.id, t.start_time, 0, NULL, NULL, NULL, t.priority, t.dispatch_times, COALESCE(t.windows, p.windows), 0,
		       COALESCE(p.ddi, 0)
		  FROM task_once t LEFT JOIN task_params_template p ON p.id = t.template_id
		 WHERE t.executor IN (`+in+`) AND t.start_time >= ? AND t.start_time < ? AND t.status = ?
		   AND (t.start_time >= ? OR COALESCE(t.windows, p.windows) IS NOT NULL)
		UNION ALL
		SELECT 2, t.id, t.start_time, t.space_minutes, t.end_time, t.cron, t.time_zone, t.priority, t.dispatch_times,
		       COALESCE(t.windows, p.windows), t.misfire, COALESCE(p.ddi, 0)
		  FROM task_rotate t LEFT JOIN task_params_template p ON p.id = t.template_id
		 WHERE t.executor IN (`+in+`) AND t.start_time < ? AND (t.end_time IS NULL OR t.end_time >= ?) AND t.status = ?`,
		args...)
	if err != nil {
		return out, mysqlErr("offer tasks", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind taskd.Kind
		var id, space int64
		var start time.Time
		var end sql.NullTime
		var cron, zone, windows sql.NullString
		var prio, quota int
		var misfire taskd.Misfire
		var ddi bool
		if err := rows.Scan(&kind, &id, &start, &space, &end, &cron, &zone, &prio, &quota, &windows, &misfire, &ddi); err != nil {
			return out, mysqlErr("offer tasks", err)
		}
		ws, err := taskd.ParseWindows(windows.String)
		if err != nil {
			return out, err
		}
		out.Quota[taskd.TaskKey{Kind: kind, ID: id}] = quota
		if kind == taskd.KindOnce {
			out.Once = append(out.Once, schedule.OnceTask{ID: id, Start: start.UTC(), Priority: prio, Windows: ws.Key(), DDI: ddi})
			continue
		}
		rt := schedule.RotateTask{ID: id, Start: start.UTC(), Space: time.Duration(space) * time.Minute, Priority: prio,
			Windows: ws.Key(), Misfire: misfire, DDI: ddi}
		if end.Valid {
			rt.End = end.Time.UTC()
		}
		if cron.Valid {
			c, err := taskd.CronOf(cron.String + ";" + zone.String)
			if err != nil {
				return out, err
			}
			rt.Space, rt.Cron = 0, c
		}
		out.Rotate = append(out.Rotate, rt)
	}
	return out, mysqlErr("offer tasks", rows.Err())
}
