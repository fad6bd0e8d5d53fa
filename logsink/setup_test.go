package logsink

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"

	"github.com/taskpull/taskd/internal/esfake"
	"github.com/taskpull/taskd/internal/testenv"
)

// logLines captures a logger's JSON lines.
type logLines struct{ buf testenv.SyncBuffer }

func (l *logLines) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(&l.buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// warnings returns the messages logged at WARN, each with its attributes.
func (l *logLines) warnings(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.buf.String()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if rec["level"] == "WARN" {
			out = append(out, rec)
		}
	}
	return out
}

// installedTemplate decodes the template the fake holds.
func installedTemplate(t *testing.T, es *esfake.Server, name string) (settings map[string]any, hasMeta bool) {
	t.Helper()
	b, ok := es.Template(name)
	if !ok {
		t.Fatalf("no template %s installed", name)
	}
	var tpl struct {
		Meta     json.RawMessage `json:"_meta"`
		Template struct {
			Settings map[string]any `json:"settings"`
			Mappings struct {
				Properties map[string]any `json:"properties"`
			} `json:"mappings"`
		} `json:"template"`
	}
	if err := json.Unmarshal(b, &tpl); err != nil {
		t.Fatal(err)
	}
	if len(tpl.Template.Mappings.Properties) == 0 {
		t.Fatalf("template without mappings: %s", b)
	}
	return tpl.Template.Settings, len(tpl.Meta) > 0
}

func runSetup(t *testing.T, es *esfake.Server, logs *logLines) setupReport {
	t.Helper()
	cfg := testConfig([]string{"127.0.0.1:1"}, es.URL(), "t", "t.dlq", "g")
	tp, err := newESTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	setup := &esSetup{api: esapi.New(tp), prefix: "ev", retentionDays: 7, log: logs.logger(),
		backoff: backoff{min: time.Millisecond, max: 10 * time.Millisecond},
		warnf:   logs.logger().Warn, now: time.Now}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := setup.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Each setup step a server does not support is skipped with one warning that says what
// the operator goes without; the rest is installed.
func TestSetupSkipsWhatTheServerDoesNotSupport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		server    func(*esfake.Server)
		policy    bool
		template  bool   // installed at all
		lifecycle bool   // the template links the policy
		meta      bool   // the template has _meta
		warn      string // in the one warning, "" for none
	}{
		{"everything supported", func(*esfake.Server) {}, true, true, true, true, ""},
		{"no ILM, 404", func(s *esfake.Server) { s.WithoutEndpoint("_ilm", 404) }, false, true, false, true, "never deleted"},
		{"no ILM, 405", func(s *esfake.Server) { s.WithoutEndpoint("_ilm", 405) }, false, true, false, true, "never deleted"},
		{"no ILM, 400 no handler", func(s *esfake.Server) { s.WithoutEndpoint("_ilm", 400) }, false, true, false, true, "never deleted"},
		{"ILM forbidden", func(s *esfake.Server) { s.WithoutEndpoint("_ilm", 403) }, false, true, false, true, "never deleted"},
		{"_meta refused", func(s *esfake.Server) { s.RefuseTemplateKeys("_meta") }, true, true, true, false, "no _meta"},
		{"lifecycle setting refused", func(s *esfake.Server) { s.RefuseTemplateKeys("index.lifecycle.name") },
			true, true, false, true, "not attached to the lifecycle policy"},
		{"OpenSearch-like", func(s *esfake.Server) {
			s.WithoutProductHeader()
			s.WithoutEndpoint("_ilm", 400)
			s.RefuseTemplateKeys("index.lifecycle.name", "_meta")
		}, false, true, false, false, ""},
		{"no composable templates", func(s *esfake.Server) { s.WithoutEndpoint("_index_template", 404) },
			true, false, false, false, "index template not installed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			es := esfake.New(t)
			tc.server(es)
			logs := &logLines{}
			rep := runSetup(t, es, logs)
			if rep.Policy != tc.policy {
				t.Errorf("policy installed %v, want %v", rep.Policy, tc.policy)
			}
			if _, ok := es.Policy("ev"); ok != tc.policy {
				t.Errorf("server holds the policy: %v", ok)
			}
			if (rep.Template != "") != tc.template {
				t.Fatalf("template %q, want installed %v; calls %v", rep.Template, tc.template, es.SetupCalls())
			}
			if tc.template {
				settings, meta := installedTemplate(t, es, "ev")
				if (settings["index.lifecycle.name"] == "ev") != tc.lifecycle || meta != tc.meta {
					t.Errorf("template settings %v, _meta %v; want lifecycle %v, _meta %v", settings, meta, tc.lifecycle, tc.meta)
				}
			}
			warns := logs.warnings(t)
			switch {
			case tc.name == "OpenSearch-like":
				// Two things lost: retention, and the template's _meta.
				if len(warns) != 2 {
					t.Fatalf("warnings %v", warns)
				}
			case tc.warn == "" && len(warns) != 0:
				t.Fatalf("warnings %v", warns)
			case tc.warn != "":
				if len(warns) != 1 || !strings.Contains(warns[0]["msg"].(string), tc.warn) {
					t.Fatalf("want one warning saying %q, got %v", tc.warn, warns)
				}
			}
		})
	}
}

// A setup step that fails transiently is tried again, with backoff, until it works.
func TestSetupRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	es := esfake.New(t)
	es.FailSetup(5, http.StatusServiceUnavailable)
	logs := &logLines{}
	rep := runSetup(t, es, logs)
	if !rep.Policy || rep.Template == "" {
		t.Fatalf("report %+v; calls %v", rep, es.SetupCalls())
	}
	// The transport retries 503 itself (3 times) before the step's own backoff.
	if n := len(es.SetupCalls()); n != 5+2 {
		t.Fatalf("%d calls, want 7: %v", n, es.SetupCalls())
	}
	for _, w := range logs.warnings(t) {
		if !strings.Contains(w["msg"].(string), "retrying") {
			t.Fatalf("unexpected warning %v", w)
		}
	}
}

// A server that lacks ILM and does not send X-Elastic-Product (OpenSearch, say) gets
// every event: setup skips what it lacks, and nothing waits on it.
func TestSinkIndexesIntoServerWithoutILM(t *testing.T) {
	t.Parallel()
	topic, dlq, group := names()
	_, brokers := newKafka(t, topic, dlq)
	es := esfake.New(t)
	es.WithoutProductHeader()
	es.WithoutEndpoint("_ilm", http.StatusNotFound)
	evs := makeEvents(500)
	produce(t, brokers, topic, evs)
	cfg := testConfig(brokers, es.URL(), topic, dlq, group)
	cfg.SetupWait = time.Hour // setup must finish by itself, or nothing is indexed
	sink, err := NewSink(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := startSink(t, sink)
	waitFor(t, time.Minute, "all indexed", func() bool { return es.Count() >= len(evs) })
	if r := sink.Readiness(); r.Holds(UnreadySetup) {
		t.Fatalf("readiness %+v after setup", r)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got, want := es.IDs(), eventIDs(evs); !equalStrings(got, want) {
		t.Fatalf("indexed ids: %s", diff(got, want))
	}
	if _, ok := es.Template(cfg.IndexPrefix); !ok {
		t.Fatal("no index template installed")
	}
}

// Setup that keeps failing transiently does not block indexing past SetupWait, and
// readiness says setup_pending until it finishes.
func TestSetupNeverBlocksIndexing(t *testing.T) {
	t.Parallel()
	topic, dlq, group := names()
	_, brokers := newKafka(t, topic, dlq)
	es := esfake.New(t)
	es.FailSetup(1<<30, http.StatusServiceUnavailable)
	evs := makeEvents(300)
	produce(t, brokers, topic, evs)
	cfg := testConfig(brokers, es.URL(), topic, dlq, group)
	cfg.SetupWait = 200 * time.Millisecond
	sink, err := NewSink(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	startSink(t, sink)
	waitFor(t, time.Minute, "all indexed while setup fails", func() bool { return es.Count() >= len(evs) })
	if r := sink.Readiness(); r.Ready || !r.Holds(UnreadySetup) {
		t.Fatalf("readiness %+v while setup fails", r)
	}
	es.FailSetup(0, 0)
	waitFor(t, time.Minute, "setup finished", func() bool { return !sink.Readiness().Holds(UnreadySetup) })
	if _, ok := es.Template(cfg.IndexPrefix); !ok {
		t.Fatal("no index template installed")
	}
}

// mappedType returns the type the installed template maps a field to ("" unmapped).
func mappedType(t *testing.T, es *esfake.Server, name, field string) string {
	t.Helper()
	b, ok := es.Template(name)
	if !ok {
		t.Fatalf("no template %s installed", name)
	}
	var tpl struct {
		Template struct {
			Mappings struct {
				Properties map[string]struct {
					Type string `json:"type"`
				} `json:"properties"`
			} `json:"mappings"`
		} `json:"template"`
	}
	if err := json.Unmarshal(b, &tpl); err != nil {
		t.Fatal(err)
	}
	return tpl.Template.Mappings.Properties[field].Type
}

// Setup proves the template: it indexes an event into a scratch index made from it,
// then deletes that index. A server that refuses the event under the full mappings
// gets the plainest mapping it takes, with one warning naming what was dropped; one
// that refuses it under every mapping keeps the full one, with one warning saying so.
func TestSetupProvesTheTemplateWithAnEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		server   func(*esfake.Server)
		template string // what the report says was installed
		atType   string // how the installed template maps "at"
		warn     string // in the one warning, "" for none
	}{
		{"Elasticsearch", func(*esfake.Server) {}, "mappings, lifecycle policy, _meta", "date", ""},
		{"epoch-millis dates, item errors", func(s *esfake.Server) { s.SetDateGrammar(esfake.EpochMillisDates) },
			"mappings (dates as keyword), lifecycle policy, _meta", "keyword", "the date type"},
		{"epoch-millis dates, whole requests refused", func(s *esfake.Server) {
			s.SetDateGrammar(esfake.EpochMillisDates)
			s.RefuseWholeRequests()
		}, "mappings (dates as keyword), lifecycle policy, _meta", "keyword", "the date type"},
		{"every event refused", func(s *esfake.Server) {
			s.SetItemFault(func(esfake.Item) int { return http.StatusBadRequest })
		}, "mappings, lifecycle policy, _meta", "date", "under every mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			es := esfake.New(t)
			tc.server(es)
			logs := &logLines{}
			rep := runSetup(t, es, logs)
			if rep.Template != tc.template {
				t.Errorf("template %q, want %q", rep.Template, tc.template)
			}
			if got := mappedType(t, es, "ev", "at"); got != tc.atType {
				t.Errorf("the installed template maps at as %q, want %q", got, tc.atType)
			}
			if idx := es.Indices(); len(idx) != 0 || es.Count() != 0 {
				t.Errorf("setup left indices %v, %d documents", idx, es.Count())
			}
			warns := logs.warnings(t)
			switch {
			case tc.warn == "" && len(warns) != 0:
				t.Fatalf("warnings %v", warns)
			case tc.warn != "":
				if len(warns) != 1 || !strings.Contains(fmt.Sprint(warns[0]), tc.warn) {
					t.Fatalf("want one warning saying %q, got %v", tc.warn, warns)
				}
			}
		})
	}
}

// A server whose date type takes only epoch milliseconds gets every event, with the
// dates mapped as keywords; none is dead-lettered.
func TestSinkIndexesIntoServerThatRefusesTheDates(t *testing.T) {
	t.Parallel()
	topic, dlq, group := names()
	_, brokers := newKafka(t, topic, dlq)
	es := esfake.New(t)
	es.SetDateGrammar(esfake.EpochMillisDates)
	evs := makeEvents(500)
	produce(t, brokers, topic, evs)
	cfg := testConfig(brokers, es.URL(), topic, dlq, group)
	cfg.SetupWait = time.Hour
	sink, checker, stop := startChecked(t, cfg, es)
	waitFor(t, time.Minute, "every event indexed or dead-lettered", func() bool {
		return es.Count()+int(sink.Stats().DeadLettered) >= len(evs)
	})
	if n := sink.Stats().DeadLettered; n != 0 {
		t.Fatalf("%d events dead-lettered", n)
	}
	wantStoredOnceAndCommitted(t, es, brokers, topic, evs, checker, stop)
	if m, _ := es.Mapping(sink.indexName(evs[0].At)); m["at"] != "keyword" {
		t.Fatalf("index mapping %v", m)
	}
}
