package taskd

import (
	"math"
	"regexp"
	"time"
)

// Settings are the task-type settings (seed 004) that a template gives its tasks as
// defaults and that a task may set for itself; nil is "not set". A task's own value
// wins over its template's, and the template's over the server's default.
type Settings struct {
	LeaseSeconds          *int     `json:"lease_seconds"`
	MaxAttempts           *int     `json:"max_attempts"`
	RetryBackoffSeconds   *int     `json:"retry_backoff_seconds"`
	RetryMultiplier       *float64 `json:"retry_multiplier"`
	RetryMaxSeconds       *int     `json:"retry_max_seconds"`
	DispatchRatePerMinute *int     `json:"dispatch_rate_per_minute"`
	ConfirmSeconds        *int     `json:"confirm_seconds"`
}

// Effective are the settings a task's dispatches get.
type Effective struct {
	// LeaseSeconds is how long a dispatch may stay open (0: never expires).
	LeaseSeconds int `json:"lease_seconds"`
	// MaxAttempts is how many attempts (failures and expiries) a user gets at an
	// occurrence.
	MaxAttempts int `json:"max_attempts"`
	// The wait before attempt n+1 is RetryBackoffSeconds * RetryMultiplier^(n-1),
	// capped at RetryMaxSeconds.
	RetryBackoffSeconds int     `json:"retry_backoff_seconds"`
	RetryMultiplier     float64 `json:"retry_multiplier"`
	RetryMaxSeconds     int     `json:"retry_max_seconds"`
	// DispatchRatePerMinute bounds how many dispatches of the task start per minute
	// (0: no bound).
	DispatchRatePerMinute int `json:"dispatch_rate_per_minute"`
	// ConfirmSeconds, when above 0, makes a success count only once the same user
	// fetches again within that many seconds after its complete (ConfirmBy); 0: a
	// success counts at once.
	ConfirmSeconds int `json:"confirm_seconds"`
}

// The server's defaults for what neither a task nor its template sets.
const (
	DefaultMaxAttempts          = 1 // without a lease: the seed's one attempt
	DefaultMaxAttemptsWithLease = 3 // with a lease an expiry counts as an attempt
	DefaultRetryMultiplier      = 2.0
	DefaultRetryMaxSeconds      = MaxBackoffSeconds
)

// Bounds of the settings beyond those of Task.
const (
	MaxRetryMultiplier = 10.0
	MaxRatePerMinute   = 1_000_000
	MaxStages          = 32
	// MaxConfirmSeconds bounds confirm_seconds: a year, as a lease.
	MaxConfirmSeconds = MaxLeaseSeconds
)

// Resolve gives the effective settings of a task with own settings whose template has
// tpl, and the names of those the template gave (inherited).
func Resolve(own, tpl Settings) (e Effective, inherited []string) {
	pick := func(name string, o, t *int, def int) int {
		switch {
		case o != nil:
			return *o
		case t != nil:
			inherited = append(inherited, name)
			return *t
		}
		return def
	}
	e.LeaseSeconds = pick("lease_seconds", own.LeaseSeconds, tpl.LeaseSeconds, 0)
	defAttempts := DefaultMaxAttempts
	if e.LeaseSeconds > 0 {
		defAttempts = DefaultMaxAttemptsWithLease
	}
	e.MaxAttempts = pick("max_attempts", own.MaxAttempts, tpl.MaxAttempts, defAttempts)
	e.RetryBackoffSeconds = pick("retry_backoff_seconds", own.RetryBackoffSeconds, tpl.RetryBackoffSeconds, 0)
	switch {
	case own.RetryMultiplier != nil:
		e.RetryMultiplier = *own.RetryMultiplier
	case tpl.RetryMultiplier != nil:
		inherited = append(inherited, "retry_multiplier")
		e.RetryMultiplier = *tpl.RetryMultiplier
	default:
		e.RetryMultiplier = DefaultRetryMultiplier
	}
	e.RetryMaxSeconds = pick("retry_max_seconds", own.RetryMaxSeconds, tpl.RetryMaxSeconds, DefaultRetryMaxSeconds)
	e.DispatchRatePerMinute = pick("dispatch_rate_per_minute", own.DispatchRatePerMinute, tpl.DispatchRatePerMinute, 0)
	e.ConfirmSeconds = pick("confirm_seconds", own.ConfirmSeconds, tpl.ConfirmSeconds, 0)
	if inherited == nil {
		inherited = []string{}
	}
	return e, inherited
}

// Validate checks each setting that is set against its bounds, naming the first wrong.
func (s Settings) Validate() error {
	bad := func(format string, args ...any) error { return Errorf(CodeInvalid, format, args...) }
	in := func(v *int, lo, hi int) bool { return v == nil || (*v >= lo && *v <= hi) }
	switch {
	case !in(s.LeaseSeconds, 0, MaxLeaseSeconds):
		return bad("lease_seconds: must be 0..%d, got %d", MaxLeaseSeconds, *s.LeaseSeconds)
	case !in(s.MaxAttempts, 1, MaxAttemptsLimit):
		return bad("max_attempts: must be 1..%d, got %d", MaxAttemptsLimit, *s.MaxAttempts)
	case !in(s.RetryBackoffSeconds, 0, MaxBackoffSeconds):
		return bad("retry_backoff_seconds: must be 0..%d, got %d", MaxBackoffSeconds, *s.RetryBackoffSeconds)
	case s.RetryMultiplier != nil && !(*s.RetryMultiplier >= 1 && *s.RetryMultiplier <= MaxRetryMultiplier):
		return bad("retry_multiplier: must be 1..%g, got %g", MaxRetryMultiplier, *s.RetryMultiplier)
	case !in(s.RetryMaxSeconds, 0, MaxBackoffSeconds):
		return bad("retry_max_seconds: must be 0..%d, got %d", MaxBackoffSeconds, *s.RetryMaxSeconds)
	case !in(s.DispatchRatePerMinute, 0, MaxRatePerMinute):
		return bad("dispatch_rate_per_minute: must be 0..%d (0: no bound), got %d", MaxRatePerMinute, *s.DispatchRatePerMinute)
	case !in(s.ConfirmSeconds, 0, MaxConfirmSeconds):
		return bad("confirm_seconds: must be 0..%d (0: a success counts at once), got %d", MaxConfirmSeconds, *s.ConfirmSeconds)
	}
	return nil
}

// WithRollout is s, a task's own settings, with its rollout r's confirm_seconds when r
// sets one and s does not: a rollout's confirm_seconds (which a rollout took before a
// task could set one) is the default of its task's, so the task's own value wins over
// it, and it wins over the template's. A task without a rollout keeps s.
func (s Settings) WithRollout(r *Rollout) Settings {
	if r != nil && r.ConfirmSeconds > 0 && s.ConfirmSeconds == nil {
		c := r.ConfirmSeconds
		s.ConfirmSeconds = &c
	}
	return s
}

// stagePattern is what a stage name may look like.
var stagePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ValidateStages checks a template's stage names: at most MaxStages, each 1 to 64 of
// [A-Za-z0-9_.-], no repeats.
func ValidateStages(stages []string) error {
	if len(stages) > MaxStages {
		return Errorf(CodeInvalid, "stages: at most %d, got %d", MaxStages, len(stages))
	}
	seen := map[string]bool{}
	for i, s := range stages {
		if !stagePattern.MatchString(s) {
			return Errorf(CodeInvalid, "stages[%d]: must be 1 to 64 of [A-Za-z0-9_.-], got %q", i, s)
		}
		if seen[s] {
			return Errorf(CodeInvalid, "stages[%d]: %q is listed twice", i, s)
		}
		seen[s] = true
	}
	return nil
}

// RetryBackoff is the wait before attempt+1: base * multiplier^(attempt-1), capped at
// maxSeconds.
func RetryBackoff(baseSeconds int, multiplier float64, maxSeconds, attempt int) time.Duration {
	s := float64(baseSeconds) * math.Pow(max(multiplier, 1), float64(attempt-1))
	return time.Duration(min(s, float64(maxSeconds))) * time.Second
}
