package loadtest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskpull/taskd/agent"
)

// runSDKAgents is runAgents with the agents on the Go SDK (package agent), as a
// program built on it would run: one agent.Agent per user, for the first opts.agents
// users, each with its one fetch loop (results carried in the next fetch), until the
// deadline. The SDK keeps its requests to itself, so what the report says of them
// comes from its metrics: fetches and empty ones from its fetch histogram, and the
// fetch latency is the time from one task's end to the next task's start (the fetch
// that carried the result and brought the next task). A cycle is a task whose handler
// returned; its result is sent by the SDK, at the latest when Run ends, and counted
// done then (the checker's cross-check finds any that did not arrive).
func runSDKAgents(ctx context.Context, c *Client, d *Deployed, opts phaseOptions, ctrs *counters) phaseResult {
	start := time.Now()
	runCtx, cancel := context.WithDeadline(ctx, opts.deadline)
	defer cancel()
	metrics := agent.NewMetrics()
	recs := make([]*recorder, opts.agents)
	var wg sync.WaitGroup
	for a := range opts.agents {
		rec := newRecorder()
		recs[a] = rec
		var mu sync.Mutex // the handler's tally, read after Run returns
		rng := mrand.New(mrand.NewPCG(opts.seed, uint64(a)))
		var last time.Time // when the previous task ended
		var done []*carried
		node := c.Node(a)
		ag, err := agent.New(agent.Config{URL: node.base, Key: d.Keys[a], HTTPClient: node.hc, Metrics: metrics,
			StartupJitter: -1, PollWait: time.Second, ShutdownGrace: 10 * time.Second,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			recordErr(rec, ctrs, EndpointFetch, err)
			continue
		}
		handler := agent.HandlerFunc(func(ctx context.Context, t *agent.Task) agent.Outcome {
			began := time.Now()
			mu.Lock()
			if !last.IsZero() {
				rec.latency(EndpointFetch, began.Sub(last))
			}
			rec.received(&Assignment{LogID: t.LogID, TaskID: t.TaskID, Redo: t.Redo, Attempt: t.Attempt})
			success := rng.Float64() >= opts.failRate
			mu.Unlock()
			ctrs.requests.Add(1)
			if opts.think > 0 {
				sleep(ctx, opts.think)
			}
			mu.Lock()
			done = append(done, &carried{logID: t.LogID, success: success})
			last = time.Now()
			mu.Unlock()
			if success {
				return agent.Done(nil)
			}
			return agent.Fail(errors.New("a failure the load test reports"))
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ag.Run(runCtx, handler); err != nil {
				mu.Lock()
				recordErr(rec, ctrs, EndpointFetch, err)
				mu.Unlock()
			}
			mu.Lock()
			for _, c := range done {
				rec.completeDone(c)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	total := newRecorder()
	for _, r := range recs {
		total.merge(r)
	}
	total.fetches, total.empty = sdkFetches(metrics)
	return phaseResult{rec: total, elapsed: time.Since(start)}
}

// sdkFetches reads the fetches the SDK's agents answered, and the empty ones, from
// their metrics.
func sdkFetches(m *agent.Metrics) (fetches, empty int64) {
	reg := prometheus.NewRegistry()
	if reg.Register(m) != nil {
		return 0, 0
	}
	families, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, f := range families {
		if f.GetName() != "taskd_agent_fetch_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			n := int64(s.GetHistogram().GetSampleCount())
			for _, l := range s.GetLabel() {
				if l.GetName() != "result" {
					continue
				}
				switch l.GetValue() {
				case "task":
					fetches += n
				case "empty":
					fetches += n
					empty += n
				}
			}
		}
	}
	return fetches, empty
}
