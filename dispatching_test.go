package taskd_test

import (
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func TestMayClaim(t *testing.T) {
	for _, tc := range []struct {
		prior, max int
		want       bool
	}{
		{0, 1, true},   // first attempt
		{0, 0, true},   // max_attempts 0 reads as 1
		{1, 1, false},  // the one attempt was used
		{1, 3, true},   // an expiry left attempts
		{2, 3, true},   // the last one
		{3, 3, false},  // none left: dead for the user
		{-1, 3, false}, // held, or finished for good
	} {
		if got := taskd.MayClaim(tc.prior, tc.max); got != tc.want {
			t.Errorf("MayClaim(%d, %d) = %v, want %v", tc.prior, tc.max, got, tc.want)
		}
	}
}

func TestRetryBackoff(t *testing.T) {
	for _, tc := range []struct {
		base, attempt int
		want          time.Duration
	}{
		{10, 1, 10 * time.Second},
		{10, 2, 20 * time.Second},
		{10, 4, 80 * time.Second},
		{0, 5, 0},
		{3600, 10, 24 * time.Hour}, // capped at a day
		{86400 * 2, 1, 24 * time.Hour},
	} {
		if got := taskd.RetryBackoff(tc.base, tc.attempt); got != tc.want {
			t.Errorf("RetryBackoff(%d, %d) = %v, want %v", tc.base, tc.attempt, got, tc.want)
		}
	}
}

func open(attempt, max int, lease *time.Time) *taskd.Dispatch {
	return &taskd.Dispatch{LogID: "l1", UID: "u1", State: taskd.StateOpen, Attempt: attempt, MaxAttempts: max,
		BackoffSeconds: 30, LeaseExpiresAt: lease}
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
	}{
		"success":                 {1, 3, taskd.ResultSuccess, taskd.Completed, taskd.StateDone, 0},
		"success on the last":     {3, 3, taskd.ResultSuccess, taskd.Completed, taskd.StateDone, 0},
		"failure, attempts left":  {1, 3, taskd.ResultFailure, taskd.RetryScheduled, taskd.StateRetryWait, 30 * time.Second},
		"failure, second attempt": {2, 3, taskd.ResultFailure, taskd.RetryScheduled, taskd.StateRetryWait, 60 * time.Second},
		"failure on the last":     {3, 3, taskd.ResultFailure, taskd.Completed, taskd.StateDead, 0},
		"failure, one attempt":    {1, 1, taskd.ResultFailure, taskd.Completed, taskd.StateDead, 0},
	} {
		d := open(tc.attempt, tc.max, nil)
		got := d.Finish(tc.result, now)
		if got != tc.want || d.State != tc.state || d.Result != tc.result || d.FinishedAt == nil || !d.FinishedAt.Equal(now) {
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
			DispatchTimes: taskd.Unlimited, Mode: taskd.ModeOncePerUser, Priority: 5, Status: taskd.StatusActive,
			MaxAttempts: 1}
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
		"executor":              func(t *taskd.Task) { t.Executor = "ops" },
		"start_time":            func(t *taskd.Task) { t.StartTime = time.Unix(-1, 0) },
		"template_id":           func(t *taskd.Task) { t.TemplateID = 0 },
		"dispatch_times":        func(t *taskd.Task) { t.DispatchTimes = 0 },
		"mode":                  func(t *taskd.Task) { t.Mode = 7 },
		"priority":              func(t *taskd.Task) { t.Priority = 10 },
		"status":                func(t *taskd.Task) { t.Status = taskd.StatusDeleted },
		"lease_seconds":         func(t *taskd.Task) { t.LeaseSeconds = taskd.MaxLeaseSeconds + 1 },
		"max_attempts":          func(t *taskd.Task) { t.MaxAttempts = taskd.MaxAttemptsLimit + 1 },
		"retry_backoff_seconds": func(t *taskd.Task) { t.RetryBackoffSeconds = -1 },
		"space_minutes":         func(t *taskd.Task) { t.SpaceMinutes = 0 },
		"end_time":              func(t *taskd.Task) { t.EndTime = &end }, // not after the start
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
