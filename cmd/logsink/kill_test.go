package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/esfake"
	"github.com/taskpull/taskd/internal/testenv"
)

// The logsink binary is killed with SIGKILL mid-stream, against a server without ILM
// that does not send X-Elastic-Product, while events keep coming; a second one takes
// over. Every event ends up in the index exactly once, and the survivor says it is
// ready: the missing ILM blocks nothing.
func TestKilledLogsinkLosesNothing(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "logsink")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	topic := "events-" + testenv.Suffix()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic, topic+".dlq"),
		kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	es := esfake.New(t)
	es.WithoutEndpoint("_ilm", http.StatusNotFound)
	es.WithoutProductHeader()
	brokers := cluster.ListenAddrs()

	const total = 8000
	produced := make(chan error, 1)
	go func() { produced <- produceSlowly(brokers, topic, total) }()

	start := func() (*exec.Cmd, *testenv.SyncBuffer, *testenv.SyncBuffer) {
		var stdout, stderr testenv.SyncBuffer
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(),
			"DISPATCH_KAFKA_BROKERS="+strings.Join(brokers, ","),
			"DISPATCH_KAFKA_TOPIC="+topic,
			"DISPATCH_KAFKA_DLQ_TOPIC="+topic+".dlq",
			"DISPATCH_KAFKA_GROUP=group-"+topic,
			"DISPATCH_KAFKA_CREATE_TOPICS=false",
			"DISPATCH_KAFKA_SESSION_TIMEOUT=2s",
			"DISPATCH_KAFKA_COMMIT_INTERVAL=50ms",
			"DISPATCH_ES_URLS="+es.URL(),
			"DISPATCH_ES_FLUSH_INTERVAL=20ms",
			"DISPATCH_ES_FLUSH_BYTES=16384",
			"DISPATCH_LOGSINK_LAG_INTERVAL=100ms",
			"DISPATCH_LOGSINK_METRICS_ADDR=127.0.0.1:0",
		)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, &stdout, &stderr
	}

	first, _, firstErr := start()
	waitUntil(t, time.Minute, "a quarter indexed", func() bool { return es.Count() >= total/4 })
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	atKill := es.Count()

	second, stdout, stderr := start()
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Minute, "all indexed", func() bool { return es.Count() >= total })
	waitUntil(t, time.Minute, "ready", func() bool { return readyz(t, stdout) == http.StatusOK })
	second.Process.Signal(syscall.SIGTERM)
	if err := second.Wait(); err != nil {
		t.Fatalf("second logsink: %v\n%s", err, stderr.String())
	}
	if atKill >= total {
		t.Fatalf("everything was indexed before the kill (%d); the test killed nothing mid-stream", atKill)
	}
	ids := es.IDs()
	if len(ids) != total || es.Count() != total {
		t.Fatalf("%d distinct ids, %d documents, want %d of each", len(ids), es.Count(), total)
	}
	for i, id := range ids {
		if want := fmt.Sprintf("ev-%05d", i); id != want {
			t.Fatalf("id %d is %s, want %s", i, id, want)
		}
	}
	if d := es.Duplicates(); len(d) > 0 {
		t.Fatalf("%d ids in two indices", len(d))
	}
	for _, out := range []string{firstErr.String(), stderr.String()} {
		if !strings.Contains(out, "lifecycle policy not installed") {
			t.Fatalf("no warning about the missing ILM:\n%s", out)
		}
	}
}

// produceSlowly writes total events in small batches, so that they keep coming while
// logsinks come and go.
func produceSlowly(brokers []string, topic string, total int) error {
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond}
	defer w.Close()
	for i := 0; i < total; i += 200 {
		var msgs []kafka.Message
		for n := i; n < min(i+200, total); n++ {
			uid := fmt.Sprint(n % 37)
			b, _ := json.Marshal(taskd.Event{EventID: fmt.Sprintf("ev-%05d", n), Type: taskd.EventDispatch,
				UID: uid, At: time.Date(2026, 11, 21, 23, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second)})
			msgs = append(msgs, kafka.Message{Key: []byte(uid), Value: b})
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readyz returns the status of the logsink's /readyz, 0 before it listens.
func readyz(t *testing.T, stdout *testenv.SyncBuffer) int {
	t.Helper()
	_, addr, ok := strings.Cut(stdout.String(), "logsink metrics on ")
	if !ok {
		return 0
	}
	resp, err := http.Get("http://" + strings.TrimSpace(addr) + "/readyz")
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
