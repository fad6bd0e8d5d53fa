package logsink

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/esfake"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// appendConcurrently writes evs to the outbox from several goroutines, in small
// transactions, as concurrent dispatches would.
func appendConcurrently(t *testing.T, s *store.Store, r *Relay, evs []taskd.Event, writers int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(evs); {
				n := 1 + i%5
				var batch []taskd.Event
				for k := 0; k < n && i < len(evs); k++ {
					batch = append(batch, evs[i])
					i += writers
				}
				if err := s.AppendOutbox(context.Background(), batch...); err != nil {
					errs <- err
					return
				}
				if r != nil {
					r.Notify()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func backlog(t *testing.T, s *store.Store) int64 {
	t.Helper()
	b, err := s.OutboxBacklog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return b.Rows
}

// Every event written to the outbox, by concurrent writers, ends up in the index
// exactly once; the sink creates the topics and installs the ES template and policy.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	_, brokers := newKafka(t)
	es := esfake.New(t)
	topic, dlq, group := names()

	cfg := testConfig(brokers, es.URL(), topic, dlq, group)
	cfg.CreateTopics = true
	cfg.RetentionDays = 7
	sink, err := NewSink(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	stopSink := startSink(t, sink)

	relay, err := NewRelay(testRelayConfig(brokers, topic), StoreOutbox(st), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	stopRelay := startRelay(t, relay)

	evs := makeEvents(3000)
	appendConcurrently(t, st, relay, evs, 8)

	want := eventIDs(evs)
	waitFor(t, time.Minute, "all events indexed", func() bool { return es.Count() >= len(want) })
	waitFor(t, 30*time.Second, "empty outbox", func() bool { return backlog(t, st) == 0 })
	stopRelay()
	if err := stopSink(); err != nil {
		t.Fatal(err)
	}

	if got := es.IDs(); !equalStrings(got, want) {
		t.Fatalf("indexed ids differ from the outbox's: %s", diff(got, want))
	}
	if d := es.Duplicates(); len(d) > 0 {
		t.Fatalf("%d events indexed into two indices", len(d))
	}
	byID := map[string]taskd.Event{}
	for _, ev := range evs {
		byID[ev.EventID] = ev
	}
	for _, d := range es.Docs() {
		var ev taskd.Event
		if err := json.Unmarshal(d.Source, &ev); err != nil {
			t.Fatal(err)
		}
		want := byID[d.ID]
		if ev.UID != want.UID || ev.Type != want.Type || !ev.At.Equal(want.At) {
			t.Fatalf("doc %s: %+v, want %+v", d.ID, ev, want)
		}
		if idx := "taskd-events-" + want.At.UTC().Format("2006.01.02"); d.Index != idx {
			t.Fatalf("doc %s in index %s, want %s", d.ID, d.Index, idx)
		}
	}
	if _, ok := es.Template("taskd-events"); !ok {
		t.Fatal("index template not installed")
	}
	pol, ok := es.Policy("taskd-events")
	if !ok {
		t.Fatal("lifecycle policy not installed")
	}
	var p struct {
		Policy struct {
			Phases map[string]struct {
				MinAge string `json:"min_age"`
			} `json:"phases"`
		} `json:"policy"`
	}
	if err := json.Unmarshal(pol, &p); err != nil || p.Policy.Phases["delete"].MinAge != "7d" {
		t.Fatalf("policy %s: delete phase %+v, want min_age 7d (%v)", pol, p.Policy.Phases["delete"], err)
	}
	if msgs := readTopic(t, brokers, dlq); len(msgs) != 0 {
		t.Fatalf("%d dead letters, want none", len(msgs))
	}
	if s := relay.Stats(); s.Sent < uint64(len(evs)) {
		t.Fatalf("relay stats %+v: sent fewer than %d", s, len(evs))
	}
}

// While Kafka refuses produce requests the backlog grows (and fetch/complete, which only
// write the outbox, go on); when it is back the backlog drains completely.
func TestRelayKafkaOutage(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	topic, _, _ := names()
	cluster, brokers := newKafka(t, topic)
	outage := cluster.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Produce},
		Topic: topic,
		Err:   kerr.NotEnoughReplicas,
		Count: -1,
	})

	relay, err := NewRelay(testRelayConfig(brokers, topic), StoreOutbox(st), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	startRelay(t, relay)

	evs := makeEvents(2000)
	for i := range evs {
		evs[i].At = time.Now().UTC() // for the age of the oldest row
	}
	appendConcurrently(t, st, relay, evs[:1000], 4)
	waitFor(t, 30*time.Second, "failed produce attempts", func() bool { return relay.Stats().Failures >= 3 })
	waitFor(t, 30*time.Second, "backlog of 1000 measured", func() bool { return relay.Stats().Backlog == 1000 })
	appendConcurrently(t, st, relay, evs[1000:], 4)
	waitFor(t, 30*time.Second, "backlog grown to 2000", func() bool { return relay.Stats().Backlog == 2000 })
	if s := relay.Stats(); !s.Active || s.Sent != 0 || s.OldestAge <= 0 {
		t.Fatalf("stats during the outage: %+v", s)
	}
	if n := backlog(t, st); n != 2000 {
		t.Fatalf("outbox has %d rows during the outage, want 2000", n)
	}

	outage.Remove()
	waitFor(t, time.Minute, "backlog drained", func() bool { return backlog(t, st) == 0 })
	waitFor(t, 10*time.Second, "drained backlog measured", func() bool { return relay.Stats().Backlog == 0 })

	got := eventIDsOf(t, readTopic(t, brokers, topic))
	if want := eventIDs(evs); !equalStrings(got, want) {
		t.Fatalf("events in Kafka differ from the outbox's: %s", diff(got, want))
	}
}

// countingOutbox observes how many relays hold a lease at once.
type countingOutbox struct {
	Outbox
	held, maxHeld *atomic.Int64
}

func (o countingOutbox) TryLeaseOutbox(ctx context.Context) (OutboxLease, error) {
	l, err := o.Outbox.TryLeaseOutbox(ctx)
	if l == nil || err != nil {
		return l, err
	}
	n := o.held.Add(1)
	for {
		m := o.maxHeld.Load()
		if n <= m || o.maxHeld.CompareAndSwap(m, n) {
			break
		}
	}
	return &countingLease{OutboxLease: l, held: o.held}, nil
}

type countingLease struct {
	OutboxLease
	held     *atomic.Int64
	released atomic.Bool
}

// Release counts the lease as gone before the store frees it, so the count never
// shows two holders that did not overlap.
func (l *countingLease) Release(ctx context.Context) error {
	if l.released.CompareAndSwap(false, true) {
		l.held.Add(-1)
	}
	return l.OutboxLease.Release(ctx)
}

// Two relays on one database: one relays, the other stands by, and takes over when the
// first stops; never do both read and send the outbox at once.
func TestRelaysOnOneDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.MySQLDSN(t)
	open := func() *store.Store {
		s, err := store.Open(ctx, dsn, store.OpenOptions{MaxConns: 16})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	stA, stB := open(), open()
	topic, _, _ := names()
	_, brokers := newKafka(t, topic)

	var held, maxHeld atomic.Int64
	newRelay := func(s *store.Store) *Relay {
		r, err := NewRelay(testRelayConfig(brokers, topic), countingOutbox{StoreOutbox(s), &held, &maxHeld}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ra, rb := newRelay(stA), newRelay(stB)
	stopA, stopB := startRelay(t, ra), startRelay(t, rb)
	waitFor(t, 10*time.Second, "one active relay", func() bool { return ra.Stats().Active || rb.Stats().Active })

	evs := makeEvents(4000)
	appendConcurrently(t, stA, nil, evs[:2000], 4)
	waitFor(t, 30*time.Second, "first half relayed", func() bool { return backlog(t, stA) == 0 })

	// Stop whichever is active; the other takes over.
	first, second, stopFirst := ra, rb, stopA
	if rb.Stats().Active {
		first, second, stopFirst = rb, ra, stopB
	}
	if second.Stats().Active {
		t.Fatal("both relays active")
	}
	appendConcurrently(t, stB, nil, evs[2000:3000], 4)
	stopFirst()
	appendConcurrently(t, stB, nil, evs[3000:], 4)
	waitFor(t, 30*time.Second, "second relay takes over", func() bool { return second.Stats().Active })
	waitFor(t, 30*time.Second, "everything relayed", func() bool { return backlog(t, stA) == 0 })

	if m := maxHeld.Load(); m != 1 {
		t.Fatalf("%d relays held the lease at once", m)
	}
	if first.Stats().Sent == 0 || second.Stats().Sent == 0 {
		t.Fatalf("sent: first %d, second %d; both should have relayed", first.Stats().Sent, second.Stats().Sent)
	}
	msgs := readTopic(t, brokers, topic)
	got := eventIDsOf(t, msgs)
	if want := eventIDs(evs); !equalStrings(uniq(got), want) {
		t.Fatalf("events in Kafka differ from the outbox's: %s", diff(uniq(got), want))
	}
	// A relay stopped mid-write may have sent a batch it could not delete; that, not two
	// relays at once, is the only source of repeats, and the sink absorbs them.
	t.Logf("%d messages for %d events", len(got), len(evs))
}

func uniq(sorted []string) []string {
	var out []string
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}

func TestRelayConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DISPATCH_KAFKA_BROKERS":       "k1:9092, k2:9092",
		"DISPATCH_RELAY_BATCH_SIZE":    "250",
		"DISPATCH_RELAY_POLL_INTERVAL": "50ms",
	}
	c, err := LoadRelayConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Brokers) != 2 || c.Brokers[1] != "k2:9092" || c.BatchSize != 250 ||
		c.PollInterval != 50*time.Millisecond || c.Topic != "taskd.events" || c.Compression != "snappy" {
		t.Fatalf("config %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	env["DISPATCH_RELAY_BATCH_SIZE"] = "many"
	if _, err := LoadRelayConfig(func(k string) string { return env[k] }); err == nil ||
		!contains(err.Error(), "DISPATCH_RELAY_BATCH_SIZE") {
		t.Fatalf("bad batch size: %v", err)
	}
	if err := (RelayConfig{}).Validate(); err == nil || !contains(err.Error(), "DISPATCH_KAFKA_BROKERS") {
		t.Fatalf("no brokers: %v", err)
	}
	if err := (RelayConfig{Brokers: []string{"k"}, Compression: "brotli"}).Validate(); err == nil ||
		!contains(err.Error(), "DISPATCH_KAFKA_COMPRESSION") {
		t.Fatalf("bad compression: %v", err)
	}
}
