package logcollapse

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"
)

// fakeClock moves only when told to; Advance runs the timers that came due, in order,
// outside its lock (a timer's function may ask the time).
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Time
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	i := slices.Index(t.c.timers, t)
	if i < 0 {
		return false
	}
	t.c.timers = slices.Delete(t.c.timers, i, i+1)
	t.stopped = true
	return true
}

// Advance moves the clock by d and fires the timers due by then.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			due = append(due, t)
		} else {
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

// Skip moves the clock by d without firing any timer: a timer running late.
func (c *fakeClock) Skip(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// output is a JSON log sink safe for concurrent writers.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// lines decodes every record written so far.
func (o *output) lines(t *testing.T) []map[string]any {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(o.buf.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func msgs(lines []map[string]any) []string {
	var out []string
	for _, l := range lines {
		out = append(out, fmt.Sprint(l["msg"]))
	}
	return out
}

func newLogger(clk Clock) (*slog.Logger, *Handler, *output) {
	out := &output{}
	h := New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}), Options{Clock: clk})
	return slog.New(h), h, out
}

func TestRepeatsInAWindowAreLoggedOnceThenSummarized(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	log, _, out := newLogger(clk)
	for i := 1; i <= 5; i++ {
		log.Warn("dependency unavailable", "component", "web", "attempt", i)
		clk.Advance(time.Second)
	}
	if got := msgs(out.lines(t)); !slices.Equal(got, []string{"dependency unavailable"}) {
		t.Fatalf("inside the window: %q, want the first record only", got)
	}
	clk.Advance(5 * time.Second) // 10s after the first record: the window ends
	lines := out.lines(t)
	if len(lines) != 2 {
		t.Fatalf("after the window: %d lines, want the first and one summary: %v", len(lines), lines)
	}
	first, sum := lines[0], lines[1]
	if first["attempt"] != 1.0 || first["level"] != "WARN" {
		t.Errorf("first record: %v", first)
	}
	want := map[string]any{"msg": "dependency unavailable (repeated)", "level": "WARN", "repeated": 4.0,
		"window": "10s", "component": "web", "attempt": 5.0}
	for k, v := range want {
		if sum[k] != v {
			t.Errorf("summary %s = %v, want %v (%v)", k, sum[k], v, sum)
		}
	}
	if clk.pending() != 0 {
		t.Errorf("%d timers left after the window ended", clk.pending())
	}

	// The next repeat opens a new window: logged again, not folded into the old one.
	log.Warn("dependency unavailable", "component", "web", "attempt", 6)
	if got := out.lines(t); len(got) != 3 || got[2]["attempt"] != 6.0 {
		t.Fatalf("after a window: %v", got)
	}
}

func TestASingleRecordHasNoSummary(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	log, h, out := newLogger(clk)
	log.Warn("once")
	clk.Advance(time.Minute)
	h.Close()
	if got := msgs(out.lines(t)); !slices.Equal(got, []string{"once"}) {
		t.Fatalf("got %q", got)
	}
}

func TestDistinctKeysAreNotCollapsed(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	log, h, out := newLogger(clk)
	log.Warn("a")
	log.Warn("b")
	log.Warn("a", "component", "relay")
	log.Warn("a", "component", "sink")
	log.With("component", "admin").Warn("a")
	log.Error("a") // an error is not hidden behind a warning with the same text
	log.Warn("a")  // only this one repeats
	h.Close()
	got := msgs(out.lines(t))
	want := []string{"a", "b", "a", "a", "a", "a", "a (repeated)"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestBelowWarnPassesThrough(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	log, h, out := newLogger(clk)
	for range 3 {
		log.Info("polling")
		log.Debug("detail")
	}
	h.Close()
	if n := len(out.lines(t)); n != 6 {
		t.Fatalf("%d lines, want all 6 info and debug records", n)
	}
}

// Loggers derived with With share the collapsing state, whether the component comes
// from With or from the record, and the summary keeps the derived logger's attributes.
func TestDerivedHandlersShareState(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	log, _, out := newLogger(clk)
	relayA := log.With("component", "relay")
	relayB := log.With("component", "relay", "node", "n1")
	relayA.Warn("kafka write failed", "rows", 1)
	relayB.Warn("kafka write failed", "rows", 2)
	log.Warn("kafka write failed", "component", "relay", "rows", 3)
	relayB.Warn("kafka write failed", "rows", 4)
	clk.Advance(10 * time.Second)
	lines := out.lines(t)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want one record and one summary: %v", len(lines), lines)
	}
	sum := lines[1]
	for k, v := range map[string]any{"repeated": 3.0, "component": "relay", "node": "n1", "rows": 4.0} {
		if sum[k] != v {
			t.Errorf("summary %s = %v, want %v (%v)", k, sum[k], v, sum)
		}
	}
}

// Attributes inside a group stay in it in the summary; repeated and window stay at the
// top level.
func TestGroupsAreKeptInTheSummary(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	log, _, out := newLogger(clk)
	g := log.With("component", "sink").WithGroup("req").With("path", "/v1/fetch")
	g.Warn("slow", "ms", 1)
	g.Warn("slow", "ms", 2)
	clk.Advance(10 * time.Second)
	lines := out.lines(t)
	if len(lines) != 2 {
		t.Fatalf("lines %v", lines)
	}
	sum := lines[1]
	req, _ := sum["req"].(map[string]any)
	if sum["repeated"] != 1.0 || sum["window"] != "10s" || sum["component"] != "sink" ||
		req["path"] != "/v1/fetch" || req["ms"] != 2.0 {
		t.Errorf("summary %v", sum)
	}
}

// A window whose timer has not fired yet ends when the next record of its key comes:
// the summary is written first, then the record, which opens a new window.
func TestLateTimerSummaryComesBeforeTheNextRecord(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	log, _, out := newLogger(clk)
	log.Warn("x", "n", 1)
	log.Warn("x", "n", 2)
	clk.Skip(11 * time.Second)
	log.Warn("x", "n", 3)
	clk.Advance(0) // the old timer must not write a second summary
	lines := out.lines(t)
	if got := msgs(lines); !slices.Equal(got, []string{"x", "x (repeated)", "x"}) {
		t.Fatalf("got %q", got)
	}
	if lines[1]["n"] != 2.0 || lines[2]["n"] != 3.0 {
		t.Errorf("lines %v", lines)
	}
}

// Close writes the summaries of windows still open, and afterwards nothing is held back.
func TestCloseFlushesPendingSummaries(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	log, h, out := newLogger(clk)
	relay := log.With("component", "relay")
	for range 3 {
		log.Warn("a")
		relay.Warn("b")
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	lines := out.lines(t)
	if got := msgs(lines); !slices.Equal(got, []string{"a", "b", "a (repeated)", "b (repeated)"}) {
		t.Fatalf("got %q", got)
	}
	if lines[2]["repeated"] != 2.0 || lines[3]["repeated"] != 2.0 || lines[3]["component"] != "relay" {
		t.Errorf("summaries %v", lines[2:])
	}
	clk.Advance(time.Minute) // stopped timers write nothing more
	relay.Warn("b")
	relay.Warn("b")
	if got := msgs(out.lines(t)); len(got) != 6 {
		t.Fatalf("after Close: %q, want every record written", got)
	}
}

// Under concurrent logging through many derived loggers while the clock moves, every
// record is accounted for exactly once: written, or counted in one summary.
func TestConcurrentRecordsAreCountedExactly(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	log, h, out := newLogger(clk)
	const writers, each = 8, 500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := log.With("component", "web", "writer", w)
			for i := range each {
				l.Warn("dependency unavailable", "i", i)
				if i%7 == 0 {
					l.Warn("other", "i", i)
				}
			}
		}()
	}
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		for {
			select {
			case <-stop:
				return
			default:
				clk.Advance(time.Second)
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-ticked
	h.Close()
	total := map[string]int{}
	for _, l := range out.lines(t) {
		msg := fmt.Sprint(l["msg"])
		if n, ok := l["repeated"].(float64); ok {
			total[msg[:len(msg)-len(" (repeated)")]] += int(n)
		} else {
			total[msg]++
		}
	}
	others := writers * ((each + 6) / 7)
	if total["dependency unavailable"] != writers*each || total["other"] != others {
		t.Fatalf("accounted %v, want %d and %d", total, writers*each, others)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	out := &output{}
	h := New(slog.NewJSONHandler(out, nil), Options{})
	if h.st.window != DefaultWindow || h.st.level.Level() != slog.LevelWarn {
		t.Errorf("window %s level %s", h.st.window, h.st.level.Level())
	}
	if h.Enabled(t.Context(), slog.LevelDebug) || !h.Enabled(t.Context(), slog.LevelInfo) {
		t.Error("Enabled must follow the wrapped handler")
	}
	h.Close()
}
