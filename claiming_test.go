package taskd_test

import (
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/claimtest"
)

// The claim scenarios through the decision alone: one batch of each scenario's claims,
// against the state its history leaves. internal/store runs the same scenarios against
// MySQL, in batches of one and of many.
func TestDecideClaimsScenarios(t *testing.T) {
	for _, sc := range claimtest.Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			claims, counts := sc.Domain()
			got := taskd.DecideClaims(claims, counts)
			for i, c := range sc.Claims {
				if got[i] != c.Want {
					t.Errorf("claim %d (%s of %s, slot %d): %v, want %v", i, c.UID, c.Task, c.Slot, got[i], c.Want)
				}
				if got[i] == taskd.Claimed {
					if d := claims[i].NewDispatch("x", claimtest.At); d.Attempt != max(c.Attempt, 1) {
						t.Errorf("claim %d: attempt %d, want %d", i, d.Attempt, max(c.Attempt, 1))
					}
				}
			}
		})
	}
}

// The decision leaves the state it was given as it was: a store that decides a batch
// again (a slot found taken at the insert) starts from the same counts.
func TestDecideClaimsChangesNothing(t *testing.T) {
	for _, sc := range claimtest.Scenarios {
		claims, counts := sc.Domain()
		before := len(counts.Claimed) + len(counts.Rate) + len(counts.Busy)
		sum := 0
		for _, n := range counts.Claimed {
			sum += n
		}
		taskd.DecideClaims(claims, counts)
		after := len(counts.Claimed) + len(counts.Rate) + len(counts.Busy)
		sum2 := 0
		for _, n := range counts.Claimed {
			sum2 += n
		}
		if before != after || sum != sum2 {
			t.Errorf("%s: the counts changed", sc.Name)
		}
	}
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
		{"expired", taskd.Dispatch{State: taskd.StateExpired}, active, taskd.Single, taskd.ResumeReclaim},
		{"retry not due", taskd.Dispatch{State: taskd.StateRetryWait, RetryAt: &later}, active, taskd.Single, taskd.ResumeNotDue},
		{"retry due", taskd.Dispatch{State: taskd.StateRetryWait, RetryAt: &at}, active, taskd.Single, taskd.ResumeNext},
		{"next stage due", taskd.Dispatch{State: taskd.StateStaged, RetryAt: &at}, active, taskd.Single, taskd.ResumeNext},
		{"parked open", taskd.Dispatch{State: taskd.StateOpen}, active, taskd.Single, taskd.ResumeRedo},
		{"parked open past its lease", taskd.Dispatch{State: taskd.StateOpen, LeaseExpiresAt: &lease}, active, taskd.Single, taskd.ResumeNone},
	} {
		if got := taskd.DecideResume(&tc.prev, tc.task, tc.take, at); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
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
