package logsink

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/testenv"
)

// testLogger logs warnings and errors into the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewJSONHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// newKafka starts an in-process Kafka broker with the given topics, 4 partitions each.
func newKafka(t testing.TB, topics ...string) (*kfake.Cluster, []string) {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(4, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()
}

// names returns a topic, dead-letter topic and group of the test's own.
func names() (topic, dlq, group string) {
	s := testenv.Suffix()
	return "events-" + s, "events-" + s + ".dlq", "group-" + s
}

// testConfig is a sink configuration with short intervals, so that tests move fast.
func testConfig(brokers []string, esURL, topic, dlq, group string) Config {
	c := DefaultConfig()
	c.KafkaBrokers = brokers
	c.ESURLs = []string{esURL}
	c.Topic, c.DLQTopic, c.Group = topic, dlq, group
	c.CreateTopics = false
	c.TopicPartitions = 4
	c.SessionTimeout = 6 * time.Second
	c.CommitInterval = 20 * time.Millisecond
	c.FlushInterval = 20 * time.Millisecond
	c.FlushBytes = 64 << 10
	c.RetryMin = 5 * time.Millisecond
	c.RetryMax = 100 * time.Millisecond
	c.ShutdownTimeout = 10 * time.Second
	c.LagInterval = 50 * time.Millisecond
	return c
}

func testRelayConfig(brokers []string, topic string) RelayConfig {
	return RelayConfig{
		Brokers:         brokers,
		Topic:           topic,
		BatchSize:       500,
		PollInterval:    10 * time.Millisecond,
		StandbyInterval: 20 * time.Millisecond,
		BackoffMin:      10 * time.Millisecond,
		BackoffMax:      100 * time.Millisecond,
		StatsInterval:   20 * time.Millisecond,
	}
}

var eventTypes = []taskd.EventType{taskd.EventDispatch, taskd.EventComplete, taskd.EventExpire, taskd.EventRedo}

// makeEvents returns n events with random ids, spread over two days and 50 users.
func makeEvents(n int) []taskd.Event {
	base := time.Date(2026, 11, 21, 23, 0, 0, 0, time.UTC)
	evs := make([]taskd.Event, n)
	for i := range evs {
		lat := int64(i % 900)
		evs[i] = taskd.Event{
			EventID:   uuid.NewString(),
			Type:      eventTypes[i%len(eventTypes)],
			LogID:     uuid.NewString(),
			UID:       strconv.Itoa(i % 50),
			TaskID:    fmt.Sprintf("once:%d", i%13),
			Kind:      "once",
			DueAt:     base.Add(-time.Hour),
			Attempt:   1,
			LatencyMS: &lat,
			Node:      "test",
			At:        base.Add(time.Duration(i) * time.Second), // crosses midnight
		}
	}
	return evs
}

func eventIDs(evs []taskd.Event) []string {
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.EventID
	}
	sort.Strings(ids)
	return ids
}

// produce writes events straight to the topic, as the relay would.
func produce(t testing.TB, brokers []string, topic string, evs []taskd.Event) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll, BatchSize: 1000, BatchTimeout: 5 * time.Millisecond}
	defer w.Close()
	msgs := make([]kafka.Message, len(evs))
	for i, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = kafka.Message{Key: []byte(ev.UID), Value: b}
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
}

func produceRaw(t testing.TB, brokers []string, topic string, values ...[]byte) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond}
	defer w.Close()
	for _, v := range values {
		if err := w.WriteMessages(context.Background(), kafka.Message{Value: v}); err != nil {
			t.Fatal(err)
		}
	}
}

// readTopic returns every message in the topic, all partitions, without a group.
func readTopic(t testing.TB, brokers []string, topic string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []kafka.Message
	for _, p := range parts {
		lc, err := kafka.DialLeader(ctx, "tcp", net.JoinHostPort(p.Leader.Host, strconv.Itoa(p.Leader.Port)), topic, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		last, err := lc.ReadLastOffset()
		lc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if last == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p.ID, MaxWait: 50 * time.Millisecond})
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				t.Fatalf("read %s/%d: %v", topic, p.ID, err)
			}
			out = append(out, m)
			if m.Offset >= last-1 {
				break
			}
		}
		r.Close()
	}
	return out
}

// eventIDsOf decodes the event ids of messages, failing on anything else.
func eventIDsOf(t testing.TB, msgs []kafka.Message) []string {
	t.Helper()
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		var ev taskd.Event
		if err := json.Unmarshal(m.Value, &ev); err != nil {
			t.Fatalf("message %d/%d: %v", m.Partition, m.Offset, err)
		}
		ids[i] = ev.EventID
	}
	sort.Strings(ids)
	return ids
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startSink runs a sink; stop cancels it and returns Run's error.
func startSink(t testing.TB, s *Sink) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				err = fmt.Errorf("sink did not stop")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// startRelay runs a relay; stop cancels it and waits.
func startRelay(t testing.TB, r *Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		r.Run(ctx)
		close(done)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Error("relay did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// diff describes how got differs from want, briefly.
func diff(got, want []string) string {
	g, w := map[string]bool{}, map[string]bool{}
	for _, s := range got {
		g[s] = true
	}
	for _, s := range want {
		w[s] = true
	}
	var missing, extra int
	for s := range w {
		if !g[s] {
			missing++
		}
	}
	for s := range g {
		if !w[s] {
			extra++
		}
	}
	return fmt.Sprintf("got %d, want %d: %d missing, %d unexpected", len(got), len(want), missing, extra)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
