package admin

import (
	"context"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// Store is what the admin service needs from the database of record (MySQL,
// internal/store). Every change takes the actor, for the audit log written in the
// same transaction; an edit takes the versions it may be made against (If-Match) and
// checks them with the record locked.
type Store interface {
	CreateTemplate(ctx context.Context, actor string, t taskd.Template, now time.Time) (taskd.Template, error)
	UpdateTemplate(ctx context.Context, actor string, id int64, ifMatch taskd.IfMatch, edit func(*taskd.Template) error, now time.Time) (before, after taskd.Template, err error)
	GetTemplate(ctx context.Context, id int64) (taskd.Template, error)
	// GetArtifact returns artifact id (not_found for none).
	GetArtifact(ctx context.Context, id int64) (taskd.Artifact, error)
	// WindowTakers returns the executors of the live tasks of template id that take
	// its windows.
	WindowTakers(ctx context.Context, id int64) ([]string, error)
	ListTemplates(ctx context.Context) ([]taskd.Template, error)
	DeleteTemplate(ctx context.Context, actor string, id int64, ifMatch taskd.IfMatch, now time.Time) error

	CreateTask(ctx context.Context, actor string, t taskd.Task, now time.Time) (taskd.Task, error)
	GetTask(ctx context.Context, key taskd.TaskKey) (taskd.Task, error)
	ReplaceTask(ctx context.Context, actor, action string, key taskd.TaskKey, ifMatch taskd.IfMatch, edit func(taskd.Task) (taskd.Task, error), now time.Time) (before, after taskd.Task, err error)
	DeleteTask(ctx context.Context, actor string, key taskd.TaskKey, ifMatch taskd.IfMatch, now time.Time) (taskd.Task, error)
	ListTasks(ctx context.Context, f taskd.TaskFilter, after taskd.TaskKey, limit int) ([]taskd.Task, bool, error)
	OutcomeFigures(ctx context.Context, tasks []taskd.TaskKey) (map[taskd.TaskKey]taskd.OutcomeFigures, error)

	// A task's results (taskresults.go). LookupTask returns a task, deleted or not
	// (not_found for an id that never named one); NumberResults numbers up to limit of
	// its finished records that have no number yet and says how many; ResultsAfter
	// returns up to limit of its results numbered above after, in order; ResultsMarks
	// returns the marks of tasks that exist.
	LookupTask(ctx context.Context, key taskd.TaskKey) (taskd.Task, error)
	NumberResults(ctx context.Context, task taskd.TaskKey, limit int) (int, error)
	ResultsAfter(ctx context.Context, task taskd.TaskKey, after int64, limit int) ([]taskd.NumberedRecord, error)
	ResultsMarks(ctx context.Context, tasks []taskd.TaskKey) (map[taskd.TaskKey]taskd.ResultsMark, error)

	AddMembers(ctx context.Context, actor, gid string, uids []string, now time.Time) ([]string, error)
	RemoveMember(ctx context.Context, actor, gid, uid string, now time.Time) (bool, error)
	ReplaceMembers(ctx context.Context, actor, gid string, uids []string, now time.Time) ([]string, error)
	Members(ctx context.Context, gid string) ([]string, error)
	// SetGroupRule makes gid dynamic with rule, or changes its rule, and makes its
	// members the clients whose stored report matches accepts; it returns the group and
	// the uids whose membership changed.
	SetGroupRule(ctx context.Context, actor, gid string, rule taskd.DynamicGroup, matches func(taskd.AgentInfo) bool,
		now time.Time) (taskd.Group, []string, error)
	// Group reads gid (not_found when it has neither members nor a rule).
	Group(ctx context.Context, gid string) (taskd.Group, error)
	// DeleteGroup removes gid's members and rule; it returns the uids removed.
	DeleteGroup(ctx context.Context, actor, gid string, now time.Time) ([]string, error)
	Cursors(ctx context.Context, uids []string) (map[string]time.Time, error)
	UserGroups(ctx context.Context, uid string) ([]string, error)

	OfferTasks(ctx context.Context, executors []string, from, until time.Time) (schedule.TaskSet, error)
	Claims(ctx context.Context, tasks []taskd.TaskKey, from, to time.Time) (map[string]int, error)
	Events(ctx context.Context, f taskd.EventFilter, after *taskd.EventCursor, limit int) ([]taskd.StoredEvent, error)
	Stats(ctx context.Context, from, to time.Time) ([]taskd.TaskStats, error)
	Overview(ctx context.Context, now time.Time) (taskd.Overview, error)
	AuditPage(ctx context.Context, from, to time.Time, afterID int64, limit int) ([]taskd.AuditEntry, error)

	// ListDispatches returns up to limit records matching f, newest first, after the
	// cursor after (nil: from the newest).
	ListDispatches(ctx context.Context, f taskd.DispatchFilter, after *taskd.DispatchCursor, limit int) ([]taskd.DispatchRecord, error)
	// ExpireDispatch, RetryDispatch and CancelDispatch change one record (not_found for
	// an unknown log id, conflict for one whose state does not allow the change).
	ExpireDispatch(ctx context.Context, actor, logID string, now time.Time) (taskd.DispatchChange, error)
	RetryDispatch(ctx context.Context, actor, logID string, now time.Time) (taskd.DispatchChange, error)
	CancelDispatch(ctx context.Context, actor, logID string, now time.Time) (taskd.DispatchChange, error)

	// ClientSetting returns a client's settings; SetMaxInFlight sets its max_in_flight
	// (audited).
	ClientSetting(ctx context.Context, uid string) (taskd.ClientSetting, error)
	SetMaxInFlight(ctx context.Context, actor, uid string, n int, ifMatch taskd.IfMatch, now time.Time) (taskd.ClientSetting, error)

	// ListClients and ListGroups page through the fleet; VersionStats counts dispatch
	// outcomes by the agent version their uids report.
	ListClients(ctx context.Context, f taskd.ClientFilter, after string, limit int) ([]taskd.Client, bool, error)
	ListGroups(ctx context.Context, after string, limit int) ([]taskd.GroupSummary, bool, error)
	VersionStats(ctx context.Context, from, to time.Time) ([]taskd.VersionStats, error)

	// TaskRollout returns a task's rollout after the server's move due at now;
	// MoveRollout applies an admin's move (audited; conflict for a move the state does
	// not allow); ActiveRollouts lists those neither completed nor aborted.
	TaskRollout(ctx context.Context, key taskd.TaskKey, now time.Time) (taskd.RolloutView, error)
	MoveRollout(ctx context.Context, actor string, key taskd.TaskKey, move taskd.RolloutMove, ifMatch taskd.IfMatch, now time.Time) (taskd.RolloutView, error)
	ActiveRollouts(ctx context.Context) ([]taskd.RolloutSummary, error)
	// StepRollouts makes the server's moves due at now and returns the rollouts moved.
	StepRollouts(ctx context.Context, now time.Time) ([]taskd.RolloutView, error)
}

// Cache is what the admin service needs from the cache (Redis, package queue): to make
// heaps stale after a change, so that agents see it on their next fetch.
type Cache interface {
	InvalidateUser(ctx context.Context, uid string) error
	// InvalidateUsers is InvalidateUser for many users, in few round trips.
	InvalidateUsers(ctx context.Context, uids []string) error
	InvalidateGroup(ctx context.Context, gid string) error
	// ClearOpen sets uid's open-dispatch hint to none if it still says seen: after an
	// admin ended that dispatch.
	ClearOpen(ctx context.Context, uid string, seen schedule.OpenHint) error
	// ForgetOpen makes uid's open-dispatch hint unknown: the next poll asks MySQL.
	ForgetOpen(ctx context.Context, uid string) error
}

// Keys issues and revokes client keys (package clientkey).
type Keys interface {
	Issue(ctx context.Context, actor, uid string) (string, error)
	Revoke(ctx context.Context, actor, uid string) (int, error)
}
