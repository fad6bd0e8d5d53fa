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
			"-kafka-commit-interval", "20ms"}, env(map[string]string{
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
		"taskd_logsink_dead_lettered_events_total 0\n", "taskd_logsink_es_bulk_failures_total 0\n"} {
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
