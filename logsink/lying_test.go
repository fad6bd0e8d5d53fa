package logsink

import (
	"fmt"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/esfake"
)

// A server that says it stored what it did not (a short item list under "errors":
// false, an item answering for another _id, an item with no status), or answers with
// more items than it was sent, gets every event it did not confirm again: nothing
// lost, nothing duplicated, and no offset committed past an event before it was stored.
func TestSinkConfirmsEveryEventItself(t *testing.T) {
	t.Parallel()
	for _, fault := range []esfake.ReplyFault{esfake.ReplyOmit, esfake.ReplyOtherID, esfake.ReplyNoStatus, esfake.ReplyTwice} {
		t.Run(fmt.Sprint(fault), func(t *testing.T) {
			t.Parallel()
			topic, dlq, group := names()
			_, brokers := newKafka(t, topic, dlq)
			es := esfake.New(t)
			evs := makeEvents(600)
			produce(t, brokers, topic, evs)
			es.SetReplyFault(func(it esfake.Item) esfake.ReplyFault {
				if hashOf(it.ID)%7 == 0 && it.Attempt <= 2 {
					return fault
				}
				return esfake.ReplyTruthfully
			})
			_, checker, stop := startChecked(t, testConfig(brokers, es.URL(), topic, dlq, group), es)
			wantStoredOnceAndCommitted(t, es, brokers, topic, evs, checker, stop)
			if n := len(readTopic(t, brokers, dlq)); n != 0 {
				t.Fatalf("%d dead letters, want none", n)
			}
		})
	}
}

// A reply that is not a bulk reply (a top-level error under 200, a proxy's HTML 502)
// stores nothing: the whole batch is sent again with backoff, the batch counts as
// refused, and readiness says es_refusing until a batch is stored again.
func TestSinkRetriesRepliesThatAreNotBulkReplies(t *testing.T) {
	t.Parallel()
	for name, fault := range map[string]esfake.RequestFault{
		"top-level error": esfake.TopLevelError, "proxy 502": esfake.ProxyBadGateway,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			topic, dlq, group := names()
			_, brokers := newKafka(t, topic, dlq)
			es := esfake.New(t)
			evs := makeEvents(400)
			produce(t, brokers, topic, evs)
			es.FailRequestsWith(1<<30, fault)
			cfg := testConfig(brokers, es.URL(), topic, dlq, group)
			cfg.SetupES = false // the setup's probe event would take the injected failures
			sink, checker, stop := startChecked(t, cfg, es)
			waitFor(t, time.Minute, "refused batches", func() bool { return sink.Stats().RefusedBatches >= 3 })
			if r := sink.Readiness(); !r.Holds(UnreadyRefused) {
				t.Fatalf("readiness %+v while every batch is refused", r)
			}
			if n := es.Count(); n != 0 {
				t.Fatalf("%d stored", n)
			}
			checker.mu.Lock()
			committed := len(checker.final)
			checker.mu.Unlock()
			if committed != 0 {
				t.Fatal("offsets committed while nothing was stored")
			}
			es.FailRequestsWith(0, esfake.RequestFault{})
			waitFor(t, time.Minute, "all indexed", func() bool { return es.Count() >= len(evs) })
			waitFor(t, time.Minute, "ready again", func() bool { return !sink.Readiness().Holds(UnreadyRefused) })
			msgs := readTopic(t, brokers, topic)
			checker.waitCommitted(t, msgs)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if got, want := es.IDs(), eventIDs(evs); !equalStrings(got, want) {
				t.Fatalf("indexed ids: %s", diff(got, want))
			}
			checker.check(t, msgs, nil)
			if r := sink.Readiness(); r.Begins[UnreadyRefused] == 0 {
				t.Fatalf("readiness %+v: es_refusing never counted", r)
			}
		})
	}
}

// BulkIndexer drops the item that fills the buffer when the flush that item triggers
// fails: it neither sends nor answers it. The lane sends it again: with a buffer that
// fills every few items and the first requests refused, every event is still stored
// once and committed.
func TestSinkResendsTheItemAFailedFlushDropped(t *testing.T) {
	t.Parallel()
	topic, dlq, group := names()
	_, brokers := newKafka(t, topic, dlq)
	es := esfake.New(t)
	evs := makeEvents(200)
	produce(t, brokers, topic, evs)
	es.FailRequestsWith(60, esfake.ProxyBadGateway)
	cfg := testConfig(brokers, es.URL(), topic, dlq, group)
	cfg.SetupES = false   // the setup's probe event would take the injected failures
	cfg.FlushBytes = 1024 // a few events
	_, checker, stop := startChecked(t, cfg, es)
	wantStoredOnceAndCommitted(t, es, brokers, topic, evs, checker, stop)
}
