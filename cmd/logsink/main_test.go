package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/esfake"
	"github.com/taskpull/taskd/internal/testenv"
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
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	es := esfake.New(t)
	topic := "events-" + testenv.Suffix()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testenv.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-kafka-topic", topic, "-es-flush-interval", "20ms", "-metrics-addr", "127.0.0.1:0",
			"-kafka-commit-interval", "20ms", "-lag-interval", "50ms"}, env(map[string]string{
			"DISPATCH_KAFKA_BROKERS":     strings.Join(cluster.ListenAddrs(), ","),
			"DISPATCH_ES_URLS":           "http://elastic:secret@" + strings.TrimPrefix(es.URL(), "http://"),
			"DISPATCH_KAFKA_GROUP":       "group-" + topic,
			"DISPATCH_KAFKA_PARTITIONS":  "2",
			"DISPATCH_ES_RETENTION_DAYS": "3",
		}), &stdout, &stderr)
	}()

	// The sink creates the topic; produce once it exists.
	w := &kafka.Writer{Addr: kafka.TCP(cluster.ListenAddrs()...), Topic: topic, RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond}
	defer w.Close()
	var msgs []kafka.Message
	for i := range 100 {
		b, _ := json.Marshal(taskd.Event{EventID: fmt.Sprintf("ev-%03d", i), Type: taskd.EventDispatch,
			UID: "u1", At: time.Date(2026, 11, 21, 10, 0, i, 0, time.UTC)})
		msgs = append(msgs, kafka.Message{Key: []byte("u1"), Value: b})
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := w.WriteMessages(ctx, msgs...)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("produce: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for es.Count() < 100 {
		if time.Now().After(deadline) {
			t.Fatalf("indexed %d of 100", es.Count())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// /metrics reports what was indexed, and no lag once the offsets are committed.
	var addr string
	for addr == "" && time.Now().Before(deadline) {
		if _, a, ok := strings.Cut(stdout.String(), "logsink metrics on "); ok {
			addr = strings.TrimSpace(a)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var scrape string
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		scrape = string(b)
		if strings.Contains(scrape, "taskd_logsink_indexed_events_total 100\n") &&
			strings.Contains(scrape, "taskd_logsink_consumer_lag_events 0\n") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{"taskd_logsink_indexed_events_total 100\n", "taskd_logsink_consumer_lag_events 0\n",
		"taskd_logsink_dead_lettered_events_total 0\n", "taskd_logsink_es_bulk_failures_total 0\n",
		"taskd_logsink_oldest_unindexed_event_age_seconds 0\n", "taskd_logsink_ready 1\n",
		`taskd_logsink_unready{reason="es_refusing"} 0` + "\n", `taskd_logsink_unready_total{reason="setup_pending"} 1` + "\n"} {
		if !strings.Contains(scrape, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not return after cancel")
	}
	logs := stderr.String()
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
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	es := esfake.New(t)
	es.SetDown(true)
	topic := "events-" + testenv.Suffix()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testenv.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-kafka-topic", topic, "-es-flush-interval", "20ms", "-metrics-addr", "127.0.0.1:0",
			"-es-setup-wait", "0", "-es-retry-max", "200ms", "-lag-interval", "50ms"}, env(map[string]string{
			"DISPATCH_KAFKA_BROKERS": strings.Join(cluster.ListenAddrs(), ","),
			"DISPATCH_ES_URLS":       es.URL(),
			"DISPATCH_KAFKA_GROUP":   "group-" + topic,
		}), &stdout, &stderr)
	}()
	w := &kafka.Writer{Addr: kafka.TCP(cluster.ListenAddrs()...), Topic: topic, RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond}
	defer w.Close()
	b, _ := json.Marshal(taskd.Event{EventID: "ev-1", Type: taskd.EventDispatch, UID: "u1", At: time.Now()})
	waitUntil(t, 30*time.Second, "produced", func() bool { return w.WriteMessages(ctx, kafka.Message{Value: b}) == nil })

	var addr string
	waitUntil(t, 30*time.Second, "metrics address", func() bool {
		_, a, ok := strings.Cut(stdout.String(), "logsink metrics on ")
		addr = strings.TrimSpace(a)
		return ok
	})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var body string
	waitUntil(t, 30*time.Second, "not ready because of refused batches", func() bool {
		var status int
		status, body = get("/readyz")
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
	if status, _ := get("/healthz"); status != http.StatusServiceUnavailable {
		t.Fatalf("/healthz %d while not ready", status)
	}
	if status, _ := get("/livez"); status != http.StatusOK {
		t.Fatalf("/livez %d", status)
	}
	_, metrics := get("/metrics")
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
	waitUntil(t, 30*time.Second, "ready", func() bool { status, _ := get("/readyz"); return status == http.StatusOK })
	if es.Count() != 1 {
		t.Fatalf("%d indexed", es.Count())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
