package logsink

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	esdeploy "github.com/taskpull/taskd/deploy/elasticsearch"
	"github.com/taskpull/taskd/internal/esfake"
)

// The paths by which a server refuses a document: an item error in a bulk reply (as
// Elasticsearch does), or the whole request refused, storing none of it (as some
// servers speaking the API do). Every scenario of refusals runs through both, and
// must end alike.
var refusalPaths = map[string]func(*esfake.Server){
	"item errors":            func(*esfake.Server) {},
	"whole requests refused": func(es *esfake.Server) { es.RefuseWholeRequests() },
}

// One event the server cannot take (a result longer than a keyword may be) goes to the
// dead-letter topic with the server's reason, counted; every other event is indexed,
// and the offsets are committed to the end: one bad document never stalls the
// pipeline.
func TestSinkDeadLettersTheOneEventTheServerRefuses(t *testing.T) {
	t.Parallel()
	for name, path := range refusalPaths {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			topic, dlq, group := names()
			_, brokers := newKafka(t, topic, dlq)
			es := esfake.New(t)
			path(es)
			evs := makeEvents(600)
			bad := &evs[321]
			bad.Result = strings.Repeat("x", 40000)
			produce(t, brokers, topic, evs)
			sink, checker, stop := startChecked(t, testConfig(brokers, es.URL(), topic, dlq, group), es)
			waitFor(t, time.Minute, "every event indexed or dead-lettered, or a stall", func() bool {
				st := sink.Stats()
				return es.Count()+int(st.DeadLettered) >= len(evs) || st.RefusedBatches >= 50
			})
			if st := sink.Stats(); es.Count()+int(st.DeadLettered) < len(evs) {
				t.Fatalf("stalled: %d indexed, %d dead-lettered of %d; %d bulk requests refused", es.Count(), st.DeadLettered, len(evs), st.RefusedBatches)
			}
			msgs := readTopic(t, brokers, topic)
			checker.waitCommitted(t, msgs)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, id := range eventIDs(evs) {
				if id != bad.EventID {
					want = append(want, id)
				}
			}
			if got := es.IDs(); !equalStrings(got, want) {
				t.Fatalf("indexed ids: %s", diff(got, want))
			}
			checker.check(t, msgs, map[string]bool{bad.EventID: true})
			assertCommittedToEnd(t, checker, msgs)
			letters := readTopic(t, brokers, dlq)
			if len(letters) != 1 || !strings.Contains(string(letters[0].Value), bad.EventID) {
				t.Fatalf("%d dead letters, want the bad event alone", len(letters))
			}
			reason := ""
			for _, h := range letters[0].Headers {
				if h.Key == "dlq_reason" {
					reason = string(h.Value)
				}
			}
			if !strings.HasPrefix(reason, "elasticsearch status 400: ") || !strings.Contains(reason, `immense term in field="result"`) {
				t.Fatalf("dead letter reason %q", reason)
			}
			st := sink.Stats()
			if st.RefusedEvents != 1 || st.DeadLettered != 1 {
				t.Fatalf("stats %+v, want 1 refused event", st)
			}
			if wholes := name == "whole requests refused"; (st.SplitBatches > 0) != wholes {
				t.Fatalf("%d requests split", st.SplitBatches)
			}
			if r := sink.Readiness(); r.Holds(UnreadyIncompatible) {
				t.Fatalf("readiness %+v", r)
			}
		})
	}
}

// installTemplate puts the shipped index template for prefix, as an operator who
// manages it does.
func installTemplate(t *testing.T, es *esfake.Server, prefix string) {
	t.Helper()
	tpl, err := esdeploy.IndexTemplate(prefix, esdeploy.TemplateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPut, es.URL()+"/_index_template/"+prefix, strings.NewReader(string(tpl)))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("install template: %d", res.StatusCode)
	}
}

// A server that refuses every event for one reason (its date type takes only epoch
// milliseconds, under a template the operator manages) is incompatible, and no event
// is at fault: none is dead-lettered, readiness says es_incompatible with the
// server's reason, nothing is committed, and the events wait in Kafka. Once the server
// is fixed, every event is indexed.
func TestSinkWaitsForAServerThatRefusesEveryEvent(t *testing.T) {
	t.Parallel()
	for name, path := range refusalPaths {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			topic, dlq, group := names()
			_, brokers := newKafka(t, topic, dlq)
			es := esfake.New(t)
			path(es)
			es.SetDateGrammar(esfake.EpochMillisDates)
			cfg := testConfig(brokers, es.URL(), topic, dlq, group)
			cfg.SetupES = false
			installTemplate(t, es, cfg.IndexPrefix)
			evs := makeEvents(600)
			produce(t, brokers, topic, evs)
			sink, checker, stop := startChecked(t, cfg, es)
			waitFor(t, time.Minute, "the server judged incompatible, several times", func() bool {
				st := sink.Stats()
				return sink.Readiness().Holds(UnreadyIncompatible) && st.RefusedBatches >= 10 || st.DeadLettered > 0
			})
			st, r := sink.Stats(), sink.Readiness()
			if st.DeadLettered != 0 || st.RefusedEvents != 0 || es.Count() != 0 {
				t.Fatalf("stats %+v, %d indexed: want nothing dead-lettered or indexed", st, es.Count())
			}
			if d := r.Details[UnreadyIncompatible]; !strings.Contains(d, "elasticsearch status 400: ") || !strings.Contains(d, "epoch_millis") {
				t.Fatalf("readiness %+v: want the server's reason", r)
			}
			checker.mu.Lock()
			committed := len(checker.final)
			checker.mu.Unlock()
			if committed != 0 {
				t.Fatal("offsets committed while nothing was stored")
			}
			es.SetDateGrammar(esfake.ElasticsearchDates) // the server fixed
			wantStoredOnceAndCommitted(t, es, brokers, topic, evs, checker, stop)
			if n := len(readTopic(t, brokers, dlq)); n != 0 {
				t.Fatalf("%d dead letters, want none", n)
			}
			if r := sink.Readiness(); r.Holds(UnreadyIncompatible) || r.Begins[UnreadyIncompatible] == 0 {
				t.Fatalf("readiness %+v after the fix", r)
			}
		})
	}
}

// One verdict decides what the refusals of a batch mean, whichever path they came by.
func TestRefusesEvents(t *testing.T) {
	t.Parallel()
	date := func(field, value string) refusal {
		return refusal{status: 400, reason: fmt.Sprintf("field [%s] value [%s] parse err: time format is [epoch_millis]", field, value), whole: true}
	}
	immense := refusal{status: 400, reason: `document_parsing_exception: failed to parse: Document contains at least one immense term in field="result"`}
	for _, tc := range []struct {
		name     string
		stored   int
		refusals []refusal
		storing  bool
		want     bool
	}{
		{"nothing refused", 0, nil, false, false},
		{"others stored in the batch", 5, []refusal{immense}, false, false},
		{"others stored, several alike", 5, []refusal{date("at", "1"), date("at", "2")}, true, false},
		{"every document, one reason", 0, []refusal{date("at", "2026-11-26T14:56:38.773768Z"), date("due_at", "0001-01-01T00:00:00Z")}, true, true},
		{"every document, two reasons", 0, []refusal{date("at", "x"), immense}, false, false},
		{"a lone document, server storing", 0, []refusal{immense}, true, false},
		{"a lone document, nothing stored", 0, []refusal{immense}, false, true},
	} {
		if got := refusesEvents(tc.stored, tc.refusals, tc.storing); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
