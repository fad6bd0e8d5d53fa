// Package claimtest holds the claim scenarios every implementation of the claim rules
// must agree on, and runs them: Run plays each scenario against a Claimer, its claims
// in batches of one and as one batch. The domain's test runs them through
// taskd.DecideClaims alone (no database), the store's against MySQL. Each scenario
// gives what came before (claims held, finished or expired) and a list of claims in
// order, with the outcome each must come to: a batch decides its claims as if they had
// run one after another.
package claimtest

import (
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

// At is when every scenario's occurrences are due and claimed.
var At = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// LeaseSeconds is every scenario task's lease (so that an attempt can expire).
const LeaseSeconds = 60

// Task is a once task of a scenario, due At. Zero values: quota Unlimited is not the
// zero value, so Quota must be set; mode once_per_user; one attempt; no rate; active;
// template "a"; executor the group every scenario user is a member of.
type Task struct {
	Name        string
	Quota       int
	Mode        taskd.Mode
	MaxAttempts int
	Rate        int // dispatch_rate_per_minute
	Paused      bool
	Template    string // "a" (default) or "b"
	ForUser     string // the task targets this user alone; "": the group
	// PhaseCap, when set, gives the task a rollout whose first (current) phase caps each
	// occurrence's claims at it (then the whole quota); Snapshot makes its targeting
	// snapshot.
	PhaseCap *int
	Snapshot bool
	// RolloutRate, with PhaseCap, ramps the rollout's claims from this many a minute.
	RolloutRate int
}

// History is what a user did at a task's occurrence before the claims.
type History uint8

const (
	Holds    History = iota + 1 // claimed it into slot 1 and holds it open
	Finished                    // claimed it into slot 1 and completed it with success
	Expired                     // claimed it into slot 1 and its lease ran out
)

// Before is one thing done before a scenario's claims.
type Before struct {
	UID  string
	Task string
	What History
}

// Claim is one claim of a scenario and what it must come to. Slot 0 is slot 1;
// Templates, when set, are the templates the fetch takes ("a", "b").
type Claim struct {
	UID       string
	Task      string
	Slot      int
	Templates []string
	Want      taskd.ClaimOutcome
	// Attempt is the attempt a granted claim must be (0: 1).
	Attempt int
}

// Scenario is a set of tasks, what came before, and claims in order.
type Scenario struct {
	Name      string
	Tasks     []Task
	Before    []Before
	Claims    []Claim
	Strangers []string // users who are not members of the group
	// Latecomers join the group after the tasks were made (after a snapshot
	// rollout's start).
	Latecomers []string
}

// Scenarios are the claim rules' cases.
var Scenarios = []Scenario{
	{
		Name:   "first come first served",
		Tasks:  []Task{{Name: "t", Quota: 2}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Claimed}, {UID: "b", Task: "t", Want: taskd.Claimed}, {UID: "c", Task: "t", Want: taskd.Exhausted}},
	},
	{
		Name:   "quota zero",
		Tasks:  []Task{{Name: "t", Quota: 0}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Exhausted}},
	},
	{
		Name:  "a user's second claim into the same slot is busy, into another slot granted",
		Tasks: []Task{{Name: "t", Quota: taskd.Unlimited}, {Name: "u", Quota: taskd.Unlimited}, {Name: "v", Quota: taskd.Unlimited}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Claimed}, {UID: "a", Task: "u", Want: taskd.UserBusy},
			{UID: "a", Task: "v", Slot: 2, Want: taskd.Claimed}},
	},
	{
		Name:   "once_per_user: a second claim by the same user is refused",
		Tasks:  []Task{{Name: "t", Quota: taskd.Unlimited}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Claimed}, {UID: "a", Task: "t", Slot: 2, Want: taskd.AlreadyHad}},
	},
	{
		Name:   "until_exhausted: held open in one slot, not taken into another",
		Tasks:  []Task{{Name: "t", Quota: 5, Mode: taskd.ModeUntilExhausted}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Claimed}, {UID: "a", Task: "t", Slot: 2, Want: taskd.Holding}},
	},
	{
		Name:   "until_exhausted: held open from before",
		Tasks:  []Task{{Name: "t", Quota: 5, Mode: taskd.ModeUntilExhausted}},
		Before: []Before{{UID: "a", Task: "t", What: Holds}},
		Claims: []Claim{{UID: "a", Task: "t", Slot: 2, Want: taskd.Holding}, {UID: "b", Task: "t", Want: taskd.Claimed}},
	},
	{
		Name:   "until_exhausted: taken again after finishing, while the quota lasts",
		Tasks:  []Task{{Name: "t", Quota: 3, Mode: taskd.ModeUntilExhausted}},
		Before: []Before{{UID: "a", Task: "t", What: Finished}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Claimed}, {UID: "b", Task: "t", Want: taskd.Claimed}, {UID: "c", Task: "t", Want: taskd.Exhausted}},
	},
	{
		Name:   "once_per_user: finished is for good",
		Tasks:  []Task{{Name: "t", Quota: taskd.Unlimited}},
		Before: []Before{{UID: "a", Task: "t", What: Finished}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.AlreadyHad}, {UID: "b", Task: "t", Want: taskd.Claimed}},
	},
	{
		Name:   "once_per_user: an expiry with attempts left gives the slot back, and the re-take is the next attempt",
		Tasks:  []Task{{Name: "t", Quota: 1, MaxAttempts: 3}},
		Before: []Before{{UID: "a", Task: "t", What: Expired}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Claimed, Attempt: 2}, {UID: "b", Task: "t", Want: taskd.Exhausted}},
	},
	{
		Name:   "once_per_user: the slot an expiry gave back goes to whoever comes first",
		Tasks:  []Task{{Name: "t", Quota: 1, MaxAttempts: 3}},
		Before: []Before{{UID: "a", Task: "t", What: Expired}},
		Claims: []Claim{{UID: "b", Task: "t", Want: taskd.Claimed}, {UID: "a", Task: "t", Want: taskd.Exhausted}},
	},
	{
		Name:   "until_exhausted: the re-take after an expiry is the next attempt",
		Tasks:  []Task{{Name: "t", Quota: 2, Mode: taskd.ModeUntilExhausted, MaxAttempts: 2}},
		Before: []Before{{UID: "a", Task: "t", What: Expired}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Claimed, Attempt: 2}, {UID: "b", Task: "t", Want: taskd.Claimed}, {UID: "c", Task: "t", Want: taskd.Exhausted}},
	},
	{
		Name:   "the last attempt expired: dead for the user, its slot kept",
		Tasks:  []Task{{Name: "t", Quota: 2, MaxAttempts: 1}, {Name: "u", Quota: 2, Mode: taskd.ModeUntilExhausted, MaxAttempts: 1}},
		Before: []Before{{UID: "a", Task: "t", What: Expired}, {UID: "a", Task: "u", What: Expired}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.AlreadyHad}, {UID: "a", Task: "u", Want: taskd.AlreadyHad},
			{UID: "b", Task: "t", Want: taskd.Claimed}, {UID: "c", Task: "t", Want: taskd.Exhausted}},
	},
	{
		Name:      "gone, not targeted, filtered: before anything else",
		Tasks:     []Task{{Name: "paused", Quota: 0, Paused: true}, {Name: "x", Quota: taskd.Unlimited, ForUser: "x"}, {Name: "b", Quota: 0, Template: "b"}, {Name: "t", Quota: taskd.Unlimited}},
		Strangers: []string{"s"},
		Claims: []Claim{{UID: "a", Task: "paused", Want: taskd.Gone}, {UID: "a", Task: "x", Want: taskd.NotTargeted},
			{UID: "x", Task: "x", Want: taskd.Claimed}, {UID: "s", Task: "t", Want: taskd.NotTargeted},
			{UID: "a", Task: "b", Templates: []string{"a"}, Want: taskd.Filtered}, {UID: "a", Task: "t", Templates: []string{"a"}, Want: taskd.Claimed}},
	},
	{
		Name:  "the dispatch rate",
		Tasks: []Task{{Name: "t", Quota: taskd.Unlimited, Rate: 2}, {Name: "u", Quota: 3, Mode: taskd.ModeUntilExhausted, Rate: 1}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Claimed}, {UID: "b", Task: "t", Want: taskd.Claimed}, {UID: "c", Task: "t", Want: taskd.RateBound},
			{UID: "c", Task: "u", Want: taskd.Claimed}, {UID: "d", Task: "u", Want: taskd.RateBound}},
	},
	{
		Name:   "the quota before the open slot: a busy user's claim of a full task is exhausted",
		Tasks:  []Task{{Name: "t", Quota: taskd.Unlimited}, {Name: "full", Quota: 1}},
		Before: []Before{{UID: "b", Task: "full", What: Holds}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Claimed}, {UID: "a", Task: "full", Want: taskd.Exhausted}},
	},
	{
		Name:   "busy outside the batch: the slot goes to the next in line",
		Tasks:  []Task{{Name: "held", Quota: taskd.Unlimited}, {Name: "t", Quota: 1}},
		Before: []Before{{UID: "a", Task: "held", What: Holds}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.UserBusy}, {UID: "b", Task: "t", Want: taskd.Claimed}, {UID: "c", Task: "t", Want: taskd.Exhausted}},
	},
	{
		Name:   "a claim refused for the slot leaves the quota to the user's later claim in another slot",
		Tasks:  []Task{{Name: "held", Quota: taskd.Unlimited}, {Name: "t", Quota: 1}},
		Before: []Before{{UID: "a", Task: "held", What: Holds}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.UserBusy}, {UID: "a", Task: "t", Slot: 2, Want: taskd.Claimed}, {UID: "b", Task: "t", Want: taskd.Exhausted}},
	},
	{
		Name:  "a rollout's phase caps each occurrence's claims",
		Tasks: []Task{{Name: "t", Quota: 10, PhaseCap: new(2)}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Claimed}, {UID: "b", Task: "t", Want: taskd.Claimed},
			{UID: "c", Task: "t", Want: taskd.PhaseBound}, {UID: "a", Task: "t", Slot: 2, Want: taskd.AlreadyHad}},
	},
	{
		Name:   "a rollout's cap counts what came before",
		Tasks:  []Task{{Name: "t", Quota: taskd.Unlimited, PhaseCap: new(2), Mode: taskd.ModeUntilExhausted}},
		Before: []Before{{UID: "a", Task: "t", What: Finished}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Claimed}, {UID: "b", Task: "t", Want: taskd.PhaseBound}},
	},
	{
		Name:       "a snapshot rollout: a latecomer may not claim, a member at the start may",
		Tasks:      []Task{{Name: "t", Quota: 10, PhaseCap: new(5), Snapshot: true}, {Name: "u", Quota: 10, PhaseCap: new(5)}},
		Latecomers: []string{"late"},
		Claims: []Claim{{UID: "late", Task: "t", Want: taskd.NotInRollout}, {UID: "a", Task: "t", Want: taskd.Claimed},
			{UID: "late", Task: "u", Want: taskd.Claimed}},
	},
	{
		Name:  "a rollout's ramped rate bounds the task's, when lower",
		Tasks: []Task{{Name: "t", Quota: 10, PhaseCap: new(5), RolloutRate: 1, Rate: 3}, {Name: "u", Quota: 10, PhaseCap: new(5), RolloutRate: 3, Rate: 1}},
		Claims: []Claim{{UID: "a", Task: "t", Want: taskd.Claimed}, {UID: "b", Task: "t", Want: taskd.RateBound},
			{UID: "c", Task: "u", Want: taskd.Claimed}, {UID: "d", Task: "u", Want: taskd.RateBound}},
	},
	{
		Name:  "a task for one user: its id compares without case",
		Tasks: []Task{{Name: "x", Quota: taskd.Unlimited, ForUser: "x"}},
		Claims: []Claim{{UID: "X", Task: "x", Want: taskd.Claimed}, {UID: "x", Task: "x", Slot: 2, Want: taskd.AlreadyHad},
			{UID: "y", Task: "x", Want: taskd.NotTargeted}},
	},
}

// TemplateName is a task's template name: "a" or "b".
func (t Task) TemplateName() string {
	if t.Template == "" {
		return "a"
	}
	return t.Template
}

// TaskMode is a task's mode: once_per_user unless said.
func (t Task) TaskMode() taskd.Mode {
	if t.Mode == 0 {
		return taskd.ModeOncePerUser
	}
	return t.Mode
}

// Rollout is the rollout a task is made with (nil: none): a first phase of PhaseCap
// claims, then the whole quota, moved by hand.
func (t Task) Rollout() *taskd.Rollout {
	if t.PhaseCap == nil {
		return nil
	}
	r := taskd.Rollout{Phases: []taskd.Phase{{Count: t.PhaseCap}, {Percent: new(100.0)}}, Advance: taskd.AdvanceManual,
		RatePerMinute: t.RolloutRate}
	if t.Snapshot {
		r.Targeting = taskd.TargetingSnapshot
	}
	r = r.WithDefaults()
	return &r
}

// Got is what a claim came to: its outcome and, when granted, its attempt.
type Got struct {
	Outcome taskd.ClaimOutcome
	Attempt int
}

// A Claimer is an implementation of the claim rules, made for one scenario's world:
// its tasks (each due At, with a LeaseSeconds lease), a group every user of the
// scenario is a member of but its strangers, and its latecomers joining the group
// after the tasks were made.
type Claimer interface {
	// Before plays one thing done before the claims.
	Before(t *testing.T, b Before)
	// Claim claims a batch, deciding its claims in order as if each ran after the ones
	// before it, and says what each came to.
	Claim(t *testing.T, claims []Claim) []Got
}

// A Checker is a Claimer that checks its own state once a scenario's claims are done.
type Checker interface {
	Check(t *testing.T)
}

// Run plays every scenario against claimers newClaimer makes, one for each scenario
// and way of batching (its claims in batches of one, and as one batch), and checks
// each claim's outcome and attempt.
func Run(t *testing.T, newClaimer func(t *testing.T, sc Scenario) Claimer) {
	for _, sc := range Scenarios {
		for _, together := range []bool{false, true} {
			name := sc.Name + "/batches of one"
			if together {
				name = sc.Name + "/one batch"
			}
			t.Run(name, func(t *testing.T) {
				c := newClaimer(t, sc)
				for _, b := range sc.Before {
					c.Before(t, b)
				}
				var got []Got
				if together {
					got = c.Claim(t, sc.Claims)
				} else {
					for _, cl := range sc.Claims {
						got = append(got, c.Claim(t, []Claim{cl})...)
					}
				}
				if len(got) != len(sc.Claims) {
					t.Fatalf("%d claims came to %d outcomes", len(sc.Claims), len(got))
				}
				for i, c := range sc.Claims {
					want := Got{Outcome: c.Want}
					if c.Want == taskd.Claimed {
						want.Attempt = max(c.Attempt, 1)
					}
					if got[i] != want {
						t.Errorf("claim %d (%s of %s, slot %d): %+v, want %+v", i, c.UID, c.Task, c.Slot, got[i], want)
					}
				}
				if ch, ok := c.(Checker); ok {
					ch.Check(t)
				}
			})
		}
	}
}
