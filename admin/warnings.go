package admin

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/taskpull/taskd"
)

// Warnings and the dry run: a task for a group with no members, or for a uid that never
// had a key nor polled, is accepted (groups fill later, users enroll later) but goes
// nowhere meanwhile; its create, replace and patch replies say so, and a preview shows
// who would get it before anything is stored.

// Warning is a hint in a task write's reply: nothing was refused.
type Warning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Warning codes.
const (
	WarnEmptyGroup        = "empty_group"
	WarnUnknownUID        = "unknown_uid"
	WarnQuotaExceedsGroup = "quota_exceeds_group"
	WarnEnded             = "ended"
	WarnBeforeCatchUp     = "before_catch_up"
	// WarnGateUnreachable is a rollout phase whose gate may never pass
	// (taskd.Rollout.GateFindings); one that never can under advance auto is refused.
	WarnGateUnreachable = taskd.GateWarning
)

// audience is who task t's executor names: the uid, or the group's members.
func (s *Service) audience(ctx context.Context, t taskd.Task) ([]string, error) {
	e, err := taskd.ParseExecutor(t.Executor)
	if err != nil {
		return nil, err
	}
	if e.Group {
		return s.store.Members(ctx, e.ID)
	}
	return []string{e.ID}, nil
}

// TaskWarnings says what would keep t from reaching anyone, or from using its quota.
func (s *Service) TaskWarnings(ctx context.Context, t taskd.Task) ([]Warning, error) {
	e, err := taskd.ParseExecutor(t.Executor)
	if err != nil {
		return nil, err
	}
	var out []Warning
	audience := -1 // how many users may take an occurrence once each; -1: no bound
	if e.Group {
		members, err := s.store.Members(ctx, e.ID)
		if err != nil {
			return nil, err
		}
		g, err := s.store.Group(ctx, e.ID)
		if err != nil && taskd.ErrorCode(err) != taskd.CodeNotFound { // a group that never had members nor a rule
			return nil, err
		}
		if t.Mode == taskd.ModeOncePerUser && !g.Dynamic { // a dynamic group's members come with the reports
			audience = len(members)
		}
		switch {
		case len(members) == 0 && g.Dynamic:
			out = append(out, Warning{WarnEmptyGroup, fmt.Sprintf("%s is dynamic and no client's latest report matches its rule yet: nobody is offered this task until an agent that matches fetches", t.Executor)})
		case len(members) == 0:
			out = append(out, Warning{WarnEmptyGroup, fmt.Sprintf("%s has no members: nobody is offered this task until members are added (PUT /v1/admin/groups/%s/members)", t.Executor, e.ID)})
		case g.Dynamic:
			// Its members follow the agents' reports: today's count says little of the
			// quota an occurrence will see.
		case t.DispatchTimes != taskd.Unlimited && t.Mode == taskd.ModeOncePerUser && t.DispatchTimes > len(members):
			out = append(out, Warning{WarnQuotaExceedsGroup, fmt.Sprintf("dispatch_times %d is more than the %d members of %s: once per user, at most %d of each occurrence's slots can be taken", t.DispatchTimes, len(members), t.Executor, len(members))})
		}
	} else {
		c, err := s.store.ClientSetting(ctx, e.ID)
		if err != nil {
			return nil, err
		}
		if c.Keys == 0 && c.LastSeen == nil && c.UpdatedAt == nil {
			out = append(out, Warning{WarnUnknownUID, fmt.Sprintf("%s has no client key and has never polled: nobody takes this task until that user enrolls (or an admin issues a key)", t.Executor)})
		}
	}
	// A user's offer starts at most the catch-up window back: a once task due before
	// it is offered to nobody, and a rotating task's occurrences before it are skipped.
	if now := s.now(); s.catchUp > 0 && t.StartTime.Before(now.Add(-s.catchUp)) && t.Key.Kind == taskd.KindOnce {
		out = append(out, Warning{WarnBeforeCatchUp, fmt.Sprintf("start_time %s is %s ago, beyond the catch-up window of %s (DISPATCH_CATCH_UP): a user's offer starts at most that far back, so nobody is offered this task",
			t.StartTime.UTC().Format(time.RFC3339), now.Sub(t.StartTime).Truncate(time.Second), s.catchUp)})
	}
	if t.Rollout != nil {
		// The rest depend on later events (an admin's advance, slots earlier phases
		// leave, failures, new members); one refused gets here only from an edit that
		// left it as stuck as it was (taskd.Task.RolloutRefusal).
		for _, f := range t.Rollout.GateFindings(t.DispatchTimes, t.Occurrences(), audience) {
			out = append(out, Warning{WarnGateUnreachable, f.Message})
		}
	}
	if t.EndTime != nil && t.EndTime.Before(s.now()) {
		out = append(out, Warning{WarnEnded, "end_time is in the past: no occurrence of this task is due any more"})
	}
	return out, nil
}

// withWarnings is a task write's reply: the task and, if any, its warnings. A failure to
// work them out does not fail the write, which is done: it is logged, and the reply has
// none.
func (h *Handlers) withWarnings(ctx context.Context, t taskd.Task, err error) taskView {
	v := viewTask(t)
	if err != nil {
		return v
	}
	w, werr := h.svc.TaskWarnings(ctx, t)
	if werr != nil {
		h.log.WarnContext(ctx, "task warnings", "task_id", t.Key.String(), "err", werr)
		return v
	}
	v.Warnings = w
	return v
}

// previewWindow is how far ahead a preview looks.
const previewWindow = 24 * time.Hour

// maxPreviewOccurrences bounds a preview's list of occurrences (a rotation every
// minute for a day is 1,440); its summary counts them all.
const maxPreviewOccurrences = 1440

// PreviewOccurrence is one occurrence a preview finds, and how many users would get it.
type PreviewOccurrence struct {
	DueAt      time.Time `json:"due_at"`
	Recipients int       `json:"recipients"`
	// LocalTime and TimeZone: due_at on a cron task's wall clock (a cron task only).
	LocalTime string `json:"local_time,omitempty"`
	TimeZone  string `json:"time_zone,omitempty"`
}

// PreviewSummary sums a preview's occurrences: the dispatches they would make, and how
// many users would get at least one (at most: when a quota or a cap leaves some of
// the offered users out, which ones is whoever fetches first).
type PreviewSummary struct {
	TotalDispatches int `json:"total_dispatches"`
	UIDs            int `json:"uids"`
}

// Preview is who a task would reach in the next 24 h, stored nowhere.
type Preview struct {
	UIDs        []string            `json:"uids"`
	Summary     PreviewSummary      `json:"summary"`
	Occurrences []PreviewOccurrence `json:"occurrences"`
	Warnings    []Warning           `json:"warnings"`
}

// PreviewTask checks t as a create would (params included) and answers its audience,
// its occurrences that agents would be handed from now to 24 h ahead, each with how
// many of the audience would get it, and their sum.
//
// What is counted is what a fetch hands out. An occurrence already due is handed out
// at once to every user whose offer reaches back to it: a user's offer starts at its
// cursor, never more than the catch-up window (DISPATCH_CATCH_UP) behind now, so a
// rotating task's occurrences of that window count for the users whose cursor is not
// past them (a new user's is the window's start), and a once task due before the
// window counts for nobody. Each occurrence's recipients are bounded by the quota
// (dispatch_times; unlimited: none) and by the cap of the rollout's first phase, the
// one a new task starts in. A paused task has no occurrences.
func (s *Service) PreviewTask(ctx context.Context, t taskd.Task) (Preview, error) {
	if err := t.Validate(); err != nil {
		return Preview{}, err
	}
	if err := t.RolloutRefusal(nil); err != nil {
		return Preview{}, err
	}
	if err := s.validateParams(ctx, t.TemplateID, t.Params); err != nil {
		return Preview{}, err
	}
	uids, err := s.audience(ctx, t)
	if err != nil {
		return Preview{}, err
	}
	p := Preview{UIDs: uids, Occurrences: []PreviewOccurrence{}}
	if p.UIDs == nil {
		p.UIDs = []string{}
	}
	if p.Warnings, err = s.TaskWarnings(ctx, t); err != nil {
		return Preview{}, err
	}
	if p.Warnings == nil {
		p.Warnings = []Warning{}
	}
	if t.Status == taskd.StatusPaused {
		return p, nil
	}
	now := s.now()
	floor := now.Add(-s.catchUp).Truncate(time.Second)
	if floor.After(now) {
		floor = now
	}
	offered, err := s.offeredFrom(ctx, uids, floor)
	if err != nil {
		return Preview{}, err
	}
	bound := -1 // the most users of one occurrence: the quota, the rollout's first cap
	if t.DispatchTimes != taskd.Unlimited {
		bound = t.DispatchTimes
	}
	if t.Rollout != nil {
		if c := t.Rollout.Cap(taskd.StartRollout(now), t.DispatchTimes); c >= 0 && (bound < 0 || c < bound) {
			bound = c
		}
	}
	cron := t.Rotation().Cron
	add := func(at time.Time) {
		n := offered(at)
		p.Summary.UIDs = max(p.Summary.UIDs, n) // offered(at) grows with at
		if bound >= 0 {
			n = min(n, bound)
		}
		p.Summary.TotalDispatches += n
		if len(p.Occurrences) < maxPreviewOccurrences {
			o := PreviewOccurrence{DueAt: at, Recipients: n}
			o.LocalTime, o.TimeZone = localTime(cron, at)
			p.Occurrences = append(p.Occurrences, o)
		}
	}
	until := now.Add(previewWindow)
	if t.Key.Kind == taskd.KindOnce {
		if !t.StartTime.Before(floor) && t.StartTime.Before(until) {
			add(t.StartTime)
		}
	} else {
		r := t.Rotation()
		for at, ok := r.First(floor); ok && at.Before(until); at, ok = r.After(at) {
			add(at)
		}
	}
	p.Summary.UIDs = min(p.Summary.UIDs, p.Summary.TotalDispatches)
	return p, nil
}

// offeredFrom returns how many of uids have on their offer an occurrence due at a
// given time, their offers starting at floor at the earliest: those whose cursor is
// not past it (every one, for an occurrence not due yet).
func (s *Service) offeredFrom(ctx context.Context, uids []string, floor time.Time) (func(time.Time) int, error) {
	cursors, err := s.store.Cursors(ctx, uids)
	if err != nil {
		return nil, err
	}
	starts := make([]time.Time, 0, len(uids)) // each user's offer's start, sorted
	for _, u := range uids {
		at := floor
		if c, ok := cursors[u]; ok && c.After(floor) {
			at = c
		}
		starts = append(starts, at)
	}
	slices.SortFunc(starts, time.Time.Compare)
	return func(due time.Time) int {
		return sort.Search(len(starts), func(i int) bool { return starts[i].After(due) })
	}, nil
}

// PreviewTask is POST /v1/admin/tasks/{kind}/preview: a create's body, nothing stored.
func (h *Handlers) PreviewTask() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		kind, err := pathKind(r)
		if err != nil {
			return 0, nil, err
		}
		t, err := decodeTask(w, r, kind)
		if err != nil {
			return 0, nil, err
		}
		p, err := h.svc.PreviewTask(r.Context(), t)
		return http.StatusOK, p, err
	})
}
