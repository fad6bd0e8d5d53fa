package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"runtime"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskpull/taskd"
)

// A complete finishes uid's open dispatch: the record is closed, the user's cursor
// moves to the occurrence's due time and its exclude set is updated, or, for a failure
// with attempts left, the record waits for its retry. Completes run in batches (group
// commit, batch.go) like claims; completeOne is a complete alone, for those a batch
// leaves: one whose lease ran out (it expires first) and a repeat of a log id already
// in the batch.

// Complete finishes uid's dispatch logID with result at now. It waits for the commit of
// the batch it joins.
//
// A success of a record whose template had a result schema when it was claimed is
// judged outside the transaction (issue 42): the first try finds the record judged and
// writes nothing for it, the detail is judged (judgeResult), and the complete comes
// again with the verdict. Other completes pay nothing for it.
func (s *Store) Complete(ctx context.Context, uid, logID string, result taskd.Result, detail json.RawMessage, now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
	return s.completeIn(ctx, completeIn{uid: uid, logID: logID, result: result, detail: detail, now: now})
}

// CompleteAction is Complete of the dispatch of DDI action, which the complete's
// transaction closes when it finishes the record.
func (s *Store) CompleteAction(ctx context.Context, uid, logID string, action int64, result taskd.Result, detail json.RawMessage, now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
	return s.completeIn(ctx, completeIn{uid: uid, logID: logID, action: action, result: result, detail: detail, now: now})
}

func (s *Store) completeIn(ctx context.Context, in completeIn) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
	detail := in.detail
	for {
		out, err := s.complete(ctx, in)
		if err != nil || !out.judge || in.verdict != nil {
			return out.outcome, out.d, mysqlErr("complete", err)
		}
		why, err := s.judgeResult(ctx, out.d.TemplateID, detail)
		if err != nil {
			return 0, nil, mysqlErr("complete", err)
		}
		in.verdict = &why
	}
}

func (s *Store) complete(ctx context.Context, in completeIn) (completeOut, error) {
	if s.completes == nil {
		return s.completeOne(ctx, in)
	}
	return s.completes.do(ctx, in)
}

type completeIn struct {
	uid    string
	logID  string
	action int64 // the DDI action to close with the record; 0: none
	result taskd.Result
	detail json.RawMessage
	// verdict is why a success's detail fails its record's result schema ("" when it
	// validates), judged outside the transaction; nil: not judged.
	verdict *string
	now     time.Time
}

type completeOut struct {
	outcome taskd.CompleteOutcome
	d       *taskd.Dispatch
	// judge: the success's detail is to be judged against d's result schema first;
	// nothing was written.
	judge bool
}

// mustJudge reports whether in, a complete of d, waits for the judgement of its
// detail: a success of a record claimed while its template had a result schema, not
// judged yet.
func (s *Store) mustJudge(in completeIn, d *taskd.Dispatch) bool {
	return in.result == taskd.ResultSuccess && d.Judged && in.verdict == nil && s.judge != nil
}

// judged is in's result with its verdict applied to d: a success whose detail fails
// the schema is a failure, with the reason.
func judged(in completeIn, d *taskd.Dispatch) taskd.Result {
	if in.result == taskd.ResultSuccess && d.Judged && in.verdict != nil && *in.verdict != "" {
		d.Reason = *in.verdict
		return taskd.ResultFailure
	}
	return in.result
}

type completeJob = job[completeIn, completeOut]

// runCompletes is the complete batcher's run: the batch in one transaction, then, one
// by one, the completes it left alone.
func (s *Store) runCompletes(jobs []*completeJob) {
	runBatch(jobs, func(err error) { s.observed("complete", len(jobs), err) }, s.completeBatch,
		func(j *completeJob) (completeOut, error) {
			return s.completeOne(j.ctx, j.in)
		},
		func(o completeOut) bool { return o.outcome != 0 || o.judge })
}

// completeBatch decides and records a batch of completes in one transaction and
// returns their outcomes once it has committed; a complete left to run alone has none.
// An error means nothing was written.
func (s *Store) completeBatch(ctx context.Context, jobs []*completeJob) ([]completeOut, error) {
	outs := make([]completeOut, len(jobs))
	alone := make([]bool, len(jobs))
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		clear(outs)
		clear(alone)
		ids := make([]any, 0, len(jobs))
		seen := map[string]bool{}
		for i, j := range jobs {
			if seen[j.in.logID] {
				alone[i] = true // a repeat: it must see the first one's outcome
				continue
			}
			seen[j.in.logID] = true
			ids = append(ids, j.in.logID)
		}
		records, err := lockDispatches(ctx, tx, ids)
		if err != nil {
			return err
		}
		var done []finishing
		var actions []any
		for i, j := range jobs {
			if alone[i] {
				continue
			}
			d := records[j.in.logID]
			outcome, ok := taskd.CompleteBlocked(d, j.in.uid, j.in.now)
			switch {
			case outcome == taskd.ExpiredNow, ok && d.Stage != "" && j.in.result == taskd.ResultSuccess:
				// An expiry first, or a stage that may not be the last: alone.
				alone[i] = true
				continue
			case !ok && d != nil && d.UID != j.in.uid:
				d = nil // someone else's: not the caller's to see
			case ok && s.mustJudge(j.in, d):
				outs[i] = completeOut{d: d, judge: true}
				continue
			case ok:
				outcome = d.Finish(judged(j.in, d), j.in.now)
				done = append(done, finishing{d, j.in.detail})
				if j.in.action != 0 {
					actions = append(actions, j.in.action)
				}
			}
			outs[i] = completeOut{outcome: outcome, d: d}
		}
		if err := s.finish(ctx, tx, done); err != nil {
			return err
		}
		return closeActions(ctx, tx, actions, jobs[0].in.now)
	})
	if err != nil {
		return nil, mysqlErr("complete", err)
	}
	return outs, nil
}

// closeActions closes the DDI actions whose records a complete finished.
func closeActions(ctx context.Context, tx *sql.Tx, ids []any, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, "UPDATE ddi_action SET closed_at = ? WHERE action_id IN ("+marks(len(ids))+") AND closed_at IS NULL",
		append([]any{now}, ids...)...)
	return err
}

// lockDispatches reads the records of ids FOR UPDATE, each with its HeldFrom (a probe
// of the open-slot key's few rows of its user, in the same statement).
func lockDispatches(ctx context.Context, tx *sql.Tx, ids []any) (map[string]*taskd.Dispatch, error) {
	out := make(map[string]*taskd.Dispatch, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.QueryContext(ctx, "SELECT "+dispatchColumns+`, (SELECT MIN(o.due_at) FROM dispatch o
		WHERE o.open_uid = dispatch.uid AND o.mode = ? AND o.log_id <> dispatch.log_id)
		FROM dispatch WHERE log_id IN (`+marks(len(ids))+") FOR UPDATE", append([]any{taskd.ModeUntilExhausted}, ids...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var held *time.Time
		d, err := scanDispatch(rows, &held)
		if err != nil {
			return nil, err
		}
		if held != nil {
			h := held.UTC()
			d.HeldFrom = &h
		}
		out[d.LogID] = d
	}
	return out, rows.Err()
}

// finishing is a record Finish has decided, with the complete's detail.
type finishing struct {
	d      *taskd.Dispatch
	detail json.RawMessage
}

// finish writes what Finish decided for records held locked: the records (a retry
// waits beside the user's open slot, not in it, so the user's other tasks flow
// meanwhile and the retry comes back through the user's heap), the cursors of those
// done or dead, and their events, in three statements whatever their number.
func (s *Store) finish(ctx context.Context, tx *sql.Tx, fs []finishing) error {
	if len(fs) == 0 {
		return nil
	}
	// One UPDATE with a CASE per column that differs between the records (a join with
	// a derived table of the values would make MariaDB write a temporary table to disk
	// on every batch).
	u := caseUpdate{key: "log_id"}
	var over []*taskd.Dispatch
	var evs []taskd.Event
	for _, f := range fs {
		d := f.d
		u.keys = append(u.keys, d.LogID)
		u.set("state", d.State)
		u.set("result", nullResult(d.Result))
		u.set("finished_at", *d.FinishedAt)
		u.set("reason", nullString(d.Reason))
		u.set("final", d.Final)
		u.set("open_uid", nil)
		if len(f.detail) > 0 {
			u.set("detail", string(f.detail))
		} else {
			u.set("detail", nil) // an open record has none yet
		}
		switch {
		case d.RetryAt != nil:
			// The retry waits beside the user's open slot.
			u.set("retry_at", *d.RetryAt)
			u.set("waiting_uid", d.UID)
		case d.State == taskd.StateUnconfirmed:
			// The success waits beside the slot for its user's next fetch (its
			// confirm entry in the user's heap), with no result and no complete
			// event until it is confirmed or lapses.
			u.keep("retry_at")
			u.set("waiting_uid", d.UID)
		default:
			u.keep("retry_at")
			u.set("waiting_uid", nil)
		}
		if d.ConfirmBy != nil {
			u.set("confirm_by", *d.ConfirmBy)
		} else {
			u.keep("confirm_by")
		}
		if d.State == taskd.StateUnconfirmed {
			over = append(over, d)
			continue
		}
		evs = s.withEvent(evs, d, taskd.EventComplete, *d.FinishedAt)
		if d.State != taskd.StateRetryWait {
			over = append(over, d)
		}
		if d.State == taskd.StateDead {
			evs = s.withEvent(evs, d, taskd.EventDead, *d.FinishedAt)
		}
	}
	q, args := u.statement("dispatch")
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return err
	}
	if err := advanceCursors(ctx, tx, over); err != nil {
		return err
	}
	return s.emitAll(ctx, tx, evs)
}

// nullResult is r as the result column holds it: NULL for none (an unconfirmed
// success has none yet).
func nullResult(r taskd.Result) any {
	if r == 0 {
		return nil
	}
	return r
}

// caseUpdate builds one UPDATE giving each row, found by its key, values of its own:
// a column with one value for all rows is a plain assignment, one whose values differ
// a CASE on the key. Rows are added in order: keys[i] with the i-th set (or keep) of
// every column.
type caseUpdate struct {
	key  string
	keys []any
	cols []string
	vals map[string][]any  // per column, one value per row
	kept map[string][]bool // per column and row: leave the column as it is
}

func (u *caseUpdate) set(col string, v any) { u.add(col, v, false) }

func (u *caseUpdate) keep(col string) { u.add(col, nil, true) }

func (u *caseUpdate) add(col string, v any, keep bool) {
	if u.vals == nil {
		u.vals, u.kept = map[string][]any{}, map[string][]bool{}
	}
	if _, ok := u.vals[col]; !ok {
		u.cols = append(u.cols, col)
	}
	u.vals[col] = append(u.vals[col], v)
	u.kept[col] = append(u.kept[col], keep)
}

func (u *caseUpdate) statement(table string) (string, []any) {
	var sets []string
	var args []any
	for _, col := range u.cols {
		vals, kept := u.vals[col], u.kept[col]
		same := true
		for j := range vals {
			same = same && kept[j] == kept[0] && vals[j] == vals[0]
		}
		switch {
		case same && kept[0]:
			// no row changes it
		case same:
			sets = append(sets, col+" = ?")
			args = append(args, vals[0])
		default:
			var c strings.Builder
			c.WriteString(col + " = CASE " + u.key)
			for j, v := range vals {
				if !kept[j] {
					c.WriteString(" WHEN ? THEN ?")
					args = append(args, u.keys[j], v)
				}
			}
			c.WriteString(" ELSE " + col + " END")
			sets = append(sets, c.String())
		}
	}
	q := "UPDATE " + table + " SET " + strings.Join(sets, ", ") + " WHERE " + u.key + " IN (" + marks(len(u.keys)) + ")"
	return q, append(args, u.keys...)
}

// completeOne is a complete in a transaction of its own; a record whose lease has run
// out expires instead (ExpiredNow).
func (s *Store) completeOne(ctx context.Context, in completeIn) (completeOut, error) {
	judge := false
	outcome, d, err := s.completeAlone(ctx, "complete", in.uid, in.logID, in.now, func(tx *sql.Tx, d *taskd.Dispatch) (taskd.CompleteOutcome, error) {
		detail, now := in.detail, in.now
		if d.Stage != "" && in.result == taskd.ResultSuccess {
			// Only the last stage's success completes the occurrence: an earlier one
			// hands it on to the stage that follows.
			stages, err := templateStages(ctx, tx, d.TemplateID)
			if err != nil {
				return 0, err
			}
			if next := followingStage(stages, d.Stage); next != "" {
				return taskd.StageDone, s.stageOn(ctx, tx, d, detail, next, nil, 0, now)
			}
		}
		if s.mustJudge(in, d) {
			judge = true
			return 0, errAbort
		}
		outcome := d.Finish(judged(in, d), now)
		if err := s.finish(ctx, tx, []finishing{{d, detail}}); err != nil {
			return 0, err
		}
		if in.action == 0 {
			return outcome, nil
		}
		return outcome, closeActions(ctx, tx, []any{in.action}, now)
	})
	return completeOut{outcome: outcome, d: d, judge: judge}, err
}

// completeAlone runs a complete of uid's logID at now in a transaction of its own: the
// record is locked and, when it is uid's open dispatch within its lease, apply records
// the complete and says its outcome. Otherwise nothing changes but a record whose lease
// has run out, which expires (ExpiredNow), and the outcome says why (a record of
// another user is not returned). op names the operation in errors.
func (s *Store) completeAlone(ctx context.Context, op, uid, logID string, now time.Time,
	apply func(*sql.Tx, *taskd.Dispatch) (taskd.CompleteOutcome, error)) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
	var outcome taskd.CompleteOutcome
	var d *taskd.Dispatch
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		records, err := lockDispatches(ctx, tx, []any{logID})
		if err != nil {
			return err
		}
		d = records[logID]
		var ok bool
		if outcome, ok = taskd.CompleteBlocked(d, uid, now); !ok {
			if outcome == taskd.ExpiredNow {
				return s.expire(ctx, tx, d, now)
			}
			if d != nil && d.UID != uid {
				d = nil // someone else's: not the caller's to see
			}
			return errAbort
		}
		outcome, err = apply(tx, d)
		return err
	})
	if errors.Is(err, errAbort) {
		return outcome, d, nil
	}
	if err != nil {
		return 0, nil, mysqlErr(op, err)
	}
	return outcome, d, nil
}

// advanceCursors moves each record's user's cursor to its occurrence's due time. The
// exclude set holds the keys completed at exactly the cursor, so ties are not
// dispatched again; an until_exhausted occurrence is not excluded: it stays on offer
// while quota lasts.
//
// One statement, read and write together (it locks the rows as a read FOR UPDATE
// would), each row deciding against what is stored: an occurrence before the cursor
// changes nothing (a retried old one: the cursor does not go back); one after it moves
// the cursor and starts the exclude set afresh; one at it joins the set. Assignments
// run left to right, so exclude_keys is decided against the cursor before cursor_at
// moves. Two records of one user apply one after the other.
//
// A user with several open slots (batch fetch) completes out of heap order: the
// cursor does not pass an until_exhausted occurrence the user still holds open
// (HeldFrom, read by the complete), or a rebuild would drop it from the offer it must
// stay on after its completion. The cursor stops at that occurrence then, and the
// completed key is not excluded (a once_per_user occurrence offered again is refused
// by its hold).
func advanceCursors(ctx context.Context, tx *sql.Tx, ds []*taskd.Dispatch) error {
	if len(ds) == 0 {
		return nil
	}
	// In user order, so that concurrent batches lock user rows in one order.
	ds = slices.SortedStableFunc(slices.Values(ds), func(a, b *taskd.Dispatch) int { return cmp.Compare(a.UID, b.UID) })
	args := make([]any, 0, 4*len(ds))
	for _, d := range ds {
		fresh := []string{} // until_exhausted: not excluded
		cursor := d.Occurrence.DueAt
		if d.HeldFrom != nil && d.HeldFrom.Before(cursor) {
			cursor = *d.HeldFrom
		} else if d.Mode == taskd.ModeOncePerUser {
			fresh = append(fresh, d.Occurrence.String())
		}
		b, _ := json.Marshal(fresh)
		args = append(args, d.UID, cursor, string(b), *d.FinishedAt)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO user_state (uid, cursor_at, exclude_keys, updated_at)
		VALUES `+tuples(len(ds), 4)+`
		ON DUPLICATE KEY UPDATE
		  exclude_keys = CASE
		    WHEN VALUES(cursor_at) > cursor_at THEN VALUES(exclude_keys)
		    WHEN VALUES(cursor_at) < cursor_at OR JSON_CONTAINS(exclude_keys, VALUES(exclude_keys)) THEN exclude_keys
		    ELSE JSON_MERGE_PRESERVE(exclude_keys, VALUES(exclude_keys)) END,
		  updated_at = IF(VALUES(cursor_at) < cursor_at, updated_at, VALUES(updated_at)),
		  cursor_at = GREATEST(cursor_at, VALUES(cursor_at))`, args...)
	return err
}

// SetResultJudge sets what checks a success's detail against its template's result
// schema: it returns why the detail fails it ("" when it validates), within a budget
// of its own (a detail that exhausts it fails). Without one, successes are recorded as
// the agents say. Call before serving.
func (s *Store) SetResultJudge(judge func(schema, detail json.RawMessage) string) {
	s.judge = judge
	s.judging = make(chan struct{}, runtime.GOMAXPROCS(0))
}

// judgeResult returns why detail fails the result schema of template templateID (""
// when it validates). It runs outside any transaction, so a validation, even one that
// uses its whole budget, holds no lock and no group-commit lane; at most GOMAXPROCS run
// at once (others wait, within ctx), so that judged completes cannot take every core.
// The schema is read without a lock: a template's result schema never changes once set
// (UpdateTemplate keeps it), so the verdict is the one a transaction would reach.
func (s *Store) judgeResult(ctx context.Context, templateID int64, detail json.RawMessage) (string, error) {
	var schema sql.NullString
	err := s.db.QueryRowContext(ctx, "SELECT result_schema FROM task_params_template WHERE id = ?", templateID).Scan(&schema)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !schema.Valid) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	select {
	case s.judging <- struct{}{}:
		defer func() { <-s.judging }()
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if len(detail) == 0 {
		detail = json.RawMessage("null") // no detail: what the schema says of null
	}
	if why := s.judge(json.RawMessage(schema.String), detail); why != "" {
		return truncate("result_schema: "+why, 512), nil
	}
	return "", nil
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
