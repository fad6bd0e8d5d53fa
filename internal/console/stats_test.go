package console

import (
	"testing"
	"time"
)

// A bucket's totals add up the tasks'; its p50 is the tasks' medians weighted by their
// completions, its p95 the highest.
func TestStatsOfABucket(t *testing.T) {
	b := statsOf(time.Time{}, []map[string]any{
		{"dispatched": 4.0, "completed": 3.0, "failed": 1.0, "latency_ms_p50": 10.0, "latency_ms_p95": 40.0},
		{"dispatched": 2.0, "completed": 1.0, "expired": 1.0, "latency_ms_p50": 30.0, "latency_ms_p95": 90.0},
		{"dispatched": 1.0, "latency_ms_p50": nil},
	})
	if b.Dispatched != 7 || b.Completed != 4 || b.Failed != 1 || b.Expired != 1 || !b.HasLatency || b.P50 != 15 || b.P95 != 90 {
		t.Fatalf("bucket %+v", b)
	}
	if niceCeil(0) != 1 || niceCeil(7) != 10 || niceCeil(12) != 20 || niceCeil(301) != 500 {
		t.Fatalf("niceCeil: %v %v %v %v", niceCeil(0), niceCeil(7), niceCeil(12), niceCeil(301))
	}
}
