package taskd

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// A rollout releases a task's quota in phases: each phase a cumulative cap on each
// occurrence's claims (a percentage of the quota, or a count), and a gate on the
// dispatches the phase finished that decides whether the next phase opens (auto, after
// a bake; or manual, by an admin) or the rollout aborts (the task is paused). A task
// carries at most one rollout, declared for the task's whole life: the phase's cap
// bounds every occurrence of a rotating task, and the gate counts the phase's finished
// dispatches over all of them (a per-occurrence rollout would restart the risk at every
// occurrence, and a daily task with a bake would never leave its first phase).

// Rollout is a task's rollout, as an admin declares it.
type Rollout struct {
	Phases []Phase `json:"phases"`
	Gate   Gate    `json:"gate"`
	// Advance is "auto" (the next phase opens bake_seconds after the gate passes) or
	// "manual" (an admin advances; the rollout waits).
	Advance     string `json:"advance"`
	BakeSeconds int    `json:"bake_seconds"`
	// Targeting is "continuous" (a user who joins the group while the rollout runs takes
	// part in the current phase and counts against its cap) or "snapshot" (only the
	// members at the rollout's start).
	Targeting string `json:"targeting"`
	// OnAbort is what an abort does to the open dispatches: "keep" them (they may
	// complete) or "cancel" them.
	OnAbort string `json:"on_abort"`
	// RatePerMinute, when set, bounds the claims per minute in the first phase, and is
	// multiplied by RateFactor at each phase after it.
	RatePerMinute int     `json:"rate_per_minute,omitempty"`
	RateFactor    float64 `json:"rate_factor,omitempty"`
	// ConfirmSeconds, when set, is the task's confirm_seconds unless the task sets its
	// own (Settings.WithRollout): a success counts, for the gate as everywhere, only
	// once its user fetches again within that many seconds; unconfirmed by then, it is a
	// failure.
	ConfirmSeconds int `json:"confirm_seconds,omitempty"`
	// BakeTime says what a bake counts: "wall" (the default: every second of it, for
	// the released devices keep running, and failing, outside their maintenance
	// windows) or "in_windows" (only the time while one of the task's windows is open:
	// for devices that report only then). A task without windows bakes in wall time.
	BakeTime string `json:"bake_time,omitempty"`
	// windows are the task's, for a bake in_windows (WithWindows).
	windows Windows
}

// What a bake counts (Rollout.BakeTime).
const (
	BakeWall      = "wall"
	BakeInWindows = "in_windows"
)

// WithWindows is r stepping with its task's maintenance windows ws, for a bake that
// counts only the time while one is open.
func (r Rollout) WithWindows(ws Windows) Rollout {
	r.windows = ws
	return r
}

// bakeUntil is when a bake that starts at now ends: BakeSeconds later, in wall time or,
// in_windows, in the time the task's windows are open.
func (r Rollout) bakeUntil(now time.Time) time.Time {
	d := time.Duration(r.BakeSeconds) * time.Second
	if r.BakeTime == BakeInWindows && len(r.windows) > 0 {
		if at, ok := r.windows.AddOpen(now, d); ok {
			return at
		}
	}
	return now.Add(d)
}

// Phase is a cumulative cap: Percent of the quota (0 < p <= 100), or Count claims.
type Phase struct {
	Percent *float64 `json:"percent,omitempty"`
	Count   *int     `json:"count,omitempty"`
}

// Gate decides a phase from its finished dispatches: it fails when at least
// FailureRatio of them failed (0: never), and passes when SuccessRatio of them
// succeeded; neither before MinFinished have finished.
type Gate struct {
	MinFinished  int     `json:"min_finished"`
	SuccessRatio float64 `json:"success_ratio"`
	FailureRatio float64 `json:"failure_ratio"`
}

// Bounds of a rollout.
const (
	MaxRolloutPhases = 20
	MaxBakeSeconds   = 30 * 24 * 60 * 60
	// MaxGateMinFinished bounds a gate's min_finished: a million finished dispatches
	// is more than any phase needs, and a bound keeps the value an integer that reads
	// back as one (2^63-1 was taken, and a PATCH of the task then refused its own
	// value, read back through JSON as a float).
	MaxGateMinFinished = 1_000_000
)

// The values of Rollout's enumerations.
const (
	AdvanceAuto          = "auto"
	AdvanceManual        = "manual"
	TargetingContinuous  = "continuous"
	TargetingSnapshot    = "snapshot"
	OnAbortKeep          = "keep"
	OnAbortCancel        = "cancel"
	defaultRolloutFactor = 2.0
)

// WithDefaults fills what the declaration left out: auto advance, continuous
// targeting, open dispatches kept on abort, a rate factor of 2, at least one finished
// dispatch per gate, and a gate that needs successes: one that sets neither ratio
// (or no gate at all) gets success_ratio 1. Without it, 0/n reaches a success_ratio
// of 0, and a phase whose dispatches all failed passed its gate and opened the next
// phase (issue 42). A gate with a failure_ratio keeps a success_ratio of 0: a phase
// of failures only fails it.
func (r Rollout) WithDefaults() Rollout {
	if r.Advance == "" {
		r.Advance = AdvanceAuto
	}
	if r.Targeting == "" {
		r.Targeting = TargetingContinuous
	}
	if r.OnAbort == "" {
		r.OnAbort = OnAbortKeep
	}
	if r.RatePerMinute > 0 && r.RateFactor == 0 {
		r.RateFactor = defaultRolloutFactor
	}
	r.Gate.MinFinished = max(r.Gate.MinFinished, 1)
	if r.Gate.SuccessRatio == 0 && r.Gate.FailureRatio == 0 {
		r.Gate.SuccessRatio = 1
	}
	return r
}

// Validate checks a rollout (with its defaults) for a task whose quota is quota: its
// phases' caps rise strictly and the last is the whole quota (percent 100, or a count
// at least the quota), a percentage needs a limited quota (but 100), and the gate's
// ratios are between 0 and 1. The first field at fault is named (CodeInvalid).
func (r Rollout) Validate(quota int) error {
	bad := func(format string, args ...any) error {
		return Errorf(CodeInvalid, "rollout."+format, args...)
	}
	if len(r.Phases) == 0 || len(r.Phases) > MaxRolloutPhases {
		return bad("phases: between 1 and %d phases, got %d", MaxRolloutPhases, len(r.Phases))
	}
	prev := -1
	for i, p := range r.Phases {
		switch {
		case (p.Percent == nil) == (p.Count == nil):
			return bad("phases[%d]: one of percent or count", i)
		case p.Percent != nil && (*p.Percent <= 0 || *p.Percent > 100 || math.IsNaN(*p.Percent)):
			return bad("phases[%d].percent: more than 0 and at most 100, got %v", i, *p.Percent)
		case p.Percent != nil && *p.Percent < 100 && quota == Unlimited:
			return bad("phases[%d].percent: a percentage of an unlimited quota (dispatch_times -1) has no size; use count", i)
		case p.Count != nil && *p.Count < 1:
			return bad("phases[%d].count: at least 1, got %d", i, *p.Count)
		}
		c := r.phaseCap(i, quota)
		if c == -1 {
			c = math.MaxInt
		}
		if c <= prev {
			return bad("phases[%d]: its cap (%s) must be above the phase before's", i, r.describeCap(i, quota))
		}
		prev = c
	}
	if last := len(r.Phases) - 1; r.phaseCap(last, quota) != -1 && (quota == Unlimited || r.phaseCap(last, quota) < quota) {
		if quota == Unlimited {
			return bad("phases[%d]: the last phase releases the whole quota (percent 100)", last)
		}
		return bad("phases[%d]: the last phase releases the whole quota (percent 100, or count %d)", last, quota)
	}
	g := r.Gate
	switch {
	case g.MinFinished < 0 || g.MinFinished > MaxGateMinFinished:
		return bad("gate.min_finished: between 0 and %d, got %d", MaxGateMinFinished, g.MinFinished)
	case g.SuccessRatio < 0 || g.SuccessRatio > 1 || math.IsNaN(g.SuccessRatio):
		return bad("gate.success_ratio: between 0 and 1, got %v", g.SuccessRatio)
	case g.FailureRatio < 0 || g.FailureRatio > 1 || math.IsNaN(g.FailureRatio):
		return bad("gate.failure_ratio: between 0 and 1, got %v", g.FailureRatio)
	case r.Advance != AdvanceAuto && r.Advance != AdvanceManual:
		return bad("advance: auto or manual, got %q", r.Advance)
	case r.Targeting != TargetingContinuous && r.Targeting != TargetingSnapshot:
		return bad("targeting: continuous or snapshot, got %q", r.Targeting)
	case r.OnAbort != OnAbortKeep && r.OnAbort != OnAbortCancel:
		return bad("on_abort: keep or cancel, got %q", r.OnAbort)
	case r.BakeSeconds < 0 || r.BakeSeconds > MaxBakeSeconds:
		return bad("bake_seconds: between 0 and %d, got %d", MaxBakeSeconds, r.BakeSeconds)
	case r.RatePerMinute < 0:
		return bad("rate_per_minute: at least 0, got %d", r.RatePerMinute)
	case r.RateFactor < 0 || r.RateFactor > 100 || math.IsNaN(r.RateFactor):
		return bad("rate_factor: between 0 and 100, got %v", r.RateFactor)
	case r.ConfirmSeconds < 0 || r.ConfirmSeconds > MaxConfirmSeconds:
		return bad("confirm_seconds: between 0 and %d, got %d", MaxConfirmSeconds, r.ConfirmSeconds)
	case r.BakeTime != "" && r.BakeTime != BakeWall && r.BakeTime != BakeInWindows:
		return bad("bake_time: wall or in_windows, got %q", r.BakeTime)
	}
	return nil
}

func (r Rollout) describeCap(i, quota int) string {
	if c := r.phaseCap(i, quota); c >= 0 {
		return fmt.Sprint(c)
	}
	return "the whole quota"
}

// phaseCap is the cap of phase i (0-based) on each occurrence's claims of a task whose
// quota is quota; -1: none (the whole of an unlimited quota).
func (r Rollout) phaseCap(i, quota int) int {
	p := r.Phases[i]
	if p.Count != nil {
		if quota != Unlimited {
			return min(*p.Count, quota)
		}
		return *p.Count
	}
	if *p.Percent >= 100 {
		if quota == Unlimited {
			return -1
		}
		return quota
	}
	return int(math.Ceil(*p.Percent * float64(quota) / 100))
}

// Cap is the claim cap of the rollout's current phase (st.Phase) on each occurrence
// of a task whose quota is quota; -1: none (the rollout completed, or its last phase
// releases an unlimited quota). An aborted rollout caps at 0 (its task is paused too).
func (r Rollout) Cap(st RolloutStatus, quota int) int {
	switch st.State {
	case RolloutCompleted:
		return -1
	case RolloutAborted:
		return 0
	}
	return r.phaseCap(min(st.Phase, len(r.Phases)-1), quota)
}

// Rate is the claims per minute the current phase allows (0: no bound).
func (r Rollout) Rate(st RolloutStatus) int {
	if r.RatePerMinute <= 0 || st.State == RolloutCompleted {
		return 0
	}
	rate := float64(r.RatePerMinute) * math.Pow(max(r.RateFactor, 1), float64(st.Phase))
	return int(min(rate, math.MaxInt32))
}

// RolloutState is where a rollout is.
type RolloutState string

const (
	RolloutRunning   RolloutState = "running"   // the phase is open; its gate is not decided yet
	RolloutBaking    RolloutState = "baking"    // the gate passed: the next phase opens at BakeUntil
	RolloutWaiting   RolloutState = "waiting"   // an admin's move is awaited (a manual gate, passed or failed)
	RolloutPaused    RolloutState = "paused"    // an admin paused it: no automatic move
	RolloutAborted   RolloutState = "aborted"   // stopped: the task is paused
	RolloutCompleted RolloutState = "completed" // the last phase passed: the task runs on its whole quota
)

// RolloutStatus is a rollout's state as stored.
type RolloutStatus struct {
	State RolloutState `json:"state"`
	// Phase is the current phase, 0-based.
	Phase          int        `json:"phase"`
	PhaseStartedAt time.Time  `json:"phase_started_at"`
	BakeUntil      *time.Time `json:"bake_until,omitempty"`
	// GateFailed says a waiting or aborted rollout stopped on a failed gate.
	GateFailed bool `json:"gate_failed"`
}

// PhaseNumber is the current phase counted from 1: the number the admin API, the
// rollout's events and history, and its dispatches (their rollout_phase) know it by.
// Phase, 0-based, indexes the declaration's Phases.
func (st RolloutStatus) PhaseNumber() int { return st.Phase + 1 }

// PhaseFigures are a phase's dispatches: claimed (first attempts), and of the finished
// ones, the successes and the failures (failures, expiries, deaths, results the
// template's result schema refused, successes left unconfirmed). Open ones, and
// successes waiting for their confirmation (Unconfirmed), are not finished.
type PhaseFigures struct {
	Claimed   int `json:"claimed"`
	Finished  int `json:"finished"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	// Unconfirmed are the successes whose user has not fetched again yet
	// (confirm_seconds): the gate counts each once it is confirmed, or a failure.
	Unconfirmed int `json:"unconfirmed"`
}

// GateVerdict is what a gate says of a phase's figures.
type GateVerdict uint8

const (
	GatePending GateVerdict = iota // too few finished, or neither ratio reached
	GatePassed
	GateFailed
)

// String is v's label as the admin API shows it: "pending", "passed" or "failed".
func (v GateVerdict) String() string {
	switch v {
	case GatePending:
		return "pending"
	case GatePassed:
		return "passed"
	case GateFailed:
		return "failed"
	}
	return "GateVerdict(" + strconv.Itoa(int(v)) + ")"
}

// Verdict decides the gate on f: nothing before MinFinished have finished; then
// failed when the failures reach FailureRatio (if set), passed when the successes
// reach SuccessRatio.
func (g Gate) Verdict(f PhaseFigures) GateVerdict {
	if f.Finished == 0 || f.Finished < g.MinFinished {
		return GatePending
	}
	n := float64(f.Finished)
	switch {
	case g.FailureRatio > 0 && float64(f.Failed)/n >= g.FailureRatio:
		return GateFailed
	case float64(f.Succeeded)/n >= g.SuccessRatio:
		return GatePassed
	}
	return GatePending
}

// RolloutChange is what a step or a move did: Event names it (one of the EventRollout
// events); "" when nothing changed. Reason, on a change a failed gate made, names the
// figures and the ratio that failed it.
type RolloutChange struct {
	Event  EventType
	From   RolloutStatus
	To     RolloutStatus
	Reason string
}

// endsPhase reports whether c ends its phase: it opens another, or ends the rollout
// (completed or aborted). Baking, waiting, a pause and a resume leave the phase open.
func (c RolloutChange) endsPhase() bool {
	return c.To.Phase != c.From.Phase || c.To.State == RolloutCompleted || c.To.State == RolloutAborted
}

// AppendHistory is a rollout's history after c: when c ends its phase (it opens
// another, completes the rollout or aborts it), or pauses or resumes the rollout,
// history with c's record appended (the phase, at, its event, the phase's figures f
// it was decided on, c's reason, and actor: the admin's, "" for the server's own
// moves); history as it is otherwise: baking and waiting are the gate's verdicts,
// shown by the rollout's state, not moves anyone made.
func (c RolloutChange) AppendHistory(history []RolloutMoveRecord, f PhaseFigures, actor string, at time.Time) []RolloutMoveRecord {
	if !c.endsPhase() && c.Event != EventRolloutPaused && c.Event != EventRolloutResumed {
		return history
	}
	return append(history, RolloutMoveRecord{Phase: c.From.PhaseNumber(), At: at, Event: c.Event, PhaseFigures: f,
		Reason: c.Reason, Actor: actor})
}

// failure says why g failed on f: the failures among the finished, and the ratio
// they reached.
func (g Gate) failure(f PhaseFigures) string {
	return fmt.Sprintf("gate failed: %d of %d finished failed (%s), at or above failure_ratio %v; %d succeeded",
		f.Failed, f.Finished, strconv.FormatFloat(100*float64(f.Failed)/float64(max(f.Finished, 1)), 'f', -1, 64)+"%",
		g.FailureRatio, f.Succeeded)
}

// StartRollout is the status of a rollout that starts at now.
func StartRollout(now time.Time) RolloutStatus {
	return RolloutStatus{State: RolloutRunning, PhaseStartedAt: now}
}

// Step is the automatic move of a rollout at now given its phase's figures: a failed
// gate aborts (auto) or waits (manual); a passed one bakes, then advances (auto), or
// waits (manual); the last phase passed completes the rollout. Paused, waiting,
// aborted and completed rollouts do not move by themselves.
func (r Rollout) Step(st RolloutStatus, f PhaseFigures, now time.Time) RolloutChange {
	if st.State != RolloutRunning && st.State != RolloutBaking {
		return RolloutChange{}
	}
	to := st
	switch v := r.Gate.Verdict(f); {
	case v == GateFailed && r.Advance == AdvanceAuto:
		to.State, to.GateFailed, to.BakeUntil = RolloutAborted, true, nil
		return RolloutChange{Event: EventRolloutAborted, From: st, To: to, Reason: r.Gate.failure(f)}
	case v == GateFailed:
		to.State, to.GateFailed, to.BakeUntil = RolloutWaiting, true, nil
		return RolloutChange{Event: EventRolloutWaiting, From: st, To: to, Reason: r.Gate.failure(f)}
	case st.State == RolloutBaking:
		if st.BakeUntil != nil && now.Before(*st.BakeUntil) {
			return RolloutChange{}
		}
		return r.advance(st, now)
	case v == GatePassed && r.Advance == AdvanceManual:
		to.State = RolloutWaiting
		return RolloutChange{Event: EventRolloutWaiting, From: st, To: to}
	case v == GatePassed && r.BakeSeconds > 0:
		until := r.bakeUntil(now)
		to.State, to.BakeUntil = RolloutBaking, &until
		return RolloutChange{Event: EventRolloutBaking, From: st, To: to}
	case v == GatePassed:
		return r.advance(st, now)
	}
	return RolloutChange{}
}

// advance opens the next phase at now, or completes the rollout after its last.
func (r Rollout) advance(st RolloutStatus, now time.Time) RolloutChange {
	to := RolloutStatus{State: RolloutRunning, Phase: st.Phase + 1, PhaseStartedAt: now}
	if to.Phase >= len(r.Phases) {
		to = RolloutStatus{State: RolloutCompleted, Phase: len(r.Phases) - 1, PhaseStartedAt: st.PhaseStartedAt}
		return RolloutChange{Event: EventRolloutCompleted, From: st, To: to}
	}
	return RolloutChange{Event: EventRolloutPhase, From: st, To: to}
}

// RolloutMove is an admin's move of a rollout.
type RolloutMove string

const (
	RolloutAdvance RolloutMove = "advance"
	RolloutPause   RolloutMove = "pause"
	RolloutResume  RolloutMove = "resume"
	RolloutAbort   RolloutMove = "abort"
)

// Move applies an admin's move at now: advance (from running, baking or waiting: the
// next phase, whatever the gate says), pause (from running, baking or waiting), resume
// (from paused: running, the gate decided afresh), abort (from any state but aborted
// and completed). A move the state does not allow is a conflict.
func (r Rollout) Move(st RolloutStatus, move RolloutMove, now time.Time) (RolloutChange, error) {
	conflict := func() (RolloutChange, error) {
		return RolloutChange{}, Errorf(CodeConflict, "rollout is %s: %s is not allowed", st.State, move)
	}
	active := st.State == RolloutRunning || st.State == RolloutBaking || st.State == RolloutWaiting
	switch move {
	case RolloutAdvance:
		if !active {
			return conflict()
		}
		return r.advance(st, now), nil
	case RolloutPause:
		if !active {
			return conflict()
		}
		to := st
		to.State, to.BakeUntil = RolloutPaused, nil
		return RolloutChange{Event: EventRolloutPaused, From: st, To: to}, nil
	case RolloutResume:
		if st.State != RolloutPaused {
			return conflict()
		}
		to := st
		to.State, to.GateFailed = RolloutRunning, false
		return RolloutChange{Event: EventRolloutResumed, From: st, To: to}, nil
	case RolloutAbort:
		if st.State == RolloutAborted || st.State == RolloutCompleted {
			return conflict()
		}
		to := st
		to.State, to.BakeUntil = RolloutAborted, nil
		return RolloutChange{Event: EventRolloutAborted, From: st, To: to}, nil
	}
	return RolloutChange{}, Errorf(CodeInvalid, "rollout move: advance, pause, resume or abort, got %q", move)
}

// RolloutSummary is a rollout in a list: its task, state and phase (1-based), and
// what may keep it from advancing.
type RolloutSummary struct {
	TaskID string       `json:"task_id"`
	State  RolloutState `json:"state"`
	Phase  int          `json:"phase"`
	// GateUnreachable, when set, says why the gate of this phase or a later one may
	// never pass on what the task can give it (GateFindings; "": none found).
	GateUnreachable string `json:"gate_unreachable,omitempty"`
}

// Unreachable is the first of r's GateFindings (for task t) at phase (1-based) or
// after, the phases behind it being over; ok false when there is none.
func (r Rollout) Unreachable(t Task, phase int) (GateFinding, bool) {
	for _, f := range r.GateFindings(t.DispatchTimes, t.Occurrences(), -1) {
		if f.Phase >= phase {
			return f, true
		}
	}
	return GateFinding{}, false
}

// RolloutView is a rollout as an admin sees it: its declaration and state, the task's
// quota, the current phase's cap on each occurrence (-1: none) and the claims of the
// occurrence it bounds now (a once task's; a rotating task's latest), and the
// figures of the current phase its gate decides on.
type RolloutView struct {
	TaskID string
	// TaskVersion is the task's version, Moves the rollout's (it counts its moves):
	// together the rollout's version (Version).
	TaskVersion int64
	Moves       int64
	Rollout     Rollout
	Status      RolloutStatus
	Quota       int
	Cap         int
	Claimed     int
	Figures     PhaseFigures
	// History are the moves that ended phases (or the rollout), oldest first.
	History []RolloutMoveRecord
}

// Version is v's version, the ETag of its reads and moves: the task's version (an
// edit of the rollout is one of the task) and the count of its moves, the server's
// and the admins' (its figures move on their own and are nobody's edit, as a
// campaign's progress). An admin's move made against another is refused.
func (v RolloutView) Version() Version {
	return Version(strconv.FormatInt(v.TaskVersion, 10) + "-" + strconv.FormatInt(v.Moves, 10))
}

// RolloutMoveRecord is a move that ended a phase, or the rollout, or paused or
// resumed it: the phase (1-based), when, the event, the phase's figures it was decided
// on, why (an automatic abort names the gate's figures and ratio) and who (empty: the
// server).
type RolloutMoveRecord struct {
	Phase int       `json:"phase"`
	At    time.Time `json:"at"`
	Event EventType `json:"event"`
	PhaseFigures
	Reason string `json:"reason,omitempty"`
	Actor  string `json:"actor,omitempty"`
}

// A gate the task cannot feed. A phase's gate waits for MinFinished finished
// dispatches, SuccessRatio of them successes; every success holds one of an
// occurrence's slots for good (a failure may hand its slot back, an expiry always
// does), so the successes a phase can ever gather are bounded by its cap on each of
// the task's occurrences. The rule, per phase (GateFindings):
//
//   - refused (Refuse, at create and at an edit that makes it so: 400
//     invalid_argument, details reason gate_unreachable; RolloutRefusal) when even the phase's whole cap on every occurrence the task
//     will ever have holds fewer successes than the gate needs (ceil(success_ratio *
//     min_finished)) under advance auto: it would sit in running, gate pending,
//     forever, whatever happens. A once task has one occurrence; a rotating one with an
//     end_time a known number; one without is never refused (later occurrences feed it).
//   - warned (gate_unreachable, the write done) when passing depends on later events:
//     the same impossibility under advance manual (only an admin's advance moves it);
//     a phase whose new slots (its cap less the phase before's, on every occurrence)
//     are fewer than min_finished (it passes only if earlier phases left slots unused,
//     or failures make up the count); a once-per-user group smaller than the gate needs
//     (it passes only if members join).

// GateFinding is a phase whose gate the task may never let pass.
type GateFinding struct {
	// Phase is 1-based.
	Phase int
	// Refuse says it can never pass, whatever happens, and nothing else would move the
	// rollout on (advance auto): the declaration is refused.
	Refuse  bool
	Message string
}

// GateWarning is the code of a GateFinding that is not refused, as the admin API's
// warnings and the refusal's details name it.
const GateWarning = "gate_unreachable"

// GateFindings checks r's gates (with its defaults) against what its task can give
// them: quota its dispatch_times, occurrences how many occurrences the task will ever
// have (-1: no end), audience how many users may take each occurrence once
// (once_per_user: the group's members; -1: no bound). At most one finding per phase,
// the strongest; see the rule above.
func (r Rollout) GateFindings(quota, occurrences, audience int) []GateFinding {
	if occurrences < 0 || len(r.Phases) == 0 {
		return nil
	}
	m := r.Gate.MinFinished
	need := int(math.Ceil(r.Gate.SuccessRatio*float64(m) - 1e-9))
	per := "on its occurrence"
	if occurrences != 1 {
		per = fmt.Sprintf("on each of the task's %d occurrences", occurrences)
	}
	var out []GateFinding
	prev := 0
	for i := range r.Phases {
		c := r.phaseCap(i, quota)
		if c < 0 {
			break // the whole of an unlimited quota: no bound
		}
		fresh := c - prev
		best, sure := c*occurrences, fresh*occurrences
		prev = c
		n := i + 1
		switch {
		case need > 0 && best < need && r.Advance == AdvanceAuto:
			out = append(out, GateFinding{n, true, fmt.Sprintf("rollout.phases[%d]: phase %d caps claims at %d %s, so it can finish at most %d successes; its gate needs %d (min_finished %d, success_ratio %v): it would never advance (lower gate.min_finished, or raise the phase's cap)",
				i, n, c, per, best, need, m, r.Gate.SuccessRatio)})
		case need > 0 && best < need:
			out = append(out, GateFinding{n, false, fmt.Sprintf("phase %d caps claims at %d %s, so its gate (%d successes needed) can never pass: only an admin's advance moves it on", n, c, per, need)})
		case sure < m:
			out = append(out, GateFinding{n, false, fmt.Sprintf("phase %d opens %d new slots %s and its gate waits for %d finished: it passes only if the phases before leave slots unused, or failures make up the count", n, fresh, per, m)})
		case audience > 0 && min(c, audience)*occurrences < m:
			out = append(out, GateFinding{n, false, fmt.Sprintf("once per user, phase %d can finish at most %d dispatches %s with the %d users it targets now; its gate waits for %d: it passes only if members join", n, min(c, audience), per, audience, m)})
		}
	}
	return out
}

// RolloutRefusal refuses t's rollout when one of its gates could never pass
// (a Refuse finding of GateFindings): 400 invalid_argument, the finding's message,
// details {"reason": "gate_unreachable", "phase": n}. before is the task an edit
// starts from (nil: a create); a phase that was refused already in before is let
// through, so that an edit leaving a rollout as stuck as it was (one stored before
// this rule; a pause of its task) is not refused: its write warns of it instead.
func (t Task) RolloutRefusal(before *Task) error {
	if t.Rollout == nil {
		return nil
	}
	had := map[int]bool{}
	if before != nil && before.Rollout != nil {
		for _, f := range before.Rollout.GateFindings(before.DispatchTimes, before.Occurrences(), -1) {
			had[f.Phase] = f.Refuse
		}
	}
	for _, f := range t.Rollout.GateFindings(t.DispatchTimes, t.Occurrences(), -1) {
		if f.Refuse && !had[f.Phase] {
			return &Error{Code: CodeInvalid, Message: f.Message, Details: map[string]any{"reason": GateWarning, "phase": f.Phase}}
		}
	}
	return nil
}

// Occurrences is how many occurrences t will ever have: 1 for a once task, the count
// up to a rotating task's end_time, -1 without one.
func (t Task) Occurrences() int {
	if t.Key.Kind == KindOnce {
		return 1
	}
	if t.EndTime == nil || t.EndTime.Before(t.StartTime) {
		return -1
	}
	if t.Cron != "" {
		// Counted, up to a bound past which the count is as good as unbounded.
		r, n := t.Rotation(), 0
		for at, ok := r.First(t.StartTime); ok && n < maxCountedCron; at, ok = r.After(at) {
			n++
		}
		if n == maxCountedCron {
			return -1
		}
		return n
	}
	if t.SpaceMinutes < 1 {
		return -1
	}
	n := t.EndTime.Sub(t.StartTime)/(time.Duration(t.SpaceMinutes)*time.Minute) + 1
	return int(min(n, math.MaxInt32))
}

// maxCountedCron bounds the occurrences of a cron task Occurrences counts one by one.
const maxCountedCron = 1_000
