package logsink

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/esfake"
)

func hashOf(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// commitChecker records, before every commit, the offsets about to be committed and how
// far the fake index had got, so that the test can prove afterwards that no committed
// offset passed an event that was not yet indexed.
type commitChecker struct {
	es *esfake.Server
	mu sync.Mutex
	// records of (offsets, index sequence number at that moment)
	records []commitRecord
	final   map[int]int64
}

type commitRecord struct {
	offsets map[int]int64
	seq     int64
}

func (c *commitChecker) install(s *Sink) {
	s.beforeCommit = func(offs map[int]int64) {
		seq := c.es.Seq()
		c.mu.Lock()
		c.records = append(c.records, commitRecord{offsets: clone(offs), seq: seq})
		c.mu.Unlock()
	}
	s.onCommit = func(offs map[int]int64) {
		c.mu.Lock()
		if c.final == nil {
			c.final = map[int]int64{}
		}
		for p, o := range offs {
			c.final[p] = max(c.final[p], o)
		}
		c.mu.Unlock()
	}
}

func clone(m map[int]int64) map[int]int64 {
	out := make(map[int]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// startChecked runs a sink of cfg with a commitChecker installed; stop as startSink's.
func startChecked(t *testing.T, cfg Config, es *esfake.Server) (*Sink, *commitChecker, func() error) {
	t.Helper()
	sink, err := NewSink(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	checker := &commitChecker{es: es}
	checker.install(sink)
	return sink, checker, startSink(t, sink)
}

// waitCommitted waits until the commits cover as many messages as msgs holds.
func (c *commitChecker) waitCommitted(t *testing.T, msgs []kafka.Message) {
	t.Helper()
	waitFor(t, time.Minute, "all committed", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := int64(0)
		for _, o := range c.final {
			n += o
		}
		return n >= int64(len(msgs))
	})
}

// check verifies every recorded commit against the topic's messages: every message
// below a committed offset was indexed (or is a dead letter) before the commit.
func (c *commitChecker) check(t *testing.T, msgs []kafka.Message, deadLetters map[string]bool) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.records) == 0 {
		t.Fatal("no commits recorded")
	}
	for _, rec := range c.records {
		for _, m := range msgs {
			off, ok := rec.offsets[m.Partition]
			if !ok || m.Offset >= off {
				continue
			}
			ids := eventIDsOf(t, []kafka.Message{m})
			if deadLetters[ids[0]] {
				continue
			}
			seq, ok := c.es.DocSeq(ids[0])
			if !ok || seq > rec.seq {
				t.Fatalf("offset %d committed on partition %d before event %s at offset %d was indexed",
					off, m.Partition, ids[0], m.Offset)
			}
		}
	}
}

// ES answers 429 for some items, 503 for some requests, and is down for a while:
// nothing is lost, nothing duplicated, and committed offsets never pass an event not
// yet indexed.
func TestSinkElasticsearchFaults(t *testing.T) {
	t.Parallel()
	topic, dlq, group := names()
	_, brokers := newKafka(t, topic, dlq)
	es := esfake.New(t)
	evs := makeEvents(3000)
	produce(t, brokers, topic, evs)

	// Every fifth event is throttled on its first two attempts.
	es.SetItemFault(func(it esfake.Item) int {
		if hashOf(it.ID)%5 == 0 && it.Attempt <= 2 {
			return http.StatusTooManyRequests
		}
		return 0
	})
	es.FailRequests(6, http.StatusServiceUnavailable) // more than the transport's own retries

	cfg := testConfig(brokers, es.URL(), topic, dlq, group)
	cfg.SetupES = false   // the setup's probe event would take the injected request failures
	cfg.MaxInFlight = 400 // the rest must wait in Kafka while ES is down
	sink, checker, stop := startChecked(t, cfg, es)

	waitFor(t, time.Minute, "a third indexed", func() bool { return es.Count() >= len(evs)/3 })
	es.SetDown(true)
	before := sink.Stats().Retries
	waitFor(t, time.Minute, "retries while ES is down", func() bool { return sink.Stats().Retries >= before+400 })
	if st := sink.Stats(); st.InFlight > cfg.MaxInFlight {
		t.Fatalf("%d in flight, limit %d", st.InFlight, cfg.MaxInFlight)
	}
	es.SetDown(false)

	waitFor(t, time.Minute, "all indexed", func() bool { return es.Count() >= len(evs) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	want := eventIDs(evs)
	if got := es.IDs(); !equalStrings(got, want) {
		t.Fatalf("indexed ids: %s", diff(got, want))
	}
	if d := es.Duplicates(); len(d) > 0 {
		t.Fatalf("%d duplicates", len(d))
	}
	msgs := readTopic(t, brokers, topic)
	checker.check(t, msgs, nil)
	assertCommittedToEnd(t, checker, msgs)
	if n := len(readTopic(t, brokers, dlq)); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}

// wantStoredOnceAndCommitted waits until every event of evs is indexed and every
// offset of topic committed, stops the sink, and checks that each event was stored
// exactly once, no offset passed an unstored event, and every partition was committed
// to its end.
func wantStoredOnceAndCommitted(t *testing.T, es *esfake.Server, brokers []string, topic string, evs []taskd.Event,
	checker *commitChecker, stop func() error) {
	t.Helper()
	waitFor(t, time.Minute, "all indexed", func() bool { return es.Count() >= len(evs) })
	msgs := readTopic(t, brokers, topic)
	checker.waitCommitted(t, msgs)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got, want := es.IDs(), eventIDs(evs); !equalStrings(got, want) {
		t.Fatalf("indexed ids: %s", diff(got, want))
	}
	checker.check(t, msgs, nil)
	assertCommittedToEnd(t, checker, msgs)
}

// assertCommittedToEnd checks the group committed every partition to its end.
func assertCommittedToEnd(t *testing.T, c *commitChecker, msgs []kafka.Message) {
	t.Helper()
	end := map[int]int64{}
	for _, m := range msgs {
		end[m.Partition] = max(end[m.Partition], m.Offset+1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, e := range end {
		if c.final[p] != e {
			t.Fatalf("partition %d committed to %d, its end is %d", p, c.final[p], e)
		}
	}
}

// The sink is stopped abruptly mid-stream (its Kafka reader closed under it, then a
// shutdown without time to flush), restarted each time: the index ends up with every
// event exactly once.
func TestSinkCrashAndRestart(t *testing.T) {
	t.Parallel()
	topic, dlq, group := names()
	_, brokers := newKafka(t, topic, dlq)
	es := esfake.New(t)
	evs := makeEvents(4000)
	produce(t, brokers, topic, evs)
	// Keep items in flight: some are throttled a few times.
	es.SetItemFault(func(it esfake.Item) int {
		if hashOf(it.ID)%7 == 0 && it.Attempt <= 3 {
			return http.StatusTooManyRequests
		}
		return 0
	})
	cfg := testConfig(brokers, es.URL(), topic, dlq, group)
	cfg.CommitInterval = 50 * time.Millisecond

	// First run: crash by closing the reader once a quarter is indexed.
	s1, err := NewSink(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	checker := &commitChecker{es: es}
	checker.install(s1)
	stop1 := startSink(t, s1)
	waitFor(t, time.Minute, "a quarter indexed", func() bool { return es.Count() >= len(evs)/4 })
	s1.closeReader()
	if err := stop1(); err == nil || !strings.Contains(err.Error(), "reader closed") {
		t.Fatalf("crashed sink: %v, want a closed-reader error", err)
	}
	afterCrash := es.Count()

	// Second run: cancelled without time to flush.
	cfg2 := cfg
	cfg2.ShutdownTimeout = 0
	s2, err := NewSink(cfg2, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	checker.install(s2)
	stop2 := startSink(t, s2)
	waitFor(t, time.Minute, "progress after the crash", func() bool { return es.Count() >= afterCrash+len(evs)/4 })
	if err := stop2(); err != nil {
		t.Fatal(err)
	}

	// Third run finishes the job.
	s3, err := NewSink(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	checker.install(s3)
	stop3 := startSink(t, s3)
	// Everything may be indexed already (the second run's last events were stored but
	// not confirmed); the third run is done when it has committed to the end.
	msgs := readTopic(t, brokers, topic)
	checker.waitCommitted(t, msgs)
	if err := stop3(); err != nil {
		t.Fatal(err)
	}

	want := eventIDs(evs)
	if got := es.IDs(); !equalStrings(got, want) {
		t.Fatalf("indexed ids: %s", diff(got, want))
	}
	if d := es.Duplicates(); len(d) > 0 {
		t.Fatalf("%d duplicates", len(d))
	}
	checker.check(t, msgs, nil)
	assertCommittedToEnd(t, checker, msgs)
	replayed := 0
	for _, d := range es.Docs() {
		if d.Version > 1 {
			replayed++
		}
	}
	t.Logf("%d events were indexed more than once (replays after the crashes), each as one document", replayed)
}

// Malformed messages and events Elasticsearch rejects for good go to the dead-letter
// topic with the reason; the rest flows on and offsets are committed past them.
func TestSinkDeadLetters(t *testing.T) {
	t.Parallel()
	topic, dlq, group := names()
	_, brokers := newKafka(t, topic, dlq)
	es := esfake.New(t)
	evs := makeEvents(500)
	rejected := evs[123].EventID
	es.SetItemFault(func(it esfake.Item) int {
		if it.ID == rejected {
			return http.StatusBadRequest // a mapping error: retrying cannot help
		}
		return 0
	})
	produce(t, brokers, topic, evs[:250])
	produceRaw(t, brokers, topic,
		[]byte("this is not JSON"),
		[]byte(`{"type":"dispatch","at":"2026-11-21T10:00:00Z"}`), // no event id
		[]byte(`{"event_id":"x","type":"dispatch","at":"2026-11-21T10:00:00Z"} trailing`),
	)
	produce(t, brokers, topic, evs[250:])

	cfg := testConfig(brokers, es.URL(), topic, dlq, group)
	sink, checker, stop := startChecked(t, cfg, es)
	waitFor(t, time.Minute, "valid events indexed", func() bool { return es.Count() >= len(evs)-1 })
	waitFor(t, time.Minute, "dead letters written", func() bool { return sink.Stats().DeadLettered >= 4 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	var want []string
	for _, id := range eventIDs(evs) {
		if id != rejected {
			want = append(want, id)
		}
	}
	if got := es.IDs(); !equalStrings(got, want) {
		t.Fatalf("indexed ids: %s", diff(got, want))
	}
	letters := readTopic(t, brokers, dlq)
	if len(letters) != 4 {
		t.Fatalf("%d dead letters, want 4", len(letters))
	}
	reasons := map[string]string{}
	for _, m := range letters {
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		if h["dlq_topic"] != topic || h["dlq_partition"] == "" || h["dlq_offset"] == "" {
			t.Fatalf("dead letter headers %v", h)
		}
		reasons[string(m.Value)] = h["dlq_reason"]
	}
	for value, want := range map[string]string{
		"this is not JSON": "malformed event: not a JSON event",
		`{"type":"dispatch","at":"2026-11-21T10:00:00Z"}`:                         "malformed event: event_id missing",
		`{"event_id":"x","type":"dispatch","at":"2026-11-21T10:00:00Z"} trailing`: "malformed event: trailing data",
	} {
		if !strings.HasPrefix(reasons[value], want) {
			t.Fatalf("reason for %q: %q, want %q...", value, reasons[value], want)
		}
	}
	found := false
	for value, reason := range reasons {
		if strings.Contains(value, rejected) {
			found = strings.HasPrefix(reason, "elasticsearch status 400: document_parsing_exception")
			if !found {
				t.Fatalf("reason for the rejected event: %q", reason)
			}
		}
	}
	if !found {
		t.Fatal("the event Elasticsearch rejected is not in the dead-letter topic")
	}
	msgs := readTopic(t, brokers, topic)
	dead := map[string]bool{rejected: true}
	var valid []kafka.Message
	for _, m := range msgs {
		if _, bad := reasons[string(m.Value)]; !bad || strings.Contains(string(m.Value), rejected) {
			valid = append(valid, m)
		}
	}
	checker.check(t, valid, dead)
	assertCommittedToEnd(t, checker, msgs)
}

func TestTracker(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	e := map[string]*entry{}
	for _, o := range []int64{10, 11, 12, 15} { // gaps happen (compaction, transactions)
		e[fmt.Sprint("p0-", o)] = tr.track(0, o)
	}
	e["p1-0"] = tr.track(1, 0)
	if c := tr.commitable(); len(c) != 0 {
		t.Fatalf("nothing done, commitable %v", c)
	}
	tr.done(e["p0-11"])
	tr.done(e["p0-15"])
	if c := tr.commitable(); len(c) != 0 {
		t.Fatalf("10 pending, commitable %v", c)
	}
	tr.done(e["p0-10"])
	tr.done(e["p1-0"])
	c := tr.commitable()
	if c[0] != 12 || c[1] != 1 {
		t.Fatalf("commitable %v, want p0:12 (12 pending), p1:1", c)
	}
	tr.committed(c)
	if c := tr.commitable(); len(c) != 0 {
		t.Fatalf("nothing new, commitable %v", c)
	}
	tr.done(e["p0-12"])
	if c := tr.commitable(); c[0] != 16 {
		t.Fatalf("commitable %v, want p0:16", c)
	}
	// A rebalance rewinds partition 0 to its committed offset: old entries no longer
	// count, and finishing them late is harmless.
	r := tr.track(0, 12)
	tr.done(e["p0-11"])
	if c := tr.commitable(); len(c) != 0 {
		t.Fatalf("after rewind, commitable %v", c)
	}
	tr.done(r)
	if c := tr.commitable(); c[0] != 13 {
		t.Fatalf("after rewind, commitable %v, want p0:13", c)
	}
}
