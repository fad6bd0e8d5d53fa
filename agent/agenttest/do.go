package agenttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskpull/taskd/agent"
)

// ErrNoResult is Do's error when the task's dispatch ended without a result the
// server took: its lease lapsed or was ended (the handler's context was cancelled
// with agent.ErrLeaseLost), or the result was refused.
var ErrNoResult = errors.New("agenttest: the task's dispatch ended without a result")

// Do runs h on one task, through a real agent (concurrency 1, no start-up wait)
// against a fresh Server, and returns the result the agent sent for the task's first
// dispatch, with the checkpoints sent before it. Nothing more is handed out after
// that dispatch ends, so h runs once. It gives up, with ctx's error, when ctx is done
// first (the agent then stops, giving its handler a second).
func Do(ctx context.Context, h agent.Handler, task Task) (Completion, error) {
	s := NewServer()
	defer s.Close()
	task.UID = ""
	id := s.Add(task)
	s.mu.Lock()
	s.stopAfter = id
	s.mu.Unlock()
	a, err := agent.New(agent.Config{URL: s.URL, Key: s.Key("agenttest"), StartupJitter: -1,
		ShutdownGrace: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return Completion{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- a.Run(runCtx, h) }()
	for {
		s.mu.Lock()
		for _, c := range s.completions {
			if c.TaskID == id {
				s.mu.Unlock()
				stop()
				<-ran
				return c, nil
			}
		}
		ended := s.stopped
		changed := s.changed
		s.mu.Unlock()
		if ended {
			stop()
			<-ran
			return Completion{}, ErrNoResult
		}
		select {
		case <-ctx.Done():
			<-ran
			return Completion{}, fmt.Errorf("agenttest: Do: %w", ctx.Err())
		case err := <-ran:
			return Completion{}, fmt.Errorf("agenttest: Do: the agent stopped: %v", err)
		case <-changed:
		case <-time.After(100 * time.Millisecond): // leases lapse without a change
			s.mu.Lock()
			s.expireAllLocked(time.Now())
			s.mu.Unlock()
		}
	}
}
