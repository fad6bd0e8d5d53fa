package fleet_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/fleet"
)

// writer is a Writer fake: it keeps each batch, or fails.
type writer struct {
	batches [][]taskd.Sighting
	fail    error
}

func (w *writer) SaveSightings(_ context.Context, b []taskd.Sighting) error {
	if w.fail != nil {
		return w.fail
	}
	w.batches = append(w.batches, b)
	return nil
}

// last is the last batch, by uid.
func (w *writer) last() map[string]taskd.Sighting {
	out := map[string]taskd.Sighting{}
	if len(w.batches) == 0 {
		return out
	}
	for _, s := range w.batches[len(w.batches)-1] {
		out[s.UID] = s
	}
	return out
}

// A uid polling often is written once per resolution, at once when its agent reports
// something new; a failed batch is written by the next flush; a uid quiet for Forget
// is forgotten (its agent written again on its next poll).
func TestRecorder(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	w := &writer{}
	r := fleet.New(w, clk, slog.New(slog.NewTextHandler(io.Discard, nil)),
		fleet.Config{Resolution: 30 * time.Second, Forget: 10 * time.Minute})
	ctx := context.Background()
	v1 := &taskd.AgentInfo{Version: "1", Labels: map[string]string{"a": "b"}}

	r.Seen("u", t0, v1)
	r.Seen("u", t0.Add(time.Second), v1)
	r.Seen("w", t0, nil)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := w.last()
	if len(got) != 2 || !got["u"].At.Equal(t0.Add(time.Second)) || got["u"].Agent == nil || got["w"].Agent != nil {
		t.Fatalf("first batch: %+v", got)
	}

	// Within the resolution and the same agent: nothing to write.
	r.Seen("u", t0.Add(10*time.Second), &taskd.AgentInfo{Version: "1", Labels: map[string]string{"a": "b"}})
	if err := r.Flush(ctx); err != nil || len(w.batches) != 1 {
		t.Fatalf("a flush with nothing new wrote %d batches (%v)", len(w.batches), err)
	}
	// A new agent is written at once; a poll past the resolution is written without it.
	r.Seen("u", t0.Add(11*time.Second), &taskd.AgentInfo{Version: "2"})
	r.Seen("w", t0.Add(40*time.Second), nil)
	w.fail = errors.New("mysql down")
	if err := r.Flush(ctx); err == nil {
		t.Fatal("flush: no error from a failing writer")
	}
	w.fail = nil
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got = w.last()
	if len(got) != 2 || got["u"].Agent == nil || got["u"].Agent.Version != "2" || !got["w"].At.Equal(t0.Add(40*time.Second)) || got["w"].Agent != nil {
		t.Fatalf("batch after a failed one: %+v", got)
	}

	// Quiet for Forget: forgotten, so its next poll writes its agent again.
	clk.Advance(11 * time.Minute)
	if err := r.Flush(ctx); err != nil || len(w.batches) != 2 {
		t.Fatalf("flush of quiet uids: %d batches (%v)", len(w.batches), err)
	}
	r.Seen("u", t0.Add(11*time.Minute), &taskd.AgentInfo{Version: "2"})
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.last(); len(got) != 1 || got["u"].Agent == nil {
		t.Fatalf("after forgetting: %+v", got)
	}
}
