package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/taskpull/taskd/agent/internal/wire"
)

// completionState is where a result is on its way to the server.
type completionState int

const (
	stateQueued  completionState = iota // waiting for a fetch to carry it
	stateCarried                        // in a fetch
	stateSending                        // sent on its own (and again until it lands)
	stateAcked                          // the server has it
	stateDropped                        // refused for good, or given up at the end
)

// completion is a finished task's result.
type completion struct {
	logID    string
	taskID   string
	template int64
	body     wire.CompleteRequest // sent on its own or carried by a fetch
	state    completionState
	run      *run // nil for a result made without running the handler
	// refused says the body was mended once after the server refused it (400/413).
	refused bool
}

// completionLocked makes t's result from out (r is the run, or nil).
func (s *session) completionLocked(t *Task, r *run, out Outcome) *completion {
	c := &completion{logID: t.LogID, taskID: t.TaskID, template: t.TemplateID, run: r,
		body: wire.CompleteRequest{LogID: t.LogID, Result: out.result()}}
	detail := out.detail
	if !out.hasDetail {
		detail = out.defaultDetail()
	}
	c.body.Detail = objectJSON(detail, "detail")
	if out.kind == kindPermanent {
		c.body.Retry = new(false)
	}
	if out.kind == kindNextStage {
		c.body.NextStage = out.stage
		c.body.Context = objectJSON(out.context, "context")
		if out.delay > 0 {
			c.body.DelaySeconds = new(int64(math.Ceil(out.delay.Seconds())))
		}
	}
	if b, _ := json.Marshal(c.body); len(b) > wire.BodyLimit-1024 {
		// It would not fit in a fetch: sent with a short detail instead.
		c.body.Detail = shortDetail(fmt.Sprintf("%d bytes of result is over the server's request limit of %d", len(b), wire.BodyLimit), len(c.body.Detail))
	}
	s.finished.put(t.LogID, c)
	return c
}

// objectJSON encodes v as a JSON object for a field that takes one: nil for nil, an
// object as it is, anything else as {"value": v}, and a value that does not encode as
// an object that says so.
func objectJSON(v any, field string) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": fmt.Sprintf("agent: the %s does not encode as JSON: %v", field, err)})
		return b
	}
	switch {
	case string(b) == "null":
		return nil
	case b[0] != '{':
		b, _ = json.Marshal(map[string]json.RawMessage{"value": b})
	}
	return b
}

// shortDetail is the detail sent instead of one the server refused.
func shortDetail(reason string, size int) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"detail_refused": reason, "detail_bytes": size})
	return b
}

// enqueueLocked queues c for the next fetch to carry, or sends it on its own while
// the fetch loop is away.
func (s *session) enqueueLocked(c *completion) {
	c.state = stateQueued
	s.queue = append(s.queue, c)
	if s.away {
		s.sendQueuedAloneLocked()
		return
	}
	s.signal()
}

// sendQueuedAloneLocked sends every queued result on its own.
func (s *session) sendQueuedAloneLocked() {
	for _, c := range s.queue {
		s.sendAloneLocked(c)
	}
	s.queue = nil
}

func (s *session) sendAloneLocked(c *completion) {
	c.state = stateSending
	s.senders.Add(1)
	go func() {
		defer s.senders.Done()
		s.deliver(c)
	}()
}

// deliver sends c on its own until the server has it: again after a failure in
// transport or a 5xx (the log id makes a repeat safe), mended once after a 400 or
// 413, not again after a 409 (the task was taken away).
func (s *session) deliver(c *completion) {
	var bo backoff
	for {
		_, err := s.a.call(s.sendCtx, "/v1/complete", c.body, nil)
		if err == nil {
			s.acked(c)
			return
		}
		var fe *fatalError
		st := statusOf(err)
		switch {
		case errors.As(err, &fe):
			s.fail(err)
			s.giveUp(c, err)
			return
		case s.sendCtx.Err() != nil:
			s.giveUp(c, err)
			return
		case st == http.StatusConflict:
			s.stale(c, err)
			return
		case (st == http.StatusBadRequest || st == http.StatusRequestEntityTooLarge) && !c.refused:
			s.mend(c, err)
			continue
		}
		d, ok := s.a.retryDelay(err, &bo, reqComplete)
		if !ok {
			s.giveUp(c, err)
			return
		}
		s.log.Warn("sending a result failed; trying again", "component", "agent", "log_id", c.logID, "err", err, "wait", d)
		if !sleep(s.sendCtx, d) {
			s.giveUp(c, err)
			return
		}
	}
}

// mend changes a result the server refused: a final failure's retry, refused by a
// server older than it, is left out (the agent fails the task's retries at once
// instead: FailPermanent); a refused detail becomes a short one that says so; a
// result refused for anything else (a stage the template does not have, a context too
// large) becomes a failure that says so.
func (s *session) mend(c *completion, err error) {
	var ae *apiError
	errors.As(err, &ae)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.body.Retry != nil && ae.status == http.StatusBadRequest && strings.Contains(ae.message, "retry") {
		// Not counted as the one mend: the result is the same, less what the server
		// does not know.
		s.log.Warn("the server does not take a final failure (retry false); sending the failure without it", "component", "agent",
			"log_id", c.logID, "err", err)
		c.body.Retry = nil
		return
	}
	c.refused = true
	if strings.HasPrefix(ae.message, "detail") || ae.status == http.StatusRequestEntityTooLarge && !strings.HasPrefix(ae.message, "context") {
		s.log.Warn("the server refused a result's detail; sending a short one instead", "component", "agent",
			"log_id", c.logID, "err", err)
		c.body.Detail = shortDetail(ae.message, len(c.body.Detail))
		return
	}
	s.log.Error("the server refused a result; sending a failure that says so", "component", "agent",
		"log_id", c.logID, "err", err)
	d, _ := json.Marshal(map[string]any{"error": "agent: the server refused the result: " + ae.message,
		"refused": map[string]any{"result": c.body.Result, "next_stage": c.body.NextStage}})
	c.body = wire.CompleteRequest{LogID: c.logID, Result: "failure", Detail: d}
}

// acked notes that the server has c.
func (s *session) acked(c *completion) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.state = stateAcked
	if s.full {
		s.full = false // the server has a slot free again
		s.signal()
	}
}

// stale notes that c's task was taken away before its result came in (409).
func (s *session) stale(c *completion, err error) {
	s.mu.Lock()
	c.state = stateDropped
	s.mu.Unlock()
	s.log.Warn("result refused: the task was taken away (its lease lapsed, or an admin ended it)", "component", "agent",
		"log_id", c.logID, "task_id", c.taskID, "err", err)
	if c.run != nil {
		c.run.countLost()
	} else {
		s.m.leaseLost.Inc()
	}
	s.signal()
}

// giveUp notes that c could not be sent.
func (s *session) giveUp(c *completion, err error) {
	s.mu.Lock()
	c.state = stateDropped
	s.mu.Unlock()
	s.log.Error("result not sent: the server will hand the task out again", "component", "agent",
		"log_id", c.logID, "task_id", c.taskID, "result", c.body.Result, "err", err)
}
