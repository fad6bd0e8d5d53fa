package taskd_test

import (
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

// A success of a record with confirm_seconds is unconfirmed, with its deadline and no
// result; a failure is as without it.
func TestFinishWithConfirm(t *testing.T) {
	d := open(1, 2, nil)
	d.ConfirmSeconds = 90
	if got := d.Finish(taskd.ResultSuccess, now); got != taskd.Completed || d.State != taskd.StateUnconfirmed ||
		d.Result != 0 || d.ConfirmBy == nil || !d.ConfirmBy.Equal(now.Add(90*time.Second)) || !d.FinishedAt.Equal(now) {
		t.Fatalf("success: %v, %+v", got, d)
	}
	d = open(1, 2, nil)
	d.ConfirmSeconds = 90
	if got := d.Finish(taskd.ResultFailure, now); got != taskd.RetryScheduled || d.ConfirmBy != nil {
		t.Fatalf("failure: %v, %+v", got, d)
	}
	// A repeated complete of an unconfirmed success changes nothing.
	u := open(1, 2, nil)
	u.State = taskd.StateUnconfirmed
	if got, ok := taskd.CompleteBlocked(u, "u1", now); ok || got != taskd.AlreadyDone {
		t.Fatalf("complete of an unconfirmed success: %v, %v", got, ok)
	}
}

func TestConfirmStep(t *testing.T) {
	done, by := now, now.Add(time.Minute)
	for name, tc := range map[string]struct {
		began, at time.Time
		want      taskd.ConfirmStep
	}{
		"a fetch that began after the complete":   {now.Add(time.Microsecond), now.Add(time.Second), taskd.ConfirmNow},
		"at the deadline":                         {now.Add(time.Second), by, taskd.ConfirmNow},
		"a fetch that began at the complete":      {now, now.Add(time.Second), taskd.ConfirmWait},
		"a fetch that began before (its carrier)": {now.Add(-time.Second), now.Add(time.Second), taskd.ConfirmWait},
		"past the deadline":                       {now.Add(time.Second), by.Add(time.Microsecond), taskd.ConfirmLapse},
		"past the deadline, whenever it began":    {now.Add(-time.Second), by.Add(time.Second), taskd.ConfirmLapse},
	} {
		d := &taskd.Dispatch{State: taskd.StateUnconfirmed, FinishedAt: &done, ConfirmBy: &by}
		if got := d.ConfirmStep(tc.began, tc.at); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

// A confirmation makes the record a success now; a lapse a failure with reason
// unconfirmed, retried while attempts are left, dead on the last.
func TestConfirmAndLapse(t *testing.T) {
	later := now.Add(time.Minute)
	unconfirmed := func(attempt, max int) *taskd.Dispatch {
		d := open(attempt, max, nil)
		d.ConfirmSeconds = 30
		d.Finish(taskd.ResultSuccess, now)
		return d
	}
	d := unconfirmed(1, 2)
	d.Confirm(later)
	if d.State != taskd.StateDone || d.Result != taskd.ResultSuccess || !d.FinishedAt.Equal(later) {
		t.Fatalf("confirmed: %+v", d)
	}
	d = unconfirmed(1, 2)
	if got := d.Lapse(later); got != taskd.RetryScheduled || d.State != taskd.StateRetryWait ||
		d.Result != taskd.ResultFailure || d.Reason != taskd.ReasonUnconfirmed || !d.RetryAt.Equal(later.Add(30*time.Second)) {
		t.Fatalf("lapsed with attempts left: %v, %+v", got, d)
	}
	d = unconfirmed(2, 2)
	if got := d.Lapse(later); got != taskd.Completed || d.State != taskd.StateDead || d.Reason != taskd.ReasonUnconfirmed {
		t.Fatalf("lapsed on the last attempt: %v, %+v", got, d)
	}
}

// confirm_seconds is a task-type setting: the task's own, else its rollout's, else its
// template's, else 0; the rollout's is the task's own (not inherited).
func TestConfirmSecondsResolve(t *testing.T) {
	rollout := &taskd.Rollout{ConfirmSeconds: 120}
	tpl := taskd.Settings{ConfirmSeconds: ptr(300)}
	for name, tc := range map[string]struct {
		own       taskd.Settings
		r         *taskd.Rollout
		tpl       taskd.Settings
		want      int
		inherited bool
	}{
		"none":                              {taskd.Settings{}, nil, taskd.Settings{}, 0, false},
		"the template's":                    {taskd.Settings{}, nil, tpl, 300, true},
		"the rollout's over the template's": {taskd.Settings{}, rollout, tpl, 120, false},
		"the task's own over the rollout's": {taskd.Settings{ConfirmSeconds: ptr(0)}, rollout, tpl, 0, false},
		"a rollout without one":             {taskd.Settings{}, &taskd.Rollout{}, tpl, 300, true},
	} {
		e, inh := taskd.Resolve(tc.own.WithRollout(tc.r), tc.tpl)
		if e.ConfirmSeconds != tc.want || strings.Contains(strings.Join(inh, ","), "confirm_seconds") != tc.inherited {
			t.Errorf("%s: %d %v, want %d (inherited %v)", name, e.ConfirmSeconds, inh, tc.want, tc.inherited)
		}
	}
	for _, v := range []int{-1, taskd.MaxConfirmSeconds + 1} {
		err := taskd.Settings{ConfirmSeconds: &v}.Validate()
		if taskd.ErrorCode(err) != taskd.CodeInvalid || !strings.Contains(err.Error(), "confirm_seconds: ") {
			t.Errorf("confirm_seconds %d: %v, want invalid naming the field", v, err)
		}
	}
}
