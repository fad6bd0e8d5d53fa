package taskd

import "time"

// A task's outcome says whether anything of it is still to come: a once task whose
// quota was used up and whose dispatches all finished, or a task none of whose
// occurrences is on anyone's offer any more, looks live in a list of active tasks
// otherwise (its status stays active).

// The outcomes of a task (Task.Outcome); "" while it may still be handed out.
const (
	OutcomeDone  = "done"  // a once task's quota used up, its dispatches finished, some succeeded
	OutcomeDead  = "dead"  // the same, but every finished dispatch died
	OutcomeEnded = "ended" // no occurrence is on any user's offer any more, nothing open
)

// OutcomeFigures are a task's dispatches as its outcome counts them: Claimed, the
// slots taken of its (once) occurrence; Unfinished, those open, waiting for a retry,
// between stages or for their confirmation; Succeeded; Dead.
type OutcomeFigures struct {
	Claimed    int
	Unfinished int
	Succeeded  int
	Dead       int
}

// Outcome is t's outcome given its figures f, when users' offers start at floor at
// the earliest (now less the catch-up window): nothing is over while a dispatch is
// unfinished; a once task whose limited quota is all claimed is done (dead if none
// succeeded and some died); a once task due before floor, or a rotating one whose
// end_time is, has ended. "" otherwise: more may be handed out.
func (t Task) Outcome(f OutcomeFigures, floor time.Time) string {
	if f.Unfinished > 0 {
		return ""
	}
	switch t.Key.Kind {
	case KindOnce:
		if t.DispatchTimes != Unlimited && f.Claimed >= t.DispatchTimes {
			if f.Succeeded == 0 && f.Dead > 0 {
				return OutcomeDead
			}
			return OutcomeDone
		}
		if t.StartTime.Before(floor) {
			return OutcomeEnded
		}
	case KindRotate:
		if t.EndTime != nil && t.EndTime.Before(floor) {
			return OutcomeEnded
		}
	}
	return ""
}

// Over reports whether no more dispatch of t can finish, given its figures f and the
// floor of users' offers (as Outcome): nothing of it is unfinished, and it is deleted
// (its open and waiting dispatches were cancelled) or has an outcome (a once task's
// quota used up, or no occurrence on anyone's offer any more). It holds as things
// stand: an admin's later change (a higher dispatch_times, a retry of a dead dispatch)
// may bring more.
func (t Task) Over(f OutcomeFigures, floor time.Time) bool {
	return f.Unfinished == 0 && (t.Status == StatusDeleted || t.Outcome(f, floor) != "")
}
