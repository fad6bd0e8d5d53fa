package dispatch

import "github.com/taskpull/taskd"

// Results wakes the requests of this node waiting for a task's results (GET
// /v1/admin/tasks/{kind}/{id}/results with wait; the admin service): told after a
// commit that finished a dispatch, they look at once rather than at their next look.
type Results interface {
	// Finished tells that a dispatch of task finished.
	Finished(task taskd.TaskKey)
}

// SetResults has the service tell r of the dispatches it finishes.
func (s *Service) SetResults(r Results) { s.results = r }

// finished tells the waiters for d's task's results that d finished (an expiry, a
// complete, a settled confirmation; an unconfirmed success is no result yet).
func (s *Service) finished(d *taskd.Dispatch) {
	if s.results != nil && d != nil && d.State != taskd.StateUnconfirmed {
		s.results.Finished(d.Occurrence.Task)
	}
}
