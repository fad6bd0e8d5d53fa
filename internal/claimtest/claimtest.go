// Package claimtest holds the claim scenarios every implementation of the claim rules
// runs and must agree on: taskd.DecideClaims alone (no database), and the store's
// claims against MySQL in batches of one and of many. Each scenario gives what came
// before (claims held, finished or expired) and a list of claims in order, with the
// outcome each must come to: a batch decides its claims as if they had run one after
// another.
package claimtest

import (
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
}

// templateIDs are the ids Domain gives the templates.
var templateIDs = map[string]int64{"a": 1, "b": 2}

// Template is a task's template name.
func (t Task) TemplateName() string {
	if t.Template == "" {
		return "a"
	}
	return t.Template
}

// Domain is the scenario as taskd.DecideClaims takes it: one batch of its claims, with
// the state what came before leaves (a hold counts a quota slot and takes slot 1; a
// completion keeps the slot; an expiry with attempts left gives it back, the last one
// keeps it).
func (sc Scenario) Domain() ([]taskd.Claim, taskd.ClaimCounts) {
	tasks := map[string]*taskd.ClaimTask{}
	keys := map[string]taskd.TaskKey{}
	for i, t := range sc.Tasks {
		ct := &taskd.ClaimTask{Executor: taskd.Executor{Group: true, ID: "g"}, Status: taskd.StatusActive, Start: At,
			Quota: t.Quota, Mode: t.Mode, TemplateID: templateIDs[t.TemplateName()],
			Settings: taskd.Effective{MaxAttempts: max(t.MaxAttempts, 1), LeaseSeconds: LeaseSeconds, DispatchRatePerMinute: t.Rate}}
		if ct.Mode == 0 {
			ct.Mode = taskd.ModeOncePerUser
		}
		if t.Paused {
			ct.Status = taskd.StatusPaused
		}
		if t.ForUser != "" {
			ct.Executor = taskd.Executor{ID: t.ForUser}
		}
		if t.PhaseCap != nil {
			ct.Rollout = &taskd.ClaimRollout{Phase: 1, Cap: *t.PhaseCap, Snapshot: t.Snapshot}
		}
		tasks[t.Name], keys[t.Name] = ct, taskd.TaskKey{Kind: taskd.KindOnce, ID: int64(i + 1)}
	}
	counts := taskd.ClaimCounts{Claimed: map[taskd.Occurrence]int{}, Rate: map[taskd.TaskKey]int{}, Busy: map[taskd.UserSlot]bool{}}
	prior := map[[2]string]taskd.Prior{}
	for _, b := range sc.Before {
		t, occ := tasks[b.Task], taskd.Occurrence{Task: keys[b.Task], DueAt: At}
		untilExhausted := t.Mode == taskd.ModeUntilExhausted
		k := [2]string{b.UID, b.Task}
		if t.Settings.DispatchRatePerMinute > 0 {
			counts.Rate[occ.Task]++
		}
		switch b.What {
		case Holds:
			counts.Claimed[occ]++
			counts.Busy[taskd.UserSlot{UID: b.UID, Slot: 1}] = true
			prior[k] = taskd.Prior{Holding: untilExhausted, Barred: !untilExhausted}
		case Finished:
			counts.Claimed[occ]++
			prior[k] = taskd.Prior{Barred: !untilExhausted}
		case Expired:
			if taskd.MaxAttemptsOf(t.Settings.MaxAttempts) <= 1 {
				counts.Claimed[occ]++ // dead: the slot is kept
				prior[k] = taskd.Prior{Barred: true}
				continue
			}
			prior[k] = taskd.Prior{Attempts: 1}
		}
	}
	claims := make([]taskd.Claim, len(sc.Claims))
	for i, c := range sc.Claims {
		t := tasks[c.Task]
		var ids []int64
		for _, name := range c.Templates {
			ids = append(ids, templateIDs[name])
		}
		claims[i] = taskd.Claim{UID: c.UID, Occurrence: taskd.Occurrence{Task: keys[c.Task], DueAt: At},
			Take: taskd.Take{Slot: c.Slot, Templates: ids}, Task: t, Prior: prior[[2]string{c.UID, c.Task}],
			Targeted:   t.Executor.Group && !contains(sc.Strangers, c.UID) || !t.Executor.Group && t.Executor.ID == c.UID,
			InSnapshot: !contains(sc.Latecomers, c.UID)}
	}
	return claims, counts
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
