package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// Violation kinds.
const (
	// An occurrence held by more live and completed dispatches than its quota.
	ViolationQuota = "quota_exceeded"
	// ViolationOutsideWindow: a task with maintenance windows was dispatched (a first
	// attempt or a retry) while none was open.
	ViolationOutsideWindow = "dispatched_outside_window"
	// ViolationNotOccurrence: a cron task was dispatched at a due time its cron does not
	// name.
	ViolationNotOccurrence = "not_an_occurrence"
	// A user holding an once_per_user occurrence twice.
	ViolationTwice = "twice_per_user"
	// A task's claimed counter differs from its live and completed dispatches.
	ViolationClaimed = "claimed_mismatch"
	// An agent received a log id that has no dispatch event (not durable in MySQL).
	ViolationNotDurable = "dispatch_not_durable"
	// An agent saw a complete acknowledged (200) that has no complete event.
	ViolationCompleteMissing = "complete_missing"
	// A campaign's counts that do not add up: more finished than its total, an offset
	// above its finished items, finished with items left.
	ViolationCampaignProgress = "campaign_progress"
	// A campaign counting fewer items done than the agents had a success acknowledged
	// for.
	ViolationItemLost = "campaign_done_lost"
	// A campaign counting more items done than the agents sent a success for: an item
	// counted twice.
	ViolationItemExtra = "campaign_done_extra"
	// A campaign handing out more items than its rate allows (plus one bucket).
	ViolationCampaignRate = "campaign_rate_exceeded"
	// ViolationFeedbackLost: the server acknowledged a DDI controller's feedback on an
	// action, and no dispatch record carries it.
	ViolationFeedbackLost = "ddi_feedback_lost"
	// ViolationFeedbackMisapplied: a DDI feedback carried by a record of another
	// controller or by more than one record, or a closing feedback whose record did
	// not end with the result the controller reported.
	ViolationFeedbackMisapplied = "ddi_feedback_misapplied"
)

// maxListed bounds the violations a result lists one by one (all are counted).
const maxListed = 50

// Observed is what the agents saw: the log ids they received from fetch and the ones
// whose complete the server acknowledged with 200.
type Observed struct {
	Got  []string
	Done []string
	// Items maps the log id of every campaign item the agents received to the item;
	// SentItems are the log ids of the items whose success complete was sent (answered
	// or not), AckedItems the ones answered 200.
	Items                 map[string]ItemRef
	SentItems, AckedItems []string
	// CampaignSeconds is how long the campaigns could hand items out: from just before
	// their start was asked to the end of the run.
	CampaignSeconds float64
	// Actions are the DDI actions the controllers' base polls named (repeats too),
	// Feedbacks the feedbacks on them the server acknowledged. A controller knows no
	// log id: checkDDI finds them through the records its feedback landed in.
	Actions   []ActionRef
	Feedbacks []FeedbackRef
}

// ItemRef names one campaign item: its campaign, and its index or uid (as JSON).
type ItemRef struct {
	Campaign int64
	Item     string
}

// Violation is one broken invariant.
type Violation struct {
	Kind   string `json:"kind"`
	TaskID string `json:"task_id,omitempty"`
	DueAt  string `json:"due_at,omitempty"`
	UID    string `json:"uid,omitempty"`
	LogID  string `json:"log_id,omitempty"`
	Detail string `json:"detail"`
}

func (v Violation) String() string {
	var b strings.Builder
	b.WriteString(v.Kind)
	if v.TaskID != "" {
		b.WriteString(" " + v.TaskID)
		if v.DueAt != "" {
			b.WriteString("@" + v.DueAt)
		}
	}
	if v.UID != "" {
		b.WriteString(" uid=" + v.UID)
	}
	if v.LogID != "" {
		b.WriteString(" log_id=" + v.LogID)
	}
	return b.String() + ": " + v.Detail
}

// CheckResult is what the checker found.
type CheckResult struct {
	Tasks          int `json:"tasks"`
	Campaigns      int `json:"campaigns,omitempty"`
	Occurrences    int `json:"occurrences"` // occurrences with at least one dispatch
	DispatchEvents int `json:"dispatch_events"`
	ExpireEvents   int `json:"expire_events"`
	CompleteEvents int `json:"complete_events"`
	// Cross-check with the agents (absent in -check-only).
	AgentReceived  int `json:"agent_received"`
	AgentCompleted int `json:"agent_completed"`
	// Events no agent saw: a reply lost on the way (a timeout after the server
	// committed) shows up here. Information, not a violation.
	UnseenDispatches int `json:"unseen_dispatches"`
	UnseenCompletes  int `json:"unseen_completes"`
	// Rollouts are the rolled-out tasks checked, and where each stands at the end.
	Rollouts      int      `json:"rollouts,omitempty"`
	RolloutPhases []string `json:"rollout_phases,omitempty"`
	// DDI: the distinct actions the controllers received and the feedbacks the server
	// acknowledged, checked; of the actions, the untied ones: no record names them (no
	// feedback on them was acknowledged), so they are not tied to a dispatch.
	DDIActions   int `json:"ddi_actions,omitempty"`
	DDIFeedbacks int `json:"ddi_feedbacks,omitempty"`
	DDIUntied    int `json:"ddi_actions_untied,omitempty"`

	ViolationCount int            `json:"violation_count"`
	ByKind         map[string]int `json:"violations_by_kind"`
	Violations     []Violation    `json:"violations"` // the first maxListed
	Notes          []string       `json:"notes,omitempty"`
	Took           float64        `json:"took_seconds"`
}

// OK reports whether no invariant was broken.
func (r *CheckResult) OK() bool { return r.ViolationCount == 0 }

func (r *CheckResult) add(v Violation) {
	r.ViolationCount++
	if r.ByKind == nil {
		r.ByKind = map[string]int{}
	}
	r.ByKind[v.Kind]++
	if len(r.Violations) < maxListed {
		r.Violations = append(r.Violations, v)
	}
}

// CheckInput is everything the invariants are checked on.
type CheckInput struct {
	Tasks      map[string]Task // the run's tasks, by task key
	Campaigns  []Campaign      // the run's campaigns, their progress read after the run
	Dispatches []Event         // dispatch events of those tasks
	Expires    []Event
	Completes  []Event
	Deads      []Event // dead events: an expiry or failure that used the last attempt
	// Stats, if not nil, are the per-task claimed counters over a window holding every
	// occurrence that was dispatched.
	Stats    []TaskStat
	Observed *Observed // nil: no cross-check with the agents
	// Rollouts and Records are the rolled-out tasks' rollouts and dispatch records, by
	// task id.
	Rollouts map[string]RolloutState
	Records  map[string][]Record
	// DDIRecords are the run's dispatch records, where the DDI controllers' feedback
	// landed (read when they saw actions).
	DDIRecords []Record
}

type occKey struct {
	task string
	due  time.Time
}

// Check checks the invariants (DESIGN.md section 5) on in.
//
// A quota slot is claimed by a dispatch and given back by an expiry that left attempts
// (an expiry that used the last attempt, followed by a dead event, keeps it); a retry
// (the next attempt after a failure of the same user's previous attempt) keeps the slot
// of the attempt before it. So the dispatches holding an occurrence are its dispatch
// events that are not retries minus its expire events that are not dead, and per user
// likewise: that count must not exceed dispatch_times, per user not exceed one in
// once_per_user mode, and per task it must equal the server's claimed counter.
func Check(in CheckInput) *CheckResult {
	r := &CheckResult{Tasks: len(in.Tasks), Campaigns: len(in.Campaigns), DispatchEvents: len(in.Dispatches),
		ExpireEvents: len(in.Expires), CompleteEvents: len(in.Completes), ByKind: map[string]int{}}
	held := map[occKey]int{}
	heldBy := map[occKey]map[string]int{}
	count := func(e Event, delta int) {
		k := occKey{e.TaskID, e.DueAt.UTC()}
		held[k] += delta
		if heldBy[k] == nil {
			heldBy[k] = map[string]int{}
		}
		heldBy[k][e.UID] += delta
	}
	type attemptKey struct {
		occ     occKey
		uid     string
		attempt int
	}
	failed := map[attemptKey]bool{}
	for _, e := range in.Completes {
		if e.Result == "failure" {
			failed[attemptKey{occKey{e.TaskID, e.DueAt.UTC()}, e.UID, e.Attempt}] = true
		}
	}
	dead := make(map[string]bool, len(in.Deads))
	for _, e := range in.Deads {
		dead[e.LogID] = true
	}
	for _, e := range in.Dispatches {
		if !failed[attemptKey{occKey{e.TaskID, e.DueAt.UTC()}, e.UID, e.Attempt - 1}] {
			count(e, 1)
		}
	}
	for _, e := range in.Expires {
		if !dead[e.LogID] {
			count(e, -1)
		}
	}
	r.Occurrences = len(held)

	keys := make([]occKey, 0, len(held))
	for k := range held {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].task != keys[j].task {
			return keys[i].task < keys[j].task
		}
		return keys[i].due.Before(keys[j].due)
	})
	heldPerTask := map[string]int{}
	for _, k := range keys {
		t, ok := in.Tasks[k.task]
		if !ok {
			continue
		}
		n := held[k]
		heldPerTask[k.task] += n
		due := k.due.Format(time.RFC3339)
		if t.DispatchTimes >= 0 && n > t.DispatchTimes {
			r.add(Violation{Kind: ViolationQuota, TaskID: k.task, DueAt: due,
				Detail: fmt.Sprintf("%d live or completed dispatches, quota %d", n, t.DispatchTimes)})
		}
		if t.Mode == "once_per_user" {
			uids := make([]string, 0, len(heldBy[k]))
			for uid := range heldBy[k] {
				uids = append(uids, uid)
			}
			sort.Strings(uids)
			for _, uid := range uids {
				if m := heldBy[k][uid]; m > 1 {
					r.add(Violation{Kind: ViolationTwice, TaskID: k.task, DueAt: due, UID: uid,
						Detail: fmt.Sprintf("user holds it %d times in once_per_user mode", m)})
				}
			}
		}
	}

	if in.Stats != nil {
		claimed := map[string]int{}
		for _, s := range in.Stats {
			claimed[s.TaskID] = s.Claimed
		}
		ids := make([]string, 0, len(in.Tasks))
		for id := range in.Tasks {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			if in.Tasks[id].DispatchTimes < 0 {
				continue // unlimited: no claim counter to compare
			}
			if c, h := claimed[id], heldPerTask[id]; c != h {
				r.add(Violation{Kind: ViolationClaimed, TaskID: id,
					Detail: fmt.Sprintf("claimed counter %d, live and completed dispatches %d", c, h)})
			}
		}
	}

	if in.Observed != nil {
		dispatched := make(map[string]bool, len(in.Dispatches))
		for _, e := range in.Dispatches {
			dispatched[e.LogID] = true
		}
		completed := make(map[string]bool, len(in.Completes))
		for _, e := range in.Completes {
			completed[e.LogID] = true
		}
		gotIDs, doneIDs := in.Observed.Got, in.Observed.Done
		if obs := in.Observed; len(obs.Actions) > 0 || len(obs.Feedbacks) > 0 {
			g, d := checkDDI(r, obs, in.DDIRecords)
			gotIDs = append(slices.Clip(gotIDs), g...)
			doneIDs = append(slices.Clip(doneIDs), d...)
		}
		got := map[string]bool{}
		for _, id := range gotIDs {
			if got[id] {
				continue // a redo: the same dispatch again
			}
			got[id] = true
			if _, item := in.Observed.Items[id]; item {
				continue // a campaign item: checked against its campaign below
			}
			if !dispatched[id] {
				r.add(Violation{Kind: ViolationNotDurable, LogID: id,
					Detail: "an agent received this dispatch but no dispatch event records it"})
			}
		}
		done := map[string]bool{}
		for _, id := range doneIDs {
			if done[id] {
				continue
			}
			done[id] = true
			if _, item := in.Observed.Items[id]; item {
				continue
			}
			if !completed[id] {
				r.add(Violation{Kind: ViolationCompleteMissing, LogID: id,
					Detail: "the server acknowledged this complete but no complete event records it"})
			}
		}
		r.AgentReceived, r.AgentCompleted = len(got), len(done)
		for id := range dispatched {
			if !got[id] {
				r.UnseenDispatches++
			}
		}
		for id := range completed {
			if !done[id] {
				r.UnseenCompletes++
			}
		}
	}
	checkSchedules(r, in.Tasks, in.Dispatches)
	checkCampaigns(r, in.Campaigns, in.Observed)
	checkRollouts(r, in.Tasks, in.Rollouts, in.Records)
	return r
}

// checkDDI ties what the DDI controllers saw to the dispatch records: a controller
// knows its dispatch by action id alone, and names it in every feedback's details
// (actionTag), which the server keeps on the record (a proceeding's as its checkpoint,
// a closing's as its detail). Every feedback the server acknowledged must be carried
// by exactly one record, of its controller's, and a closing one's record must have
// ended with the result reported (closed with failure: a failure; else a success). It
// returns the log ids of the actions received and of those closed, for the checks on
// every dispatch an agent received and every complete it had acknowledged.
func checkDDI(r *CheckResult, obs *Observed, records []Record) (got, done []string) {
	byAction := map[int64][]int{} // action id -> indexes of the records naming it
	for i, rec := range records {
		for _, id := range actionTags(rec.Checkpoint, rec.Detail) {
			byAction[id] = append(byAction[id], i)
		}
	}
	seen := map[int64]bool{}
	for _, a := range obs.Actions {
		if seen[a.ID] {
			continue // shown again while held
		}
		seen[a.ID] = true
		r.DDIActions++
		if recs := byAction[a.ID]; len(recs) > 0 {
			got = append(got, records[recs[0]].LogID)
		} else {
			r.DDIUntied++
		}
	}
	for _, f := range obs.Feedbacks {
		r.DDIFeedbacks++
		recs := byAction[f.ID]
		bad := func(kind, format string, args ...any) {
			r.add(Violation{Kind: kind, UID: f.UID, Detail: fmt.Sprintf("action %d, feedback %s/%s: ", f.ID, f.Execution, f.Finished) +
				fmt.Sprintf(format, args...)})
		}
		if len(recs) == 0 {
			bad(ViolationFeedbackLost, "acknowledged, and no dispatch record carries it")
			continue
		}
		rec := records[recs[0]]
		switch {
		case len(recs) > 1:
			bad(ViolationFeedbackMisapplied, "carried by %d dispatch records", len(recs))
		case !strings.EqualFold(rec.UID, f.UID):
			bad(ViolationFeedbackMisapplied, "carried by log id %s, a dispatch of %s", rec.LogID, rec.UID)
		case f.Execution == "closed":
			want := "success"
			if f.Finished == "failure" {
				want = "failure"
			}
			if rec.Result == nil || *rec.Result != want {
				result := "none"
				if rec.Result != nil {
					result = *rec.Result
				}
				bad(ViolationFeedbackMisapplied, "log id %s has result %s, want %s", rec.LogID, result, want)
			}
			done = append(done, rec.LogID)
		}
	}
	if r.DDIUntied > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d of the %d DDI actions the controllers received had no feedback acknowledged: no record names them, so they are not tied to a dispatch",
			r.DDIUntied, r.DDIActions))
	}
	return got, done
}

// actionTags returns the action ids the feedback records (a record's checkpoint or
// detail: {"details": [...]}) name by actionTag.
func actionTags(raws ...json.RawMessage) []int64 {
	var ids []int64
	for _, raw := range raws {
		var f struct {
			Details []string `json:"details"`
		}
		if len(raw) == 0 || json.Unmarshal(raw, &f) != nil {
			continue
		}
		for _, d := range f.Details {
			if s, ok := strings.CutPrefix(d, actionTagPrefix); ok {
				if id, err := strconv.ParseInt(s, 10, 64); err == nil && !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
		}
	}
	return ids
}

// checkSchedules checks each dispatch against its task's schedule: a cron task's due
// time is one its cron names, and a task with windows was dispatched while one was
// open (the dispatch event's time is the claim's).
func checkSchedules(r *CheckResult, tasks map[string]Task, dispatches []Event) {
	for _, e := range dispatches {
		t, ok := tasks[e.TaskID]
		if !ok {
			continue
		}
		if t.Cron != "" {
			c, err := taskd.ParseCron(t.Cron, t.TimeZone)
			if err == nil && !c.Has(e.DueAt.UTC()) {
				r.add(Violation{Kind: ViolationNotOccurrence, TaskID: e.TaskID, DueAt: e.DueAt.UTC().Format(time.RFC3339),
					LogID: e.LogID, Detail: fmt.Sprintf("cron %q in %s has no occurrence then", t.Cron, t.TimeZone)})
			}
		}
		if len(t.Windows) > 0 && !t.Windows.Open(e.At) {
			r.add(Violation{Kind: ViolationOutsideWindow, TaskID: e.TaskID, LogID: e.LogID, UID: e.UID,
				Detail: fmt.Sprintf("dispatched at %s, outside its windows", e.At.UTC().Format(time.RFC3339Nano))})
		}
	}
}

// checkCampaigns checks the run's campaigns: their counts add up and, with the agents'
// observations, no item acknowledged done is lost, none is counted twice (done never
// exceeds the items a success was sent for), and no campaign handed out items faster
// than its rate plus one bucket (a second's worth).
func checkCampaigns(r *CheckResult, campaigns []Campaign, obs *Observed) {
	type perCampaign struct{ sent, acked map[string]bool }
	var seen map[int64]*perCampaign
	handouts := map[int64]int{}
	if obs != nil {
		seen = map[int64]*perCampaign{}
		items := func(ids []string, pick func(*perCampaign) map[string]bool) {
			for _, id := range ids {
				it, ok := obs.Items[id]
				if !ok {
					continue
				}
				p := seen[it.Campaign]
				if p == nil {
					p = &perCampaign{map[string]bool{}, map[string]bool{}}
					seen[it.Campaign] = p
				}
				pick(p)[it.Item] = true
			}
		}
		items(obs.SentItems, func(p *perCampaign) map[string]bool { return p.sent })
		items(obs.AckedItems, func(p *perCampaign) map[string]bool { return p.acked })
		for _, it := range obs.Items {
			handouts[it.Campaign]++ // distinct log ids: every handout of an item is one
		}
	}
	sort.Slice(campaigns, func(i, j int) bool { return campaigns[i].ID < campaigns[j].ID })
	for _, c := range campaigns {
		task := fmt.Sprintf("campaign:%d", c.ID)
		bad := func(kind, format string, args ...any) {
			r.add(Violation{Kind: kind, TaskID: task, Detail: fmt.Sprintf(format, args...)})
		}
		finished := c.Done + c.Failed
		switch {
		case finished > c.Total:
			bad(ViolationCampaignProgress, "%d done and %d failed, of %d items", c.Done, c.Failed, c.Total)
		case c.Offset > finished:
			bad(ViolationCampaignProgress, "offset %d above the %d items finished", c.Offset, finished)
		case c.State == "finished" && finished != c.Total:
			bad(ViolationCampaignProgress, "finished with %d of %d items finished", finished, c.Total)
		case c.InFlight < 0:
			bad(ViolationCampaignProgress, "%d in flight", c.InFlight)
		}
		if obs == nil {
			continue
		}
		p := seen[c.ID]
		if p == nil {
			p = &perCampaign{}
		}
		if n := int64(len(p.acked)); c.Done < n {
			bad(ViolationItemLost, "%d items done, the agents had a success acknowledged for %d", c.Done, n)
		}
		if n := int64(len(p.sent)); c.Done > n {
			bad(ViolationItemExtra, "%d items done, the agents sent a success for %d", c.Done, n)
		}
		if limit := c.RatePerSecond*(obs.CampaignSeconds+1) + 1; float64(handouts[c.ID]) > limit {
			bad(ViolationCampaignRate, "%d items handed out in %.1fs at %g/s (at most %.0f with one bucket)",
				handouts[c.ID], obs.CampaignSeconds, c.RatePerSecond, limit)
		}
	}
}

// CheckTarget says which tasks and which events a check covers.
type CheckTarget struct {
	RunID string
	// Since, if not zero, leaves out events before it (the run's setup start).
	Since time.Time
	// ClaimsFrom and ClaimsTo bound the due times the claimed counters are summed
	// over; they must hold every occurrence the run could dispatch.
	ClaimsFrom, ClaimsTo time.Time
	MaxEvents            int64
}

// RunTask reports whether a task belongs to run runID: its executor is one of the
// run's users or groups.
func RunTask(t Task, runID string) bool { return runExecutor(t.Executor, runID) }

// runExecutor reports whether executor is one of run runID's users or groups.
func runExecutor(executor, runID string) bool {
	return strings.HasPrefix(executor, "uid_"+runID+"-") || strings.HasPrefix(executor, "gid_"+runID+"-")
}

// CheckServer reads the run's tasks, events and claimed counters through the admin
// API and checks them, with the agents' observations if obs is not nil.
func CheckServer(ctx context.Context, c *Client, target CheckTarget, obs *Observed) (*CheckResult, error) {
	start := time.Now()
	all, err := c.Tasks(ctx, 10_000)
	if err != nil {
		return nil, err
	}
	in := CheckInput{Tasks: map[string]Task{}, Observed: obs}
	for _, t := range all {
		if RunTask(t, target.RunID) {
			in.Tasks[t.TaskID] = t
		}
	}
	in.Rollouts, in.Records = map[string]RolloutState{}, map[string][]Record{}
	for id, t := range in.Tasks {
		if t.Rollout == nil {
			continue
		}
		if in.Rollouts[id], err = c.Rollout(ctx, id); err != nil {
			return nil, err
		}
		if in.Records[id], err = c.Records(ctx, id, 1000); err != nil {
			return nil, err
		}
	}
	campaigns, err := c.Campaigns(ctx, 100)
	if err != nil {
		return nil, err
	}
	for _, cp := range campaigns {
		if runExecutor(cp.Executor, target.RunID) {
			in.Campaigns = append(in.Campaigns, cp)
		}
	}
	keep := func(e Event) bool { _, ok := in.Tasks[e.TaskID]; return ok }
	budget := target.MaxEvents
	for _, p := range []struct {
		typ string
		out *[]Event
	}{{"dispatch", &in.Dispatches}, {"expire", &in.Expires}, {"complete", &in.Completes}, {"dead", &in.Deads}} {
		evs, read, err := c.Events(ctx, p.typ, target.Since, budget, keep)
		if err != nil {
			return nil, err
		}
		*p.out = evs
		budget -= read
	}
	if in.Stats, err = c.Stats(ctx, target.ClaimsFrom, target.ClaimsTo); err != nil {
		return nil, err
	}
	if obs != nil && (len(obs.Actions) > 0 || len(obs.Feedbacks) > 0) {
		// Where the DDI controllers' feedback landed; bounded as the events are.
		recs, err := c.RecordsSince(ctx, target.Since, int(max(budget, 0)/1000)+1)
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			if _, ok := in.Tasks[rec.TaskID]; ok {
				in.DDIRecords = append(in.DDIRecords, rec)
			}
		}
	}
	r := Check(in)
	if len(in.Tasks) == 0 && len(in.Campaigns) == 0 {
		r.Notes = append(r.Notes, "no task of run "+target.RunID+" found")
	}
	if obs == nil {
		r.Notes = append(r.Notes, "no agent observations: the cross-check with the agents was skipped")
	}
	r.Took = time.Since(start).Seconds()
	return r, nil
}

// checkRollouts checks the rolled-out tasks: no phase let an occurrence's claims past
// its cap, and no phase was ended by the server's gate on fewer finished dispatches than
// the gate's min_finished. From the dispatch records (each carries the phase it was
// claimed in): an occurrence's slots held in phases 1..p are its records of those
// phases that claimed a slot (not resumed from a waiting one) and did not give it back
// (an expiry with attempts left); a phase's finished dispatches at its end are its
// records finished by then. An admin's advance may end a phase on purpose: only the
// server's own moves are checked against the gate.
func checkRollouts(r *CheckResult, tasks map[string]Task, rollouts map[string]RolloutState, records map[string][]Record) {
	for id, st := range rollouts {
		t := tasks[id]
		spec := t.Rollout
		if spec == nil || len(spec.Phases) == 0 {
			continue
		}
		r.Rollouts++
		held := map[occKey]map[int]int{} // per occurrence, slots held by phase
		for _, rec := range records[id] {
			if rec.RolloutPhase == nil || rec.Resumed || rec.State == "expired" {
				continue
			}
			k := occKey{id, rec.DueAt.UTC()}
			if held[k] == nil {
				held[k] = map[int]int{}
			}
			held[k][*rec.RolloutPhase]++
		}
		for k, byPhase := range held {
			sum := 0
			for p := 1; p <= len(spec.Phases); p++ {
				sum += byPhase[p]
				if limit := spec.Cap(p-1, t.DispatchTimes); limit >= 0 && sum > limit {
					r.add(Violation{Kind: "phase_cap_exceeded", TaskID: id,
						DueAt: k.due.Format(time.RFC3339), Detail: fmt.Sprintf("phase %d: %d slots held through it, its cap is %d", p, sum, limit)})
				}
			}
		}
		for _, h := range st.History {
			if h.Actor != "" || (h.Event != "rollout.phase" && h.Event != "rollout.completed") {
				continue
			}
			finished := 0
			for _, rec := range records[id] {
				if rec.RolloutPhase != nil && *rec.RolloutPhase == h.Phase && rec.FinishedAt != nil && !rec.FinishedAt.After(h.At) {
					finished++
				}
			}
			if finished < spec.Gate.MinFinished {
				r.add(Violation{Kind: "gate_passed_early", TaskID: id,
					Detail: fmt.Sprintf("phase %d ended at %s with %d finished, the gate wants %d", h.Phase,
						h.At.Format(time.RFC3339Nano), finished, spec.Gate.MinFinished)})
			}
		}
		r.RolloutPhases = append(r.RolloutPhases, fmt.Sprintf("%s: %s, phase %d", id, st.State, st.Phase))
	}
	slices.Sort(r.RolloutPhases)
}
