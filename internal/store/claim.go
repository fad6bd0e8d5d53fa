package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// A claim's rules are taskd.DecideClaims's; the store reads what they need, locked, in
// the claim's transaction, asks it, and writes what it decided: the users'
// once_per_user holds, the occurrences' claim counters, the rate counts, the open
// dispatch records and their events. Claims run in batches (group commit, batch.go):
// claimBatch decides a batch in one transaction, as if its claims had run one after
// another; a claim alone is a batch of one.
//
// What a claim reads, in order (the lock order every claim keeps): the tasks with
// their templates (share mode: an edit waits for the claim, and a claim after an
// edit's commit sees it), the group memberships (share mode), the once_per_user holds
// (inserted, or locked where they exist), the users' records of until_exhausted
// occurrences (share mode), the limited occurrences' counters and the rate rows (for
// update). The counter of a task neither a quota nor a rollout bounds is only added
// to, never read.

// loadClaimTasks reads the tasks of keys, with their templates' settings and stages,
// in share mode. Missing tasks are absent from the map.
func loadClaimTasks(ctx context.Context, tx *sql.Tx, keys []taskd.TaskKey) (map[taskd.TaskKey]*taskd.ClaimTask, error) {
	tasks, _, err := loadClaimTargets(ctx, tx, keys, nil)
	return tasks, err
}

// loadClaimTask reads one task as loadClaimTasks does; nil when it is missing.
func loadClaimTask(ctx context.Context, tx *sql.Tx, k taskd.TaskKey) (*taskd.ClaimTask, error) {
	m, err := loadClaimTasks(ctx, tx, []taskd.TaskKey{k})
	return m[k], err
}

// member is a user of a group task's group, as loadClaimTargets finds it (the uid in
// lower case: ids compare without case, as the columns do).
type member struct {
	task taskd.TaskKey
	uid  string
}

// claimRollout is the rollout declared as spec, at st, as the claims of a task of
// quota see it (taskd.Rollout.ClaimView).
func claimRollout(spec string, st taskd.RolloutStatus, quota int, settings *taskd.Effective) (*taskd.ClaimRollout, error) {
	var r taskd.Rollout
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		return nil, fmt.Errorf("task rollout: %w", err)
	}
	return r.ClaimView(st, quota, settings), nil
}

// snapshotMember is the key under which loadClaimTargets says uid was a member at the
// start of task's snapshot rollout.
func snapshotMember(task taskd.TaskKey, uid string) member {
	return member{task, "\x00snapshot:" + strings.ToLower(uid)}
}

// The statements that read a batch's tasks. claimTargetsSQL reads, for each claim of a
// task of one kind, the task, its template and its rollout's state, whether the
// claiming user is a member of the task's group (m) and was one at the start of its
// snapshot rollout (rm). The claims' (task id, n) pairs drive it (w: a derived table,
// so that every join is a lookup by key), and the n-th uid is picked from the list
// with ELT, so that it stays a literal: a derived table's string column would compare
// under the connection's collation, which MySQL 8 may refuse to mix with the
// column's. claimTasksSQL reads the tasks alone. Both are in share mode, and their
// columns are scanned by scanClaimTarget, in this order. The verbs: %[1]s the task
// table, %[2]d its kind, %[3]s the rotate task's space, end, cron and zone (0 and NULLs for
// a once task), %[4]s the pairs or the ids, %[5]s the uids.
const (
	claimTaskColumns = `t.id, t.executor, t.status, t.start_time, t.dispatch_times, t.mode, t.template_id, t.params,
		t.lease_seconds, t.max_attempts, t.retry_backoff_seconds, t.retry_multiplier, t.retry_max_seconds, t.dispatch_rate_per_minute, t.confirm_seconds,
		p.lease_seconds, p.max_attempts, p.retry_backoff_seconds, p.retry_multiplier, p.retry_max_seconds, p.dispatch_rate_per_minute, p.confirm_seconds,
		p.stages, t.rollout, r.state, r.phase, p.result_schema IS NOT NULL, COALESCE(t.windows, p.windows), COALESCE(p.ddi, 0), %[3]s`
	claimTargetsSQL = `SELECT ` + claimTaskColumns + `, m.uid, rm.uid
		FROM (%[4]s) w
		JOIN %[1]s t ON t.id = w.id
		LEFT JOIN task_params_template p ON p.id = t.template_id
		LEFT JOIN task_rollout r ON r.task_kind = %[2]d AND r.task_id = t.id
		LEFT JOIN group_member m ON t.executor LIKE 'gid\_%%' AND m.gid = SUBSTRING(t.executor, 5) AND m.uid = ELT(w.n, %[5]s)
		LEFT JOIN rollout_member rm ON rm.task_kind = %[2]d AND rm.task_id = t.id AND rm.uid = m.uid
		LOCK IN SHARE MODE`
	claimTasksSQL = `SELECT ` + claimTaskColumns + `, NULL, NULL
		FROM %[1]s t
		LEFT JOIN task_params_template p ON p.id = t.template_id
		LEFT JOIN task_rollout r ON r.task_kind = %[2]d AND r.task_id = t.id
		WHERE t.id IN (%[4]s)
		LOCK IN SHARE MODE`
)

// claimTarget is a row of claimTargetsSQL or claimTasksSQL.
type claimTarget struct {
	id                  int64
	task                taskd.ClaimTask
	own, tpl            taskd.Settings
	stages              *string
	executor, params    string
	rollout, rstate     sql.NullString
	rphase              sql.NullInt64
	space               int64
	end                 sql.NullTime
	cron, zone, windows sql.NullString
	member, snapshotted sql.NullString
}

// scanClaimTarget scans a row of claimTaskColumns, then the member columns.
func scanClaimTarget(rows *sql.Rows) (claimTarget, error) {
	var r claimTarget
	t, own, tpl := &r.task, &r.own, &r.tpl
	err := rows.Scan(&r.id, &r.executor, &t.Status, &t.Start, &t.Quota, &t.Mode, &t.TemplateID, &r.params,
		&own.LeaseSeconds, &own.MaxAttempts, &own.RetryBackoffSeconds, &own.RetryMultiplier, &own.RetryMaxSeconds, &own.DispatchRatePerMinute, &own.ConfirmSeconds,
		&tpl.LeaseSeconds, &tpl.MaxAttempts, &tpl.RetryBackoffSeconds, &tpl.RetryMultiplier, &tpl.RetryMaxSeconds, &tpl.DispatchRatePerMinute, &tpl.ConfirmSeconds,
		&r.stages, &r.rollout, &r.rstate, &r.rphase, &t.Judged, &r.windows, &t.DDI, &r.space, &r.end, &r.cron, &r.zone,
		&r.member, &r.snapshotted)
	return r, err
}

// claimTask is the task of a row, resolved: its settings over its template's, its
// rollout as its claims see it.
func (r *claimTarget) claimTask() (*taskd.ClaimTask, error) {
	t := r.task
	var err error
	if t.Stages, err = parseStages(r.stages); err != nil {
		return nil, err
	}
	own := r.own
	if r.rollout.Valid {
		// A rollout's confirm_seconds is the task's default (Settings.WithRollout).
		var ro taskd.Rollout
		if err := json.Unmarshal([]byte(r.rollout.String), &ro); err != nil {
			return nil, fmt.Errorf("task rollout: %w", err)
		}
		own = own.WithRollout(&ro)
	}
	t.Settings, _ = taskd.Resolve(own, r.tpl)
	if r.rollout.Valid && r.rstate.Valid {
		st := taskd.RolloutStatus{State: taskd.RolloutState(r.rstate.String), Phase: int(r.rphase.Int64)}
		if t.Rollout, err = claimRollout(r.rollout.String, st, t.Quota, &t.Settings); err != nil {
			return nil, err
		}
	}
	t.Start, t.Space, t.Params = t.Start.UTC(), time.Duration(r.space)*time.Minute, json.RawMessage(r.params)
	if r.end.Valid {
		t.End = &r.end.Time
	}
	if t.Windows, err = taskd.ParseWindows(r.windows.String); err != nil {
		return nil, err
	}
	if r.cron.Valid {
		if t.Cron, err = taskd.CronOf(r.cron.String + ";" + r.zone.String); err != nil {
			return nil, err
		}
	}
	t.Executor, _ = taskd.ParseExecutor(r.executor)
	return &t, nil
}

// loadClaimTargets reads the tasks of keys, with their templates, and, in the same
// statement, whether uids[i] is a member of keys[i]'s group (when uids is not nil), all
// in share mode: an edit of the task or its template, or a member's removal, committed
// after this read waits for the claim's commit, so an admin told a member is gone is
// never followed by a claim of the member's; and a claim after such a commit sees it.
// A removed member's cached heap may still offer the group's tasks (its invalidation
// may not have reached Redis yet): MySQL's membership is what a claim goes by.
func loadClaimTargets(ctx context.Context, tx *sql.Tx, keys []taskd.TaskKey, uids []string) (map[taskd.TaskKey]*taskd.ClaimTask, map[member]bool, error) {
	tasks := make(map[taskd.TaskKey]*taskd.ClaimTask, len(keys))
	members := map[member]bool{}
	for _, kind := range []taskd.Kind{taskd.KindOnce, taskd.KindRotate} {
		table, rotate := "task_once", "0, NULL, NULL, NULL"
		if kind == taskd.KindRotate {
			table, rotate = "task_rotate", "t.space_minutes, t.end_time, t.cron, t.time_zone"
		}
		var q string
		var args []any
		if uids == nil {
			var ids []any
			for _, k := range keys {
				if k.Kind == kind && !slices.Contains(ids, any(k.ID)) {
					ids = append(ids, k.ID)
				}
			}
			if len(ids) == 0 {
				continue
			}
			q, args = fmt.Sprintf(claimTasksSQL, table, kind, rotate, marks(len(ids))), ids
		} else {
			var pairs, users []any
			for i, k := range keys {
				if k.Kind == kind {
					pairs = append(pairs, k.ID, len(users)+1)
					users = append(users, uids[i])
				}
			}
			if len(users) == 0 {
				continue
			}
			w := "SELECT ? AS id, ? AS n" + strings.Repeat(" UNION ALL SELECT ?, ?", len(users)-1)
			q, args = fmt.Sprintf(claimTargetsSQL, table, kind, rotate, w, marks(len(users))), append(pairs, users...)
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, nil, err
		}
		for rows.Next() {
			r, err := scanClaimTarget(rows)
			if err != nil {
				rows.Close()
				return nil, nil, err
			}
			key := taskd.TaskKey{Kind: kind, ID: r.id}
			if r.member.Valid {
				members[member{key, strings.ToLower(r.member.String)}] = true
			}
			if r.snapshotted.Valid {
				members[snapshotMember(key, r.snapshotted.String)] = true
			}
			if tasks[key] != nil {
				continue // the task's row again, for another claim
			}
			if tasks[key], err = r.claimTask(); err != nil {
				rows.Close()
				return nil, nil, err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, err
		}
	}
	return tasks, members, nil
}

// Claim tries to dispatch occurrence occ to uid at now, into the open slot take names
// (UserBusy when that slot is taken) and only if the task's template is one take
// allows (Filtered otherwise). On Claimed it returns the new open record; its attempt
// counts the user's latest expired attempts at the occurrence. It waits for the commit
// of the batch it joins.
func (s *Store) Claim(ctx context.Context, uid string, occ taskd.Occurrence, now time.Time, take taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
	occ.DueAt = occ.DueAt.UTC() // a map key in the batch, as MySQL gives it back
	j := &claimJob{ctx: ctx, in: claimIn{uid: uid, occ: occ, now: now, take: take}}
	var out claimOut
	var err error
	if s.claims == nil {
		out, err = s.claimAlone(j)
	} else {
		out, err = s.claims.do(ctx, j.in)
	}
	return out.outcome, out.d, mysqlErr("claim "+occ.String(), err)
}

type claimIn struct {
	uid  string
	occ  taskd.Occurrence
	now  time.Time
	take taskd.Take
}

type claimOut struct {
	outcome taskd.ClaimOutcome
	d       *taskd.Dispatch
}

type claimJob = job[claimIn, claimOut]

// runClaims is the claim batcher's run: the batch in one transaction. If it fails,
// each of its claims runs in a batch of its own, so that one claim's error is its own.
func (s *Store) runClaims(jobs []*claimJob) {
	observe := func(err error) { s.observed("claim", len(jobs), err) }
	runBatch(jobs, observe, s.claimBatch, s.claimAlone, func(o claimOut) bool { return o.outcome != 0 })
}

func (s *Store) claimAlone(j *claimJob) (claimOut, error) {
	outs, err := s.claimBatch(j.ctx, []*claimJob{j})
	if err != nil {
		return claimOut{}, err
	}
	return outs[0], nil
}

// claimBatch decides and records a batch of claims in one transaction and returns
// their outcomes once it has committed. An error means nothing was written.
func (s *Store) claimBatch(ctx context.Context, jobs []*claimJob) ([]claimOut, error) {
	var c *claimRun
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		c = newClaimRun(tx, jobs)
		return s.claimAll(ctx, c)
	})
	if err != nil {
		return nil, mysqlErr("claim", err)
	}
	outs := make([]claimOut, len(jobs))
	for i, o := range c.outcomes {
		outs[i].outcome = o
		if o == taskd.Claimed {
			outs[i].d = c.ds[i]
		}
	}
	return outs, nil
}

// claimRun is one try of a batch's transaction.
type claimRun struct {
	tx       *sql.Tx
	jobs     []*claimJob
	now      time.Time // the first claim's: the batch's claims share one rate minute
	claims   []taskd.Claim
	open     []int // the claims Refusal leaves to decide, in batch order
	holds    map[taskd.Holder]*hold
	counts   taskd.ClaimCounts
	outcomes []taskd.ClaimOutcome
	ds       []*taskd.Dispatch // the records of the claims granted, by claim
}

// hold is a once_per_user hold the batch took: inserted by it (fresh), or found
// released by an expiry (a re-take's, taken again if a claim is granted).
type hold struct {
	fresh, retaken bool
}

func newClaimRun(tx *sql.Tx, jobs []*claimJob) *claimRun {
	c := &claimRun{tx: tx, jobs: jobs, now: jobs[0].in.now, claims: make([]taskd.Claim, len(jobs)), ds: make([]*taskd.Dispatch, len(jobs))}
	for i, j := range jobs {
		c.claims[i] = taskd.Claim{UID: j.in.uid, Occurrence: j.in.occ, Take: j.in.take, At: j.in.now}
	}
	return c
}

// openWhere lists the open claims that keep is true of.
func (c *claimRun) openWhere(keep func(*taskd.Claim) bool) []int {
	var idx []int
	for _, i := range c.open {
		if keep(&c.claims[i]) {
			idx = append(idx, i)
		}
	}
	return idx
}

func (s *Store) claimAll(ctx context.Context, c *claimRun) error {
	keys := make([]taskd.TaskKey, len(c.claims))
	for i, cl := range c.claims {
		keys[i] = cl.Occurrence.Task
	}
	uids := make([]string, len(c.claims))
	for i, cl := range c.claims {
		uids[i] = cl.UID
	}
	tasks, members, err := loadClaimTargets(ctx, c.tx, keys, uids)
	if err != nil {
		return err
	}
	for i := range c.claims {
		cl := &c.claims[i]
		if cl.Task = tasks[keys[i]]; cl.Task == nil {
			continue
		}
		cl.Target(members[member{keys[i], strings.ToLower(cl.UID)}], members[snapshotMember(keys[i], cl.UID)])
	}
	for i := range c.claims {
		if c.claims[i].Refusal() == 0 {
			c.open = append(c.open, i)
		}
	}
	if err := c.takeHolds(ctx); err != nil {
		return err
	}
	if err := c.readPriors(ctx); err != nil {
		return err
	}
	if err := c.lockCounters(ctx); err != nil {
		return err
	}
	if err := c.lockRates(ctx); err != nil {
		return err
	}
	if err := c.grant(ctx); err != nil {
		return err
	}
	if err := c.settleHolds(ctx); err != nil {
		return err
	}
	if err := c.writeCounters(ctx); err != nil {
		return err
	}
	if err := c.writeRates(ctx); err != nil {
		return err
	}
	if err := c.numberActions(ctx); err != nil {
		return err
	}
	var evs []taskd.Event
	for i, o := range c.outcomes {
		if o == taskd.Claimed {
			evs = s.withEvent(evs, c.ds[i], taskd.EventDispatch, c.jobs[i].in.now)
		}
	}
	return s.emitAll(ctx, c.tx, evs)
}

// numberActions gives the dispatches granted to DDI takes their action ids, in the
// claim's transaction (ddi_action): the controller's poll writes nothing after it.
func (c *claimRun) numberActions(ctx context.Context) error {
	var args, logIDs, uids []any
	for i, o := range c.outcomes {
		if o == taskd.Claimed && c.jobs[i].in.take.DDI {
			d := c.ds[i]
			args = append(args, d.LogID, d.UID, c.jobs[i].in.now)
			logIDs = append(logIDs, d.LogID)
			uids = append(uids, d.UID)
		}
	}
	if len(logIDs) == 0 {
		return nil
	}
	if err := supersede(ctx, c.tx, uids, c.now); err != nil {
		return err
	}
	if _, err := c.tx.ExecContext(ctx, "INSERT INTO ddi_action (log_id, uid, created_at) VALUES "+
		tuples(len(logIDs), 3), args...); err != nil {
		return err
	}
	rows, err := c.tx.QueryContext(ctx, "SELECT log_id, action_id FROM ddi_action WHERE log_id IN ("+marks(len(logIDs))+")", logIDs...)
	if err != nil {
		return err
	}
	defer rows.Close()
	ids := map[string]int64{}
	for rows.Next() {
		var logID string
		var id int64
		if err := rows.Scan(&logID, &id); err != nil {
			return err
		}
		ids[logID] = id
	}
	for i, o := range c.outcomes {
		if o == taskd.Claimed && c.jobs[i].in.take.DDI {
			c.ds[i].ActionID = ids[c.ds[i].LogID]
		}
	}
	return rows.Err()
}

// takeHolds takes the once_per_user holds of the open claims and sets their priors:
// a hold is inserted (none yet: a first claim), or, where the user has one, locked and
// read (held: barred; released by an expiry: a re-take of the next attempt). A second
// claim of the same user and occurrence in the batch shares the first's hold.
func (c *claimRun) takeHolds(ctx context.Context) error {
	idx := c.openWhere(func(cl *taskd.Claim) bool { return cl.Task.Mode == taskd.ModeOncePerUser })
	if len(idx) == 0 {
		return nil
	}
	c.holds = map[taskd.Holder]*hold{}
	prior := map[taskd.Holder]taskd.Prior{}
	var want []int // one claim per hold
	for _, i := range idx {
		if k := c.claims[i].Holder(); c.holds[k] == nil {
			c.holds[k] = &hold{}
			want = append(want, i)
		}
	}
	for len(want) > 0 {
		args := c.holdArgs(want)
		_, err := c.tx.ExecContext(ctx, "INSERT INTO occurrence_user (task_kind, task_id, due_at, uid) VALUES "+
			tuples(len(want), 4), args...)
		if err == nil {
			for _, i := range want {
				c.holds[c.claims[i].Holder()].fresh = true
			}
			break
		}
		if !isDuplicate(err) {
			return err
		}
		// Some exist: lock and read them, and insert the others.
		rows, err := c.tx.QueryContext(ctx, `SELECT task_kind, task_id, due_at, uid, released, attempts FROM occurrence_user
			WHERE `+anyOf(len(want), holdCols...)+` FOR UPDATE`, args...)
		if err != nil {
			return err
		}
		found := 0
		for rows.Next() {
			var k taskd.Holder
			var released bool
			var attempts int
			if err := rows.Scan(&k.Occurrence.Task.Kind, &k.Occurrence.Task.ID, &k.Occurrence.DueAt, &k.UID, &released, &attempts); err != nil {
				rows.Close()
				return err
			}
			k.Occurrence.DueAt, k.UID = k.Occurrence.DueAt.UTC(), strings.ToLower(k.UID)
			prior[k] = taskd.HoldPrior(true, released, attempts)
			c.holds[k].retaken = released
			found++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if found == 0 {
			return errConflict // a concurrent claim's hold, rolled back since: look again
		}
		want = slices.DeleteFunc(want, func(i int) bool {
			_, ok := prior[c.claims[i].Holder()]
			return ok
		})
	}
	for _, i := range idx {
		c.claims[i].Prior = prior[c.claims[i].Holder()] // none found: a first claim
	}
	return nil
}

// holdArgs are the hold keys of claims idx, as holdCols.
func (c *claimRun) holdArgs(idx []int) []any {
	args := make([]any, 0, 4*len(idx))
	for _, i := range idx {
		cl := &c.claims[i]
		args = append(args, cl.Occurrence.Task.Kind, cl.Occurrence.Task.ID, cl.Occurrence.DueAt, cl.UID)
	}
	return args
}

// readPriors sets the priors of the open until_exhausted claims from the users'
// records of the occurrences: such an occurrence has no hold (the user takes it again
// after each completion). The read locks the records in share mode, so that a complete
// of the user's record in flight is waited for, not read past (it may make the
// occurrence dead for the user).
func (c *claimRun) readPriors(ctx context.Context) error {
	idx := c.openWhere(func(cl *taskd.Claim) bool { return cl.Task.Mode != taskd.ModeOncePerUser })
	if len(idx) == 0 {
		return nil
	}
	// Per user and occurrence: one open; one waits (a retry, the next stage, an admin's
	// retry, a success for its confirmation: it may yet become a failure and be
	// retried) or was cancelled; the newest record's state and attempt.
	rows, err := c.tx.QueryContext(ctx, `SELECT task_kind, task_id, due_at, uid, MAX(state = ?),
		MAX(state IN (?, ?) OR (state IN (?, ?) AND waiting_uid IS NOT NULL) OR cancelled_at IS NOT NULL),
		SUBSTRING_INDEX(GROUP_CONCAT(CONCAT(state, ' ', attempt) ORDER BY dispatched_at DESC, log_id DESC), ',', 1)
		FROM dispatch WHERE `+anyOf(len(idx), holdCols...)+`
		GROUP BY task_kind, task_id, due_at, uid LOCK IN SHARE MODE`,
		append([]any{taskd.StateOpen, taskd.StateRetryWait, taskd.StateUnconfirmed, taskd.StateStaged, taskd.StateDead}, c.holdArgs(idx)...)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	prior := map[taskd.Holder]taskd.Prior{}
	for rows.Next() {
		var k taskd.Holder
		var open, waits bool
		var latest string
		if err := rows.Scan(&k.Occurrence.Task.Kind, &k.Occurrence.Task.ID, &k.Occurrence.DueAt, &k.UID, &open, &waits, &latest); err != nil {
			return err
		}
		state, attempt, err := parseLatest(latest)
		if err != nil {
			return err
		}
		k.Occurrence.DueAt, k.UID = k.Occurrence.DueAt.UTC(), strings.ToLower(k.UID)
		prior[k] = taskd.RecordsPrior(open, waits, true, state, attempt)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, i := range idx {
		c.claims[i].Prior = prior[c.claims[i].Holder()] // no record: never taken
	}
	return nil
}

// parseLatest parses readPriors's "<state> <attempt>".
func parseLatest(s string) (taskd.DispatchState, int, error) {
	st, at, _ := strings.Cut(s, " ")
	state, err := strconv.ParseUint(st, 10, 8)
	if err != nil {
		return 0, 0, err
	}
	attempt, err := strconv.Atoi(at)
	return taskd.DispatchState(state), attempt, err
}

// lockCounters locks and reads the claim counters of the open claims' counted
// occurrences (a limited quota, or a rollout's cap); an occurrence without a counter
// row has none claimed yet. Another task's counter is not read: no rule needs it.
func (c *claimRun) lockCounters(ctx context.Context) error {
	c.counts.Claimed = map[taskd.Occurrence]int{}
	occs := c.occurrences(c.openWhere(func(cl *taskd.Claim) bool { return cl.Task.Counted() && cl.Task.Quota != 0 }))
	if len(occs) == 0 {
		return nil
	}
	rows, err := c.tx.QueryContext(ctx, `SELECT task_kind, task_id, due_at, claimed FROM occurrence_claim
		WHERE `+anyOf(len(occs), holdCols[:3]...)+` FOR UPDATE`, occArgs(occs, nil)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var o taskd.Occurrence
		var n int
		if err := rows.Scan(&o.Task.Kind, &o.Task.ID, &o.DueAt, &n); err != nil {
			return err
		}
		o.DueAt = o.DueAt.UTC()
		c.counts.Claimed[o] = n
	}
	return rows.Err()
}

// occurrences lists the occurrences of claims idx, each once, sorted (the lock order).
func (c *claimRun) occurrences(idx []int) []taskd.Occurrence {
	occs := make([]taskd.Occurrence, 0, len(idx))
	for _, i := range idx {
		occs = append(occs, c.claims[i].Occurrence)
	}
	slices.SortFunc(occs, compareOccurrences)
	return slices.Compact(occs)
}

func compareOccurrences(a, b taskd.Occurrence) int {
	return cmp.Or(compareTasks(a.Task, b.Task), a.DueAt.Compare(b.DueAt))
}

func compareTasks(a, b taskd.TaskKey) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID))
}

func occArgs(occs []taskd.Occurrence, n []int) []any {
	args := make([]any, 0, 4*len(occs))
	for i, o := range occs {
		args = append(args, o.Task.Kind, o.Task.ID, o.DueAt)
		if n != nil {
			args = append(args, n[i])
		}
	}
	return args
}

// grant decides the batch against the locked state and inserts the granted claims'
// records. A claim of an open slot already taken outside the batch is found when the
// insert hits the open-slot key: the slot is marked busy and the batch decided again.
// A re-take starts where the user's expired attempt was (its checkpoint and stage).
func (c *claimRun) grant(ctx context.Context) error {
	c.counts.Busy = map[taskd.UserSlot]bool{}
	for {
		c.outcomes = taskd.DecideClaims(c.claims, c.counts)
		var ds []*taskd.Dispatch
		var slots []taskd.UserSlot
		for i, o := range c.outcomes {
			if o != taskd.Claimed {
				continue
			}
			cl := &c.claims[i]
			if c.ds[i] == nil {
				d := cl.NewDispatch(newLogID(c.jobs[i].in.now), c.jobs[i].in.now)
				if cl.Prior.Attempts > 0 {
					expired := taskd.Dispatch{UID: cl.UID, Occurrence: cl.Occurrence}
					if found, err := takeUp(ctx, c.tx, &expired); err != nil {
						return err
					} else if found {
						d.TakeUp(&expired)
					}
				}
				c.ds[i] = d
			}
			ds = append(ds, c.ds[i])
			slots = append(slots, taskd.UserSlot{UID: cl.UID, Slot: cl.Take.OpenSlot()})
		}
		err := insertDispatches(ctx, c.tx, ds)
		if err == nil || !isDuplicate(err) {
			return err
		}
		if isOpenTwice(err) {
			// A concurrent claim opened one of these occurrences for its user since
			// the records were read: read them again.
			return errConflict
		}
		found, err := takenSlots(ctx, c.tx, slots)
		if err != nil {
			return err
		}
		if len(found) == 0 {
			return errConflict // the slot's holder has gone since: look again
		}
		for _, us := range found {
			c.counts.Busy[us] = true
		}
	}
}

// takenSlots returns which of slots an open dispatch holds (uids in lower case, as
// DecideClaims keys them).
func takenSlots(ctx context.Context, tx *sql.Tx, slots []taskd.UserSlot) ([]taskd.UserSlot, error) {
	args := make([]any, 0, 2*len(slots))
	for _, us := range slots {
		args = append(args, us.UID, us.Slot)
	}
	rows, err := tx.QueryContext(ctx, "SELECT open_uid, open_slot FROM dispatch WHERE "+
		anyOf(len(slots), "open_uid", "open_slot"), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []taskd.UserSlot
	for rows.Next() {
		var us taskd.UserSlot
		if err := rows.Scan(&us.UID, &us.Slot); err != nil {
			return nil, err
		}
		us.UID = strings.ToLower(us.UID)
		out = append(out, us)
	}
	return out, rows.Err()
}

// settleHolds keeps the holds of the users granted a claim and only theirs: the holds
// the batch inserted for claims that did not dispatch are deleted, and a released hold
// a re-take was granted is taken again.
func (c *claimRun) settleHolds(ctx context.Context) error {
	if len(c.holds) == 0 {
		return nil
	}
	granted := map[taskd.Holder]bool{}
	for i, o := range c.outcomes {
		if o == taskd.Claimed {
			granted[c.claims[i].Holder()] = true
		}
	}
	var drop, retake []int
	seen := map[taskd.Holder]bool{}
	for _, i := range c.open {
		k := c.claims[i].Holder()
		h := c.holds[k]
		if h == nil || seen[k] {
			continue
		}
		seen[k] = true
		switch {
		case h.fresh && !granted[k]:
			drop = append(drop, i)
		case h.retaken && granted[k]:
			retake = append(retake, i)
		}
	}
	if len(drop) > 0 {
		if _, err := c.tx.ExecContext(ctx, "DELETE FROM occurrence_user WHERE "+anyOf(len(drop), holdCols...), c.holdArgs(drop)...); err != nil {
			return err
		}
	}
	if len(retake) > 0 {
		if _, err := c.tx.ExecContext(ctx, "UPDATE occurrence_user SET released = 0 WHERE "+anyOf(len(retake), holdCols...), c.holdArgs(retake)...); err != nil {
			return err
		}
	}
	return nil
}

// granted counts the granted claims by key.
func granted[K comparable](c *claimRun, key func(*taskd.Claim) (K, bool)) map[K]int {
	n := map[K]int{}
	for i, o := range c.outcomes {
		if o != taskd.Claimed {
			continue
		}
		if k, ok := key(&c.claims[i]); ok {
			n[k]++
		}
	}
	return n
}

// lockRates locks the rate rows of the open claims' rate-bound tasks and sets how many
// claims each counts in the batch's minute (taskd.RateUsed); a task without a row is
// absent.
func (c *claimRun) lockRates(ctx context.Context) error {
	c.counts.Rate = map[taskd.TaskKey]int{}
	var keys []taskd.TaskKey
	for _, i := range c.openWhere(func(cl *taskd.Claim) bool { return cl.Task.Settings.DispatchRatePerMinute > 0 }) {
		keys = append(keys, c.claims[i].Occurrence.Task)
	}
	if len(keys) == 0 {
		return nil
	}
	slices.SortFunc(keys, compareTasks)
	keys = slices.Compact(keys)
	args := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		args = append(args, k.Kind, k.ID)
	}
	rows, err := c.tx.QueryContext(ctx, "SELECT task_kind, task_id, window_at, dispatched FROM task_rate WHERE "+
		anyOf(len(keys), "task_kind", "task_id")+" FOR UPDATE", args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k taskd.TaskKey
		var at time.Time
		var n int
		if err := rows.Scan(&k.Kind, &k.ID, &at, &n); err != nil {
			return err
		}
		c.counts.Rate[k] = taskd.RateUsed(at, n, c.now)
	}
	return rows.Err()
}

// writeRates counts the granted claims of rate-bound tasks in their rows: a row the
// batch holds locked is rewritten (a new minute starts from the batch's claims); a row
// it found missing is inserted, and if a concurrent claim inserted it meanwhile the
// batch runs again, since its decision read none.
func (c *claimRun) writeRates(ctx context.Context) error {
	per := granted(c, func(cl *taskd.Claim) (taskd.TaskKey, bool) {
		return cl.Occurrence.Task, cl.Task.Settings.DispatchRatePerMinute > 0
	})
	window := taskd.RateWindow(c.now)
	for _, k := range slices.SortedFunc(maps.Keys(per), compareTasks) {
		n := per[k]
		if _, held := c.counts.Rate[k]; held {
			// The window never goes back: a claim whose now is a little older (it waited
			// in the queue, or its node's clock is behind) counts in the later minute.
			if _, err := c.tx.ExecContext(ctx, `UPDATE task_rate SET dispatched = IF(window_at >= ?, dispatched + ?, ?),
				window_at = GREATEST(window_at, ?) WHERE task_kind = ? AND task_id = ?`, window, n, n, window, k.Kind, k.ID); err != nil {
				return err
			}
			continue
		}
		if _, err := c.tx.ExecContext(ctx, "INSERT INTO task_rate (task_kind, task_id, window_at, dispatched) VALUES (?, ?, ?, ?)",
			k.Kind, k.ID, window, n); err != nil {
			if isDuplicate(err) {
				return errConflict
			}
			return err
		}
	}
	return nil
}

// errConflict is a transaction that met a concurrent one's write where it had read
// none: it is run again (see inTx).
var errConflict = errors.New("conflict with a concurrent transaction")

// writeCounters adds the granted claims to the occurrences' counters: to a row the
// batch holds locked, or one no rule reads (no quota, no rollout cap), an increment; a
// counted occurrence's row it found missing is inserted, and if a concurrent claim
// inserted it meanwhile the batch runs again, since its decision read none.
func (c *claimRun) writeCounters(ctx context.Context) error {
	type counter struct {
		occ     taskd.Occurrence
		limited bool
	}
	added := granted(c, func(cl *taskd.Claim) (counter, bool) { return counter{cl.Occurrence, cl.Task.Counted()}, true })
	var add, fresh []taskd.Occurrence
	n := map[taskd.Occurrence]int{}
	for k, v := range added {
		n[k.occ] = v
		if _, held := c.counts.Claimed[k.occ]; held || !k.limited {
			add = append(add, k.occ)
		} else {
			fresh = append(fresh, k.occ)
		}
	}
	write := func(occs []taskd.Occurrence, q string) error {
		if len(occs) == 0 {
			return nil
		}
		slices.SortFunc(occs, compareOccurrences)
		counts := make([]int, len(occs))
		for i, o := range occs {
			counts[i] = n[o]
		}
		_, err := c.tx.ExecContext(ctx, "INSERT INTO occurrence_claim (task_kind, task_id, due_at, claimed) VALUES "+
			tuples(len(occs), 4)+q, occArgs(occs, counts)...)
		return err
	}
	if err := write(add, " ON DUPLICATE KEY UPDATE claimed = claimed + VALUES(claimed)"); err != nil {
		return err
	}
	if err := write(fresh, ""); err != nil {
		if isDuplicate(err) {
			return errConflict
		}
		return err
	}
	return nil
}

// errAbort rolls a transaction back without it being an error.
var errAbort = errors.New("abort")

// insertDispatches inserts open dispatch records (setting their lease expiry) in one
// statement.
func insertDispatches(ctx context.Context, tx *sql.Tx, ds []*taskd.Dispatch) error {
	if len(ds) == 0 {
		return nil
	}
	const cols = 26
	args := make([]any, 0, cols*len(ds))
	for _, d := range ds {
		if d.LeaseSeconds > 0 {
			exp := d.DispatchedAt.Add(time.Duration(d.LeaseSeconds) * time.Second)
			d.LeaseExpiresAt = &exp
		}
		if d.Slot == 0 {
			d.Slot = 1
		}
		args = append(args, d.LogID, d.UID, d.UID, d.Slot, d.Occurrence.Task.Kind, d.Occurrence.Task.ID, d.Occurrence.DueAt,
			d.Mode, d.Attempt, d.MaxAttempts, d.BackoffSeconds, d.RetryMultiplier, d.RetryMaxSeconds, d.LeaseSeconds, taskd.StateOpen, d.TemplateID,
			string(d.Params), d.DispatchedAt, d.LeaseExpiresAt, nullJSON(d.Checkpoint), nullString(d.Stage), nullJSON(d.Context),
			d.Resumed, nullInt(d.RolloutPhase), d.Judged, d.ConfirmSeconds)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO dispatch (log_id, uid, open_uid, open_slot, task_kind, task_id, due_at,
		mode, attempt, max_attempts, retry_backoff_seconds, retry_multiplier, retry_max_seconds, lease_seconds, state, template_id, params,
		dispatched_at, lease_expires_at, checkpoint, stage, context, resumed, rollout_phase, judged, confirm_seconds) VALUES `+tuples(len(ds), cols), args...)
	return err
}

// holdCols is the key of a once_per_user hold; its first three columns an
// occurrence's.
var holdCols = []string{"task_kind", "task_id", "due_at", "uid"}
