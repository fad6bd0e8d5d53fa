package logsink

import (
	"context"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/esfake"
	"github.com/taskpull/taskd/internal/testenv"
)

// BenchmarkRelay measures events/s from a filled MySQL outbox into Kafka (kfake), rows
// deleted after the acknowledgement included. Run with e.g. -benchtime=50000x.
func BenchmarkRelay(b *testing.B) {
	st := testenv.Store(b)
	topic, _, _ := names()
	_, brokers := newKafka(b, topic)
	evs := makeEvents(b.N)
	for i := 0; i < len(evs); i += 1000 {
		if err := st.AppendOutbox(context.Background(), evs[i:min(i+1000, len(evs))]...); err != nil {
			b.Fatal(err)
		}
	}
	cfg := testRelayConfig(brokers, topic)
	cfg.BatchSize = 1000
	cfg.StatsInterval = time.Hour
	r, err := NewRelay(cfg, StoreOutbox(st), testLogger(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	stop := startRelay(b, r)
	waitFor(b, 10*time.Minute, "outbox relayed", func() bool { return r.Stats().Sent >= uint64(b.N) })
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}

// BenchmarkSink measures events/s from Kafka (kfake) into the fake bulk endpoint,
// offsets committed along the way. Run with e.g. -benchtime=100000x.
func BenchmarkSink(b *testing.B) {
	topic, dlq, group := names()
	_, brokers := newKafka(b, topic, dlq)
	es := esfake.New(b)
	for i := 0; i < b.N; i += 10000 {
		produce(b, brokers, topic, makeEvents(min(10000, b.N-i)))
	}
	cfg := testConfig(brokers, es.URL(), topic, dlq, group)
	cfg.FlushBytes = 2 << 20
	cfg.FlushInterval = 50 * time.Millisecond
	cfg.CommitInterval = 200 * time.Millisecond
	s, err := NewSink(cfg, testLogger(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	stop := startSink(b, s)
	waitFor(b, 10*time.Minute, "all indexed", func() bool { return es.Count() >= b.N })
	elapsed := time.Since(start)
	b.StopTimer()
	if err := stop(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}
