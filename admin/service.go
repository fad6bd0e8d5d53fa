package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/targeting"
)

// Service carries out admin changes.
type Service struct {
	store Store
	cache Cache
	keys  Keys
	clock clock.Clock
	log   *slog.Logger
	// compile compiles a template's schema (a test counts the calls); schemas keeps
	// what it compiled.
	compile func(json.RawMessage) (*jsonschema.Schema, error)
	schemas schemaCache
	// ddi remembers which templates are DDI templates (a template's never changes).
	ddi sync.Map // int64 -> bool
	// catchUp is how far behind now a user's offer starts (DISPATCH_CATCH_UP); 0 gives
	// no warning about it.
	catchUp time.Duration
	// waiters are the requests of this node waiting for tasks' results (waiters.go);
	// maxWait caps a wait, roundTimeout bounds each of its reads (WithLongPoll).
	waiters      *waiters
	maxWait      time.Duration
	roundTimeout time.Duration
}

// WithCatchUp tells the service the deployment's catch-up window, so that a task
// starting before it is warned about.
func (s *Service) WithCatchUp(d time.Duration) *Service {
	s.catchUp = d
	return s
}

// WithLongPoll tells the service the bounds of a wait for a task's results: maxWait
// caps it (DISPATCH_MAX_WAIT, as a fetch's), roundTimeout bounds each of its reads of
// MySQL (DISPATCH_REQUEST_TIMEOUT: the wait itself is not dependency work). Zero keeps
// the defaults, 30 s and 5 s.
func (s *Service) WithLongPoll(maxWait, roundTimeout time.Duration) *Service {
	if maxWait > 0 {
		s.maxWait = maxWait
	}
	if roundTimeout > 0 {
		s.roundTimeout = roundTimeout
		s.waiters.bound = roundTimeout
	}
	return s
}

// NewService wires the admin service.
func NewService(st Store, cache Cache, keys Keys, clk clock.Clock, log *slog.Logger) *Service {
	log = log.With("component", "admin")
	return &Service{store: st, cache: cache, keys: keys, clock: clk, log: log, compile: compileSchema,
		waiters: newWaiters(st.ResultsMarks, resultsRecheck, 5*time.Second, log), maxWait: 30 * time.Second,
		roundTimeout: 5 * time.Second}
}

// now is the time of a change, at the precision MySQL keeps (microseconds).
func (s *Service) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// CreateTemplate validates the name and schema and stores the template (its settings
// and stages checked by the caller).
func (s *Service) CreateTemplate(ctx context.Context, t taskd.Template) (taskd.Template, error) {
	if err := checkName(t.Name); err != nil {
		return taskd.Template{}, err
	}
	schema := t.Schema
	if len(schema) == 0 {
		return taskd.Template{}, taskd.Errorf(taskd.CodeInvalid, "schema: required")
	}
	compact, err := boundSchema(schema)
	if err != nil {
		return taskd.Template{}, err
	}
	sch, err := s.compile(compact)
	if err != nil {
		return taskd.Template{}, err
	}
	t.Schema = compact
	if t.ResultSchema, err = checkResultSchema(s.compile, t.ResultSchema); err != nil {
		return taskd.Template{}, err
	}
	t, err = s.store.CreateTemplate(ctx, ActorFrom(ctx), t, s.now())
	if err != nil {
		return t, err
	}
	s.schemas.put(t.ID, sch)
	return t, nil
}

// UpdateTemplate applies edit (which checks what it sets) to template id's name,
// settings, stages and windows, if its version is one ifMatch matches. A claim reads
// its settings in its own transaction, so the next dispatch of any of its tasks has
// them; its windows are also in the heaps of its tasks' users, which a change of them
// makes stale.
func (s *Service) UpdateTemplate(ctx context.Context, id int64, ifMatch taskd.IfMatch, edit func(*taskd.Template) error) (taskd.Template, error) {
	checked := func(t *taskd.Template) error {
		if err := edit(t); err != nil {
			return err
		}
		if t.DDI && len(t.Stages) > 0 {
			return taskd.Errorf(taskd.CodeInvalid, "stages: a ddi template has none (a controller's closing feedback ends its action)")
		}
		return nil
	}
	before, after, err := s.store.UpdateTemplate(ctx, ActorFrom(ctx), id, ifMatch, checked, s.now())
	if err != nil || before.Windows.Key() == after.Windows.Key() {
		return after, err
	}
	// The heaps of the users of its tasks carry the windows: they are stale now (the
	// update noted them for the heap-change feed too, should Redis be away).
	executors, err := s.store.WindowTakers(ctx, id)
	if err != nil {
		s.log.WarnContext(ctx, "template edit committed, but its tasks' executors were not read to tell their caches (the heap-change feed does)",
			"template_id", id, "err", err)
		return after, nil
	}
	s.tellCaches(ctx, executors...)
	return after, nil
}

// templateSchema returns the compiled schema of a template, compiling it once.
func (s *Service) templateSchema(ctx context.Context, templateID int64) (*jsonschema.Schema, error) {
	if sch := s.schemas.get(templateID); sch != nil {
		return sch, nil
	}
	tpl, err := s.store.GetTemplate(ctx, templateID)
	if taskd.ErrorCode(err) == taskd.CodeNotFound {
		return nil, taskd.Errorf(taskd.CodeInvalid, "template_id: template %d does not exist", templateID)
	}
	if err != nil {
		return nil, err
	}
	sch, err := s.compile(tpl.Schema)
	if err != nil {
		return nil, fmt.Errorf("template %d: stored schema: %w", templateID, err)
	}
	s.schemas.put(templateID, sch)
	return sch, nil
}

// templateDDI reports whether template id is a DDI template, asking MySQL once per
// template (false for none: the params check says it does not exist).
func (s *Service) templateDDI(ctx context.Context, id int64) (bool, error) {
	if v, ok := s.ddi.Load(id); ok {
		return v.(bool), nil
	}
	tpl, err := s.store.GetTemplate(ctx, id)
	if taskd.ErrorCode(err) == taskd.CodeNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.ddi.Store(id, tpl.DDI)
	return tpl.DDI, nil
}

// sameAudience refuses a task's move between a DDI template and another: its
// dispatches are a DDI controller's or a fetch agent's, and one of the other kind
// must never reach the first (a parked dispatch comes back with its old template).
func (s *Service) sameAudience(ctx context.Context, from, to int64) error {
	if from == to {
		return nil
	}
	a, err := s.templateDDI(ctx, from)
	if err != nil {
		return err
	}
	b, err := s.templateDDI(ctx, to)
	if err != nil {
		return err
	}
	if a != b {
		return taskd.Errorf(taskd.CodeInvalid, "template_id: a task cannot move between a DDI template and another (its dispatches are for DDI controllers or for fetch agents); create a new task")
	}
	return nil
}

// checkDeployment checks a DDI template's task: each artifact it names by id is one
// uploaded (a deployment naming none would be shown to devices that can never get it).
func (s *Service) checkDeployment(ctx context.Context, t taskd.Task) error {
	ddi, err := s.templateDDI(ctx, t.TemplateID)
	if err != nil || !ddi {
		return err
	}
	dep, err := taskd.ParseDeployment(t.Params)
	if err != nil {
		return taskd.Errorf(taskd.CodeParamsInvalid, "params: %v", err)
	}
	for i, c := range dep.Chunks {
		for j, a := range c.Artifacts {
			if a.ArtifactID == 0 {
				continue
			}
			_, err := s.store.GetArtifact(ctx, a.ArtifactID)
			if taskd.ErrorCode(err) == taskd.CodeNotFound {
				return taskd.Errorf(taskd.CodeParamsInvalid, "params.chunks[%d].artifacts[%d].artifact_id: artifact %d does not exist (POST /v1/admin/artifacts uploads one)", i, j, a.ArtifactID)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// validateParams checks params against the task's template schema (422 otherwise).
func (s *Service) validateParams(ctx context.Context, templateID int64, params json.RawMessage) error {
	sch, err := s.templateSchema(ctx, templateID)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return taskd.Errorf(taskd.CodeInvalid, "params: %v", err)
	}
	if err := sch.Validate(inst); err != nil {
		e := taskd.Errorf(taskd.CodeParamsInvalid, "params do not match template %d", templateID)
		if ve, ok := err.(*jsonschema.ValidationError); ok {
			e.Details = ve.BasicOutput()
		}
		return e
	}
	return nil
}

// CreateTask validates and stores a task and invalidates its executor's heaps.
func (s *Service) CreateTask(ctx context.Context, t taskd.Task) (taskd.Task, error) {
	if err := t.Validate(); err != nil {
		return taskd.Task{}, err
	}
	if err := t.RolloutRefusal(nil); err != nil {
		return taskd.Task{}, err
	}
	if err := s.validateParams(ctx, t.TemplateID, t.Params); err != nil {
		return taskd.Task{}, err
	}
	if err := s.checkDeployment(ctx, t); err != nil {
		return taskd.Task{}, err
	}
	t, err := s.store.CreateTask(ctx, ActorFrom(ctx), t, s.now())
	if err != nil {
		return t, err
	}
	s.tellCaches(ctx, t.Executor)
	return t, nil
}

// The audit actions of a task's edits: a PUT replaces, a PATCH patches (the audit
// says which the admin sent: the entries of a patch were recorded as replaces).
const (
	auditTaskReplace = "task.replace"
	auditTaskPatch   = "task.patch"
)

// ReplaceTask replaces a task's editable fields with t's, if its version is one
// ifMatch matches (see UpdateTask); audited as task.replace.
func (s *Service) ReplaceTask(ctx context.Context, t taskd.Task, ifMatch taskd.IfMatch) (taskd.Task, error) {
	return s.editTask(ctx, auditTaskReplace, t.Key, ifMatch, func(taskd.Task) (taskd.Task, error) { return t, nil })
}

// UpdateTask replaces task key's editable fields with those edit makes of the task as
// it is, held locked (so that an edit made meanwhile is never overwritten with what
// was read before it), if its version is one ifMatch matches: a patch, audited as
// task.patch. The result is checked as a new task is; the heaps of the old and the
// new executor are invalidated.
func (s *Service) UpdateTask(ctx context.Context, key taskd.TaskKey, ifMatch taskd.IfMatch, edit func(taskd.Task) (taskd.Task, error)) (taskd.Task, error) {
	return s.editTask(ctx, auditTaskPatch, key, ifMatch, edit)
}

// editTask is ReplaceTask and UpdateTask, audited as action.
func (s *Service) editTask(ctx context.Context, action string, key taskd.TaskKey, ifMatch taskd.IfMatch, edit func(taskd.Task) (taskd.Task, error)) (taskd.Task, error) {
	checked := func(cur taskd.Task) (taskd.Task, error) {
		t, err := edit(cur)
		if err != nil {
			return t, err
		}
		t.Key = key
		if err := t.Validate(); err != nil {
			return t, err
		}
		if err := t.RolloutRefusal(&cur); err != nil {
			return t, err
		}
		if err := s.sameAudience(ctx, cur.TemplateID, t.TemplateID); err != nil {
			return t, err
		}
		return t, s.validateParams(ctx, t.TemplateID, t.Params)
	}
	// The params are checked in the transaction, against the template's compiled
	// schema: compiled here first, from the task as it is now, so that the check in the
	// transaction finds it cached and the transaction waits on no other connection (so
	// are the templates' DDI marks). A deployment's artifacts are checked here too.
	if cur, err := s.store.GetTask(ctx, key); err == nil {
		if t, err := edit(cur); err == nil {
			s.templateSchema(ctx, t.TemplateID)
			s.templateDDI(ctx, cur.TemplateID)
			if err := s.checkDeployment(ctx, t); err != nil {
				return t, err
			}
		}
	}
	before, after, err := s.store.ReplaceTask(ctx, ActorFrom(ctx), action, key, ifMatch, checked, s.now())
	if err != nil {
		return after, err
	}
	s.tellCaches(ctx, before.Executor, after.Executor)
	return after, nil
}

// DeleteTask soft-deletes a task and invalidates its executor's heaps.
func (s *Service) DeleteTask(ctx context.Context, key taskd.TaskKey, ifMatch taskd.IfMatch) error {
	before, err := s.store.DeleteTask(ctx, ActorFrom(ctx), key, ifMatch, s.now())
	if err != nil {
		return err
	}
	// Its open and waiting dispatches were cancelled: results, and perhaps its last.
	s.Finished(key)
	s.tellCaches(ctx, before.Executor)
	return nil
}

func (s *Service) invalidate(ctx context.Context, executor string) error {
	e, err := taskd.ParseExecutor(executor)
	if err != nil {
		return err
	}
	if e.Group {
		return s.cache.InvalidateGroup(ctx, e.ID)
	}
	return s.cache.InvalidateUser(ctx, e.ID)
}

// tellCaches tells the caches that the heaps of executors went stale, after the change
// committed. From the commit on, nothing turns the change into an error: a create told
// 503 would be sent again and create twice (its Idempotency-Key is freed by a refusal).
// The change noted itself for every node's heap-change feed in its transaction, so a
// cache that was not told here is told by the feed once Redis answers.
func (s *Service) tellCaches(ctx context.Context, executors ...string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), membershipSync)
	defer cancel()
	for _, e := range executors {
		if err := s.invalidate(ctx, e); err != nil {
			s.log.WarnContext(ctx, "change committed, but a cache was not told (the heap-change feed tells it)",
				"executor", e, "err", err)
		}
	}
}

// membershipSync bounds the telling of the caches after a membership change.
const membershipSync = 30 * time.Second

// membershipChanged tells the caches that uids' memberships changed, after the change
// committed: their heaps are rebuilt at their next fetch (a thousand users to a Redis
// round trip). From the commit on, nothing turns the change into an error: a client
// told 503 would send it again, find nothing to change, and clear nothing. The caches
// are told on a context of their own, so a client that hangs up or runs out of time
// does not cut the telling short; should Redis fail, a removed member still cannot
// take the group's tasks (a claim reads the membership in MySQL, and rebuilds the
// heap of a user it refuses), and an added member sees them when every node's
// heap-change feed applies the change noted with it, once Redis answers.
func (s *Service) membershipChanged(ctx context.Context, gid string, uids []string) {
	if len(uids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), membershipSync)
	defer cancel()
	if err := s.cache.InvalidateUsers(ctx, uids); err != nil {
		s.log.WarnContext(ctx, "membership change committed, but the caches of its users were not all told",
			"gid", gid, "users", len(uids), "err", err)
	}
}

// AddMembers adds users to a group; their heaps are rebuilt on their next fetch.
func (s *Service) AddMembers(ctx context.Context, gid string, uids []string) error {
	if err := checkMembers(gid, uids); err != nil {
		return err
	}
	added, err := s.store.AddMembers(ctx, ActorFrom(ctx), gid, uids, s.now())
	if err != nil {
		return err
	}
	s.membershipChanged(ctx, gid, added)
	return nil
}

// ReplaceMembers sets a group's members.
func (s *Service) ReplaceMembers(ctx context.Context, gid string, uids []string) error {
	if err := checkMembers(gid, uids); err != nil {
		return err
	}
	changed, err := s.store.ReplaceMembers(ctx, ActorFrom(ctx), gid, uids, s.now())
	if err != nil {
		return err
	}
	s.membershipChanged(ctx, gid, changed)
	return nil
}

// checkMembers checks a group id and user ids as a membership change gives them.
func checkMembers(gid string, uids []string) error {
	if err := bareID("gid", gid); err != nil {
		return err
	}
	for _, u := range uids {
		if err := bareID("uids", u); err != nil {
			return err
		}
	}
	return nil
}

// DeleteTemplate soft-deletes a template that no live task uses.
func (s *Service) DeleteTemplate(ctx context.Context, id int64, ifMatch taskd.IfMatch) error {
	if err := s.store.DeleteTemplate(ctx, ActorFrom(ctx), id, ifMatch, s.now()); err != nil {
		return err
	}
	s.schemas.drop(id)
	return nil
}

// IssueKey creates a client key for uid.
func (s *Service) IssueKey(ctx context.Context, uid string) (string, error) {
	return s.keys.Issue(ctx, ActorFrom(ctx), uid)
}

// RevokeKeys revokes every key of uid.
func (s *Service) RevokeKeys(ctx context.Context, uid string) (int, error) {
	return s.keys.Revoke(ctx, ActorFrom(ctx), uid)
}

// RemoveMember removes a user from a group: the group's tasks leave the user's offer
// on its next fetch (an open dispatch may still be completed).
func (s *Service) RemoveMember(ctx context.Context, gid, uid string) error {
	if err := checkMembers(gid, []string{uid}); err != nil {
		return err
	}
	removed, err := s.store.RemoveMember(ctx, ActorFrom(ctx), gid, uid, s.now())
	if err != nil {
		return err
	}
	if !removed {
		return taskd.Errorf(taskd.CodeNotFound, "user %s is not in group %s", uid, gid)
	}
	s.membershipChanged(ctx, gid, []string{uid})
	return nil
}

// SetGroupRule makes gid a dynamic group with rule, or changes its rule: its members
// become the clients whose latest report matches, and follow their reports from then
// on. A rule that matches nobody is kept, with an empty_group warning.
func (s *Service) SetGroupRule(ctx context.Context, gid string, rule taskd.DynamicGroup) (taskd.Group, []Warning, error) {
	if err := bareID("gid", gid); err != nil {
		return taskd.Group{}, nil, err
	}
	rule.Selector, rule.AgentVersion = strings.TrimSpace(rule.Selector), strings.TrimSpace(rule.AgentVersion)
	parsed, err := targeting.Parse(rule)
	if err != nil {
		return taskd.Group{}, nil, err
	}
	g, changed, err := s.store.SetGroupRule(ctx, ActorFrom(ctx), gid, rule, parsed.Matches, s.now())
	if err != nil {
		return g, nil, err
	}
	s.membershipChanged(ctx, gid, changed)
	var warnings []Warning
	if g.Members == 0 {
		warnings = append(warnings, Warning{WarnEmptyGroup, fmt.Sprintf("no client's latest report matches the rule of group %s: its tasks go to nobody until an agent that matches fetches", gid)})
	}
	return g, warnings, nil
}

// Group returns gid with its rule, if it is dynamic, and its member count.
func (s *Service) Group(ctx context.Context, gid string) (taskd.Group, error) {
	if err := bareID("gid", gid); err != nil {
		return taskd.Group{}, err
	}
	return s.store.Group(ctx, gid)
}

// DeleteGroup removes gid's members and rule; a group that active or paused tasks
// target is a conflict.
func (s *Service) DeleteGroup(ctx context.Context, gid string) error {
	if err := bareID("gid", gid); err != nil {
		return err
	}
	removed, err := s.store.DeleteGroup(ctx, ActorFrom(ctx), gid, s.now())
	if err != nil {
		return err
	}
	s.membershipChanged(ctx, gid, removed)
	return nil
}

// The reads: what the admin API shows, as the Store has it.

// ListTemplates returns every template.
func (s *Service) ListTemplates(ctx context.Context) ([]taskd.Template, error) {
	return s.store.ListTemplates(ctx)
}

// GetTemplate returns the template id, or taskd.ErrNotFound.
func (s *Service) GetTemplate(ctx context.Context, id int64) (taskd.Template, error) {
	return s.store.GetTemplate(ctx, id)
}

// GetTask returns the task key, or taskd.ErrNotFound.
func (s *Service) GetTask(ctx context.Context, key taskd.TaskKey) (taskd.Task, error) {
	return s.store.GetTask(ctx, key)
}

// TaskOutcomes returns the outcomes of tasks (taskd.Task.Outcome) that have one: a
// once task done or dead, a task ended. Users' offers start the catch-up window back;
// without one known, nothing is taken to have ended by it.
func (s *Service) TaskOutcomes(ctx context.Context, tasks []taskd.Task) (map[taskd.TaskKey]string, error) {
	keys := make([]taskd.TaskKey, len(tasks))
	for i, t := range tasks {
		keys[i] = t.Key
	}
	figures, err := s.store.OutcomeFigures(ctx, keys)
	if err != nil {
		return nil, err
	}
	floor := s.offerFloor()
	out := make(map[taskd.TaskKey]string)
	for _, t := range tasks {
		if o := t.Outcome(figures[t.Key], floor); o != "" {
			out[t.Key] = o
		}
	}
	return out, nil
}

// offerFloor is where users' offers start at the earliest, as outcomes judge it: the
// catch-up window back; without one known (zero), nothing is taken to have ended by
// it.
func (s *Service) offerFloor() time.Time {
	if s.catchUp <= 0 {
		return time.Time{}
	}
	return s.now().Add(-s.catchUp).Truncate(time.Second)
}

// ListTasks returns up to limit tasks matching f after the key after, and whether more
// follow.
func (s *Service) ListTasks(ctx context.Context, f taskd.TaskFilter, after taskd.TaskKey, limit int) ([]taskd.Task, bool, error) {
	return s.store.ListTasks(ctx, f, after, limit)
}

// Members returns the uids of group gid.
func (s *Service) Members(ctx context.Context, gid string) ([]string, error) {
	return s.store.Members(ctx, gid)
}

// Events returns up to limit events matching f, newest first, after the cursor after.
func (s *Service) Events(ctx context.Context, f taskd.EventFilter, after *taskd.EventCursor, limit int) ([]taskd.StoredEvent, error) {
	return s.store.Events(ctx, f, after, limit)
}

// Stats summarises every task with activity in [from, to).
func (s *Service) Stats(ctx context.Context, from, to time.Time) ([]taskd.TaskStats, error) {
	return s.store.Stats(ctx, from, to)
}

// Overview is the dispatch pipeline at a glance.
func (s *Service) Overview(ctx context.Context) (taskd.Overview, error) {
	return s.store.Overview(ctx, s.now())
}

// AuditPage returns up to limit audit entries in [from, to) after the entry afterID.
func (s *Service) AuditPage(ctx context.Context, from, to time.Time, afterID int64, limit int) ([]taskd.AuditEntry, error) {
	return s.store.AuditPage(ctx, from, to, afterID, limit)
}
