package logsink

import (
	"fmt"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/esfake"
)

// A server that says it stored what it did not (a short item list under "errors":
// false, an item answering for another _id, an item with no status) gets every event
// it did not confirm again: nothing lost, nothing duplicated, and no offset committed
// past an event before it was stored.
func TestSinkConfirmsEveryEventItself(t *testing.T) {
	t.Parallel()
	for _, fault := range []esfake.ReplyFault{esfake.ReplyOmit, esfake.ReplyOtherID, esfake.ReplyNoStatus} {
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
			sink, err := NewSink(testConfig(brokers, es.URL(), topic, dlq, group), testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			checker := &commitChecker{es: es}
			checker.install(sink)
			stop := startSink(t, sink)
			waitFor(t, time.Minute, "all indexed", func() bool { return es.Count() >= len(evs) })
			msgs := readTopic(t, brokers, topic)
			waitFor(t, time.Minute, "all committed", func() bool {
				checker.mu.Lock()
				defer checker.mu.Unlock()
				n := int64(0)
				for _, o := range checker.final {
					n += o
				}
				return n >= int64(len(msgs))
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			want := eventIDs(evs)
			if got := es.IDs(); !equalStrings(got, want) {
				t.Fatalf("indexed ids: %s", diff(got, want))
			}
			checker.check(t, msgs, nil)
			assertCommittedToEnd(t, checker, msgs)
			if n := len(readTopic(t, brokers, dlq)); n != 0 {
				t.Fatalf("%d dead letters, want none", n)
			}
		})
	}
}
