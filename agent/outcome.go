package agent

import (
	"time"
)

// outcomeKind is what a handler decided about its task.
type outcomeKind int

const (
	kindDone outcomeKind = iota
	kindFail
	kindPermanent
	kindNextStage
	kindGiveBack
	kindPanic
)

// label is the outcome's name in metrics and logs.
func (k outcomeKind) label() string {
	switch k {
	case kindDone:
		return "success"
	case kindFail:
		return "failure"
	case kindPermanent:
		return "permanent_failure"
	case kindNextStage:
		return "next_stage"
	case kindGiveBack:
		return "given_back"
	case kindPanic:
		return "panic"
	}
	return "unknown"
}

// Outcome is what a handler made of its task; build one with Done, Fail,
// FailPermanent, NextStage or GiveBack. The zero Outcome is Done(nil).
type Outcome struct {
	kind      outcomeKind
	err       error
	detail    any
	hasDetail bool
	stage     string
	context   any
	delay     time.Duration
	reason    string
	stack     string
}

// Done is success: the task (or its last stage) is complete. detail, if not nil, is
// sent as the complete's detail (an object; anything else is sent as {"value": detail}).
func Done(detail any) Outcome {
	return Outcome{kind: kindDone, detail: detail, hasDetail: detail != nil}
}

// Fail is a failure the server may retry: it hands the task out again, as its next
// attempt and with its last checkpoint, after the task's backoff while its
// max_attempts allow (else the task is dead). The detail is {"error": err's text}.
func Fail(err error) Outcome { return Outcome{kind: kindFail, err: err} }

// FailPermanent is a failure that trying again will not mend (bad input, a task this
// agent cannot do): the complete says so ("retry": false), and the server ends the
// task at once, whatever attempts are left; its events say the failure was final. The
// detail is {"error": err's text, "permanent": true}.
//
// A server older than "retry" refuses it: the agent then sends the failure without
// it, the server retries the task while max_attempts allow, and this agent fails each
// retry of it that reaches it at once, with the same detail and without running the
// handler, so that the task uses up its attempts quickly.
func FailPermanent(err error) Outcome { return Outcome{kind: kindPermanent, err: err} }

// NextStage completes the current stage of a multi-stage task and hands the task on
// to stage, with context (an object, or nil) for it, after delay (whole seconds, at
// most a week). The server hands the task back to this uid at that stage.
func NextStage(stage string, context any, delay time.Duration) Outcome {
	return Outcome{kind: kindNextStage, stage: stage, context: context, delay: delay}
}

// GiveBack hands the task back at once without doing it. The API has no call that
// returns a task without using an attempt, so this is the closest honest thing: a
// failure, with the detail {"given_back": true, "reason": reason}. It counts as an
// attempt, and the server hands the task out again after its retry backoff while its
// max_attempts allow (to this uid: a task stays with its user).
func GiveBack(reason string) Outcome { return Outcome{kind: kindGiveBack, reason: reason} }

// WithDetail returns o with detail as the complete's detail instead of the one o
// would send (an object; anything else is sent as {"value": detail}). A
// json.RawMessage is sent as it is.
func (o Outcome) WithDetail(detail any) Outcome {
	o.detail, o.hasDetail = detail, true
	return o
}

// result is the complete's result field for o.
func (o Outcome) result() string {
	if o.kind == kindDone || o.kind == kindNextStage {
		return "success"
	}
	return "failure"
}

// defaultDetail is the detail o sends when no detail was given.
func (o Outcome) defaultDetail() any {
	msg := func() string {
		if o.err == nil {
			return "failed"
		}
		return o.err.Error()
	}
	switch o.kind {
	case kindFail:
		return map[string]any{"error": msg()}
	case kindPermanent:
		return map[string]any{"error": msg(), "permanent": true}
	case kindGiveBack:
		return map[string]any{"given_back": true, "reason": o.reason}
	case kindPanic:
		return map[string]any{"error": msg(), "panic": true, "stack": o.stack}
	}
	return nil
}
