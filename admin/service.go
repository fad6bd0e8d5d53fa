package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/queue"
)

// Service carries out admin changes.
type Service struct {
	store    *store.Store
	cache    *queue.Cache
	dispatch *dispatch.Service
	clock    clock.Clock
	log      *slog.Logger
	// compile compiles a template's schema (a test counts the calls); schemas keeps
	// what it compiled.
	compile func(json.RawMessage) (*jsonschema.Schema, error)
	schemas schemaCache
}

// NewService wires the admin service.
func NewService(st *store.Store, cache *queue.Cache, ds *dispatch.Service, clk clock.Clock, log *slog.Logger) *Service {
	return &Service{store: st, cache: cache, dispatch: ds, clock: clk, log: log.With("component", "admin"), compile: compileSchema}
}

// now is the time of a change, at the precision MySQL keeps (microseconds).
func (s *Service) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// CreateTemplate validates the schema and stores the template.
func (s *Service) CreateTemplate(ctx context.Context, name string, schema json.RawMessage) (taskd.Template, error) {
	if err := checkName(name); err != nil {
		return taskd.Template{}, err
	}
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
	t, err := s.store.CreateTemplate(ctx, ActorFrom(ctx), name, compact, s.now())
	if err != nil {
		return t, err
	}
	s.schemas.put(t.ID, sch)
	return t, nil
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
	if err := s.validateParams(ctx, t.TemplateID, t.Params); err != nil {
		return taskd.Task{}, err
	}
	t, err := s.store.CreateTask(ctx, ActorFrom(ctx), t, s.now())
	if err != nil {
		return t, err
	}
	return t, s.invalidate(ctx, t.Executor)
}

// ReplaceTask replaces a task's editable fields and invalidates the heaps of the old
// and the new executor.
func (s *Service) ReplaceTask(ctx context.Context, t taskd.Task) (taskd.Task, error) {
	if err := s.validateParams(ctx, t.TemplateID, t.Params); err != nil {
		return taskd.Task{}, err
	}
	before, after, err := s.store.ReplaceTask(ctx, ActorFrom(ctx), t, s.now())
	if err != nil {
		return after, err
	}
	if err := s.invalidate(ctx, before.Executor); err != nil {
		return after, err
	}
	return after, s.invalidate(ctx, after.Executor)
}

// DeleteTask soft-deletes a task and invalidates its executor's heaps.
func (s *Service) DeleteTask(ctx context.Context, key taskd.TaskKey) error {
	before, err := s.store.DeleteTask(ctx, ActorFrom(ctx), key, s.now())
	if err != nil {
		return err
	}
	return s.invalidate(ctx, before.Executor)
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

func (s *Service) invalidateUsers(ctx context.Context, uids []string) error {
	for _, u := range uids {
		if err := s.cache.InvalidateUser(ctx, u); err != nil {
			return err
		}
	}
	return nil
}

// AddMembers adds users to a group; their heaps are rebuilt on their next fetch.
func (s *Service) AddMembers(ctx context.Context, gid string, uids []string) error {
	added, err := s.store.AddMembers(ctx, ActorFrom(ctx), gid, uids, s.now())
	if err != nil {
		return err
	}
	return s.invalidateUsers(ctx, added)
}

// ReplaceMembers sets a group's members.
func (s *Service) ReplaceMembers(ctx context.Context, gid string, uids []string) error {
	changed, err := s.store.ReplaceMembers(ctx, ActorFrom(ctx), gid, uids, s.now())
	if err != nil {
		return err
	}
	return s.invalidateUsers(ctx, changed)
}

// DeleteTemplate soft-deletes a template that no live task uses.
func (s *Service) DeleteTemplate(ctx context.Context, id int64) error {
	if err := s.store.DeleteTemplate(ctx, ActorFrom(ctx), id, s.now()); err != nil {
		return err
	}
	s.schemas.drop(id)
	return nil
}

// IssueKey creates a client key for uid.
func (s *Service) IssueKey(ctx context.Context, uid string) (string, error) {
	return s.dispatch.IssueKey(ctx, ActorFrom(ctx), uid)
}

// RevokeKeys revokes every key of uid.
func (s *Service) RevokeKeys(ctx context.Context, uid string) (int, error) {
	return s.dispatch.RevokeKeys(ctx, ActorFrom(ctx), uid)
}

// RemoveMember removes a user from a group: the group's tasks leave the user's offer
// on its next fetch (an open dispatch may still be completed).
func (s *Service) RemoveMember(ctx context.Context, gid, uid string) error {
	removed, err := s.store.RemoveMember(ctx, ActorFrom(ctx), gid, uid, s.now())
	if err != nil {
		return err
	}
	if !removed {
		return taskd.Errorf(taskd.CodeNotFound, "user %s is not in group %s", uid, gid)
	}
	return s.cache.InvalidateUser(ctx, uid)
}
