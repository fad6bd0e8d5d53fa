package main

import (
	"context"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/taskpull/taskd/internal/testenv"
)

// sinkRun is logsink's run in the test process, on an in-process Kafka of its own.
type sinkRun struct {
	brokers        []string
	topic          string
	stdout, stderr testenv.SyncBuffer
	cancel         context.CancelFunc
	done           chan error
}

// startRun runs logsink with args after its metrics listener on a free port and a
// short flush interval, and the environment vars over the brokers, a topic and group
// of the run's own, and esURL.
func startRun(t *testing.T, esURL string, args []string, vars map[string]string) *sinkRun {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	r := &sinkRun{brokers: cluster.ListenAddrs(), topic: "events-" + testenv.Suffix(), done: make(chan error, 1)}
	environ := map[string]string{
		"DISPATCH_KAFKA_BROKERS": strings.Join(r.brokers, ","),
		"DISPATCH_KAFKA_TOPIC":   r.topic,
		"DISPATCH_KAFKA_GROUP":   "group-" + r.topic,
		"DISPATCH_ES_URLS":       esURL,
	}
	maps.Copy(environ, vars)
	ctx, cancel := context.WithCancel(t.Context())
	r.cancel = cancel
	t.Cleanup(cancel)
	args = append([]string{"-metrics-addr", "127.0.0.1:0", "-es-flush-interval", "20ms"}, args...)
	go func() { r.done <- run(ctx, args, env(environ), &r.stdout, &r.stderr) }()
	return r
}

// produce writes msgs once the topic exists (the run creates it).
func (r *sinkRun) produce(t *testing.T, msgs ...kafka.Message) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(r.brokers...), Topic: r.topic, RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond}
	defer w.Close()
	waitUntil(t, 30*time.Second, "produced", func() bool { return w.WriteMessages(t.Context(), msgs...) == nil })
}

// get requests path from the metrics listener, once its address is on stdout.
func (r *sinkRun) get(t *testing.T, path string) (int, string) {
	t.Helper()
	var addr string
	waitUntil(t, 30*time.Second, "the metrics address", func() bool {
		_, a, ok := strings.Cut(r.stdout.String(), "logsink metrics on ")
		addr = strings.TrimSpace(a)
		return ok
	})
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metrics returns /metrics.
func (r *sinkRun) metrics(t *testing.T) string {
	t.Helper()
	_, body := r.get(t, "/metrics")
	return body
}

// stop ends the run and fails the test if run returned an error or did not return.
func (r *sinkRun) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not return after cancel")
	}
}
