package store

import (
	"context"
	"strings"

	"github.com/taskpull/taskd"
)

// OutcomeFigures returns the dispatch figures of tasks that their outcomes
// (taskd.Task.Outcome) are decided on: for every task, its unfinished dispatches (read
// through the state index: few are unfinished at any time, however many a rotating
// task has finished), counting an ended attempt whose next waits for its user; for the
// once tasks their occurrence's claimed slots (read first), and for those with none
// unfinished their successes and deaths (read through the occurrence index: at most a
// quota's worth of attempts). A task with one unfinished has no outcome, and its
// successes and deaths are left zero.
func (s *Store) OutcomeFigures(ctx context.Context, tasks []taskd.TaskKey) (map[taskd.TaskKey]taskd.OutcomeFigures, error) {
	out := make(map[taskd.TaskKey]taskd.OutcomeFigures, len(tasks))
	if len(tasks) == 0 {
		return out, nil
	}
	var all, once []string
	var allArgs, onceArgs []any
	for _, k := range tasks {
		all, allArgs = append(all, "(task_kind = ? AND task_id = ?)"), append(allArgs, k.Kind, k.ID)
		if k.Kind == taskd.KindOnce {
			once, onceArgs = append(once, "(task_kind = ? AND task_id = ?)"), append(onceArgs, k.Kind, k.ID)
		}
	}
	scan := func(query string, args []any, set func(k taskd.TaskKey, f *taskd.OutcomeFigures, a, b int)) error {
		rows, err := s.db.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k taskd.TaskKey
			var a, b int
			if err := rows.Scan(&k.Kind, &k.ID, &a, &b); err != nil {
				return err
			}
			f := out[k]
			set(k, &f, a, b)
			out[k] = f
		}
		return rows.Err()
	}
	// The claimed slots are read before the unfinished dispatches: a claim made after
	// the count of the unfinished would otherwise be counted claimed and not
	// unfinished, and a once task whose last slot was claimed just then would look done
	// with its last dispatch open (a results read would answer done without it). Read
	// in this order, every slot claimed by the first read is finished by the second if
	// it counts none unfinished (a slot an expiry gave back is held by a record waiting
	// for its user, counted unfinished below, until it is claimed again).
	if len(once) > 0 {
		err := scan(`SELECT task_kind, task_id, SUM(claimed), 0 FROM occurrence_claim WHERE `+strings.Join(once, " OR ")+`
			GROUP BY task_kind, task_id`, onceArgs,
			func(_ taskd.TaskKey, f *taskd.OutcomeFigures, n, _ int) { f.Claimed = n })
		if err != nil {
			return out, mysqlErr("task outcomes", err)
		}
	}
	// An unconfirmed success is unfinished: it may yet become a failure and be retried.
	err := scan(`SELECT task_kind, task_id, COUNT(*), 0 FROM dispatch WHERE state IN (?, ?, ?, ?) AND (`+strings.Join(all, " OR ")+`)
		GROUP BY task_kind, task_id`, append([]any{taskd.StateOpen, taskd.StateRetryWait, taskd.StateStaged, taskd.StateUnconfirmed}, allArgs...),
		func(_ taskd.TaskKey, f *taskd.OutcomeFigures, n, _ int) { f.Unfinished = n })
	if err != nil {
		return out, mysqlErr("task outcomes", err)
	}
	// So is an attempt that ended and waits for its user to take the next (an expiry
	// with attempts left, a dead dispatch an admin sent back): read through the waiting
	// index, as few wait at any time.
	err = scan(`SELECT task_kind, task_id, COUNT(*), 0 FROM dispatch WHERE waiting_uid IS NOT NULL AND state NOT IN (?, ?, ?, ?)
		AND (`+strings.Join(all, " OR ")+`) GROUP BY task_kind, task_id`,
		append([]any{taskd.StateOpen, taskd.StateRetryWait, taskd.StateStaged, taskd.StateUnconfirmed}, allArgs...),
		func(_ taskd.TaskKey, f *taskd.OutcomeFigures, n, _ int) { f.Unfinished += n })
	if err != nil {
		return out, mysqlErr("task outcomes", err)
	}
	// A task with an unfinished dispatch has no outcome whatever its other figures: the
	// read of all of a once task's records (whether it is done or dead) is left to
	// those with none.
	once, onceArgs = nil, nil
	for _, k := range tasks {
		if k.Kind == taskd.KindOnce && out[k].Unfinished == 0 {
			once, onceArgs = append(once, "(task_kind = ? AND task_id = ?)"), append(onceArgs, k.Kind, k.ID)
		}
	}
	if len(once) == 0 {
		return out, nil
	}
	err = scan(`SELECT task_kind, task_id, COALESCE(SUM(state = ? AND result = ?), 0), COALESCE(SUM(state = ?), 0) FROM dispatch
		WHERE `+strings.Join(once, " OR ")+` GROUP BY task_kind, task_id`,
		append([]any{taskd.StateDone, taskd.ResultSuccess, taskd.StateDead}, onceArgs...),
		func(_ taskd.TaskKey, f *taskd.OutcomeFigures, ok, dead int) { f.Succeeded, f.Dead = ok, dead })
	if err != nil {
		return out, mysqlErr("task outcomes", err)
	}
	return out, mysqlErr("task outcomes", err)
}
