package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
)

// Handler works tasks. Work is called on its own goroutine for each task, as many at
// once as the agent's concurrency; ctx is cancelled when the task's lease is lost or
// the agent stops (see context.Cause: ErrLeaseLost, ErrStopping).
type Handler interface {
	Work(ctx context.Context, t *Task) Outcome
}

// HandlerFunc is a function as a Handler.
type HandlerFunc func(ctx context.Context, t *Task) Outcome

// Work calls f.
func (f HandlerFunc) Work(ctx context.Context, t *Task) Outcome { return f(ctx, t) }

// Typed is a Handler for tasks whose params decode into P: it decodes them and calls
// f. Params that do not decode fail the task for good (FailPermanent): the server
// checked them against the template's schema, so another attempt would not decode
// them either.
func Typed[P any](f func(ctx context.Context, t *Task, params P) Outcome) Handler {
	return HandlerFunc(func(ctx context.Context, t *Task) Outcome {
		var p P
		if len(t.Params) > 0 {
			if err := json.Unmarshal(t.Params, &p); err != nil {
				return FailPermanent(fmt.Errorf("params of template %d: %w", t.TemplateID, err))
			}
		}
		return f(ctx, t, p)
	})
}

// Mux sends each task to the handler of its template. An agent running a Mux, with
// no Config.Templates, fetches only the tasks of the templates the Mux has handlers
// for. The zero Mux is ready to use; it is safe for concurrent use.
type Mux struct {
	mu       sync.RWMutex
	handlers map[int64]Handler
}

// Handle makes h the handler of the tasks of template templateID, replacing any
// handler it had.
func (m *Mux) Handle(templateID int64, h Handler) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.handlers == nil {
		m.handlers = map[int64]Handler{}
	}
	m.handlers[templateID] = h
}

// Work calls the handler of t's template; a task of a template without one fails
// for good.
func (m *Mux) Work(ctx context.Context, t *Task) Outcome {
	m.mu.RLock()
	h := m.handlers[t.TemplateID]
	m.mu.RUnlock()
	if h == nil {
		return FailPermanent(fmt.Errorf("no handler for template %d", t.TemplateID))
	}
	return h.Work(ctx, t)
}

// templates lists the templates m has handlers for, in order.
func (m *Mux) templates() []int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	ids := make([]int64, 0, len(m.handlers))
	for id := range m.handlers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
