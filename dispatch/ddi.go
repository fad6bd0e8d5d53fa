package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// DDI controllers (hawkBit's Direct Device Integration: SWUpdate's suricatta,
// rauc-hawkbit-updater) poll with an idempotent GET and report through feedback. Here
// their poll is a fetch of DDI deployments alone (taskd.Take.DDI), into the user's slot
// 1, through the claim path every fetch takes; the dispatch is an action, numbered once
// (ddi_action), and it stays the controller's until the controller closes it: each
// poll shows it again and renews its lease (the device installs and reboots between
// polls), feedback proceeding checkpoints it, and feedback closed completes it. An
// admin's cancel shows as a cancelAction until the controller acknowledges it.

// Credential is what a DDI request authenticated with: the client key of the
// controller's own uid (TargetToken), or of the gateway's (GatewayToken).
type Credential struct {
	UID, Hash string
}

// DDIPoll is a controller's base poll: its action, to deploy or (Cancel) to cancel, or
// none; and how long to sleep before the next poll.
type DDIPoll struct {
	Action *taskd.DDIAction
	Cancel bool
	Sleep  time.Duration
	fresh  bool // the action was claimed by this poll
}

// DDIFeedback is a controller's feedback on an action (hawkBit's status: execution,
// result.finished, result.progress, details).
type DDIFeedback struct {
	Execution string
	Finished  string
	Cnt, Of   int
	Details   []string
}

// The executions hawkBit defines; closed, rejected and canceled end an action.
var ddiExecutions = map[string]bool{"closed": true, "proceeding": true, "canceled": true, "scheduled": true,
	"rejected": true, "resumed": true, "download": true, "downloaded": true}

// Check refuses an execution or result hawkBit does not define.
func (f DDIFeedback) Check() error {
	if !ddiExecutions[f.Execution] {
		return taskd.Errorf(taskd.CodeInvalid, "status.execution: must be one of closed, proceeding, canceled, scheduled, rejected, resumed, download, downloaded; got %q", f.Execution)
	}
	switch f.Finished {
	case "success", "failure", "none", "":
	default:
		return taskd.Errorf(taskd.CodeInvalid, "status.result.finished: must be success, failure or none; got %q", f.Finished)
	}
	return nil
}

// ends says the feedback ends the action, with the result it comes to.
func (f DDIFeedback) ends() (taskd.Result, bool) {
	switch f.Execution {
	case "closed":
		if f.Finished == "failure" {
			return taskd.ResultFailure, true
		}
		return taskd.ResultSuccess, true // hawkBit reads none as success
	case "rejected", "canceled":
		return taskd.ResultFailure, true
	}
	return 0, false
}

// record is the feedback as a dispatch keeps it: the checkpoint of a proceeding
// action, the detail of a closed one.
func (f DDIFeedback) record(at time.Time) json.RawMessage {
	type progress struct {
		Cnt int `json:"cnt"`
		Of  int `json:"of"`
	}
	rec := struct {
		Execution string    `json:"execution"`
		Finished  string    `json:"finished,omitempty"`
		Progress  *progress `json:"progress,omitempty"`
		Details   []string  `json:"details,omitempty"`
		At        time.Time `json:"at"`
	}{Execution: f.Execution, Finished: f.Finished, Details: f.Details, At: at}
	if f.Of > 0 {
		rec.Progress = &progress{f.Cnt, f.Of}
	}
	b, _ := json.Marshal(rec)
	return b
}

// verifyDDI checks a DDI request's credential for controller uid: the key of uid
// itself, or the gateway's (any controller). It returns the hash to check with uid's
// own peek ("" when the gateway's was checked here).
func (s *Service) verifyDDI(ctx context.Context, uid string, c Credential) (string, error) {
	if c.Hash == "" {
		return "", taskd.Errorf(taskd.CodeUnauthenticated, "missing client key")
	}
	if c.UID == uid {
		return c.Hash, nil
	}
	if c.UID == "" || c.UID != s.cfg.DDIGateway {
		return "", taskd.Errorf(taskd.CodePermission, "the key of %s is not controller %s's: a TargetToken is the controller's own client key (ids are compared as spelled)", c.UID, uid)
	}
	return "", s.cache.VerifyKey(ctx, c.UID, c.Hash)
}

// AuthorizeDDI checks a DDI request's credential for controller uid, in full.
func (s *Service) AuthorizeDDI(ctx context.Context, uid string, c Credential) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	hash, err := s.verifyDDI(ctx, uid, c)
	if err == nil && hash != "" {
		err = s.cache.VerifyKey(ctx, uid, hash)
	}
	return err
}

// PollDDI is a DDI controller's base poll: the action it holds, shown again with its
// lease renewed (or its cancel, until acknowledged); else the next due deployment,
// claimed as a fetch claims; else none, with the time until the next is due.
func (s *Service) PollDDI(ctx context.Context, uid string, c Credential) (DDIPoll, error) {
	poll, err := s.pollDDI(ctx, uid, c)
	if err == nil {
		// Counted as fetches are: a new deployment, one shown again, none.
		switch {
		case poll.Action == nil:
			s.cfg.Metrics.Fetch("empty")
		case poll.fresh:
			s.cfg.Metrics.Fetch("task")
		default:
			s.cfg.Metrics.Fetch("redo")
		}
		s.seen(uid, nil)
	}
	return poll, err
}

func (s *Service) pollDDI(ctx context.Context, uid string, c Credential) (DDIPoll, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	hash, err := s.verifyDDI(ctx, uid, c)
	if err != nil {
		return DDIPoll{}, err
	}
	now := s.now()
	view, err := s.cache.PeekN(ctx, uid, hash, now, singlePeek)
	if err != nil {
		return DDIPoll{}, err
	}
	if view, err = s.confirm(ctx, uid, view, s.confirming(), now, singlePeek); err != nil {
		return DDIPoll{}, err
	}
	if view.Open.State != schedule.OpenNone {
		// The controller may hold an action: MySQL says which. (A poll whose hint says
		// none costs MySQL nothing; an admin's cancel makes the hint unknown.)
		if poll, ok, err := s.heldAction(ctx, uid, now); err != nil || ok {
			if ok && poll.Cancel {
				s.forgetOpen(ctx, uid) // asked again until the controller acknowledges it
			}
			return poll, err
		}
		d, err := s.store.OpenDispatch(ctx, uid)
		if err != nil {
			return DDIPoll{}, err
		}
		if d != nil && d.LeaseExpired(now) {
			if err := s.expired(ctx, d.LogID, now); err != nil {
				return DDIPoll{}, err
			}
			d = nil
		}
		if d != nil {
			if ddi, err := s.templateDDI(ctx, d.TemplateID); err != nil || !ddi {
				// The slot holds a fetch agent's dispatch: nothing for the controller
				// until it ends, at its lease's end at the latest.
				return DDIPoll{Sleep: s.ddiSleep(now, d.LeaseExpiresAt)}, err
			}
			// A DDI dispatch without its number (its claim's poll ended before it).
			return s.numbered(ctx, d, now)
		}
		// Nothing open: the hint says so from now on (if nothing changed it meanwhile),
		// and the next polls ask MySQL nothing.
		s.clearOpen(ctx, uid, view.Open)
		if view, err = s.cache.PeekN(ctx, uid, "", now, singlePeek); err != nil {
			return DDIPoll{}, err
		}
	}
	out, err := s.takeInto(ctx, uid, view, singlePeek, []int{1}, taskd.Take{Slot: 1, DDI: true}, now)
	if err == nil && len(out.tasks) == 0 && out.busy {
		// Another poll of the controller took the slot meanwhile: its action.
		if poll, ok, err := s.heldAction(ctx, uid, now); err != nil || ok {
			return poll, err
		}
	}
	if err != nil || len(out.tasks) == 0 {
		return DDIPoll{Sleep: s.ddiSleep(now, out.next)}, err
	}
	t := out.tasks[0]
	d := &taskd.Dispatch{LogID: t.LogID, UID: uid, TemplateID: t.TemplateID, Params: t.Params, LeaseExpiresAt: t.LeaseExpiresAt,
		ConfirmSeconds: t.confirmSeconds}
	if t.ActionID != 0 {
		// Numbered in the claim's transaction.
		return DDIPoll{Action: &taskd.DDIAction{ID: t.ActionID, UID: uid, Dispatch: d}, Sleep: s.actionSleep(now, d), fresh: true}, nil
	}
	// A resumed attempt (a retry): numbered now.
	poll, err := s.numbered(ctx, d, now)
	poll.fresh = !t.Redo
	return poll, err
}

// heldAction is the poll's answer when uid's controller holds an action it has not
// closed: an open one again, its lease renewed; a cancelled one as a cancel. An action
// whose dispatch ended otherwise (its lease expired, an admin expired it) is closed
// here, and ok is false: the poll goes on to the heap.
func (s *Service) heldAction(ctx context.Context, uid string, now time.Time) (DDIPoll, bool, error) {
	for range 3 {
		a, err := s.store.OpenAction(ctx, uid)
		if err != nil || a == nil {
			return DDIPoll{}, false, err
		}
		d := a.Dispatch
		switch {
		case d.Cancelled:
			return DDIPoll{Action: a, Cancel: true, Sleep: s.cfg.DDISleep}, true, nil
		case d.State == taskd.StateOpen && !d.LeaseExpired(now):
			lease, err := s.store.Progress(ctx, uid, d.LogID, nil, true, now)
			if taskd.ErrorCode(err) == taskd.CodeStaleLease {
				continue // ended meanwhile: look again
			}
			if err != nil {
				return DDIPoll{}, false, err
			}
			d.LeaseExpiresAt = lease
			return DDIPoll{Action: a, Sleep: s.actionSleep(now, d)}, true, nil
		case d.State == taskd.StateOpen:
			if err := s.expired(ctx, d.LogID, now); err != nil {
				return DDIPoll{}, false, err
			}
		}
		if _, err := s.store.CloseAction(ctx, a.ID, now); err != nil {
			return DDIPoll{}, false, err
		}
	}
	return DDIPoll{}, false, taskd.Errorf(taskd.CodeUnavailable, "the action of controller %s is changing; try again", uid)
}

// numbered is the poll's answer with dispatch d, just claimed (or found without its
// number): its action.
func (s *Service) numbered(ctx context.Context, d *taskd.Dispatch, now time.Time) (DDIPoll, error) {
	id, err := s.store.NumberAction(ctx, d.UID, d.LogID, now)
	if err != nil {
		return DDIPoll{}, err
	}
	if id > taskd.MaxActionID {
		return DDIPoll{}, taskd.Errorf(taskd.CodeInternal, "DDI action ids are used up (%d > %d)", id, taskd.MaxActionID)
	}
	return DDIPoll{Action: &taskd.DDIAction{ID: id, UID: d.UID, Dispatch: d}, Sleep: s.actionSleep(now, d)}, nil
}

// ddiSleep is how long a controller with nothing to do sleeps: until next, at most the
// configured sleep.
func (s *Service) ddiSleep(now time.Time, next *time.Time) time.Duration {
	if next == nil {
		return s.cfg.DDISleep
	}
	return min(max(next.Sub(now), time.Second), s.cfg.DDISleep)
}

// actionSleep is how long a controller holding the action of d sleeps: a third of
// what is left of its lease at most, so that its polls keep the lease while it installs
// and reboots; and a third of its confirm_seconds at most, so that the poll after its
// closing feedback comes in time to confirm its success.
func (s *Service) actionSleep(now time.Time, d *taskd.Dispatch) time.Duration {
	sleep := s.cfg.DDISleep
	if d.LeaseExpiresAt != nil {
		sleep = min(sleep, d.LeaseExpiresAt.Sub(now)/3)
	}
	if d.ConfirmSeconds > 0 {
		sleep = min(sleep, time.Duration(d.ConfirmSeconds)*time.Second/3)
	}
	return max(sleep, time.Second)
}

// templateDDI reports whether template id is a DDI template, asking MySQL once per
// template (it never changes).
func (s *Service) templateDDI(ctx context.Context, id int64) (bool, error) {
	if v, ok := s.ddiTemplates.Load(id); ok {
		return v.(bool), nil
	}
	ddi, err := s.store.TemplateDDI(ctx, id)
	if err != nil {
		return false, err
	}
	s.ddiTemplates.Store(id, ddi)
	return ddi, nil
}

// ActionOf returns controller uid's action id for a GET of its deployment or cancel:
// not_found for none of uid's, gone for one closed (or ended otherwise).
func (s *Service) ActionOf(ctx context.Context, uid string, c Credential, id int64) (*taskd.DDIAction, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	if err := s.AuthorizeDDI(ctx, uid, c); err != nil {
		return nil, err
	}
	return s.action(ctx, uid, id)
}

// action is uid's action id, live.
func (s *Service) action(ctx context.Context, uid string, id int64) (*taskd.DDIAction, error) {
	a, err := s.store.Action(ctx, id)
	if errors.Is(err, taskd.ErrNotFound) || (err == nil && !strings.EqualFold(a.UID, uid)) {
		return nil, taskd.Errorf(taskd.CodeNotFound, "action %d not found for controller %s", id, uid)
	}
	if err != nil {
		return nil, err
	}
	if !a.Closed && !a.Dispatch.Cancelled && a.Dispatch.State != taskd.StateOpen {
		// Its dispatch ended otherwise (its lease expired, an admin ended it): closed
		// for the controller too.
		if _, err := s.store.CloseAction(ctx, id, s.now()); err != nil {
			return nil, err
		}
		a.Closed = true
	}
	if a.Closed {
		return a, taskd.Errorf(taskd.CodeGone, "action %d is closed", id)
	}
	return a, nil
}

// HoldsArtifact checks that controller uid may download artifact id: its credential,
// and an action it holds naming the artifact (any other is not found, as an artifact
// that does not exist: ids are not secrets, the bytes are the deployment's).
func (s *Service) HoldsArtifact(ctx context.Context, uid string, c Credential, id int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	if err := s.AuthorizeDDI(ctx, uid, c); err != nil {
		return err
	}
	a, err := s.store.OpenAction(ctx, uid)
	if err != nil {
		return err
	}
	if a != nil && a.Dispatch.State == taskd.StateOpen && !a.Dispatch.Cancelled {
		if dep, err := taskd.ParseDeployment(a.Dispatch.Params); err == nil {
			for _, c := range dep.Chunks {
				for _, x := range c.Artifacts {
					if x.ArtifactID == id {
						return nil
					}
				}
			}
		}
	}
	return taskd.Errorf(taskd.CodeNotFound, "artifact %d is not in a deployment controller %s holds", id, uid)
}

// FeedbackDDI applies a controller's feedback on its deployment action id: proceeding
// (and the other steps) checkpoints it and renews its lease; closed completes it
// (success or none: a success; failure: a failure with the details), and rejected or
// canceled complete it as a failure; either way the action is closed. Feedback on an
// action closed or ended is gone.
func (s *Service) FeedbackDDI(ctx context.Context, uid string, c Credential, id int64, f DDIFeedback) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	a, err := s.ActionOf(ctx, uid, c, id)
	if err != nil {
		return err
	}
	now := s.now()
	// Each feedback is a MySQL write: it counts against the uid's poll limit.
	if err := s.cache.CountPoll(uid, now); err != nil {
		return err
	}
	d := a.Dispatch
	if d.Cancelled {
		return taskd.Errorf(taskd.CodeGone, "action %d was cancelled: acknowledge its cancelAction", id)
	}
	result, ends := f.ends()
	if !ends {
		_, err := s.store.Progress(ctx, uid, d.LogID, f.record(now), true, now)
		if taskd.ErrorCode(err) == taskd.CodeStaleLease {
			return taskd.Errorf(taskd.CodeGone, "action %d has ended", id)
		}
		return err
	}
	// The complete closes the action in its transaction.
	_, _, err = s.finish(ctx, uid, d.LogID, true, func(now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
		return s.store.CompleteAction(ctx, uid, d.LogID, id, result, f.record(now), now)
	})
	if taskd.ErrorCode(err) != taskd.CodeStaleLease {
		// Done, or not recorded (MySQL away: the action stays the controller's, and its
		// feedback is welcome again).
		return err
	}
	// Ended meanwhile (expired, cancelled): closed for the controller too.
	if _, err := s.store.CloseAction(ctx, id, now); err != nil {
		return err
	}
	return taskd.Errorf(taskd.CodeGone, "action %d has ended", id)
}

// CancelFeedbackDDI applies a controller's feedback on its cancel action id: closed
// (or rejected: the cancel is the admin's, done already) closes the action; the other
// steps change nothing.
func (s *Service) CancelFeedbackDDI(ctx context.Context, uid string, c Credential, id int64, f DDIFeedback) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	a, err := s.ActionOf(ctx, uid, c, id)
	if err != nil {
		return err
	}
	if !a.Dispatch.Cancelled {
		return taskd.Errorf(taskd.CodeNotFound, "action %d has no cancel", id)
	}
	if err := s.cache.CountPoll(uid, s.now()); err != nil {
		return err
	}
	if _, ends := f.ends(); !ends {
		return nil
	}
	_, err = s.store.CloseAction(ctx, id, s.now())
	return err
}

// ConfigDDI records a controller's configData as its uid's reported labels (dynamic
// groups select on them).
func (s *Service) ConfigDDI(ctx context.Context, uid string, c Credential, labels map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	if err := s.AuthorizeDDI(ctx, uid, c); err != nil {
		return err
	}
	agent := taskd.AgentInfo{Labels: labels}
	if err := agent.Check(); err != nil {
		return err
	}
	if err := s.cache.CountPoll(uid, s.now()); err != nil {
		return err
	}
	if err := s.report(ctx, uid, agent); err != nil {
		return err
	}
	s.seen(uid, &agent)
	return nil
}
