package logsink

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/esfake"
)

// The lag comes from the broker, over every partition of the topic, whether or not
// anything has read them; the age is that of the oldest unindexed message.
func TestLagProbeCountsEveryPartition(t *testing.T) {
	t.Parallel()
	topic, dlq, group := names()
	_, brokers := newKafka(t, topic, dlq)
	evs := makeEvents(400)
	produce(t, brokers, topic, evs)
	produced := time.Now()
	probe := newLagProbe(brokers, topic, group)
	defer probe.close()
	time.Sleep(50 * time.Millisecond)
	ctx := context.Background()
	now := time.Now()
	lag, err := probe.measure(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if lag.Events != int64(len(evs)) {
		t.Fatalf("lag %d, want %d (no commits yet)", lag.Events, len(evs))
	}
	if min := now.Sub(produced); lag.OldestAge < min || lag.OldestAge > time.Minute {
		t.Fatalf("oldest age %v, want at least %v", lag.OldestAge, min)
	}
	// The same offsets are not fetched again.
	stamps := len(probe.stamps)
	if stamps != 4 {
		t.Fatalf("%d partitions stamped, want 4", stamps)
	}
	later, err := probe.measure(ctx, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if later.Events != lag.Events || later.OldestAge != lag.OldestAge+time.Second {
		t.Fatalf("second measure %+v, first %+v", later, lag)
	}

	if _, err := newLagProbe(brokers, "no-such-topic-"+group, group).measure(ctx, now); err == nil {
		t.Fatal("a missing topic measured without error")
	}
}

// A sink that has read nothing yet (indexing held back by a setup that keeps failing)
// reports the whole backlog as lag, and is not ready while the oldest unindexed event
// is older than MaxEventAge; once it catches up the lag is 0 and it is ready.
func TestSinkReportsStallFromTheBroker(t *testing.T) {
	t.Parallel()
	topic, dlq, group := names()
	_, brokers := newKafka(t, topic, dlq)
	es := esfake.New(t)
	es.FailSetup(1<<30, http.StatusServiceUnavailable)
	evs := makeEvents(200)
	produce(t, brokers, topic, evs)
	cfg := testConfig(brokers, es.URL(), topic, dlq, group)
	cfg.SetupWait = time.Hour
	cfg.MaxEventAge = 100 * time.Millisecond
	sink, err := NewSink(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	startSink(t, sink)
	waitFor(t, time.Minute, "too old", func() bool { return sink.Readiness().Holds(UnreadyBehind) })
	if st := sink.Stats(); st.Lag.Events != int64(len(evs)) || st.Lag.OldestAge <= cfg.MaxEventAge || es.Count() != 0 {
		t.Fatalf("stats %+v, %d indexed", st, es.Count())
	}
	es.FailSetup(0, 0)
	waitFor(t, time.Minute, "caught up", func() bool {
		l := sink.Stats().Lag
		return l.Events == 0 && l.OldestAge == 0
	})
	waitFor(t, time.Minute, "ready", func() bool { return sink.Readiness().Ready })
	if r := sink.Readiness(); r.Begins[UnreadyBehind] != 1 || r.Begins[UnreadySetup] != 1 {
		t.Fatalf("readiness %+v", r)
	}
}
