package taskd_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func TestRetryBackoff(t *testing.T) {
	for _, tc := range []struct {
		base    int
		mult    float64
		cap     int
		attempt int
		want    time.Duration
	}{
		{10, 2, 86400, 1, 10 * time.Second},
		{10, 2, 86400, 2, 20 * time.Second},
		{10, 2, 86400, 4, 80 * time.Second},
		{0, 2, 86400, 5, 0},
		{3600, 2, 86400, 10, 24 * time.Hour}, // capped
		{86400, 2, 86400, 1, 24 * time.Hour},
		{10, 1, 86400, 7, 10 * time.Second}, // a multiplier of 1: constant
		{10, 3, 100, 2, 30 * time.Second},
		{10, 3, 100, 3, 90 * time.Second},
		{10, 3, 100, 4, 100 * time.Second},      // capped at 100
		{86400, 10, 86400, 100, 24 * time.Hour}, // 10^99 does not overflow
	} {
		if got := taskd.RetryBackoff(tc.base, tc.mult, tc.cap, tc.attempt); got != tc.want {
			t.Errorf("RetryBackoff(%d, %g, %d, %d) = %v, want %v", tc.base, tc.mult, tc.cap, tc.attempt, got, tc.want)
		}
	}
}

func open(attempt, max int, lease *time.Time) *taskd.Dispatch {
	return &taskd.Dispatch{LogID: "l1", UID: "u1", State: taskd.StateOpen, Attempt: attempt, MaxAttempts: max,
		BackoffSeconds: 30, RetryMultiplier: 2, RetryMaxSeconds: 86400, LeaseExpiresAt: lease}
}

func TestCompleteBlocked(t *testing.T) {
	past, future := now.Add(-time.Second), now.Add(time.Minute)
	dead := func(result taskd.Result) *taskd.Dispatch {
		d := open(3, 3, nil)
		d.State, d.Result = taskd.StateDead, result
		return d
	}
	inState := func(s taskd.DispatchState) *taskd.Dispatch {
		d := open(1, 3, nil)
		d.State = s
		return d
	}
	for name, tc := range map[string]struct {
		d       *taskd.Dispatch
		uid     string
		want    taskd.CompleteOutcome
		proceed bool
	}{
		"open, no lease":      {open(1, 1, nil), "u1", 0, true},
		"open, within lease":  {open(1, 1, &future), "u1", 0, true},
		"open, lease over":    {open(1, 1, &past), "u1", taskd.ExpiredNow, false},
		"someone else's":      {open(1, 1, nil), "u2", taskd.Stale, false},
		"unknown":             {nil, "u1", taskd.Stale, false},
		"done":                {inState(taskd.StateDone), "u1", taskd.AlreadyDone, false},
		"waiting for a retry": {inState(taskd.StateRetryWait), "u1", taskd.AlreadyDone, false},
		"retried":             {inState(taskd.StateRetried), "u1", taskd.AlreadyDone, false},
		"dead by failing":     {dead(taskd.ResultFailure), "u1", taskd.AlreadyDone, false},
		"dead by expiring":    {dead(0), "u1", taskd.Stale, false},
		"expired":             {inState(taskd.StateExpired), "u1", taskd.Stale, false},
		"cancelled (deleted)": {inState(taskd.StateCancelled), "u1", taskd.Stale, false},
	} {
		got, proceed := taskd.CompleteBlocked(tc.d, tc.uid, now)
		if got != tc.want || proceed != tc.proceed {
			t.Errorf("%s: CompleteBlocked = %v, %v; want %v, %v", name, got, proceed, tc.want, tc.proceed)
		}
	}
}

func TestFinish(t *testing.T) {
	for name, tc := range map[string]struct {
		attempt, max int
		result       taskd.Result
		want         taskd.CompleteOutcome
		state        taskd.DispatchState
		retryIn      time.Duration // 0: no retry
		final        bool          // the record says it died of a final failure
	}{
		"success":                       {1, 3, taskd.ResultSuccess, taskd.Completed, taskd.StateDone, 0, false},
		"success on the last":           {3, 3, taskd.ResultSuccess, taskd.Completed, taskd.StateDone, 0, false},
		"failure, attempts left":        {1, 3, taskd.ResultFailure, taskd.RetryScheduled, taskd.StateRetryWait, 30 * time.Second, false},
		"failure, second attempt":       {2, 3, taskd.ResultFailure, taskd.RetryScheduled, taskd.StateRetryWait, 60 * time.Second, false},
		"failure on the last":           {3, 3, taskd.ResultFailure, taskd.Completed, taskd.StateDead, 0, false},
		"failure, one attempt":          {1, 1, taskd.ResultFailure, taskd.Completed, taskd.StateDead, 0, false},
		"final failure, attempts left":  {1, 3, taskd.ResultFinalFailure, taskd.Completed, taskd.StateDead, 0, true},
		"final failure, second attempt": {2, 3, taskd.ResultFinalFailure, taskd.Completed, taskd.StateDead, 0, true},
		"final failure on the last":     {3, 3, taskd.ResultFinalFailure, taskd.Completed, taskd.StateDead, 0, true},
	} {
		d := open(tc.attempt, tc.max, nil)
		got := d.Finish(tc.result, now)
		// A final failure is recorded as a failure, with Final set.
		wantResult := tc.result
		if tc.final {
			wantResult = taskd.ResultFailure
		}
		if got != tc.want || d.State != tc.state || d.Result != wantResult || d.Final != tc.final ||
			d.FinishedAt == nil || !d.FinishedAt.Equal(now) {
			t.Errorf("%s: Finish = %v, record %+v", name, got, d)
		}
		switch {
		case tc.retryIn == 0 && d.RetryAt != nil:
			t.Errorf("%s: retry at %v, want none", name, d.RetryAt)
		case tc.retryIn != 0 && (d.RetryAt == nil || !d.RetryAt.Equal(now.Add(tc.retryIn))):
			t.Errorf("%s: retry at %v, want %v", name, d.RetryAt, now.Add(tc.retryIn))
		}
	}
}

func TestExpiryState(t *testing.T) {
	for _, tc := range []struct {
		attempt, max int
		want         taskd.DispatchState
	}{
		{1, 3, taskd.StateExpired},
		{2, 3, taskd.StateExpired},
		{3, 3, taskd.StateDead},
		{1, 1, taskd.StateDead},
	} {
		if got := open(tc.attempt, tc.max, nil).ExpiryState(); got != tc.want {
			t.Errorf("attempt %d of %d: %v, want %v", tc.attempt, tc.max, got, tc.want)
		}
	}
}

func TestLeaseExpired(t *testing.T) {
	past, at := now.Add(-time.Second), now
	if open(1, 1, nil).LeaseExpired(now) {
		t.Error("no lease expired")
	}
	if !open(1, 1, &past).LeaseExpired(now) || !open(1, 1, &at).LeaseExpired(now) {
		t.Error("a lease at or before now did not expire")
	}
	done := open(1, 1, &past)
	done.State = taskd.StateDone
	if done.LeaseExpired(now) {
		t.Error("a finished record's lease expired")
	}
}

func TestTaskValidate(t *testing.T) {
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	good := func(kind taskd.Kind) taskd.Task {
		t := taskd.Task{Key: taskd.TaskKey{Kind: kind}, Executor: "gid_ops", StartTime: start, TemplateID: 1,
			DispatchTimes: taskd.Unlimited, Mode: taskd.ModeOncePerUser, Priority: 5, Status: taskd.StatusActive}
		if kind == taskd.KindRotate {
			t.SpaceMinutes = 5
		}
		return t
	}
	for _, kind := range []taskd.Kind{taskd.KindOnce, taskd.KindRotate} {
		if err := good(kind).Validate(); err != nil {
			t.Fatalf("a good %s task: %v", kind, err)
		}
	}
	end := start
	for field, edit := range map[string]func(*taskd.Task){
		"executor":                 func(t *taskd.Task) { t.Executor = "ops" },
		"start_time":               func(t *taskd.Task) { t.StartTime = time.Unix(-1, 0) },
		"template_id":              func(t *taskd.Task) { t.TemplateID = 0 },
		"dispatch_times":           func(t *taskd.Task) { t.DispatchTimes = 0 },
		"mode":                     func(t *taskd.Task) { t.Mode = 7 },
		"priority":                 func(t *taskd.Task) { t.Priority = 10 },
		"status":                   func(t *taskd.Task) { t.Status = taskd.StatusDeleted },
		"lease_seconds":            func(t *taskd.Task) { t.Own.LeaseSeconds = ptr(taskd.MaxLeaseSeconds + 1) },
		"max_attempts":             func(t *taskd.Task) { t.Own.MaxAttempts = ptr(taskd.MaxAttemptsLimit + 1) },
		"retry_backoff_seconds":    func(t *taskd.Task) { t.Own.RetryBackoffSeconds = ptr(-1) },
		"retry_multiplier":         func(t *taskd.Task) { t.Own.RetryMultiplier = ptr(0.5) },
		"retry_max_seconds":        func(t *taskd.Task) { t.Own.RetryMaxSeconds = ptr(taskd.MaxBackoffSeconds + 1) },
		"dispatch_rate_per_minute": func(t *taskd.Task) { t.Own.DispatchRatePerMinute = ptr(-1) },
		"space_minutes":            func(t *taskd.Task) { t.SpaceMinutes = 0 },
		"end_time":                 func(t *taskd.Task) { t.EndTime = &end }, // not after the start
	} {
		task := good(taskd.KindRotate)
		edit(&task)
		err := task.Validate()
		if taskd.ErrorCode(err) != taskd.CodeInvalid || !strings.Contains(err.Error(), field) {
			t.Errorf("bad %s: %v", field, err)
		}
	}
	once := good(taskd.KindOnce)
	once.SpaceMinutes = 5
	if err := once.Validate(); err == nil || !strings.Contains(err.Error(), "rotate tasks only") {
		t.Errorf("a once task with a period: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// Resolve: a task's own setting wins, then its template's (named in inherited), then
// the server's default; max_attempts defaults to 3 only where the effective lease is set.
func TestResolve(t *testing.T) {
	e, inh := taskd.Resolve(taskd.Settings{}, taskd.Settings{})
	if e != (taskd.Effective{MaxAttempts: 1, RetryMultiplier: 2, RetryMaxSeconds: 86400}) || len(inh) != 0 {
		t.Fatalf("defaults: %+v %v", e, inh)
	}
	tpl := taskd.Settings{LeaseSeconds: ptr(60), RetryBackoffSeconds: ptr(5), RetryMultiplier: ptr(3.0)}
	e, inh = taskd.Resolve(taskd.Settings{RetryBackoffSeconds: ptr(9)}, tpl)
	want := taskd.Effective{LeaseSeconds: 60, MaxAttempts: 3, RetryBackoffSeconds: 9, RetryMultiplier: 3, RetryMaxSeconds: 86400}
	if e != want || strings.Join(inh, ",") != "lease_seconds,retry_multiplier" {
		t.Fatalf("inherited lease: %+v %v", e, inh)
	}
	e, _ = taskd.Resolve(taskd.Settings{LeaseSeconds: ptr(0)}, tpl)
	if e.LeaseSeconds != 0 || e.MaxAttempts != 1 {
		t.Fatalf("own lease 0 over the template's: %+v", e)
	}
}

// Every claim outcome has a name and a step, and the names are the metric labels the
// README lists.
func TestClaimOutcomeNamesAndSteps(t *testing.T) {
	want := map[taskd.ClaimOutcome]struct {
		name string
		step taskd.EntryStep
	}{
		taskd.Claimed:       {"claimed", taskd.EntryTaken},
		taskd.Exhausted:     {"exhausted", taskd.EntryPop},
		taskd.AlreadyHad:    {"already_had", taskd.EntryPop},
		taskd.Gone:          {"gone", taskd.EntryPop},
		taskd.UserBusy:      {"user_busy", taskd.EntryRetry},
		taskd.NotDue:        {"not_due", taskd.EntryKeep},
		taskd.Holding:       {"holding", taskd.EntryKeep},
		taskd.Filtered:      {"filtered", taskd.EntryKeep},
		taskd.RateBound:     {"rate_bound", taskd.EntryKeep},
		taskd.NotTargeted:   {"not_targeted", taskd.EntryPop},
		taskd.PhaseBound:    {"phase_bound", taskd.EntryKeep},
		taskd.NotInRollout:  {"not_in_rollout", taskd.EntryPop},
		taskd.OutsideWindow: {"outside_window", taskd.EntryKeep},
	}
	for o := taskd.ClaimOutcome(0); o < 20; o++ {
		w, known := want[o]
		if got := o.Step(); got != w.step {
			t.Errorf("%d.Step() = %v, want %v", o, got, w.step)
		}
		if !known {
			if o == 0 && o.String() != "" || o != 0 && o.String() != fmt.Sprintf("ClaimOutcome(%d)", o) {
				t.Errorf("unknown outcome %d named %q", o, o.String())
			}
			continue
		}
		if o.String() != w.name {
			t.Errorf("%d.String() = %q, want %q", o, o.String(), w.name)
		}
	}
}
