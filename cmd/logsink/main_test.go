package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/esfake"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{}, nil, "DISPATCH_KAFKA_BROKERS"},
		{map[string]string{"DISPATCH_KAFKA_BROKERS": "k:9092"}, nil, "DISPATCH_ES_URLS"},
		{map[string]string{"DISPATCH_KAFKA_BROKERS": "k:9092", "DISPATCH_ES_URLS": "http://es:9200",
			"DISPATCH_ES_RETENTION_DAYS": "0"}, nil, "DISPATCH_ES_RETENTION_DAYS"},
		{map[string]string{"DISPATCH_KAFKA_BROKERS": "k:9092", "DISPATCH_ES_URLS": "http://es:9200",
			"DISPATCH_ES_FLUSH_INTERVAL": "soon"}, nil, "DISPATCH_ES_FLUSH_INTERVAL"},
		// The flag wins over the (valid) environment.
		{map[string]string{"DISPATCH_KAFKA_BROKERS": "k:9092", "DISPATCH_ES_URLS": "http://es:9200"},
			[]string{"-es-index-prefix", "Bad Prefix"}, "DISPATCH_ES_INDEX_PREFIX"},
		{map[string]string{}, []string{"-no-such-flag"}, "no-such-flag"},
	} {
		var stderr bytes.Buffer
		err := run(context.Background(), tc.args, env(tc.env), &bytes.Buffer{}, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %v args %v: %v, want an error naming %s", tc.env, tc.args, err, tc.want)
		}
	}
}

// run consumes events into Elasticsearch until its context ends, then returns nil.
func TestRunIndexesAndStops(t *testing.T) {
	t.Parallel()
	es := esfake.New(t)
	sink := startRun(t, "http://elastic:secret@"+strings.TrimPrefix(es.URL(), "http://"),
		[]string{"-kafka-commit-interval", "20ms", "-lag-interval", "50ms"},
		map[string]string{"DISPATCH_KAFKA_PARTITIONS": "2", "DISPATCH_ES_RETENTION_DAYS": "3"})
	var msgs []kafka.Message
	for i := range 100 {
		b, _ := json.Marshal(taskd.Event{EventID: fmt.Sprintf("ev-%03d", i), Type: taskd.EventDispatch,
			UID: "u1", At: time.Date(2026, 11, 21, 10, 0, i, 0, time.UTC)})
		msgs = append(msgs, kafka.Message{Key: []byte("u1"), Value: b})
	}
	sink.produce(t, msgs...)
	waitUntil(t, 30*time.Second, "all indexed", func() bool { return es.Count() >= 100 })
	// /metrics reports what was indexed, and no lag once the offsets are committed.
	var scrape string
	waitUntil(t, 30*time.Second, "no lag", func() bool {
		scrape = sink.metrics(t)
		return strings.Contains(scrape, "taskd_logsink_indexed_events_total 100\n") &&
			strings.Contains(scrape, "taskd_logsink_consumer_lag_events 0\n")
	})
	for _, want := range []string{"taskd_logsink_dead_lettered_events_total 0\n", "taskd_logsink_es_bulk_failures_total 0\n",
		"taskd_logsink_oldest_unindexed_event_age_seconds 0\n", "taskd_logsink_ready 1\n",
		"taskd_logsink_es_refused_events_total 0\n", "taskd_logsink_es_split_batches_total 0\n",
		`taskd_logsink_unready{reason="es_incompatible"} 0` + "\n",
		`taskd_logsink_unready{reason="es_refusing"} 0` + "\n", `taskd_logsink_unready_total{reason="setup_pending"} 1` + "\n"} {
		if !strings.Contains(scrape, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	sink.stop(t)
	logs := sink.stderr.String()
	if strings.Contains(logs, "secret") {
		t.Fatal("the Elasticsearch password reached the logs")
	}
	if !strings.Contains(logs, `"component":"logsink"`) || !strings.Contains(logs, `"msg":"stopped"`) {
		t.Fatalf("logs lack the sink's lines:\n%s", logs)
	}
}

// /readyz and /healthz answer 503 with the reasons while the server refuses every
// batch, and /metrics says the same per reason; /livez stays ok; once the server
// stores again, the sink is ready.
func TestReadyzSaysWhy(t *testing.T) {
	t.Parallel()
	es := esfake.New(t)
	es.SetDown(true)
	sink := startRun(t, es.URL(), []string{"-es-setup-wait", "0", "-es-retry-max", "200ms", "-lag-interval", "50ms"}, nil)
	b, _ := json.Marshal(taskd.Event{EventID: "ev-1", Type: taskd.EventDispatch, UID: "u1", At: time.Now()})
	sink.produce(t, kafka.Message{Value: b})

	var body string
	waitUntil(t, 30*time.Second, "not ready because of refused batches", func() bool {
		var status int
		status, body = sink.get(t, "/readyz")
		return status == http.StatusServiceUnavailable && strings.Contains(body, "es_refusing")
	})
	var got struct {
		Status  string   `json:"status"`
		Reasons []string `json:"reasons"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || got.Status != "not_ready" ||
		strings.Join(got.Reasons, ",") != "setup_pending,es_refusing" {
		t.Fatalf("/readyz said %s", body)
	}
	if status, _ := sink.get(t, "/healthz"); status != http.StatusServiceUnavailable {
		t.Fatalf("/healthz %d while not ready", status)
	}
	if status, _ := sink.get(t, "/livez"); status != http.StatusOK {
		t.Fatalf("/livez %d", status)
	}
	metrics := sink.metrics(t)
	for _, want := range []string{"taskd_logsink_ready 0\n", `taskd_logsink_unready{reason="es_refusing"} 1` + "\n",
		`taskd_logsink_unready{reason="setup_pending"} 1` + "\n", `taskd_logsink_unready_total{reason="es_refusing"} 1` + "\n",
		`taskd_logsink_unready{reason="events_too_old"} 0` + "\n"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(metrics, "taskd_logsink_es_refused_batches_total ") ||
		strings.Contains(metrics, "taskd_logsink_es_refused_batches_total 0\n") {
		t.Error("/metrics counts no refused batch")
	}
	es.SetDown(false)
	waitUntil(t, 30*time.Second, "ready", func() bool { status, _ := sink.get(t, "/readyz"); return status == http.StatusOK })
	if es.Count() != 1 {
		t.Fatalf("%d indexed", es.Count())
	}
	sink.stop(t)
}

// A server that refuses every event for one reason (the measured one: it does not know
// Elasticsearch's date formats, and the operator's template names one) makes /readyz
// say es_incompatible with the server's words; nothing is dead-lettered.
func TestReadyzSaysWhyTheServerRefusesEveryEvent(t *testing.T) {
	t.Parallel()
	es := esfake.New(t)
	es.SetDateGrammar(esfake.RFC3339Dates)
	es.RefuseWholeRequests()
	req, _ := http.NewRequest(http.MethodPut, es.URL()+"/_index_template/taskd-events", strings.NewReader(
		`{"index_patterns":["taskd-events-*"],"template":{"mappings":{"properties":{"at":{"type":"date","format":"strict_date_optional_time||epoch_millis"}}}}}`))
	req.Header.Set("Content-Type", "application/json")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("template: %v %v", res, err)
	}
	sink := startRun(t, es.URL(), []string{"-es-setup=false", "-es-retry-max", "200ms", "-lag-interval", "50ms"}, nil)
	var msgs []kafka.Message
	for i := range 50 {
		b, _ := json.Marshal(taskd.Event{EventID: fmt.Sprintf("ev-%03d", i), Type: taskd.EventDispatch, UID: "u1",
			At: time.Date(2026, 11, 26, 14, 56, 38, 773768000+i, time.UTC)})
		msgs = append(msgs, kafka.Message{Key: []byte("u1"), Value: b})
	}
	sink.produce(t, msgs...)
	var body string
	waitUntil(t, 30*time.Second, "not ready because the server refuses every event", func() bool {
		var status int
		status, body = sink.get(t, "/readyz")
		return status == http.StatusServiceUnavailable && strings.Contains(body, "es_incompatible")
	})
	var got struct {
		Reasons []string          `json:"reasons"`
		Details map[string]string `json:"details"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil ||
		!strings.Contains(got.Details["es_incompatible"], "parse err: time format is [strict_date_optional_time||epoch_millis]") {
		t.Fatalf("/readyz said %s", body)
	}
	metrics := sink.metrics(t)
	for _, want := range []string{`taskd_logsink_unready{reason="es_incompatible"} 1` + "\n",
		"taskd_logsink_dead_lettered_events_total 0\n", "taskd_logsink_es_refused_events_total 0\n"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(metrics, "taskd_logsink_es_split_batches_total 0\n") {
		t.Error("/metrics counts no split request")
	}
	if es.Count() != 0 {
		t.Fatalf("%d indexed", es.Count())
	}
	sink.stop(t)
}
