package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpull/taskd/agent"
)

// BenchmarkCycle measures task cycles (a fetch that carries the previous task's result
// and hands out the next) against a real dispatchd in process, one uid, one task at a
// time: through the SDK, and through the hand-written loop an agent without it would
// be (the load tester's agents' loop). The SDK is not to be the bottleneck: its cycles
// are to be within 10% of the hand-written loop's (docs/PERFORMANCE.md).
func BenchmarkCycle(b *testing.B) {
	d := startDispatchd(b, nil, nil)
	tpl := d.template(nil)
	// One occurrence the uid may take again and again: unlimited, until_exhausted.
	runs := 0
	newUID := func(kind string) string {
		runs++ // a uid of its own for each run: a uid's history makes its claims dearer
		uid := fmt.Sprintf("%s%d", kind, runs)
		d.task(uid, tpl, map[string]any{"dispatch_times": -1, "mode": "until_exhausted",
			"start_time": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)})
		return d.key(uid)
	}
	b.Run("sdk", func(b *testing.B) {
		key := newUID("sdk")
		a, err := agent.New(agent.Config{URL: d.URL, Key: key, StartupJitter: -1, Logger: testLogger(b)})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var n atomic.Int64
		done := make(chan struct{})
		b.ResetTimer()
		go func() {
			a.Run(ctx, agent.HandlerFunc(func(context.Context, *agent.Task) agent.Outcome {
				if n.Add(1) == int64(b.N) {
					close(done)
				}
				return agent.Done(nil)
			}))
		}()
		<-done
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
	})
	b.Run("hand-written", func(b *testing.B) {
		key := newUID("hand")
		client := &http.Client{}
		var last string
		b.ResetTimer()
		for range b.N {
			body := map[string]any{}
			if last != "" {
				body["complete"] = map[string]any{"log_id": last, "result": "success"}
			}
			buf, _ := json.Marshal(body)
			req, _ := http.NewRequest("POST", d.URL+"/v1/fetch", bytes.NewReader(buf))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			var reply struct {
				Task *struct {
					LogID string `json:"log_id"`
				} `json:"task"`
			}
			err = json.NewDecoder(resp.Body).Decode(&reply)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || reply.Task == nil {
				b.Fatalf("fetch: %d %v %+v", resp.StatusCode, err, reply)
			}
			last = reply.Task.LogID
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
	})
}
