package loadtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/testenv"
)

func TestPhaseSummary(t *testing.T) {
	rec := newRecorder()
	for i := 1; i <= 100; i++ {
		rec.latency(EndpointFetch, time.Duration(i)*time.Millisecond)
	}
	rec.latency(EndpointComplete, 3*time.Millisecond)
	rec.fetches, rec.empty, rec.dispatched, rec.completed = 100, 80, 20, 20
	rec.errs[errKey{EndpointFetch, 503, "unavailable"}] = 2
	rec.errs[errKey{EndpointComplete, 409, "stale_lease"}] = 5
	other := newRecorder()
	other.latency(EndpointFetch, time.Second)
	other.fetches = 1
	rec.merge(other)

	p := newPhase(phaseResult{rec: rec, elapsed: 2 * time.Second}, 1000)
	if p.Fetches != 101 || p.FetchPerSec != 50.5 || p.CyclesPerSec != 10 || p.Errors != 7 {
		t.Errorf("phase %+v", p)
	}
	if p.EmptyRatio < 0.79 || p.EmptyRatio > 0.80 {
		t.Errorf("empty ratio %v", p.EmptyRatio)
	}
	if p.PollInterval < 19.8 || p.PollInterval > 19.81 {
		t.Errorf("poll interval %v, want 1000 users / 50.5 fetch/s", p.PollInterval)
	}
	l := p.Latency[EndpointFetch]
	if l.Count != 101 || l.P50 < 49.9 || l.P50 > 51.1 || l.P99 < 98.9 || l.P99 > 100.1 || l.Max < 999 || l.Max > 1001 {
		t.Errorf("fetch latency %+v", l)
	}
	if p.ErrorsBy[0].Code != "stale_lease" || p.ErrorsBy[1].Status != 503 {
		t.Errorf("errors not by count: %+v", p.ErrorsBy)
	}

	rep := &Report{RunID: "ltx", URL: "http://127.0.0.1:1", Preset: "small", Workload: WorkloadMixed,
		Scenario: &SizeJSON{Users: 1000, Agents: 10}, Run: p,
		Check: Check(CheckInput{Tasks: map[string]Task{"once:1": {DispatchTimes: 1}},
			Dispatches: []Event{ev("dispatch", "a", "u1", "once:1", 1), ev("dispatch", "b", "u2", "once:1", 1)}})}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fetch/s", "empty-poll ratio", "cycles/s", "p99", "stale_lease", "unavailable",
		"VIOLATIONS: 1 (quota_exceeded 1)", "FAIL"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	run := back["run"].(map[string]any)
	if run["fetch_per_second"].(float64) != 50.5 || back["passed"].(bool) ||
		back["check"].(map[string]any)["violation_count"].(float64) != 1 {
		t.Errorf("json: %s", js.String())
	}
	if _, ok := run["latency_ms"].(map[string]any)["fetch"].(map[string]any)["p99"]; !ok {
		t.Errorf("json lacks fetch p99: %s", js.String())
	}
}

func TestProgressLine(t *testing.T) {
	var ctrs counters
	ctrs.requests.Store(10)
	var buf testenv.SyncBuffer
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { progressLine(&buf, false, "run", time.Millisecond, &ctrs, stop); close(done) }()
	for i := 0; i < 1000 && !strings.Contains(buf.String(), "requests"); i++ {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	<-done
	if s := buf.String(); !strings.Contains(s, "run  elapsed") || !strings.Contains(s, "errors") || !strings.Contains(s, "rate") {
		t.Errorf("progress line: %q", s)
	}
}

// Every form of the verdict comes from Verdict: the table's last line, the JSON's
// "passed" (and "check_error"), and the error the command exits with.
func TestVerdictIsTheOneSource(t *testing.T) {
	t.Parallel()
	violated := Check(CheckInput{Tasks: map[string]Task{"once:1": {DispatchTimes: 1}},
		Dispatches: []Event{ev("dispatch", "a", "u1", "once:1", 1), ev("dispatch", "b", "u2", "once:1", 1)}})
	for _, c := range []struct {
		name    string
		rep     *Report
		wantErr error // nil: passes
		table   string
	}{
		{"clean", &Report{RunID: "r1", Check: Check(CheckInput{})}, nil, "invariants hold"},
		{"not checked", &Report{RunID: "r1"}, nil, "check skipped"},
		{"violations", &Report{RunID: "r1", Check: violated}, ErrViolations, "VIOLATIONS: 1"},
		{"check error", &Report{RunID: "r1", checkErr: errors.New("list dispatch events: 500 internal")},
			ErrCheckIncomplete, "check could not be completed: list dispatch events: 500 internal"},
	} {
		err := c.rep.Verdict()
		if c.wantErr == nil && err != nil || c.wantErr != nil && !errors.Is(err, c.wantErr) {
			t.Errorf("%s: verdict %v, want %v", c.name, err, c.wantErr)
		}
		want := map[bool]string{true: "PASS", false: "FAIL"}[c.wantErr == nil]
		var table bytes.Buffer
		if err := c.rep.WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		if s := strings.TrimSpace(table.String()); !strings.HasSuffix(s, "\n"+want) || !strings.Contains(s, c.table) {
			t.Errorf("%s: table does not end in %s or lacks %q:\n%s", c.name, want, c.table, s)
		}
		var js bytes.Buffer
		if err := c.rep.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		var back struct {
			RunID      string `json:"run_id"`
			Passed     *bool  `json:"passed"`
			CheckError string `json:"check_error"`
		}
		if err := json.Unmarshal(js.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		if back.Passed == nil || *back.Passed != (c.wantErr == nil) || back.RunID != "r1" ||
			(back.CheckError != "") != errors.Is(c.wantErr, ErrCheckIncomplete) {
			t.Errorf("%s: json %s", c.name, js.String())
		}
	}
}
