package taskd_test

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/claimtest"
)

// The claim scenarios through the decision alone: internal/store runs the same
// scenarios against MySQL.
func TestDecideClaimsScenarios(t *testing.T) {
	claimtest.Run(t, newDecider)
}

// The decision leaves the state it was given as it was: a store that decides a batch
// again (a slot found taken at the insert) starts from the same counts.
func TestDecideClaimsChangesNothing(t *testing.T) {
	for _, sc := range claimtest.Scenarios {
		d := newDecider(t, sc).(*decider)
		for _, b := range sc.Before {
			d.Before(t, b)
		}
		counts := d.counts()
		batch := d.batch(sc.Claims)
		taskd.DecideClaims(batch, counts)
		if !reflect.DeepEqual(counts, d.counts()) {
			t.Errorf("%s: the counts changed", sc.Name)
		}
	}
}

// decider is the claim rules alone, for a scenario: its world is the domain's records,
// its history is played through the domain's own steps (a claim decided and made, a
// record's Finish, its ExpiryState), and each batch is decided against what the records
// hold, read as the store reads its rows.
type decider struct {
	sc      claimtest.Scenario
	tasks   map[string]*taskd.ClaimTask
	keys    map[string]taskd.TaskKey
	records []*taskd.Dispatch
}

var deciderTemplates = map[string]int64{"a": 1, "b": 2}

func newDecider(t *testing.T, sc claimtest.Scenario) claimtest.Claimer {
	d := &decider{sc: sc, tasks: map[string]*taskd.ClaimTask{}, keys: map[string]taskd.TaskKey{}}
	for i, task := range sc.Tasks {
		ct := &taskd.ClaimTask{Executor: taskd.Executor{Group: true, ID: "g"}, Status: taskd.StatusActive,
			Start: claimtest.At, Quota: task.Quota, Mode: task.TaskMode(), TemplateID: deciderTemplates[task.TemplateName()],
			Settings: taskd.Effective{MaxAttempts: max(task.MaxAttempts, 1), LeaseSeconds: claimtest.LeaseSeconds,
				DispatchRatePerMinute: task.Rate}}
		if task.Paused {
			ct.Status = taskd.StatusPaused
		}
		if task.ForUser != "" {
			ct.Executor = taskd.Executor{ID: task.ForUser}
		}
		if r := task.Rollout(); r != nil {
			ct.Rollout = r.ClaimView(taskd.RolloutStatus{State: taskd.RolloutRunning}, ct.Quota, &ct.Settings)
		}
		d.tasks[task.Name], d.keys[task.Name] = ct, taskd.TaskKey{Kind: taskd.KindOnce, ID: int64(i + 1)}
	}
	return d
}

func (d *decider) Before(t *testing.T, b claimtest.Before) {
	got := d.Claim(t, []claimtest.Claim{{UID: b.UID, Task: b.Task}})
	if got[0].Outcome != taskd.Claimed {
		t.Fatalf("before: %s's claim of %s: %v", b.UID, b.Task, got[0].Outcome)
	}
	r := d.records[len(d.records)-1]
	switch b.What {
	case claimtest.Finished:
		r.Finish(taskd.ResultSuccess, claimtest.At)
	case claimtest.Expired:
		r.State = r.ExpiryState()
	}
}

func (d *decider) Claim(t *testing.T, claims []claimtest.Claim) []claimtest.Got {
	batch := d.batch(claims)
	out := taskd.DecideClaims(batch, d.counts())
	got := make([]claimtest.Got, len(claims))
	for i, o := range out {
		got[i].Outcome = o
		if o == taskd.Claimed {
			r := batch[i].NewDispatch("r"+strconv.Itoa(len(d.records)), claimtest.At)
			d.records = append(d.records, r)
			got[i].Attempt = r.Attempt
		}
	}
	return got
}

// batch is claims as DecideClaims takes them, each with its user's prior.
func (d *decider) batch(claims []claimtest.Claim) []taskd.Claim {
	out := make([]taskd.Claim, len(claims))
	for i, c := range claims {
		var ids []int64
		for _, name := range c.Templates {
			ids = append(ids, deciderTemplates[name])
		}
		cl := taskd.Claim{UID: c.UID, Occurrence: taskd.Occurrence{Task: d.keys[c.Task], DueAt: claimtest.At},
			Take: taskd.Take{Slot: c.Slot, Templates: ids}, Task: d.tasks[c.Task]}
		cl.Target(!slices.Contains(d.sc.Strangers, c.UID), !slices.Contains(d.sc.Latecomers, c.UID))
		cl.Prior = d.prior(cl)
		out[i] = cl
	}
	return out
}

// prior reads the user's records of the claim's occurrence as the store reads its
// rows: a once_per_user hold (taken by the first claim, released by an expiry with
// attempts left), or the records themselves (until_exhausted).
func (d *decider) prior(c taskd.Claim) taskd.Prior {
	var latest *taskd.Dispatch
	var open, waits bool
	for _, r := range d.records {
		if r.Occurrence == c.Occurrence && strings.EqualFold(r.UID, c.UID) {
			latest = r
			open = open || r.State == taskd.StateOpen
			waits = waits || r.State == taskd.StateRetryWait || r.State == taskd.StateStaged || r.State == taskd.StateCancelled
		}
	}
	if latest == nil {
		return taskd.Prior{}
	}
	if c.Task.Mode == taskd.ModeOncePerUser {
		return taskd.HoldPrior(true, latest.State == taskd.StateExpired, latest.Attempt)
	}
	return taskd.RecordsPrior(open, waits, true, latest.State, latest.Attempt)
}

// counts is the shared state the records hold: the quota slots they keep, the claims of
// this minute, and the open slots.
func (d *decider) counts() taskd.ClaimCounts {
	counts := taskd.ClaimCounts{Claimed: map[taskd.Occurrence]int{}, Rate: map[taskd.TaskKey]int{}, Busy: map[taskd.UserSlot]bool{}}
	for _, r := range d.records {
		if r.KeepsSlot() {
			counts.Claimed[r.Occurrence]++
		}
		counts.Rate[r.Occurrence.Task] += taskd.RateUsed(r.DispatchedAt, 1, claimtest.At)
		if r.State == taskd.StateOpen {
			counts.Busy[taskd.UserSlot{UID: strings.ToLower(r.UID), Slot: r.Slot}] = true
		}
	}
	return counts
}

func TestPriorMayTake(t *testing.T) {
	for _, tc := range []struct {
		prior taskd.Prior
		max   int
		want  bool
	}{
		{taskd.Prior{}, 1, true},               // first attempt
		{taskd.Prior{}, 0, true},               // max_attempts 0 reads as 1
		{taskd.Prior{Attempts: 1}, 1, false},   // the one attempt was used
		{taskd.Prior{Attempts: 1}, 3, true},    // an expiry left attempts
		{taskd.Prior{Attempts: 2}, 3, true},    // the last one
		{taskd.Prior{Attempts: 3}, 3, false},   // none left
		{taskd.Prior{Barred: true}, 3, false},  // held, or finished for good
		{taskd.Prior{Holding: true}, 3, false}, // open in another slot
	} {
		if got := tc.prior.MayTake(tc.max); got != tc.want {
			t.Errorf("%+v.MayTake(%d) = %v, want %v", tc.prior, tc.max, got, tc.want)
		}
	}
}

func TestPriorsFromWhatTheStoreReads(t *testing.T) {
	if p := taskd.HoldPrior(false, false, 0); p != (taskd.Prior{}) {
		t.Errorf("no hold: %+v", p)
	}
	if p := taskd.HoldPrior(true, false, 2); !p.Barred {
		t.Errorf("held: %+v", p)
	}
	if p := taskd.HoldPrior(true, true, 2); p != (taskd.Prior{Attempts: 2}) {
		t.Errorf("released after 2 attempts: %+v", p)
	}
	for _, tc := range []struct {
		open, waits, found bool
		latest             taskd.DispatchState
		attempt            int
		want               taskd.Prior
	}{
		{want: taskd.Prior{}},
		{open: true, found: true, latest: taskd.StateOpen, attempt: 1, want: taskd.Prior{Holding: true}},
		{waits: true, found: true, latest: taskd.StateRetryWait, attempt: 1, want: taskd.Prior{Barred: true}},
		{found: true, latest: taskd.StateDead, attempt: 3, want: taskd.Prior{Barred: true}},
		{found: true, latest: taskd.StateExpired, attempt: 2, want: taskd.Prior{Attempts: 2}},
		{found: true, latest: taskd.StateDone, attempt: 2, want: taskd.Prior{}}, // taken again after a completion
	} {
		if got := taskd.RecordsPrior(tc.open, tc.waits, tc.found, tc.latest, tc.attempt); got != tc.want {
			t.Errorf("RecordsPrior(%v, %v, %v, %v, %d) = %+v, want %+v", tc.open, tc.waits, tc.found, tc.latest, tc.attempt, got, tc.want)
		}
	}
}

func TestRateUsed(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	if n := taskd.RateUsed(at, 4, at.Add(59*time.Second)); n != 4 {
		t.Errorf("same minute: %d", n)
	}
	if n := taskd.RateUsed(at, 4, at.Add(time.Minute)); n != 0 {
		t.Errorf("the next minute: %d", n)
	}
	if n := taskd.RateUsed(at.Add(time.Minute), 4, at.Add(30*time.Second)); n != 4 {
		t.Errorf("a claim whose now is a little older counts in the later minute: %d", n)
	}
}

func TestDecideResume(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	later := at.Add(time.Minute)
	lease := at.Add(-time.Second)
	active := &taskd.ClaimTask{Status: taskd.StatusActive, TemplateID: 1}
	// A window at 01:00 for two hours (closed at noon), and one at noon for an hour.
	closed := &taskd.ClaimTask{Status: taskd.StatusActive, TemplateID: 1, Windows: taskd.Windows{{Cron: "0 1 * * *", Minutes: 120}}}
	open := &taskd.ClaimTask{Status: taskd.StatusActive, TemplateID: 1, Windows: taskd.Windows{{Cron: "0 12 * * *", Minutes: 60}}}
	deployment := &taskd.ClaimTask{Status: taskd.StatusActive, TemplateID: 1, DDI: true}
	for _, tc := range []struct {
		name string
		prev taskd.Dispatch
		task *taskd.ClaimTask
		take taskd.Take
		want taskd.ResumeStep
	}{
		{"deleted, expired", taskd.Dispatch{State: taskd.StateExpired}, nil, taskd.Single, taskd.ResumeUnpark},
		{"deleted, waiting retry", taskd.Dispatch{State: taskd.StateRetryWait}, &taskd.ClaimTask{Status: taskd.StatusDeleted}, taskd.Single, taskd.ResumeCancel},
		{"paused", taskd.Dispatch{State: taskd.StateRetryWait}, &taskd.ClaimTask{Status: taskd.StatusPaused}, taskd.Single, taskd.ResumeNone},
		{"another template", taskd.Dispatch{State: taskd.StateRetryWait}, active, taskd.Take{Templates: []int64{2}}, taskd.ResumeFiltered},
		{"a DDI controller's take, a fetch's task", taskd.Dispatch{State: taskd.StateRetryWait, RetryAt: &at}, active, taskd.Take{DDI: true}, taskd.ResumeFiltered},
		{"a fetch's take, a deployment", taskd.Dispatch{State: taskd.StateRetryWait, RetryAt: &at}, deployment, taskd.Single, taskd.ResumeFiltered},
		{"a DDI controller's take, a deployment", taskd.Dispatch{State: taskd.StateRetryWait, RetryAt: &at}, deployment, taskd.Take{DDI: true}, taskd.ResumeNext},
		{"expired", taskd.Dispatch{State: taskd.StateExpired}, active, taskd.Single, taskd.ResumeReclaim},
		{"retry not due", taskd.Dispatch{State: taskd.StateRetryWait, RetryAt: &later}, active, taskd.Single, taskd.ResumeNotDue},
		{"retry due", taskd.Dispatch{State: taskd.StateRetryWait, RetryAt: &at}, active, taskd.Single, taskd.ResumeNext},
		{"next stage due", taskd.Dispatch{State: taskd.StateStaged, RetryAt: &at}, active, taskd.Single, taskd.ResumeNext},
		{"retry due, its windows closed", taskd.Dispatch{State: taskd.StateRetryWait, RetryAt: &at}, closed, taskd.Single, taskd.ResumeOutsideWindow},
		{"retry due, its window open", taskd.Dispatch{State: taskd.StateRetryWait, RetryAt: &at}, open, taskd.Single, taskd.ResumeNext},
		{"parked open, its windows closed", taskd.Dispatch{State: taskd.StateOpen}, closed, taskd.Single, taskd.ResumeRedo},
		{"parked open", taskd.Dispatch{State: taskd.StateOpen}, active, taskd.Single, taskd.ResumeRedo},
		{"parked open past its lease", taskd.Dispatch{State: taskd.StateOpen, LeaseExpiresAt: &lease}, active, taskd.Single, taskd.ResumeNone},
	} {
		if got := taskd.DecideResume(&tc.prev, tc.task, tc.take, at); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A claim of a DDI deployment by a fetch, or of a fetch's task by a DDI controller, is
// Filtered: the entry stays for the other.
func TestRefusalKeepsDDIApart(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	occ := taskd.Occurrence{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: 1}, DueAt: at}
	for _, tc := range []struct {
		ddiTask, ddiTake bool
		want             taskd.ClaimOutcome
	}{{false, false, 0}, {true, true, 0}, {true, false, taskd.Filtered}, {false, true, taskd.Filtered}} {
		c := taskd.Claim{UID: "u", Occurrence: occ, At: at, Take: taskd.Take{Slot: 1, DDI: tc.ddiTake}, Targeted: true,
			Task: &taskd.ClaimTask{Status: taskd.StatusActive, Start: at, Quota: 1, TemplateID: 1, DDI: tc.ddiTask}}
		if got := c.Refusal(); got != tc.want {
			t.Errorf("task ddi %v, take ddi %v: %v, want %v", tc.ddiTask, tc.ddiTake, got, tc.want)
		}
	}
}

func TestNextAttempt(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	task := &taskd.ClaimTask{TemplateID: 7, Params: []byte(`{"v":2}`), Settings: taskd.Effective{MaxAttempts: 5, LeaseSeconds: 30}}
	retry := taskd.Dispatch{LogID: "old", State: taskd.StateRetryWait, Attempt: 2, Result: taskd.ResultFailure, RetryAt: &at, RedoCount: 3}
	next := retry.NextAttempt("new", task, taskd.Take{Slot: 2}, at)
	if next.LogID != "new" || next.Attempt != 3 || next.State != taskd.StateOpen || next.Result != 0 || next.RetryAt != nil ||
		next.RedoCount != 0 || next.Slot != 2 || !next.Resumed || next.MaxAttempts != 5 || next.LeaseSeconds != 30 ||
		next.TemplateID != 7 || string(next.Params) != `{"v":2}` {
		t.Errorf("the retry's next attempt: %+v", next)
	}
	if retry.Superseded() != taskd.StateRetried {
		t.Errorf("a retried attempt is superseded as %v", retry.Superseded())
	}
	staged := taskd.Dispatch{State: taskd.StateStaged, Attempt: 2, Stage: "one", NextStage: "two", NextContext: []byte(`{}`)}
	if next := staged.NextAttempt("n", task, taskd.Single, at); next.Attempt != 1 || next.Stage != "two" || next.NextStage != "" {
		t.Errorf("the next stage: %+v", next)
	}
	if staged.Superseded() != taskd.StateStaged {
		t.Errorf("a staged record stays staged")
	}
	dead := taskd.Dispatch{State: taskd.StateDead, Attempt: 3}
	if next := dead.NextAttempt("n", task, taskd.Single, at); next.Attempt != 1 {
		t.Errorf("an admin's retry of a dead attempt counts afresh: attempt %d", next.Attempt)
	}
}
