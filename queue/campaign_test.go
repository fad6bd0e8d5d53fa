package queue

import (
	"maps"
	"strconv"
	"testing"

	"github.com/taskpull/taskd"
)

// Apply sends the campaign as one JSON argument; the window's hash holds every setting
// in the same decimal digits as when each was an argument of its own, and a restore
// takes the finished items and the progress.
func TestCampaignApplyWritesTheSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cs := NewCampaigns(e.rdb, e.keys, true)
	camp := taskd.Campaign{ID: 7, Total: 90_000_000_000, RatePerSecond: 3, Window: 500, LeaseSeconds: 30, MaxAttempts: 4,
		RetryBackoffSeconds: 5, State: taskd.CampaignRunning, Reason: `a <b> "c" é`, Offset: 40, Done: 38, Failed: 2,
		Epoch: 1_700_000_000_123, FinishedAbove: []int64{41, 43}, ErrorBudget: &taskd.ErrorBudget{MaxFailures: 10, PerSeconds: 60}}
	if err := cs.Apply(e.ctx, camp); err != nil {
		t.Fatal(err)
	}
	h := e.hgetall(e.keys.Campaign(7)[0])
	want := map[string]string{"state": "running", "reason": `a <b> "c" é`, "epoch": "1700000000123", "total": "90000000000",
		"window": "500", "ivl": "333334", "tol": strconv.Itoa(2 * 333334), "lease_ms": "30000", "max_att": "4",
		"backoff_ms": "5000", "fmax": "10", "fper_ms": "60000", "events": "1", "offset": "40", "next": "40", "done": "38",
		"failed": "2", "tat": "0"}
	if !maps.Equal(h, want) {
		t.Errorf("window hash = %v\nwant          %v", h, want)
	}
	if fin := e.smembers(e.keys.Campaign(7)[1]); len(fin) != 2 || !fin["41"] || !fin["43"] {
		t.Errorf("finished = %v, want 41 and 43", fin)
	}

	// A newer epoch's settings reach the window; its progress stays Redis's.
	camp.Epoch++
	camp.State, camp.Reason, camp.MaxAttempts, camp.ErrorBudget, camp.Done = taskd.CampaignPaused, "", 6, nil, 0
	if err := cs.Apply(e.ctx, camp); err != nil {
		t.Fatal(err)
	}
	h = e.hgetall(e.keys.Campaign(7)[0])
	want["state"], want["reason"], want["epoch"], want["max_att"], want["fmax"], want["fper_ms"] = "paused", "", "1700000000124", "6", "0", "0"
	if !maps.Equal(h, want) {
		t.Errorf("window hash after a newer epoch = %v\nwant                           %v", h, want)
	}
}
