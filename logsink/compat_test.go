package logsink

import (
	"net/http"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/esfake"
)

// The measured run: a server speaking the Elasticsearch API that does not know
// Elasticsearch's date format grammar, refuses a bulk request as a whole for a document
// it cannot take, and refuses the template keys and endpoints OpenSearch does. With the
// project's default settings every event is indexed.
func TestSinkIndexesIntoServerWithItsOwnDateGrammar(t *testing.T) {
	t.Parallel()
	topic, dlq, group := names()
	_, brokers := newKafka(t, topic, dlq)
	es := esfake.New(t)
	es.WithoutProductHeader()
	es.WithoutEndpoint("_ilm", http.StatusBadRequest)
	es.RefuseTemplateKeys("index.lifecycle.name", "_meta")
	es.SetDateGrammar(esfake.RFC3339Dates)
	es.RefuseWholeRequests()
	evs := makeEvents(3000)
	for i := range evs { // event times with microseconds, as the dispatch path writes them
		evs[i].At = evs[i].At.Add(773768 * time.Microsecond)
	}
	produce(t, brokers, topic, evs)
	cfg := testConfig(brokers, es.URL(), topic, dlq, group)
	sink, checker, stop := startChecked(t, cfg, es)
	waitFor(t, time.Minute, "every event indexed, or every batch refused", func() bool {
		return es.Count() >= len(evs) || (es.Count() == 0 && sink.Stats().RefusedBatches >= 20)
	})
	st := sink.Stats()
	t.Logf("%d events written, %d indexed, %d dead-lettered, %d bulk requests refused", len(evs), es.Count(), st.DeadLettered, st.RefusedBatches)
	if es.Count() != len(evs) {
		t.Fatalf("%d of %d events indexed", es.Count(), len(evs))
	}
	wantStoredOnceAndCommitted(t, es, brokers, topic, evs, checker, stop)
	if n := len(readTopic(t, brokers, dlq)); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}
