package logsink

import (
	"bytes"
	"container/heap"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/elastic/go-elasticsearch/v8/esutil"
	"github.com/segmentio/kafka-go"
)

// job is one consumed message on its way to being done: indexed, or dead-lettered.
type job struct {
	msg   kafka.Message
	entry *entry
	index string // target index, from the event time
	id    string // document _id: the event id
	// attempt counts bulk submissions; answered is the last attempt whose outcome was
	// handled. Exactly one outcome per attempt is acted on, whichever path sees it first.
	attempt  int
	answered atomic.Int64
	due      time.Time // when a retry may go
	reason   string    // why it is dead-lettered
}

// answer claims the outcome of attempt; false means it was already handled.
func (j *job) answer(attempt int) bool {
	return j.answered.CompareAndSwap(int64(attempt-1), int64(attempt))
}

// lane is one esutil.BulkIndexer with a single worker. BulkIndexer reports per-item
// results only when a bulk request got a parseable answer: when the request fails (ES
// down, 503 after the transport's retries, a bad body) the items of that flush are
// dropped without a callback. With one worker per indexer, the items in a flush are
// exactly those whose body the worker read since the previous flush, so the lane records
// them as they are read and, at the end of each flush, sends every item that got no
// answer back for a retry. Several lanes give several concurrent bulk requests.
//
// One more case: when the item that makes the buffer full triggers a flush and that
// flush fails, BulkIndexer drops that item too, unread and unanswered. So the lane also
// keeps the items handed to the indexer and not read yet, and a flush that settled
// nothing sends them again as well (one still on its way is then sent twice: same
// _id, and only one of its answers is acted on).
type lane struct {
	s  *Sink
	bi esutil.BulkIndexer

	mu       sync.Mutex
	buffered []laneItem
	unread   []laneItem

	// Of the flush under way, touched by the lane's one worker only: how many items
	// it sends, how many of them got a final answer (stored, or dead-lettered), how
	// many were stored, the items refused for good (settled at the end of the flush,
	// by one verdict over the whole batch), whether its reply was decoded
	// (BulkIndexer's flush fails, and may drop an item, exactly when it was not), and
	// the refusal of the whole request when the server refused it for a reason in its
	// documents.
	sent, settled, stored int
	refused               []refusedJob
	decoded               bool
	whole                 *refusal
}

// refusedJob is a document the server refused for good, with its refusal.
type refusedJob struct {
	j *job
	refusal
}

type laneItem struct {
	j       *job
	attempt int
}

type flushKey struct{}

func (s *Sink) newLane() (*lane, error) {
	l := &lane{s: s}
	bi, err := esutil.NewBulkIndexer(esutil.BulkIndexerConfig{
		Client:        laneTransport{next: s.es, l: l},
		NumWorkers:    1,
		FlushBytes:    s.cfg.FlushBytes,
		FlushInterval: s.cfg.FlushInterval,
		OnError: func(_ context.Context, err error) {
			s.warnf("bulk request failed; its items will be retried", "err", err)
		},
		OnFlushStart: l.flushStart,
		OnFlushEnd:   l.flushEnd,
		Decoder:      replyDecoder{l},
	})
	if err != nil {
		return nil, fmt.Errorf("bulk indexer: %w", err)
	}
	l.bi = bi
	return l, nil
}

// add submits a job; it blocks while the lane's worker is busy.
func (l *lane) add(ctx context.Context, j *job) error {
	j.attempt++
	attempt := j.attempt
	l.mu.Lock()
	l.unread = append(l.unread, laneItem{j, attempt})
	l.mu.Unlock()
	err := l.bi.Add(ctx, esutil.BulkIndexerItem{
		Action:     "index",
		Index:      j.index,
		DocumentID: j.id,
		Body:       &itemBody{r: bytes.NewReader(j.msg.Value), onRead: func() { l.buffer(j, attempt) }},
		OnSuccess: func(_ context.Context, _ esutil.BulkIndexerItem, res esutil.BulkIndexerResponseItem) {
			l.itemAnswered(j, attempt, res, nil)
		},
		OnFailure: func(_ context.Context, _ esutil.BulkIndexerItem, res esutil.BulkIndexerResponseItem, err error) {
			l.itemAnswered(j, attempt, res, err)
		},
	})
	if err != nil {
		// Not handed over: the caller abandons it, so no flush may send it again;
		// unless a failed flush took it meanwhile and sent it for a retry, which owns
		// the job now (two owners would release its in-flight slot twice).
		l.mu.Lock()
		l.unread = removeItem(l.unread, j, attempt)
		l.mu.Unlock()
		if !j.answer(attempt) {
			return nil
		}
	}
	return err
}

// removeItem removes the item of job j's attempt from items.
func removeItem(items []laneItem, j *job, attempt int) []laneItem {
	for i, it := range items {
		if it.j == j && it.attempt == attempt {
			return append(items[:i], items[i+1:]...)
		}
	}
	return items
}

// itemAnswered acts on the reply item for job j's attempt (err: BulkIndexer could not
// even send it): a stored event is done; a refused one waits for the end of the flush,
// where the batch's refusals are settled together; any other goes again.
func (l *lane) itemAnswered(j *job, attempt int, res esutil.BulkIndexerResponseItem, err error) {
	if !j.answer(attempt) {
		return
	}
	if err != nil {
		l.s.retry(j)
		return
	}
	stored, refused := itemFate(res, j.id)
	switch {
	case stored:
		l.settled++
		l.stored++
		l.s.indexed.Add(1)
		l.s.finish(j)
	case refused != nil:
		l.refused = append(l.refused, refusedJob{j, *refused})
	default:
		if res.Error.Type == "" && res.Status < 300 {
			// BulkIndexer pairs reply items with request items by position: a short
			// or reordered list, an item for another _id, or one without a 2xx
			// status confirms nothing. The event goes again (same _id: harmless).
			l.s.unconfirmed.Add(1)
			l.s.warnf("bulk reply item does not confirm its event; retrying it",
				"event_id", j.id, "reply_id", res.DocumentID, "status", res.Status)
		}
		l.s.retry(j)
	}
}

func (l *lane) buffer(j *job, attempt int) {
	l.mu.Lock()
	l.unread = removeItem(l.unread, j, attempt)
	l.buffered = append(l.buffered, laneItem{j, attempt})
	l.mu.Unlock()
}

// flushStart takes the items of the flush about to be sent, and runs the request under
// the sink's abort context, so a shutdown that gives up does not wait for a dead ES.
func (l *lane) flushStart(context.Context) context.Context {
	l.mu.Lock()
	items := l.buffered
	l.buffered = nil
	l.mu.Unlock()
	l.sent, l.settled, l.stored, l.refused, l.decoded, l.whole = len(items), 0, 0, nil, false, nil
	return context.WithValue(l.s.abortCtx, flushKey{}, items)
}

// flushEnd settles the items the server refused, sends those of a request refused as
// a whole to be split, retries the others that got no per-item answer, and records
// whether the server is storing what it is sent: a request none of whose items got a
// final answer was refused.
func (l *lane) flushEnd(ctx context.Context) {
	items, _ := ctx.Value(flushKey{}).([]laneItem)
	var split []*job
	for _, it := range items {
		if !it.j.answer(it.attempt) {
			continue
		}
		if l.whole != nil {
			split = append(split, it.j)
		} else {
			l.s.retry(it.j)
		}
	}
	if len(split) > 0 {
		l.s.split(split, *l.whole)
	}
	if len(items) == 0 {
		return
	}
	l.settled += l.s.settle(l.stored, l.refused)
	refused := l.settled == 0
	if refused {
		l.s.refusedBatches.Add(1)
	}
	if !l.decoded {
		// The flush failed: the item that triggered it may have been dropped unread.
		l.mu.Lock()
		unread := l.unread
		l.unread = nil
		l.mu.Unlock()
		for _, it := range unread {
			if it.j.answer(it.attempt) {
				l.s.retry(it.j)
			}
		}
	}
	l.s.health.set(UnreadyRefused, refused)
}

// replyDecoder decodes a bulk reply, and rejects one that cannot be a true answer to
// the request: a top-level error (whatever the HTTP status), or a number of items
// other than the number sent. BulkIndexer pairs reply items with request items by
// position (and would index past the end of its list on a long reply). A rejected
// reply answers for no item: the request's events are all sent again.
type replyDecoder struct{ l *lane }

func (d replyDecoder) UnmarshalFromReader(r io.Reader, blk *esutil.BulkIndexerResponse) error {
	reply, err := decodeBulkReply(r, d.l.sent)
	if err != nil {
		return err
	}
	*blk = reply
	d.l.decoded = true
	return nil
}

// laneTransport is the transport of a lane's bulk requests. It gives each request a
// body of its own: BulkIndexer sends its reusable buffer as the body and resets it as
// soon as the request fails, but net/http may still be writing that body from its
// connection goroutine when a failed round trip returns (a reset connection, say): a
// data race that corrupts or crashes. Reading the buffer out first costs one copy of
// each request. And it keeps the server's reason when it refuses a request as a whole
// (BulkIndexer drops the answer), for the lane to split the request.
type laneTransport struct {
	next esapi.Transport
	l    *lane
}

func (t laneTransport) Perform(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("bulk body: %w", err)
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		req.ContentLength = int64(len(b))
	}
	res, err := t.next.Perform(req)
	if err != nil || res.StatusCode < 300 {
		return res, err
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("bulk reply: %w", err)
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	// Perform runs on the lane's one worker, as do flushStart and flushEnd.
	t.l.whole = wholeRefusal(res.StatusCode, body)
	return res, nil
}

// itemBody is an item's source that tells the lane when its worker reads it into a
// bulk request buffer.
type itemBody struct {
	r      *bytes.Reader
	onRead func()
	seen   bool
}

func (b *itemBody) Read(p []byte) (int, error) {
	if !b.seen {
		b.seen = true
		b.onRead()
	}
	return b.r.Read(p)
}

func (b *itemBody) Seek(off int64, whence int) (int64, error) { return b.r.Seek(off, whence) }

var _ io.ReadSeeker = (*itemBody)(nil)

// retry schedules another attempt after the job's backoff. The queue has room for
// every job in flight, so this never blocks a bulk worker.
func (s *Sink) retry(j *job) {
	s.retries.Add(1)
	j.due = time.Now().Add(retryDelay(j.attempt, s.cfg.RetryMin, s.cfg.RetryMax))
	select {
	case s.retryCh <- j:
	default:
		s.abandon(j)
	}
}

// retryLoop resubmits jobs when their backoff has passed. At shutdown what is still
// waiting is abandoned: not committed, so consumed again at the next start.
func (s *Sink) retryLoop(ctx context.Context) {
	var waiting jobHeap
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if len(waiting) > 0 {
			timer.Reset(time.Until(waiting[0].due))
		}
		select {
		case <-ctx.Done():
			for _, j := range waiting {
				s.abandon(j)
			}
			return
		case j := <-s.retryCh:
			heap.Push(&waiting, j)
		case <-timer.C:
			for len(waiting) > 0 && !waiting[0].due.After(time.Now()) {
				j := heap.Pop(&waiting).(*job)
				if err := s.submit(ctx, j); err != nil {
					s.abandon(j)
				}
			}
		}
	}
}

type jobHeap []*job

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, k int) bool { return h[i].due.Before(h[k].due) }
func (h jobHeap) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *jobHeap) Push(x any)        { *h = append(*h, x.(*job)) }
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return j
}

// deadLetter queues a job for the dead-letter topic; like retry, it never blocks.
func (s *Sink) deadLetter(j *job) {
	select {
	case s.dlqCh <- j:
	default:
		s.abandon(j)
	}
}

// dlqLoop writes dead letters to Kafka, retrying until Kafka takes them: only then are
// they done and may their offsets be committed.
func (s *Sink) dlqLoop(ctx context.Context) {
	for {
		var batch []*job
		select {
		case <-ctx.Done():
			return
		case j := <-s.dlqCh:
			batch = append(batch, j)
		}
	more:
		for len(batch) < 500 {
			select {
			case j := <-s.dlqCh:
				batch = append(batch, j)
			default:
				break more
			}
		}
		msgs := make([]kafka.Message, len(batch))
		for i, j := range batch {
			m := j.msg
			h := append([]kafka.Header(nil), m.Headers...)
			h = append(h,
				kafka.Header{Key: "dlq_reason", Value: []byte(j.reason)},
				kafka.Header{Key: "dlq_topic", Value: []byte(m.Topic)},
				kafka.Header{Key: "dlq_partition", Value: []byte(strconv.Itoa(m.Partition))},
				kafka.Header{Key: "dlq_offset", Value: []byte(strconv.FormatInt(m.Offset, 10))},
			)
			msgs[i] = kafka.Message{Key: m.Key, Value: m.Value, Headers: h, Time: m.Time}
		}
		b := backoff{min: s.cfg.RetryMin, max: s.cfg.RetryMax}
		for {
			err := s.dlq.WriteMessages(ctx, msgs...)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				for _, j := range batch {
					s.abandon(j)
				}
				return
			}
			s.warnf("dead-letter write failed; retrying", "err", err, "topic", s.cfg.DLQTopic)
			sleep(ctx, b.next())
		}
		for _, j := range batch {
			s.log.Warn("event dead-lettered", "reason", j.reason, "partition", j.msg.Partition,
				"offset", j.msg.Offset, "event_id", j.id, "dlq_topic", s.cfg.DLQTopic)
			s.deadLettered.Add(1)
			s.finish(j)
		}
	}
}
