package taskd_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

func pct(p float64) taskd.Phase { return taskd.Phase{Percent: &p} }
func cnt(n int) taskd.Phase     { return taskd.Phase{Count: &n} }

func TestRolloutValidate(t *testing.T) {
	ok := taskd.Rollout{Phases: []taskd.Phase{pct(5), pct(25), pct(100)}}.WithDefaults()
	if err := ok.Validate(20); err != nil {
		t.Fatalf("5/25/100%% of 20: %v", err)
	}
	if err := (taskd.Rollout{Phases: []taskd.Phase{cnt(2), cnt(10), pct(100)}}.WithDefaults()).Validate(taskd.Unlimited); err != nil {
		t.Fatalf("counts then 100%% of an unlimited quota: %v", err)
	}
	for _, tc := range []struct {
		name  string
		r     taskd.Rollout
		quota int
		want  string
	}{
		{"no phase", taskd.Rollout{}, 20, "rollout.phases"},
		{"both", taskd.Rollout{Phases: []taskd.Phase{{Percent: new(50.0), Count: new(3)}, pct(100)}}, 20, "phases[0]: one of"},
		{"percent of unlimited", taskd.Rollout{Phases: []taskd.Phase{pct(10), pct(100)}}, taskd.Unlimited, "phases[0].percent"},
		{"not rising", taskd.Rollout{Phases: []taskd.Phase{pct(50), cnt(5), pct(100)}}, 10, "phases[1]"},
		{"not the whole quota", taskd.Rollout{Phases: []taskd.Phase{pct(5), pct(50)}}, 20, "phases[1]: the last phase"},
		{"ratio", taskd.Rollout{Phases: []taskd.Phase{pct(100)}, Gate: taskd.Gate{SuccessRatio: 1.5}}, 20, "gate.success_ratio"},
		{"advance", taskd.Rollout{Phases: []taskd.Phase{pct(100)}, Advance: "soon"}, 20, "advance"},
		{"targeting", taskd.Rollout{Phases: []taskd.Phase{pct(100)}, Targeting: "all"}, 20, "targeting"},
		{"min_finished", taskd.Rollout{Phases: []taskd.Phase{pct(100)}, Gate: taskd.Gate{MinFinished: 1<<63 - 1}}, 20, "gate.min_finished"},
		{"min_finished past the bound", taskd.Rollout{Phases: []taskd.Phase{pct(100)}, Gate: taskd.Gate{MinFinished: 1_000_001}}, 20, "gate.min_finished"},
	} {
		err := tc.r.WithDefaults().Validate(tc.quota)
		if err == nil || !strings.Contains(err.Error(), tc.want) || taskd.ErrorCode(err) != taskd.CodeInvalid {
			t.Errorf("%s: %v; want invalid naming %q", tc.name, err, tc.want)
		}
	}
}

// A gate that sets neither ratio needs successes: a phase of failures only never
// passes it (success_ratio defaults to 1); one that sets either keeps what it says.
func TestGateDefaultNeedsSuccesses(t *testing.T) {
	r := taskd.Rollout{Phases: []taskd.Phase{cnt(1), pct(100)}}.WithDefaults()
	if r.Gate.SuccessRatio != 1 || r.Gate.MinFinished != 1 {
		t.Fatalf("the default gate: %+v", r.Gate)
	}
	if v := r.Gate.Verdict(taskd.PhaseFigures{Finished: 1, Failed: 1}); v == taskd.GatePassed {
		t.Fatalf("a phase of one failure passes the default gate")
	}
	if v := r.Gate.Verdict(taskd.PhaseFigures{Finished: 1, Succeeded: 1}); v != taskd.GatePassed {
		t.Fatalf("a phase of one success: %v", v)
	}
	set := taskd.Rollout{Phases: []taskd.Phase{pct(100)}, Gate: taskd.Gate{FailureRatio: 0.5}}.WithDefaults()
	if set.Gate.SuccessRatio != 0 {
		t.Fatalf("a gate with a failure_ratio keeps its success_ratio 0: %+v", set.Gate)
	}
	if v := set.Gate.Verdict(taskd.PhaseFigures{Finished: 1, Failed: 1}); v != taskd.GateFailed {
		t.Fatalf("a phase of one failure, failure_ratio 0.5: %v", v)
	}
	if err := r.Validate(2); err != nil {
		t.Fatal(err)
	}
}

func TestRolloutCap(t *testing.T) {
	r := taskd.Rollout{Phases: []taskd.Phase{pct(5), cnt(5), pct(100)}}.WithDefaults()
	st := taskd.StartRollout(now)
	for _, tc := range []struct {
		phase int
		state taskd.RolloutState
		quota int
		want  int
	}{
		{0, taskd.RolloutRunning, 20, 1},    // 5% of 20, rounded up
		{0, taskd.RolloutRunning, 100, 5},   // 5% of 100
		{1, taskd.RolloutRunning, 20, 5},    // a count
		{1, taskd.RolloutRunning, 3, 3},     // a count above the quota: the quota
		{2, taskd.RolloutRunning, 20, 20},   // the whole quota
		{2, taskd.RolloutPaused, 20, 20},    // paused: the phase's cap holds
		{0, taskd.RolloutAborted, 20, 0},    // aborted: nothing more
		{2, taskd.RolloutCompleted, 20, -1}, // completed: no cap
	} {
		st.Phase, st.State = tc.phase, tc.state
		if got := r.Cap(st, tc.quota); got != tc.want {
			t.Errorf("phase %d %s of %d: cap %d, want %d", tc.phase, tc.state, tc.quota, got, tc.want)
		}
	}
	ramp := taskd.Rollout{Phases: []taskd.Phase{pct(10), pct(100)}, RatePerMinute: 5}.WithDefaults()
	if r0, r1 := ramp.Rate(taskd.RolloutStatus{Phase: 0}), ramp.Rate(taskd.RolloutStatus{Phase: 1}); r0 != 5 || r1 != 10 {
		t.Errorf("rate ramp: %d then %d, want 5 then 10", r0, r1)
	}
}

func TestGateVerdict(t *testing.T) {
	g := taskd.Gate{MinFinished: 4, SuccessRatio: 0.75, FailureRatio: 0.5}
	for _, tc := range []struct {
		f    taskd.PhaseFigures
		want taskd.GateVerdict
	}{
		{taskd.PhaseFigures{Claimed: 10, Finished: 3, Succeeded: 3}, taskd.GatePending}, // too few finished, however good
		{taskd.PhaseFigures{Claimed: 10, Finished: 3, Failed: 3}, taskd.GatePending},    // too few finished, however bad
		{taskd.PhaseFigures{Finished: 4, Succeeded: 3, Failed: 1}, taskd.GatePassed},
		{taskd.PhaseFigures{Finished: 4, Succeeded: 2, Failed: 2}, taskd.GateFailed},
		{taskd.PhaseFigures{Finished: 5, Succeeded: 3, Failed: 2}, taskd.GatePending}, // 60%: neither
	} {
		if got := g.Verdict(tc.f); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.f, got, tc.want)
		}
	}
}

func TestRolloutStep(t *testing.T) {
	auto := taskd.Rollout{Phases: []taskd.Phase{pct(10), pct(100)}, BakeSeconds: 60,
		Gate: taskd.Gate{MinFinished: 2, SuccessRatio: 1, FailureRatio: 0.5}}.WithDefaults()
	pass := taskd.PhaseFigures{Finished: 2, Succeeded: 2}
	fail := taskd.PhaseFigures{Finished: 2, Failed: 1, Succeeded: 1}
	st := taskd.StartRollout(now)

	c := auto.Step(st, taskd.PhaseFigures{Finished: 1, Succeeded: 1}, now)
	if c.Event != "" {
		t.Fatalf("one finished of two: %+v", c)
	}
	c = auto.Step(st, pass, now)
	if c.Event != taskd.EventRolloutBaking || c.To.BakeUntil == nil || !c.To.BakeUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("passed: %+v; want baking for a minute", c)
	}
	baking := c.To
	if c := auto.Step(baking, pass, now.Add(59*time.Second)); c.Event != "" {
		t.Fatalf("mid-bake: %+v", c)
	}
	if c := auto.Step(baking, fail, now.Add(30*time.Second)); c.Event != taskd.EventRolloutAborted || !c.To.GateFailed {
		t.Fatalf("failing during the bake: %+v; want aborted", c)
	}
	c = auto.Step(baking, pass, now.Add(time.Minute))
	if c.Event != taskd.EventRolloutPhase || c.To.Phase != 1 || c.To.State != taskd.RolloutRunning || !c.To.PhaseStartedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("after the bake: %+v; want phase 1 running", c)
	}
	// The last phase's gate passed completes the rollout (after its bake).
	last := c.To
	c = auto.Step(auto.Step(last, pass, now.Add(2*time.Minute)).To, pass, now.Add(3*time.Minute))
	if c.Event != taskd.EventRolloutCompleted || c.To.State != taskd.RolloutCompleted {
		t.Fatalf("the last phase passed: %+v", c)
	}

	manual := auto
	manual.Advance = taskd.AdvanceManual
	if c := manual.Step(st, pass, now); c.To.State != taskd.RolloutWaiting || c.To.GateFailed {
		t.Errorf("manual, passed: %+v; want waiting", c)
	}
	if c := manual.Step(st, fail, now); c.To.State != taskd.RolloutWaiting || !c.To.GateFailed {
		t.Errorf("manual, failed: %+v; want waiting on a failed gate", c)
	}
	for _, s := range []taskd.RolloutState{taskd.RolloutWaiting, taskd.RolloutPaused, taskd.RolloutAborted, taskd.RolloutCompleted} {
		if c := auto.Step(taskd.RolloutStatus{State: s}, fail, now); c.Event != "" {
			t.Errorf("%s moved by itself: %+v", s, c)
		}
	}
}

func TestRolloutMoves(t *testing.T) {
	r := taskd.Rollout{Phases: []taskd.Phase{pct(10), pct(100)}}.WithDefaults()
	allowed := map[taskd.RolloutMove][]taskd.RolloutState{
		taskd.RolloutAdvance: {taskd.RolloutRunning, taskd.RolloutBaking, taskd.RolloutWaiting},
		taskd.RolloutPause:   {taskd.RolloutRunning, taskd.RolloutBaking, taskd.RolloutWaiting},
		taskd.RolloutResume:  {taskd.RolloutPaused},
		taskd.RolloutAbort:   {taskd.RolloutRunning, taskd.RolloutBaking, taskd.RolloutWaiting, taskd.RolloutPaused},
	}
	states := []taskd.RolloutState{taskd.RolloutRunning, taskd.RolloutBaking, taskd.RolloutWaiting, taskd.RolloutPaused,
		taskd.RolloutAborted, taskd.RolloutCompleted}
	for move, ok := range allowed {
		for _, s := range states {
			_, err := r.Move(taskd.RolloutStatus{State: s}, move, now)
			want := false
			for _, a := range ok {
				want = want || a == s
			}
			if (err == nil) != want || (err != nil && taskd.ErrorCode(err) != taskd.CodeConflict) {
				t.Errorf("%s from %s: %v (allowed: %v)", move, s, err, want)
			}
		}
	}
	c, _ := r.Move(taskd.RolloutStatus{State: taskd.RolloutRunning, Phase: 1}, taskd.RolloutAdvance, now)
	if c.To.State != taskd.RolloutCompleted {
		t.Errorf("advance past the last phase: %+v; want completed", c)
	}
	if _, err := r.Move(taskd.RolloutStatus{State: taskd.RolloutRunning}, "jump", now); taskd.ErrorCode(err) != taskd.CodeInvalid {
		t.Errorf("an unknown move: %v", err)
	}
}

// A verdict's label is what the admin API shows as a rollout's gate.
func TestGateVerdictString(t *testing.T) {
	for v, want := range map[taskd.GateVerdict]string{taskd.GatePending: "pending", taskd.GatePassed: "passed",
		taskd.GateFailed: "failed"} {
		if got := v.String(); got != want {
			t.Errorf("%d: %q, want %q", v, got, want)
		}
	}
}

// A status's phase number counts from 1; its Phase, from 0.
func TestRolloutPhaseNumber(t *testing.T) {
	for phase, want := range []int{1, 2, 3} {
		if got := (taskd.RolloutStatus{Phase: phase}).PhaseNumber(); got != want {
			t.Errorf("phase %d: number %d, want %d", phase, got, want)
		}
	}
}

// A rollout's history keeps the changes that end a phase (the next phase opened, the
// rollout completed or aborted, by the server's step or an admin's move) and the
// pauses and resumes, each with its phase (1-based), event, figures and actor; an
// automatic abort says which figures failed the gate. Baking and waiting leave the
// history as it was (issue 37: pauses and resumes were missing).
func TestRolloutHistory(t *testing.T) {
	auto := taskd.Rollout{Phases: []taskd.Phase{pct(10), pct(100)}, BakeSeconds: 60,
		Gate: taskd.Gate{MinFinished: 2, SuccessRatio: 1, FailureRatio: 0.5}}.WithDefaults()
	manual, noBake := auto, auto
	manual.Advance, noBake.BakeSeconds = taskd.AdvanceManual, 0
	pass := taskd.PhaseFigures{Claimed: 3, Finished: 2, Succeeded: 2}
	fail := taskd.PhaseFigures{Claimed: 3, Finished: 2, Succeeded: 1, Failed: 1}
	running := taskd.StartRollout(now)
	baking := auto.Step(running, pass, now).To
	last := taskd.RolloutStatus{State: taskd.RolloutRunning, Phase: 1, PhaseStartedAt: now}
	paused := taskd.RolloutStatus{State: taskd.RolloutPaused, Phase: 1, PhaseStartedAt: now}
	at := now.Add(time.Minute)
	move := func(st taskd.RolloutStatus, m taskd.RolloutMove) taskd.RolloutChange {
		c, err := auto.Move(st, m, at)
		if err != nil {
			t.Fatalf("%s from %s: %v", m, st.State, err)
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		c     taskd.RolloutChange
		f     taskd.PhaseFigures
		actor string
		phase int // the phase recorded, 1-based; 0: no record
		event taskd.EventType
	}{
		{"baking", auto.Step(running, pass, at), pass, "", 0, ""},
		{"waiting on a passed gate", manual.Step(running, pass, at), pass, "", 0, ""},
		{"waiting on a failed gate", manual.Step(running, fail, at), fail, "", 0, ""},
		{"the bake over", auto.Step(baking, pass, at), pass, "", 1, taskd.EventRolloutPhase},
		{"no bake", noBake.Step(running, pass, at), pass, "", 1, taskd.EventRolloutPhase},
		{"a failed gate", auto.Step(running, fail, at), fail, "", 1, taskd.EventRolloutAborted},
		{"the last phase passed", noBake.Step(last, pass, at), pass, "", 2, taskd.EventRolloutCompleted},
		{"a pause", move(running, taskd.RolloutPause), pass, "admin", 1, taskd.EventRolloutPaused},
		{"a resume", move(paused, taskd.RolloutResume), pass, "admin", 2, taskd.EventRolloutResumed},
		{"an advance on a failing gate", move(running, taskd.RolloutAdvance), fail, "admin", 1, taskd.EventRolloutPhase},
		{"an advance past the last phase", move(last, taskd.RolloutAdvance), pass, "admin", 2, taskd.EventRolloutCompleted},
		{"an abort of a paused rollout", move(paused, taskd.RolloutAbort), pass, "admin", 2, taskd.EventRolloutAborted},
	} {
		earlier := taskd.RolloutMoveRecord{Phase: 1, At: now, Event: taskd.EventRolloutPhase}
		got := tc.c.AppendHistory([]taskd.RolloutMoveRecord{earlier}, tc.f, tc.actor, at)
		if tc.phase == 0 {
			if len(got) != 1 || got[0] != earlier {
				t.Errorf("%s (%s): history %+v; want it as it was", tc.name, tc.c.Event, got)
			}
			continue
		}
		want := taskd.RolloutMoveRecord{Phase: tc.phase, At: at, Event: tc.event, PhaseFigures: tc.f, Actor: tc.actor, Reason: tc.c.Reason}
		if tc.name == "a failed gate" && tc.c.Reason != "gate failed: 1 of 2 finished failed (50%), at or above failure_ratio 0.5; 1 succeeded" {
			t.Errorf("an automatic abort's reason: %q", tc.c.Reason)
		}
		if tc.name != "a failed gate" && tc.c.Reason != "" {
			t.Errorf("%s: a reason %q", tc.name, tc.c.Reason)
		}
		if len(got) != 2 || got[0] != earlier || got[1] != want {
			t.Errorf("%s: history %+v; want %+v appended", tc.name, got, want)
		}
	}
}

// A gate the task cannot feed: refused when it can never pass whatever happens under
// advance auto, warned when passing depends on later events (issue 37).
func TestRolloutGateFindings(t *testing.T) {
	gate := func(m int, ratio float64) taskd.Gate { return taskd.Gate{MinFinished: m, SuccessRatio: ratio} }
	for _, tc := range []struct {
		name        string
		r           taskd.Rollout
		quota       int
		occurrences int
		audience    int
		want        []taskd.GateFinding // Phase and Refuse; the message is checked for the phase
	}{
		{"fits", taskd.Rollout{Phases: []taskd.Phase{cnt(5), cnt(10), pct(100)}, Gate: gate(5, 1)}, 20, 1, -1, nil},
		{"first phase below min_finished, auto", taskd.Rollout{Phases: []taskd.Phase{cnt(2), pct(100)}, Gate: gate(5, 1)}, 20, 1, -1,
			[]taskd.GateFinding{{Phase: 1, Refuse: true}}},
		{"first phase below min_finished, manual", taskd.Rollout{Phases: []taskd.Phase{cnt(2), pct(100)}, Gate: gate(5, 1), Advance: "manual"}, 20, 1, -1,
			[]taskd.GateFinding{{Phase: 1}}},
		{"few new slots: earlier phases may leave some", taskd.Rollout{Phases: []taskd.Phase{cnt(5), cnt(7), pct(100)}, Gate: gate(5, 1)}, 20, 1, -1,
			[]taskd.GateFinding{{Phase: 2}}},
		{"a ratio below 1: failures may fill the count", taskd.Rollout{Phases: []taskd.Phase{cnt(4), pct(100)}, Gate: gate(5, 0.8)}, 20, 1, -1,
			[]taskd.GateFinding{{Phase: 1}}},
		{"a ratio below 1 still short", taskd.Rollout{Phases: []taskd.Phase{cnt(3), pct(100)}, Gate: gate(5, 0.8)}, 20, 1, -1,
			[]taskd.GateFinding{{Phase: 1, Refuse: true}}},
		{"the last phase is the quota", taskd.Rollout{Phases: []taskd.Phase{cnt(1), pct(100)}, Gate: gate(3, 1)}, 2, 1, -1,
			[]taskd.GateFinding{{Phase: 1, Refuse: true}, {Phase: 2, Refuse: true}}},
		{"an unlimited last phase has no bound", taskd.Rollout{Phases: []taskd.Phase{cnt(5), pct(100)}, Gate: gate(5, 1)}, taskd.Unlimited, 1, -1, nil},
		{"rotating without end: later occurrences feed it", taskd.Rollout{Phases: []taskd.Phase{cnt(1), pct(100)}, Gate: gate(50, 1)}, 10, -1, -1, nil},
		{"rotating with an end: too few occurrences", taskd.Rollout{Phases: []taskd.Phase{cnt(1), pct(100)}, Gate: gate(5, 1)}, 10, 4, -1,
			[]taskd.GateFinding{{Phase: 1, Refuse: true}}},
		{"rotating with an end: enough occurrences", taskd.Rollout{Phases: []taskd.Phase{cnt(1), pct(100)}, Gate: gate(5, 1)}, 10, 5, -1, nil},
		{"a small group: members may join", taskd.Rollout{Phases: []taskd.Phase{cnt(5), pct(100)}, Gate: gate(5, 1)}, 20, 1, 3,
			[]taskd.GateFinding{{Phase: 1}, {Phase: 2}}},
		{"an empty group is another warning's", taskd.Rollout{Phases: []taskd.Phase{cnt(5), pct(100)}, Gate: gate(5, 1)}, 20, 1, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r.WithDefaults()
			if err := r.Validate(tc.quota); err != nil {
				t.Fatal(err)
			}
			got := r.GateFindings(tc.quota, tc.occurrences, tc.audience)
			if len(got) != len(tc.want) {
				t.Fatalf("%d findings, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, f := range got {
				if f.Phase != tc.want[i].Phase || f.Refuse != tc.want[i].Refuse || !strings.Contains(f.Message, "phase") {
					t.Errorf("finding %d: %+v, want phase %d refuse %v", i, f, tc.want[i].Phase, tc.want[i].Refuse)
				}
			}
		})
	}
}

// RolloutRefusal refuses what GateFindings refuses, naming the reason in the details;
// a rotating task's end bounds its occurrences; an edit that leaves a refused phase as
// it was is let through.
func TestTaskValidateRefusesAnUnreachableGate(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	r := taskd.Rollout{Phases: []taskd.Phase{cnt(2), pct(100)}, Gate: taskd.Gate{MinFinished: 5}}.WithDefaults()
	once := taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce, ID: 1}, Executor: "gid_g", StartTime: start, TemplateID: 1,
		DispatchTimes: 20, Mode: taskd.ModeOncePerUser, Priority: 5, Status: taskd.StatusActive, Rollout: &r}
	if err := once.Validate(); err != nil {
		t.Fatalf("Validate leaves gates to RolloutRefusal: %v", err)
	}
	err := once.RolloutRefusal(nil)
	var e *taskd.Error
	if !errors.As(err, &e) || e.Code != taskd.CodeInvalid || !strings.Contains(e.Message, "rollout.phases[0]") {
		t.Fatalf("once, cap 2, min_finished 5: %v", err)
	}
	if d, _ := e.Details.(map[string]any); d["reason"] != "gate_unreachable" || d["phase"] != 1 {
		t.Fatalf("details: %v", e.Details)
	}
	rot := once
	rot.Key, rot.SpaceMinutes = taskd.TaskKey{Kind: taskd.KindRotate, ID: 1}, 60
	if err := rot.RolloutRefusal(nil); err != nil {
		t.Fatalf("rotating without an end: %v", err)
	}
	end := start.Add(2 * time.Hour) // three occurrences: 6 slots in phase 1
	rot.EndTime = &end
	if err := rot.RolloutRefusal(nil); err != nil {
		t.Fatalf("rotating, three occurrences: %v", err)
	}
	end = start.Add(time.Hour) // two: 4 slots
	if err := rot.RolloutRefusal(nil); taskd.ErrorCode(err) != taskd.CodeInvalid {
		t.Fatalf("rotating, two occurrences: %v", err)
	}
	// An edit of a task stuck already (stored before the rule) is let through; one
	// that makes a phase stuck is not.
	stuck := once
	paused := stuck
	paused.Status = taskd.StatusPaused
	if err := paused.RolloutRefusal(&stuck); err != nil {
		t.Fatalf("a pause of a stuck rollout's task: %v", err)
	}
	fine := taskd.Rollout{Phases: []taskd.Phase{cnt(5), pct(100)}, Gate: taskd.Gate{MinFinished: 5}}.WithDefaults()
	was := once
	was.Rollout = &fine
	if err := stuck.RolloutRefusal(&was); taskd.ErrorCode(err) != taskd.CodeInvalid {
		t.Fatalf("an edit that makes phase 1 stuck: %v", err)
	}
	manual := r
	manual.Advance = taskd.AdvanceManual
	once.Rollout = &manual
	if err := once.RolloutRefusal(nil); err != nil {
		t.Fatalf("manual: warned, not refused: %v", err)
	}
}

// A bake in_windows counts only the time while the task's windows are open; wall, the
// default, every second; a task without windows bakes in wall time either way.
func TestRolloutBakeInWindows(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC) // noon; the window is 01:00 to 03:00
	ws := taskd.Windows{{Cron: "0 1 * * *", Minutes: 120}}
	r := taskd.Rollout{Phases: []taskd.Phase{pct(10), pct(100)}, BakeSeconds: 3 * 3600,
		Gate: taskd.Gate{MinFinished: 1, SuccessRatio: 1}}.WithDefaults()
	pass := taskd.PhaseFigures{Finished: 1, Succeeded: 1}
	for _, tc := range []struct {
		bake string
		ws   taskd.Windows
		want time.Time
	}{
		{"", ws, at.Add(3 * time.Hour)},
		{taskd.BakeWall, ws, at.Add(3 * time.Hour)},
		{taskd.BakeInWindows, ws, time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC)}, // two hours one night, one the next
		{taskd.BakeInWindows, nil, at.Add(3 * time.Hour)},
	} {
		r.BakeTime = tc.bake
		c := r.WithWindows(tc.ws).Step(taskd.StartRollout(at), pass, at)
		if c.To.BakeUntil == nil || !c.To.BakeUntil.Equal(tc.want) {
			t.Errorf("bake_time %q: bake until %v, want %s", tc.bake, c.To.BakeUntil, tc.want)
		}
	}
	r.BakeTime = "weekends"
	if err := r.Validate(100); err == nil || !strings.Contains(err.Error(), "bake_time") {
		t.Errorf("bake_time weekends: %v", err)
	}
}
