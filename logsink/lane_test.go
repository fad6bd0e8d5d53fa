package logsink

import (
	"context"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esutil"
	"github.com/segmentio/kafka-go"
)

// failingFlushDuringAdd is a BulkIndexer whose Add blocks while a flush of the lane
// fails (and sends the items not read yet for a retry), then gives up as a context
// ending at shutdown would.
type failingFlushDuringAdd struct {
	esutil.BulkIndexer
	l     *lane
	other laneItem // an item of the failing flush
}

func (b failingFlushDuringAdd) Add(ctx context.Context, _ esutil.BulkIndexerItem) error {
	fctx := b.l.flushStart(ctx)
	b.l.mu.Lock()
	b.l.buffered = nil
	b.l.mu.Unlock()
	b.l.flushEnd(context.WithValue(fctx, flushKey{}, []laneItem{b.other}))
	return context.Canceled
}

// An item a failed flush sent for a retry while its Add was still blocked belongs to
// the retry: the Add that then fails must not hand it to its caller to abandon too
// (which would release its in-flight slot a second time).
func TestLaneAddThatFailsAfterAFlushRetriedItsItem(t *testing.T) {
	s := &Sink{abortCtx: context.Background(), retryCh: make(chan *job, 4), health: newHealth(), cfg: Config{RetryMin: time.Millisecond, RetryMax: time.Millisecond}}
	l := &lane{s: s}
	other := &job{msg: kafka.Message{Value: []byte(`{}`)}, id: "other"}
	other.attempt = 1
	l.bi = failingFlushDuringAdd{l: l, other: laneItem{other, 1}}
	j := &job{msg: kafka.Message{Value: []byte(`{}`)}, id: "j"}
	if err := l.add(context.Background(), j); err != nil {
		t.Fatalf("add = %v, want nil: the failed flush's retry owns the job", err)
	}
	got := map[string]bool{}
	for len(s.retryCh) > 0 {
		got[(<-s.retryCh).id] = true
	}
	if !got["j"] || !got["other"] || len(got) != 2 {
		t.Fatalf("retried %v, want the flush's item and the unread one, once each", got)
	}
}
