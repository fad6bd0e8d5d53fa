package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// A claim dispatches an occurrence to a user if the rules allow: the task is active and
// has the occurrence, the user has attempts left at it (and, once_per_user, has not
// taken it), and the quota has a slot. Its writes: the user's once_per_user hold, the
// occurrence's claim counter, the open dispatch record and its event. Claims run in
// batches (group commit, batch.go): claimBatch decides a batch in one transaction from
// rows it holds locked, as if its claims had run one after another; claimOne is the
// same claim alone, for the few a batch leaves to run on their own.

// dispatchTask is the part of a task row a dispatch needs, read in the claim
// transaction so that a concurrent edit (pause, lower quota) is respected.
type dispatchTask struct {
	executor   taskd.Executor
	status     taskd.Status
	start      time.Time
	space      int64 // minutes; rotate only
	end        sql.NullTime
	quota      int
	mode       taskd.Mode
	templateID int64
	params     string
	settings   taskd.Effective
	stages     []string // the template's
}

func (t *dispatchTask) hasOccurrence(k taskd.Kind, due time.Time) bool {
	if k == taskd.KindOnce {
		return t.start.Equal(due)
	}
	var end *time.Time
	if t.end.Valid {
		end = &t.end.Time
	}
	return t.space > 0 && taskd.IsRotation(t.start, time.Duration(t.space)*time.Minute, end, due)
}

// newDispatch is the open record of a claim of occ by uid at now, who used prior
// attempts at it before, with the task's current params, lease and retry settings.
func (t *dispatchTask) newDispatch(uid string, occ taskd.Occurrence, prior int, now time.Time) *taskd.Dispatch {
	return &taskd.Dispatch{
		LogID:           newID(),
		UID:             uid,
		Occurrence:      occ,
		Mode:            t.mode,
		Attempt:         prior + 1,
		MaxAttempts:     taskd.MaxAttemptsOf(t.settings.MaxAttempts),
		BackoffSeconds:  t.settings.RetryBackoffSeconds,
		RetryMultiplier: t.settings.RetryMultiplier,
		RetryMaxSeconds: t.settings.RetryMaxSeconds,
		LeaseSeconds:    t.settings.LeaseSeconds,
		State:           taskd.StateOpen,
		Stage:           t.firstStage(),
		TemplateID:      t.templateID,
		Params:          json.RawMessage(t.params),
		DispatchedAt:    now,
	}
}

// firstStage is the stage a new dispatch of the task starts at ("" for none).
func (t *dispatchTask) firstStage() string {
	if len(t.stages) == 0 {
		return ""
	}
	return t.stages[0]
}

// offers reports whether the task is active and has occ.
func (t *dispatchTask) offers(occ taskd.Occurrence) bool {
	return t != nil && t.status == taskd.StatusActive && t.hasOccurrence(occ.Task.Kind, occ.DueAt)
}

// loadDispatchTasks reads the tasks of keys, with their templates' settings and stages,
// in share mode (an edit of either waits for the claim's commit, and a claim after an
// edit's commit sees it). Missing tasks are absent from the map.
func loadDispatchTasks(ctx context.Context, tx *sql.Tx, keys []taskd.TaskKey) (map[taskd.TaskKey]*dispatchTask, error) {
	out := make(map[taskd.TaskKey]*dispatchTask, len(keys))
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
		cols := "t.id, t.executor, t.status, t.start_time, t.dispatch_times, t.mode, t.template_id, t.params, " +
			settingsCols("t") + ", " + settingsCols("p") + ", p.stages"
		q := "SELECT " + cols + ", 0, NULL FROM task_once t"
		if kind == taskd.KindRotate {
			q = "SELECT " + cols + ", t.space_minutes, t.end_time FROM task_rotate t"
		}
		rows, err := tx.QueryContext(ctx, q+" LEFT JOIN task_params_template p ON p.id = t.template_id WHERE t.id IN ("+
			marks(len(ids))+") LOCK IN SHARE MODE", ids...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id int64
			var t dispatchTask
			var own, tpl taskd.Settings
			var stages *string
			var executor string
			dest := []any{&id, &executor, &t.status, &t.start, &t.quota, &t.mode, &t.templateID, &t.params}
			dest = append(append(dest, settingsDest(&own)...), settingsDest(&tpl)...)
			err := rows.Scan(append(dest, &stages, &t.space, &t.end)...)
			if err == nil {
				t.stages, err = parseStages(stages)
			}
			if err != nil {
				rows.Close()
				return nil, err
			}
			t.settings, _ = taskd.Resolve(own, tpl)
			t.start = t.start.UTC()
			t.executor, _ = taskd.ParseExecutor(executor)
			out[taskd.TaskKey{Kind: kind, ID: id}] = &t
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// targeted says, for each claim (task, uid) of tasks, whether the task targets uid:
// its executor is uid, or a group uid is a member of now. A removed member's cached
// heap may still offer the group's tasks (its invalidation may not have reached Redis
// yet); MySQL's membership is what a claim goes by. One read for every group claim.
func targeted(ctx context.Context, tx *sql.Tx, tasks []*dispatchTask, uids []string) ([]bool, error) {
	out := make([]bool, len(tasks))
	var args []any
	for i, t := range tasks {
		switch {
		case t == nil:
		case !t.executor.Group:
			out[i] = strings.EqualFold(t.executor.ID, uids[i]) // as the id columns compare
		default:
			args = append(args, t.executor.ID, uids[i])
		}
	}
	if len(args) == 0 {
		return out, nil
	}
	// In share mode: a removal committed after this read waits for the claim, so an
	// admin told the member is gone is never followed by a claim of the member's.
	rows, err := tx.QueryContext(ctx, "SELECT gid, uid FROM group_member WHERE "+anyOf(len(args)/2, "gid", "uid")+" LOCK IN SHARE MODE", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	member := map[[2]string]bool{}
	for rows.Next() {
		var gid, uid string
		if err := rows.Scan(&gid, &uid); err != nil {
			return nil, err
		}
		member[[2]string{strings.ToLower(gid), strings.ToLower(uid)}] = true
	}
	for i, t := range tasks {
		if t != nil && t.executor.Group {
			out[i] = member[[2]string{strings.ToLower(t.executor.ID), strings.ToLower(uids[i])}]
		}
	}
	return out, rows.Err()
}

// loadDispatchTask reads one task as loadDispatchTasks does; nil when it is missing.
func loadDispatchTask(ctx context.Context, tx *sql.Tx, k taskd.TaskKey) (*dispatchTask, error) {
	m, err := loadDispatchTasks(ctx, tx, []taskd.TaskKey{k})
	return m[k], err
}

// Claim tries to dispatch occurrence occ to uid at now, into the open slot take names
// (UserBusy when that slot is taken) and only if the task's template is one take
// allows (Filtered otherwise). On Claimed it returns the new open record; its attempt
// counts the user's latest expired attempts at the occurrence. It waits for the commit
// of the batch it joins.
func (s *Store) Claim(ctx context.Context, uid string, occ taskd.Occurrence, now time.Time, take taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
	if s.claims == nil {
		return s.claimOne(ctx, uid, occ, now, take)
	}
	occ.DueAt = occ.DueAt.UTC() // a map key in the batch, as MySQL gives it back
	out, err := s.claims.do(ctx, claimIn{uid: uid, occ: occ, now: now, take: take})
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

// runClaims is the claim batcher's run: the batch in one transaction, then, one by one,
// the claims it left alone. If the batch fails, each of its claims runs alone, so that
// one claim's error is its own. A lone claim runs alone at once: the single path has
// fewer statements than a batch of one (its conditional increment decides and writes
// the counter in one).
func (s *Store) runClaims(jobs []*claimJob) {
	observe := func(err error) { s.observed("claim", len(jobs), err) }
	if len(jobs) == 1 {
		observe(nil)
		jobs[0].finish(s.claimAlone(jobs[0]))
		return
	}
	runBatch(jobs, observe, s.claimBatch, s.claimAlone, func(o claimOut) bool { return o.outcome != 0 })
}

func (s *Store) claimAlone(j *claimJob) (claimOut, error) {
	outcome, d, err := s.claimOne(j.ctx, j.in.uid, j.in.occ, j.in.now, j.in.take)
	return claimOut{outcome, d}, err
}

// claimState is one claim's progress through a batch.
type claimState struct {
	outcome taskd.ClaimOutcome // 0: undecided
	d       *taskd.Dispatch
	alone   bool // left to run on its own after the batch commits
	held    bool // the batch took the user's once_per_user hold
	prior   int  // attempts the user already used at the occurrence
	// takenUp holds what a re-take (prior > 0) starts with: the expired attempt's
	// checkpoint, stage and context.
	takenUp      taskd.Dispatch
	takenUpFound bool
}

// claimRun is one attempt at a batch's transaction.
type claimRun struct {
	jobs  []*claimJob
	st    []claimState
	tasks map[taskd.TaskKey]*dispatchTask
	tx    *sql.Tx
}

// open lists the claims still undecided, in batch order.
func (c *claimRun) open() []int {
	var idx []int
	for i := range c.jobs {
		if c.st[i].outcome == 0 && !c.st[i].alone {
			idx = append(idx, i)
		}
	}
	return idx
}

func (c *claimRun) task(i int) *dispatchTask { return c.tasks[c.jobs[i].in.occ.Task] }

// claimBatch decides and records a batch of claims in one transaction and returns
// their outcomes once it has committed; a claim left to run alone has none. An error
// means nothing was written.
func (s *Store) claimBatch(ctx context.Context, jobs []*claimJob) ([]claimOut, error) {
	var c *claimRun
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		c = &claimRun{jobs: jobs, st: make([]claimState, len(jobs)), tx: tx}
		return s.claimAll(ctx, c)
	})
	if err != nil {
		return nil, mysqlErr("claim", err)
	}
	outs := make([]claimOut, len(jobs))
	for i := range jobs {
		if !c.st[i].alone {
			outs[i] = claimOut{c.st[i].outcome, c.st[i].d}
		}
	}
	return outs, nil
}

func (s *Store) claimAll(ctx context.Context, c *claimRun) error {
	keys := make([]taskd.TaskKey, 0, len(c.jobs))
	for _, j := range c.jobs {
		keys = append(keys, j.in.occ.Task)
	}
	var err error
	if c.tasks, err = loadDispatchTasks(ctx, c.tx, keys); err != nil {
		return err
	}
	tasks := make([]*dispatchTask, len(c.jobs))
	uids := make([]string, len(c.jobs))
	for i, j := range c.jobs {
		tasks[i], uids[i] = c.task(i), j.in.uid
	}
	aimed, err := targeted(ctx, c.tx, tasks, uids)
	if err != nil {
		return err
	}
	for i, j := range c.jobs {
		switch t := c.task(i); {
		case !t.offers(j.in.occ):
			c.st[i].outcome = taskd.Gone
		case !aimed[i]:
			c.st[i].outcome = taskd.NotTargeted
		case !j.in.take.Allows(t.templateID):
			c.st[i].outcome = taskd.Filtered
		}
	}
	if err := c.takeHolds(ctx); err != nil {
		return err
	}
	if err := c.readPriors(ctx); err != nil {
		return err
	}
	for _, i := range c.open() {
		switch prior := c.st[i].prior; {
		case prior == priorHolding:
			c.st[i].outcome = taskd.Holding
		case !taskd.MayClaim(prior, c.task(i).settings.MaxAttempts):
			c.st[i].outcome = taskd.AlreadyHad
		}
	}
	claimed, err := c.lockCounters(ctx)
	if err != nil {
		return err
	}
	used, err := c.lockRates(ctx)
	if err != nil {
		return err
	}
	added, err := c.grant(ctx, claimed, used)
	if err != nil {
		return err
	}
	if err := c.releaseHolds(ctx); err != nil {
		return err
	}
	if err := c.writeCounters(ctx, claimed, added); err != nil {
		return err
	}
	if err := c.writeRates(ctx, used); err != nil {
		return err
	}
	var evs []taskd.Event
	for i := range c.jobs {
		if c.st[i].outcome == taskd.Claimed {
			evs = s.withEvent(evs, c.st[i].d, taskd.EventDispatch, c.jobs[i].in.now)
		}
	}
	return s.emitAll(ctx, c.tx, evs)
}

// priorExpr is, over a user's dispatch records of one until_exhausted occurrence, the
// attempts the user already used at it: priorHolding if one is open (in another of the
// user's slots); -1 if the user may not take it now: one waits for a retry or the
// next stage (a retry an admin asked for too), or was cancelled by an admin (for
// good), or the latest died; else the attempt of the latest record if it expired (the
// attempts at its stage since the last completion), 0 after a completion. Its
// arguments are priorArgs.
const priorExpr = `IF(SUM(state = ?) > 0, -2,
	IF(SUM(state = ? OR (state IN (?, ?) AND waiting_uid IS NOT NULL) OR cancelled_at IS NOT NULL) > 0, -1,
	COALESCE(CAST(SUBSTRING_INDEX(GROUP_CONCAT(IF(state = ?, attempt, IF(state = ?, -1, 0))
	ORDER BY dispatched_at DESC, log_id DESC), ',', 1) AS SIGNED), 0)))`

// priorHolding is priorExpr's "the user holds the occurrence open".
const priorHolding = -2

func priorArgs() []any {
	return []any{taskd.StateOpen, taskd.StateRetryWait, taskd.StateStaged, taskd.StateDead, taskd.StateExpired, taskd.StateDead}
}

// occUser is a once_per_user hold's key.
type occUser struct {
	occ taskd.Occurrence
	uid string
}

// takeHolds inserts the once_per_user holds of the batch's open claims. A user who
// holds a row already (an open or finished claim, or one released by an expiry, whose
// re-take must read its attempts) is left to the single path, which tells them apart;
// so is a second claim of the same user and occurrence in the batch.
func (c *claimRun) takeHolds(ctx context.Context) error {
	var idx []int
	seen := map[occUser]bool{}
	for _, i := range c.open() {
		if c.task(i).mode != taskd.ModeOncePerUser {
			continue
		}
		k := occUser{c.jobs[i].in.occ, c.jobs[i].in.uid}
		if seen[k] {
			c.st[i].alone = true
			continue
		}
		seen[k] = true
		idx = append(idx, i)
	}
	for len(idx) > 0 {
		args := c.holdArgs(idx)
		_, err := c.tx.ExecContext(ctx, "INSERT INTO occurrence_user (task_kind, task_id, due_at, uid) VALUES "+
			tuples(len(idx), 4), args...)
		if err == nil {
			for _, i := range idx {
				c.st[i].held = true
			}
			return nil
		}
		if !isDuplicate(err) {
			return err
		}
		rows, qerr := c.tx.QueryContext(ctx, `SELECT task_kind, task_id, due_at, uid FROM occurrence_user
			WHERE `+anyOf(len(idx), holdCols...), args...)
		if qerr != nil {
			return qerr
		}
		taken := map[occUser]bool{}
		for rows.Next() {
			var k occUser
			if qerr = rows.Scan(&k.occ.Task.Kind, &k.occ.Task.ID, &k.occ.DueAt, &k.uid); qerr != nil {
				break
			}
			k.occ.DueAt = k.occ.DueAt.UTC()
			taken[k] = true
		}
		rows.Close()
		if qerr = cmp.Or(qerr, rows.Err()); qerr != nil {
			return qerr
		}
		if len(taken) == 0 {
			return err // not a hold after all: the batch gives way to the single path
		}
		idx = slices.DeleteFunc(idx, func(i int) bool {
			k := occUser{c.jobs[i].in.occ, c.jobs[i].in.uid}
			c.st[i].alone = taken[k]
			return taken[k]
		})
	}
	return nil
}

func (c *claimRun) holdArgs(idx []int) []any {
	args := make([]any, 0, 4*len(idx))
	for _, i := range idx {
		in := c.jobs[i].in
		args = append(args, in.occ.Task.Kind, in.occ.Task.ID, in.occ.DueAt, in.uid)
	}
	return args
}

// readPriors reads, for the open until_exhausted claims, the attempts each user already
// used at the occurrence, from its dispatch records (-1: one waits for a retry or is
// dead, so the user may not take it again now). Such an occurrence has no hold row: the
// user takes it again after each completion. The read locks the records in share mode,
// so that a complete of the user's record in flight is waited for, not read past (it
// may make the occurrence dead for the user).
func (c *claimRun) readPriors(ctx context.Context) error {
	var idx []int
	for _, i := range c.open() {
		if c.task(i).mode != taskd.ModeOncePerUser {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	rows, err := c.tx.QueryContext(ctx, `SELECT task_kind, task_id, due_at, uid, `+priorExpr+`
		FROM dispatch WHERE `+anyOf(len(idx), holdCols...)+`
		GROUP BY task_kind, task_id, due_at, uid LOCK IN SHARE MODE`, append(priorArgs(), c.holdArgs(idx)...)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	prior := map[occUser]int{}
	for rows.Next() {
		var k occUser
		var n int
		if err := rows.Scan(&k.occ.Task.Kind, &k.occ.Task.ID, &k.occ.DueAt, &k.uid, &n); err != nil {
			return err
		}
		k.occ.DueAt = k.occ.DueAt.UTC()
		prior[k] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows.Close()
	for _, i := range idx {
		in := c.jobs[i].in
		if c.st[i].prior = prior[occUser{in.occ, in.uid}]; c.st[i].prior > 0 {
			// A re-take after an expiry (rare): it starts where the expired one was.
			c.st[i].takenUp = taskd.Dispatch{UID: in.uid, Occurrence: in.occ}
			if c.st[i].takenUpFound, err = takeUp(ctx, c.tx, &c.st[i].takenUp); err != nil {
				return err
			}
		}
	}
	return nil
}

// lockCounters locks the claim counters of the open claims' occurrences and returns
// them; an occurrence without a counter row is absent (none claimed yet).
func (c *claimRun) lockCounters(ctx context.Context) (map[taskd.Occurrence]int, error) {
	claimed := map[taskd.Occurrence]int{}
	occs := c.openOccurrences()
	if len(occs) == 0 {
		return claimed, nil
	}
	rows, err := c.tx.QueryContext(ctx, `SELECT task_kind, task_id, due_at, claimed FROM occurrence_claim
		WHERE `+anyOf(len(occs), holdCols[:3]...)+` FOR UPDATE`, occArgs(occs, nil)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var o taskd.Occurrence
		var n int
		if err := rows.Scan(&o.Task.Kind, &o.Task.ID, &o.DueAt, &n); err != nil {
			return nil, err
		}
		o.DueAt = o.DueAt.UTC()
		claimed[o] = n
	}
	return claimed, rows.Err()
}

// openOccurrences lists the occurrences of the open claims, each once, sorted.
func (c *claimRun) openOccurrences() []taskd.Occurrence {
	var occs []taskd.Occurrence
	for _, i := range c.open() {
		occs = append(occs, c.jobs[i].in.occ)
	}
	slices.SortFunc(occs, compareOccurrences)
	return slices.Compact(occs)
}

func compareOccurrences(a, b taskd.Occurrence) int {
	return cmp.Or(cmp.Compare(a.Task.Kind, b.Task.Kind), cmp.Compare(a.Task.ID, b.Task.ID), a.DueAt.Compare(b.DueAt))
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

// grant gives the open claims their quota slots in batch order, against the locked
// counters, and inserts their dispatch records; it returns the slots added per
// occurrence. A second claim of the same user's open slot in the batch, or a claim of
// an open slot already taken (found when the insert hits the open-slot key), is
// UserBusy, and the quota slots are given again without it.
func (c *claimRun) grant(ctx context.Context, claimed map[taskd.Occurrence]int, used map[taskd.TaskKey]int) (map[taskd.Occurrence]int, error) {
	busy := map[userSlot]bool{}
	for {
		added := map[taskd.Occurrence]int{}
		rated := map[taskd.TaskKey]int{} // claims granted per rate-bound task
		users := map[userSlot]bool{}
		holding := map[occUser]bool{} // the occurrences granted in the batch, by user
		decided := map[int]taskd.ClaimOutcome{}
		var granted []int
		var ds []*taskd.Dispatch
		for _, i := range c.open() {
			in, t := c.jobs[i].in, c.task(i)
			us := userSlot{in.uid, in.take.OpenSlot()}
			// In the single path's order: the counter first, then the open slot.
			switch {
			case t.quota == 0, t.quota > 0 && claimed[in.occ]+added[in.occ] >= t.quota:
				decided[i] = taskd.Exhausted
				continue
			case t.settings.DispatchRatePerMinute > 0 && used[in.occ.Task]+rated[in.occ.Task] >= t.settings.DispatchRatePerMinute:
				decided[i] = taskd.RateBound
				continue
			case busy[us] || users[us]:
				decided[i] = taskd.UserBusy
				continue
			case holding[occUser{in.occ, in.uid}]:
				// A second claim of one occurrence by one user in the batch (into
				// another slot): the first holds it open.
				decided[i] = taskd.Holding
				continue
			}
			decided[i] = taskd.Claimed
			added[in.occ]++
			rated[in.occ.Task]++
			users[us] = true
			holding[occUser{in.occ, in.uid}] = true
			granted = append(granted, i)
			d := t.newDispatch(in.uid, in.occ, c.st[i].prior, in.now)
			d.Slot = in.take.OpenSlot()
			if c.st[i].takenUpFound {
				d.Checkpoint = c.st[i].takenUp.Checkpoint
				if c.st[i].takenUp.Stage != "" {
					d.Stage, d.Context = c.st[i].takenUp.Stage, c.st[i].takenUp.Context
				}
			}
			c.st[i].d = d
			ds = append(ds, d)
		}
		err := insertDispatches(ctx, c.tx, ds)
		if err == nil {
			for i, o := range decided {
				c.st[i].outcome = o
				if o != taskd.Claimed {
					c.st[i].d = nil
				}
			}
			return added, nil
		}
		if !isDuplicate(err) {
			return nil, err
		}
		slots := make([]userSlot, 0, len(granted))
		for _, i := range granted {
			slots = append(slots, userSlot{c.jobs[i].in.uid, c.jobs[i].in.take.OpenSlot()})
		}
		found, qerr := takenSlots(ctx, c.tx, slots)
		if qerr != nil {
			return nil, qerr
		}
		if len(found) == 0 {
			return nil, err
		}
		for _, us := range found {
			busy[us] = true
		}
	}
}

// userSlot is one of a user's open slots.
type userSlot struct {
	uid  string
	slot int
}

// takenSlots returns which of slots an open dispatch holds.
func takenSlots(ctx context.Context, tx *sql.Tx, slots []userSlot) ([]userSlot, error) {
	args := make([]any, 0, 2*len(slots))
	for _, us := range slots {
		args = append(args, us.uid, us.slot)
	}
	rows, err := tx.QueryContext(ctx, "SELECT open_uid, open_slot FROM dispatch WHERE "+
		anyOf(len(slots), "open_uid", "open_slot"), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []userSlot
	for rows.Next() {
		var us userSlot
		if err := rows.Scan(&us.uid, &us.slot); err != nil {
			return nil, err
		}
		out = append(out, us)
	}
	return out, rows.Err()
}

// releaseHolds deletes the holds the batch took for claims that did not dispatch.
func (c *claimRun) releaseHolds(ctx context.Context) error {
	var idx []int
	for i := range c.jobs {
		if c.st[i].held && c.st[i].outcome != taskd.Claimed {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	_, err := c.tx.ExecContext(ctx, "DELETE FROM occurrence_user WHERE "+anyOf(len(idx), holdCols...), c.holdArgs(idx)...)
	return err
}

// rateWindow is the minute a claim at now counts in, for dispatch_rate_per_minute.
func rateWindow(now time.Time) time.Time { return now.UTC().Truncate(time.Minute) }

// lockRates locks the rate rows of the open claims' rate-bound tasks and returns how
// many of each task's claims the current minute holds (a row of an earlier minute:
// none); a task without a row is absent. The batch's claims share one minute: the
// first claim's.
func (c *claimRun) lockRates(ctx context.Context) (map[taskd.TaskKey]int, error) {
	used := map[taskd.TaskKey]int{}
	var keys []taskd.TaskKey
	for _, i := range c.open() {
		if k := c.jobs[i].in.occ.Task; c.task(i).settings.DispatchRatePerMinute > 0 && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return used, nil
	}
	slices.SortFunc(keys, func(a, b taskd.TaskKey) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID)) })
	args := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		args = append(args, k.Kind, k.ID)
	}
	rows, err := c.tx.QueryContext(ctx, "SELECT task_kind, task_id, window_at, dispatched FROM task_rate WHERE "+
		anyOf(len(keys), "task_kind", "task_id")+" FOR UPDATE", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	window := rateWindow(c.jobs[0].in.now)
	for rows.Next() {
		var k taskd.TaskKey
		var at time.Time
		var n int
		if err := rows.Scan(&k.Kind, &k.ID, &at, &n); err != nil {
			return nil, err
		}
		used[k] = 0
		if !at.Before(window) { // a row of a later minute (a claim whose now is older): that minute's count
			used[k] = n
		}
	}
	return used, rows.Err()
}

// writeRates counts the granted claims of rate-bound tasks in their rows: a row the
// batch holds locked is rewritten (a new minute starts from the batch's claims); a row
// it found missing is inserted, and if a concurrent claim inserted it meanwhile the
// batch runs again, since its decision read none.
func (c *claimRun) writeRates(ctx context.Context, used map[taskd.TaskKey]int) error {
	per := map[taskd.TaskKey]int{}
	for i := range c.jobs {
		if c.st[i].outcome == taskd.Claimed && c.task(i).settings.DispatchRatePerMinute > 0 {
			per[c.jobs[i].in.occ.Task]++
		}
	}
	if len(per) == 0 {
		return nil
	}
	window := rateWindow(c.jobs[0].in.now)
	keys := slices.SortedFunc(maps.Keys(per), func(a, b taskd.TaskKey) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID))
	})
	for _, k := range keys {
		n := per[k]
		if _, held := used[k]; held {
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

// takeRate counts one claim of rate-bound task k at now against its rate, in the claim
// transaction; false when the current minute's rate is used up (nothing written).
func takeRate(ctx context.Context, tx *sql.Tx, k taskd.TaskKey, rate int, now time.Time) (bool, error) {
	window := rateWindow(now)
	var at time.Time
	var n int
	err := tx.QueryRowContext(ctx, "SELECT window_at, dispatched FROM task_rate WHERE task_kind = ? AND task_id = ? FOR UPDATE",
		k.Kind, k.ID).Scan(&at, &n)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, "INSERT INTO task_rate (task_kind, task_id, window_at, dispatched) VALUES (?, ?, ?, 1)",
			k.Kind, k.ID, window); err != nil {
			if isDuplicate(err) {
				return false, errConflict
			}
			return false, err
		}
		return true, nil
	case err != nil:
		return false, err
	case !at.Before(window) && n >= rate:
		return false, nil
	}
	if at.Before(window) {
		n = 0
	} else {
		window = at // never back (see writeRates)
	}
	_, err = tx.ExecContext(ctx, "UPDATE task_rate SET window_at = ?, dispatched = ? WHERE task_kind = ? AND task_id = ?",
		window, n+1, k.Kind, k.ID)
	return err == nil, err
}

// errConflict is a transaction that met a concurrent one's write where it had read
// none: it is run again (see inTx).
var errConflict = errors.New("conflict with a concurrent transaction")

// writeCounters adds the granted slots to the claim counters: to a row the batch holds
// locked, an increment; a row it found missing is inserted, and if a concurrent claim
// inserted it meanwhile the batch runs again, since its decision read none.
func (c *claimRun) writeCounters(ctx context.Context, claimed, added map[taskd.Occurrence]int) error {
	var held, fresh []taskd.Occurrence
	for o := range added {
		if _, ok := claimed[o]; ok {
			held = append(held, o)
		} else {
			fresh = append(fresh, o)
		}
	}
	write := func(occs []taskd.Occurrence, q string) error {
		if len(occs) == 0 {
			return nil
		}
		slices.SortFunc(occs, compareOccurrences)
		n := make([]int, len(occs))
		for i, o := range occs {
			n[i] = added[o]
		}
		_, err := c.tx.ExecContext(ctx, "INSERT INTO occurrence_claim (task_kind, task_id, due_at, claimed) VALUES "+
			tuples(len(occs), 4)+q, occArgs(occs, n)...)
		return err
	}
	if err := write(held, " ON DUPLICATE KEY UPDATE claimed = claimed + VALUES(claimed)"); err != nil {
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

// priorAttempts takes uid's hold on occ for a claim and returns the attempts uid
// already used at it (expiries that left attempts), or -1 when uid may not take it: it
// holds it (open or waiting for a retry), finished it for good (once_per_user), or it
// is dead for uid; priorHolding when an until_exhausted occurrence is open for uid.
//
// until_exhausted reads them in share mode, as readPriors does.
//
// once_per_user: the claim row (task, due, uid) is the hold. It is inserted, or, when
// an expiry released it, taken again; rows affected tell which (1 new, 2 re-taken, 0
// held), and only a re-take reads its attempts. until_exhausted has no such row (the
// user takes the occurrence again after each completion): the user's dispatch records
// of it say.
func priorAttempts(ctx context.Context, tx *sql.Tx, mode taskd.Mode, occ taskd.Occurrence, uid string) (int, error) {
	o := occ.Task
	if mode != taskd.ModeOncePerUser {
		var prior int
		err := tx.QueryRowContext(ctx, `SELECT `+priorExpr+`
			FROM dispatch WHERE task_kind = ? AND task_id = ? AND due_at = ? AND uid = ? LOCK IN SHARE MODE`,
			append(priorArgs(), o.Kind, o.ID, occ.DueAt, uid)...).Scan(&prior)
		return prior, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO occurrence_user (task_kind, task_id, due_at, uid) VALUES (?, ?, ?, ?)
		ON DUPLICATE KEY UPDATE released = 0`, o.Kind, o.ID, occ.DueAt, uid)
	if err != nil {
		return 0, err
	}
	switch n, err := res.RowsAffected(); {
	case err != nil:
		return 0, err
	case n == 1:
		return 0, nil
	case n == 0:
		return -1, nil // held: released was 0 already
	}
	var prior int
	err = tx.QueryRowContext(ctx, `SELECT attempts FROM occurrence_user
		WHERE task_kind = ? AND task_id = ? AND due_at = ? AND uid = ?`, o.Kind, o.ID, occ.DueAt, uid).Scan(&prior)
	return prior, err
}

// errAbort rolls a transaction back without it being an error.
var errAbort = errors.New("abort")

// claimOne is a claim in a transaction of its own: the task row, the user's hold (and
// the attempts of a re-take), a conditional increment of the counter, the record. It
// serves the claims a batch leaves alone: a user's once_per_user hold that exists
// already (held: AlreadyHad; released by an expiry: a re-take).
func (s *Store) claimOne(ctx context.Context, uid string, occ taskd.Occurrence, now time.Time, take taskd.Take) (taskd.ClaimOutcome, *taskd.Dispatch, error) {
	var outcome taskd.ClaimOutcome
	var d *taskd.Dispatch
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		outcome, d = 0, nil
		t, err := loadDispatchTask(ctx, tx, occ.Task)
		if err != nil {
			return err
		}
		if !t.offers(occ) {
			outcome = taskd.Gone
			return errAbort
		}
		aimed, err := targeted(ctx, tx, []*dispatchTask{t}, []string{uid})
		if err != nil {
			return err
		}
		if !aimed[0] {
			outcome = taskd.NotTargeted
			return errAbort
		}
		if !take.Allows(t.templateID) {
			outcome = taskd.Filtered
			return errAbort
		}
		prior, err := priorAttempts(ctx, tx, t.mode, occ, uid)
		switch {
		case err != nil:
			return err
		case prior == priorHolding:
			outcome = taskd.Holding
			return errAbort
		case !taskd.MayClaim(prior, t.settings.MaxAttempts):
			outcome = taskd.AlreadyHad
			return errAbort
		}
		// One statement: insert the counter at 1, or add one while below the quota.
		// Rows affected is 1 (inserted), 2 (incremented) or 0 (exhausted).
		res, err := tx.ExecContext(ctx, `INSERT INTO occurrence_claim (task_kind, task_id, due_at, claimed)
			VALUES (?, ?, ?, 1)
			ON DUPLICATE KEY UPDATE claimed = IF(? < 0 OR claimed < ?, claimed + 1, claimed)`,
			occ.Task.Kind, occ.Task.ID, occ.DueAt, t.quota, t.quota)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 || t.quota == 0 {
			outcome = taskd.Exhausted
			return errAbort
		}
		if rate := t.settings.DispatchRatePerMinute; rate > 0 {
			if ok, err := takeRate(ctx, tx, occ.Task, rate, now); err != nil {
				return err
			} else if !ok {
				outcome = taskd.RateBound
				return errAbort
			}
		}
		d = t.newDispatch(uid, occ, prior, now)
		d.Slot = take.OpenSlot()
		if prior > 0 {
			if _, err := takeUp(ctx, tx, d); err != nil {
				return err
			}
		}
		if err := insertDispatches(ctx, tx, []*taskd.Dispatch{d}); err != nil {
			if isDuplicate(err) {
				outcome = busyOutcome(err)
				return errAbort
			}
			return err
		}
		outcome = taskd.Claimed
		return s.emit(ctx, tx, d, taskd.EventDispatch, now)
	})
	if errors.Is(err, errAbort) {
		return outcome, nil, nil
	}
	if err != nil {
		return 0, nil, mysqlErr("claim "+occ.String(), err)
	}
	return outcome, d, nil
}

// insertDispatches inserts open dispatch records (setting their lease expiry) in one
// statement.
func insertDispatches(ctx context.Context, tx *sql.Tx, ds []*taskd.Dispatch) error {
	if len(ds) == 0 {
		return nil
	}
	const cols = 23
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
			d.Resumed)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO dispatch (log_id, uid, open_uid, open_slot, task_kind, task_id, due_at,
		mode, attempt, max_attempts, retry_backoff_seconds, retry_multiplier, retry_max_seconds, lease_seconds, state, template_id, params,
		dispatched_at, lease_expires_at, checkpoint, stage, context, resumed) VALUES `+tuples(len(ds), cols), args...)
	return err
}

// marks is n comma-separated placeholders.
func marks(n int) string {
	return "?" + strings.Repeat(", ?", n-1)
}

// anys is vs as arguments.
func anys[T any](vs []T) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

// tuples is n parenthesized groups of width placeholders: a multi-row VALUES list.
func tuples(n, width int) string {
	one := "(" + marks(width) + ")"
	return one + strings.Repeat(", "+one, n-1)
}

// holdCols is the key of a once_per_user hold; its first three columns an
// occurrence's.
var holdCols = []string{"task_kind", "task_id", "due_at", "uid"}

// anyOf matches rows whose cols equal any of n groups of arguments:
// "(a = ? AND b = ?) OR (a = ? AND b = ?)". Not a row IN: MariaDB reads a row IN of one
// element in a DELETE by scanning the table (locking what it reads), where this form
// is a range on the key in every statement.
func anyOf(n int, cols ...string) string {
	one := "(" + strings.Join(cols, " = ? AND ") + " = ?)"
	return one + strings.Repeat(" OR "+one, n-1)
}
