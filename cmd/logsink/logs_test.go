package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/taskpull/taskd/internal/esfake"
)

// A burst of malformed events logs "event dead-lettered" for each; the log carries it
// once, and the summary written by the time run returns counts the rest.
func TestDeadLetterWarningsAreCollapsed(t *testing.T) {
	t.Parallel()
	es := esfake.New(t)
	sink := startRun(t, es.URL(), []string{"-kafka-commit-interval", "20ms"}, nil)
	const bad = 30
	var msgs []kafka.Message
	for i := range bad {
		msgs = append(msgs, kafka.Message{Key: []byte("u1"), Value: []byte(fmt.Sprintf("not an event %d", i))})
	}
	sink.produce(t, msgs...)
	want := fmt.Sprintf("taskd_logsink_dead_lettered_events_total %d\n", bad)
	waitUntil(t, 30*time.Second, "dead letters", func() bool { return strings.Contains(sink.metrics(t), want) })
	sink.stop(t)
	stderr := &sink.stderr

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
