package main

import (
	"bufio"
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

	"github.com/taskpull/taskd/internal/esfake"
	"github.com/taskpull/taskd/internal/testenv"
)

// A burst of malformed events logs "event dead-lettered" for each; the log carries it
// once, and the summary written by the time run returns counts the rest.
func TestDeadLetterWarningsAreCollapsed(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	es := esfake.New(t)
	topic := "events-" + testenv.Suffix()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testenv.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-kafka-topic", topic, "-es-flush-interval", "20ms", "-metrics-addr", "127.0.0.1:0",
			"-kafka-commit-interval", "20ms"}, env(map[string]string{
			"DISPATCH_KAFKA_BROKERS": strings.Join(cluster.ListenAddrs(), ","),
			"DISPATCH_ES_URLS":       es.URL(),
			"DISPATCH_KAFKA_GROUP":   "group-" + topic,
		}), &stdout, &stderr)
	}()

	const bad = 30
	w := &kafka.Writer{Addr: kafka.TCP(cluster.ListenAddrs()...), Topic: topic, RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond}
	defer w.Close()
	var msgs []kafka.Message
	for i := range bad {
		msgs = append(msgs, kafka.Message{Key: []byte("u1"), Value: []byte(fmt.Sprintf("not an event %d", i))})
	}
	deadline := time.Now().Add(30 * time.Second)
	for w.WriteMessages(ctx, msgs...) != nil {
		if time.Now().After(deadline) {
			t.Fatal("could not produce")
		}
		time.Sleep(50 * time.Millisecond)
	}
	want := fmt.Sprintf("taskd_logsink_dead_lettered_events_total %d\n", bad)
	for !strings.Contains(scrape(t, &stdout), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the sink did not dead-letter %d events", bad)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var written, repeated int
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	for sc.Scan() {
		var rec struct {
			Msg       string `json:"msg"`
			Component string `json:"component"`
			Repeated  int    `json:"repeated"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		switch rec.Msg {
		case "event dead-lettered":
			written++
		case "event dead-lettered (repeated)":
			repeated += rec.Repeated
			if rec.Component != "logsink" {
				t.Errorf("summary lost the component: %s", sc.Text())
			}
		}
	}
	if written+repeated != bad || written >= bad/2 {
		t.Fatalf("%d dead letters: %d warnings written, %d counted in summaries; want them collapsed and all counted\n%s",
			bad, written, repeated, stderr.String())
	}
}

// scrape reads the sink's /metrics once its address is on stdout ("" before).
func scrape(t *testing.T, stdout *testenv.SyncBuffer) string {
	t.Helper()
	_, addr, ok := strings.Cut(stdout.String(), "logsink metrics on ")
	if !ok {
		return ""
	}
	resp, err := http.Get("http://" + strings.TrimSpace(addr) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
