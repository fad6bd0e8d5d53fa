package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/taskpull/taskd"
)

// Rollout returns task key's rollout as it stands now (the server's move due by now
// made first). An abort pauses the task: its executor's heaps are made stale, as a
// pause's are.
func (s *Service) Rollout(ctx context.Context, key taskd.TaskKey) (taskd.RolloutView, error) {
	v, err := s.store.TaskRollout(ctx, key, s.now())
	if err != nil {
		return v, err
	}
	s.afterRollout(ctx, key, v)
	return v, nil
}

// MoveRollout applies an admin's move (advance, pause, resume, abort) to task key's
// rollout, at a version ifMatch matches.
func (s *Service) MoveRollout(ctx context.Context, key taskd.TaskKey, move taskd.RolloutMove, ifMatch taskd.IfMatch) (taskd.RolloutView, error) {
	v, err := s.store.MoveRollout(ctx, ActorFrom(ctx), key, move, ifMatch, s.now())
	if err != nil {
		return v, err
	}
	s.afterRollout(ctx, key, v)
	return v, nil
}

// afterRollout tells the caches of an aborted rollout's paused task, and the waiters
// for its results (an abort with on_abort cancel ended its open dispatches).
func (s *Service) afterRollout(ctx context.Context, key taskd.TaskKey, v taskd.RolloutView) {
	if v.Status.State != taskd.RolloutAborted {
		return
	}
	s.Finished(key)
	t, err := s.store.GetTask(ctx, key)
	if err != nil {
		s.log.WarnContext(ctx, "rollout aborted, but its task was not read to tell its caches (a claim refuses its paused task)",
			"task_id", key.String(), "err", err)
		return
	}
	s.tellCaches(ctx, t.Executor)
}

// StepRollouts makes the server's moves of the running and baking rollouts due now (a
// gate decided, a bake over) and tells the caches of the tasks an abort paused. Every
// node runs it, every RolloutStep.
func (s *Service) StepRollouts(ctx context.Context) error {
	moved, err := s.store.StepRollouts(ctx, s.now())
	for _, v := range moved {
		key, perr := taskd.ParseTaskKey(v.TaskID)
		if perr == nil {
			s.afterRollout(ctx, key, v)
		}
	}
	return err
}

// RolloutStep is how often each node makes the rollouts' moves due.
const RolloutStep = time.Second

// RunRollouts makes the rollouts' moves due every RolloutStep until ctx ends.
func (s *Service) RunRollouts(ctx context.Context) {
	t := time.NewTicker(RolloutStep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.StepRollouts(ctx); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "rollouts: a step failed", "err", err)
			}
		}
	}
}

// ActiveRollouts lists the rollouts neither completed nor aborted, after the server's
// moves due now (as a rollout's own read does): what it shows holds. Each says whether
// a gate ahead of it cannot be met on what its task gives (a rollout stored before
// such gates were refused sits in running for ever).
func (s *Service) ActiveRollouts(ctx context.Context) ([]taskd.RolloutSummary, error) {
	if err := s.StepRollouts(ctx); err != nil {
		return nil, err
	}
	rs, err := s.store.ActiveRollouts(ctx)
	if err != nil {
		return nil, err
	}
	for i, r := range rs {
		key, err := taskd.ParseTaskKey(r.TaskID)
		if err != nil {
			return nil, err
		}
		t, err := s.store.GetTask(ctx, key)
		if taskd.ErrorCode(err) == taskd.CodeNotFound {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		if t.Rollout == nil {
			continue
		}
		if f, ok := t.Rollout.Unreachable(t, r.Phase); ok {
			rs[i].GateUnreachable = f.Message
		}
	}
	return rs, nil
}

// rolloutReply is GET .../rollout's answer.
type rolloutReply struct {
	TaskID string             `json:"task_id"`
	State  taskd.RolloutState `json:"state"`
	// Phase is the current phase, 1-based, of Phases.
	Phase  int `json:"phase"`
	Phases int `json:"phases"`
	// Cap bounds each occurrence's claims in this phase (null: no bound); Claimed is the
	// claims of the occurrence it bounds now (a once task's; a rotating task's latest).
	Cap     *int `json:"cap"`
	Quota   int  `json:"quota"`
	Claimed int  `json:"claimed"`
	// The phase's dispatches: claimed in it, and of those finished, the successes and
	// the failures (failures, expiries, deaths).
	PhaseClaimed int `json:"phase_claimed"`
	Finished     int `json:"finished"`
	Succeeded    int `json:"succeeded"`
	Failed       int `json:"failed"`
	// Unconfirmed are the phase's successes waiting for their user's next fetch
	// (confirm_seconds): not finished until confirmed (a success) or lapsed (a failure).
	Unconfirmed int `json:"unconfirmed"`
	// Gate is what the gate says of them now: pending, passed or failed.
	Gate           string     `json:"gate"`
	GateFailed     bool       `json:"gate_failed"`
	PhaseStartedAt time.Time  `json:"phase_started_at"`
	BakeUntil      *time.Time `json:"bake_until"`
	// MayAdvanceAt is when the next phase opens by itself: a bake's end (null: not
	// baking).
	MayAdvanceAt *time.Time    `json:"may_advance_at"`
	Rollout      taskd.Rollout `json:"rollout"`
	// History are the moves that ended phases (or the rollout), oldest first, each with
	// the figures it was decided on.
	History []taskd.RolloutMoveRecord `json:"history"`
}

func viewRollout(v taskd.RolloutView) rolloutReply {
	r := rolloutReply{TaskID: v.TaskID, State: v.Status.State, Phase: v.Status.PhaseNumber(), Phases: len(v.Rollout.Phases),
		Quota: v.Quota, Claimed: v.Claimed, PhaseClaimed: v.Figures.Claimed, Finished: v.Figures.Finished,
		Succeeded: v.Figures.Succeeded, Failed: v.Figures.Failed, Unconfirmed: v.Figures.Unconfirmed, Gate: v.Rollout.Gate.Verdict(v.Figures).String(),
		GateFailed: v.Status.GateFailed, PhaseStartedAt: v.Status.PhaseStartedAt, BakeUntil: v.Status.BakeUntil,
		MayAdvanceAt: v.Status.BakeUntil, Rollout: v.Rollout, History: v.History}
	if v.Cap >= 0 {
		r.Cap = &v.Cap
	}
	return r
}

// GetRollout is GET /v1/admin/tasks/{kind}/{id}/rollout.
func (h *Handlers) GetRollout() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		key, err := pathTaskKey(r)
		if err != nil {
			return 0, nil, err
		}
		v, err := h.svc.Rollout(r.Context(), key)
		return http.StatusOK, viewRollout(v), tagged(w, v.Version(), err)
	})
}

// MoveRollout is POST /v1/admin/tasks/{kind}/{id}/rollout/{move}: advance, pause,
// resume or abort (409 conflict for a move the rollout's state does not allow; 412
// precondition_failed, with the current ETag, for one made against a version the
// rollout no longer has: it moved, by the server or another admin, or its task was
// edited).
func (h *Handlers) MoveRollout() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		key, err := pathTaskKey(r)
		if err != nil {
			return 0, nil, err
		}
		move := taskd.RolloutMove(chi.URLParam(r, "move"))
		switch move {
		case taskd.RolloutAdvance, taskd.RolloutPause, taskd.RolloutResume, taskd.RolloutAbort:
		default:
			return 0, nil, taskd.Errorf(taskd.CodeNotFound, "no such rollout move %q: advance, pause, resume or abort", move)
		}
		v, err := h.svc.MoveRollout(r.Context(), key, move, ifMatch(r))
		return http.StatusOK, viewRollout(v), tagged(w, v.Version(), err)
	})
}

// ListRollouts is GET /v1/admin/rollouts: the rollouts neither completed nor aborted.
func (h *Handlers) ListRollouts() http.Handler {
	return h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		rs, err := h.svc.ActiveRollouts(r.Context())
		return http.StatusOK, map[string]any{"rollouts": rs}, err
	})
}
