package logsink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/segmentio/kafka-go"

	"github.com/taskpull/taskd"
	esdeploy "github.com/taskpull/taskd/deploy/elasticsearch"
)

// SinkStats is a snapshot of the sink's progress since start.
type SinkStats struct {
	Indexed      uint64 // events Elasticsearch acknowledged (replays included)
	DeadLettered uint64 // events sent to the dead-letter topic
	Retries      uint64 // item attempts that will be tried again
	// Unconfirmed counts reply items that did not confirm their event (another _id, no
	// 2xx status, or a short reply list); each such event was retried.
	Unconfirmed uint64
	InFlight    int // messages fetched and not yet done
	// Lag is the consumer lag: over the partitions this sink has read, the high
	// watermark last seen minus the offset last committed (or first fetched).
	Lag int64
}

// Sink consumes events from Kafka in a consumer group and bulk-indexes them into daily
// Elasticsearch indices, the event id as the document _id (so replays overwrite, never
// duplicate). A partition's offset is committed only up to the lowest message not yet
// done, so a crash at any moment loses nothing: what was not committed is consumed
// again. What Elasticsearch can never take (and what is not an event at all) goes to the
// dead-letter topic with the reason, and the stream flows on.
type Sink struct {
	cfg     Config
	log     *slog.Logger
	es      *elasticsearch.Client
	dlq     *kafka.Writer
	tracker *tracker

	sem      chan struct{} // one token per message in flight
	lanes    []*lane
	nextLane atomic.Uint64
	retryCh  chan *job
	dlqCh    chan *job
	abortCtx context.Context // ends in-flight bulk requests when shutdown gives up

	mu     sync.Mutex
	reader *kafka.Reader
	crash  context.CancelCauseFunc

	indexed, deadLettered, retries, unconfirmed atomic.Uint64
	lastWarn                                    atomic.Int64

	lagMu     sync.Mutex
	watermark map[int]int64 // partition -> high watermark last seen
	position  map[int]int64 // partition -> offset committed (or first fetched)

	// Test hooks: beforeCommit sees the offsets (the next to consume, per partition)
	// about to be committed, onCommit those committed.
	beforeCommit, onCommit func(offsets map[int]int64)
}

// NewSink checks the configuration and prepares a sink; nothing connects until Run.
func NewSink(cfg Config, logger *slog.Logger) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := logger.With("component", "logsink")
	es, err := elasticsearch.NewClient(elasticsearch.Config{
		Addresses: cfg.ESURLs,
		Username:  cfg.ESUsername,
		Password:  cfg.ESPassword,
		// The transport retries a request a few times at once; past that the sink's
		// own per-item backoff takes over, without limit.
		RetryOnStatus: []int{http.StatusTooManyRequests, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout},
		MaxRetries: 3,
		RetryBackoff: func(attempt int) time.Duration {
			return retryDelay(attempt, cfg.RetryMin, min(cfg.RetryMax, 2*time.Second))
		},
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			ResponseHeaderTimeout: 2 * time.Minute,
			MaxIdleConnsPerHost:   cfg.Workers + 2,
			IdleConnTimeout:       90 * time.Second,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("elasticsearch client: %w", err)
	}
	_, errs := kafkaLoggers(log)
	dlq := &kafka.Writer{
		Addr:                   kafka.TCP(cfg.KafkaBrokers...),
		Topic:                  cfg.DLQTopic,
		Balancer:               &kafka.Murmur2Balancer{},
		RequiredAcks:           kafka.RequireAll,
		BatchTimeout:           10 * time.Millisecond,
		MaxAttempts:            3,
		AllowAutoTopicCreation: true,
		ErrorLogger:            errs,
	}
	return &Sink{
		cfg:     cfg,
		log:     log,
		es:      es,
		dlq:     dlq,
		tracker: newTracker(),
		sem:     make(chan struct{}, cfg.MaxInFlight),
		retryCh: make(chan *job, cfg.MaxInFlight),
		dlqCh:   make(chan *job, cfg.MaxInFlight),

		watermark: map[int]int64{},
		position:  map[int]int64{},
	}, nil
}

// Stats returns the sink's figures.
func (s *Sink) Stats() SinkStats {
	st := SinkStats{
		Indexed: s.indexed.Load(), DeadLettered: s.deadLettered.Load(),
		Retries: s.retries.Load(), Unconfirmed: s.unconfirmed.Load(), InFlight: len(s.sem),
	}
	s.lagMu.Lock()
	for p, hw := range s.watermark {
		st.Lag += max(hw-s.position[p], 0)
	}
	s.lagMu.Unlock()
	return st
}

// observe records a fetched message's partition watermark for the lag.
func (s *Sink) observe(m kafka.Message) {
	s.lagMu.Lock()
	s.watermark[m.Partition] = m.HighWaterMark
	if _, ok := s.position[m.Partition]; !ok {
		s.position[m.Partition] = m.Offset
	}
	s.lagMu.Unlock()
}

func (s *Sink) readerConfig() kafka.ReaderConfig {
	info, errs := kafkaLoggers(s.log)
	return kafka.ReaderConfig{
		Brokers:           s.cfg.KafkaBrokers,
		GroupID:           s.cfg.Group,
		Topic:             s.cfg.Topic,
		MinBytes:          1,
		MaxBytes:          16 << 20,
		MaxWait:           500 * time.Millisecond,
		QueueCapacity:     1000,
		StartOffset:       kafka.FirstOffset,
		SessionTimeout:    s.cfg.SessionTimeout,
		HeartbeatInterval: max(s.cfg.SessionTimeout/10, 100*time.Millisecond),
		RebalanceTimeout:  s.cfg.SessionTimeout,
		JoinGroupBackoff:  time.Second,
		ReadBackoffMin:    100 * time.Millisecond,
		ReadBackoffMax:    2 * time.Second,
		// CommitInterval 0: CommitMessages commits synchronously, so a commit the
		// sink counts as done is on the broker.
		Logger:      info,
		ErrorLogger: errs,
	}
}

// Run prepares Kafka topics and Elasticsearch (waiting for them to answer), then
// consumes until ctx is done. At shutdown it stops fetching, lets what is in flight
// finish for up to ShutdownTimeout, commits, and returns nil. It returns an error only
// when consuming cannot go on (the reader was closed under it).
func (s *Sink) Run(ctx context.Context) error {
	if err := s.prepare(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	abortCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	s.abortCtx = abortCtx
	s.lanes = nil
	for range s.cfg.Workers {
		l, err := s.newLane()
		if err != nil {
			return err
		}
		s.lanes = append(s.lanes, l)
	}
	reader := kafka.NewReader(s.readerConfig())
	fetchCtx, crash := context.WithCancelCause(ctx)
	defer crash(nil)
	s.mu.Lock()
	s.reader, s.crash = reader, crash
	s.mu.Unlock()

	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){s.retryLoop, s.dlqLoop, func(ctx context.Context) { s.commitLoop(ctx, reader) }} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(workCtx)
		}()
	}
	s.log.Info("consuming", "topic", s.cfg.Topic, "group", s.cfg.Group, "index_prefix", s.cfg.IndexPrefix)
	runErr := s.fetchLoop(fetchCtx, reader)

	// Shutdown: nothing new is fetched; give what is in flight time to finish.
	if !s.waitIdle(s.cfg.ShutdownTimeout) {
		s.log.Warn("shutdown timeout with events in flight; they will be consumed again at the next start",
			"in_flight", len(s.sem))
		abort()
	}
	stopWork()
	wg.Wait()
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, l := range s.lanes {
		l.bi.Close(closeCtx)
	}
	if err := s.commit(closeCtx, reader); err != nil {
		s.log.Warn("final commit", "err", err)
	}
	reader.Close()
	s.dlq.Close()
	st := s.Stats()
	s.log.Info("stopped", "indexed", st.Indexed, "dead_lettered", st.DeadLettered, "retries", st.Retries)
	return runErr
}

// prepare creates the topics and installs the Elasticsearch template and policy,
// retrying while either is unavailable: the sink may start before its dependencies.
func (s *Sink) prepare(ctx context.Context) error {
	b := backoff{min: s.cfg.RetryMin, max: min(s.cfg.RetryMax, 10*time.Second)}
	if s.cfg.CreateTopics {
		for {
			tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := ensureTopics(tctx, s.cfg.KafkaBrokers, s.cfg.TopicPartitions, s.cfg.TopicReplication,
				s.cfg.Topic, s.cfg.DLQTopic)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.warnf("kafka topics not ready; retrying", "err", err)
			sleep(ctx, b.next())
		}
	}
	b.reset()
	if s.cfg.SetupES {
		for {
			err := SetupElasticsearch(ctx, s.es, s.cfg.IndexPrefix, s.cfg.RetentionDays)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.warnf("elasticsearch setup failed; retrying", "err", err)
			sleep(ctx, b.next())
		}
		s.log.Info("elasticsearch template and lifecycle policy installed",
			"index_pattern", s.cfg.IndexPrefix+"-*", "retention_days", s.cfg.RetentionDays)
	}
	return nil
}

// fetchLoop reads messages and hands them on, while there is room in flight.
func (s *Sink) fetchLoop(ctx context.Context, r *kafka.Reader) error {
	b := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	for {
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			return fetchEnd(ctx)
		}
		m, err := r.FetchMessage(ctx)
		if err != nil {
			<-s.sem
			if ctx.Err() != nil {
				return fetchEnd(ctx)
			}
			if errors.Is(err, io.EOF) {
				return errCrashed
			}
			s.warnf("kafka fetch failed; retrying", "err", err)
			sleep(ctx, b.next())
			continue
		}
		b.reset()
		s.observe(m)
		j := &job{msg: m, entry: s.tracker.track(m.Partition, m.Offset)}
		ev, err := decodeEvent(m.Value)
		if err != nil {
			j.reason = "malformed event: " + err.Error()
			s.deadLetter(j)
			continue
		}
		j.id, j.index = ev.EventID, s.indexName(ev.At)
		if err := s.submit(ctx, j); err != nil {
			s.abandon(j)
		}
	}
}

// errCrashed ends a sink whose reader was closed under it.
var errCrashed = errors.New("kafka reader closed")

// fetchEnd tells a shutdown (nil) from a crash.
func fetchEnd(ctx context.Context) error {
	if err := context.Cause(ctx); errors.Is(err, errCrashed) {
		return err
	}
	return nil
}

// submit hands a job to the next lane, round robin.
func (s *Sink) submit(ctx context.Context, j *job) error {
	return s.lanes[s.nextLane.Add(1)%uint64(len(s.lanes))].add(ctx, j)
}

// finish marks a job done: its offset may be committed.
func (s *Sink) finish(j *job) {
	s.tracker.done(j.entry)
	<-s.sem
}

// abandon drops a job at shutdown without marking it done: it is not committed and will
// be consumed again.
func (s *Sink) abandon(j *job) { <-s.sem }

// waitIdle waits until nothing is in flight, up to d.
func (s *Sink) waitIdle(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for len(s.sem) > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func (s *Sink) commitLoop(ctx context.Context, r *kafka.Reader) {
	t := time.NewTicker(s.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.commit(ctx, r); err != nil && ctx.Err() == nil {
				s.warnf("offset commit failed; will retry", "err", err)
			}
		}
	}
}

// commit commits every partition's done prefix.
func (s *Sink) commit(ctx context.Context, r *kafka.Reader) error {
	offs := s.tracker.commitable()
	if len(offs) == 0 {
		return nil
	}
	if s.beforeCommit != nil {
		s.beforeCommit(offs)
	}
	msgs := make([]kafka.Message, 0, len(offs))
	for p, off := range offs {
		// kafka-go commits a message's offset + 1.
		msgs = append(msgs, kafka.Message{Topic: s.cfg.Topic, Partition: p, Offset: off - 1})
	}
	if err := r.CommitMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("commit offsets: %w", err)
	}
	s.tracker.committed(offs)
	s.lagMu.Lock()
	for p, off := range offs {
		s.position[p] = off
	}
	s.lagMu.Unlock()
	if s.onCommit != nil {
		s.onCommit(offs)
	}
	return nil
}

// closeReader closes the Kafka reader under a running sink: a crash, for tests. (A
// closed group reader does not always wake a blocked FetchMessage, hence the cancel.)
func (s *Sink) closeReader() {
	s.mu.Lock()
	r, crash := s.reader, s.crash
	s.mu.Unlock()
	if r != nil {
		r.Close()
		crash(errCrashed)
	}
}

// indexName is the daily index of an event, by its own time, so that a replay of an
// event lands in the same index as the first delivery, whenever it happens.
func (s *Sink) indexName(at time.Time) string {
	return s.cfg.IndexPrefix + "-" + at.UTC().Format("2006.01.02")
}

// warnf logs a warning at most every few seconds: during an outage the same failure
// repeats for every request.
func (s *Sink) warnf(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := s.lastWarn.Load()
	if now-last < int64(5*time.Second) || !s.lastWarn.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn(msg, args...)
}

// decodeEvent checks that a message is an event the sink can index.
func decodeEvent(value []byte) (taskd.Event, error) {
	var ev taskd.Event
	dec := json.NewDecoder(bytes.NewReader(value))
	if err := dec.Decode(&ev); err != nil {
		return ev, fmt.Errorf("not a JSON event: %w", err)
	}
	if dec.More() {
		return ev, errors.New("trailing data after the JSON event")
	}
	switch {
	case ev.EventID == "":
		return ev, errors.New("event_id missing")
	case len(ev.EventID) > 512:
		return ev, errors.New("event_id longer than 512 bytes")
	case ev.Type == "":
		return ev, errors.New("type missing")
	case ev.At.IsZero():
		return ev, errors.New("at missing")
	}
	return ev, nil
}

// SetupElasticsearch installs, idempotently, the lifecycle policy named prefix that
// deletes indices after retentionDays, and the index template named prefix with the
// events' mappings for indices prefix-*.
func SetupElasticsearch(ctx context.Context, es *elasticsearch.Client, prefix string, retentionDays int) error {
	pol, err := esdeploy.LifecyclePolicy(retentionDays)
	if err != nil {
		return err
	}
	res, err := es.ILM.PutLifecycle(prefix, es.ILM.PutLifecycle.WithBody(bytes.NewReader(pol)),
		es.ILM.PutLifecycle.WithContext(ctx))
	if err := esResult(res, err); err != nil {
		return fmt.Errorf("put lifecycle policy %s: %w", prefix, err)
	}
	tpl, err := esdeploy.IndexTemplate(prefix, prefix)
	if err != nil {
		return err
	}
	res, err = es.Indices.PutIndexTemplate(prefix, bytes.NewReader(tpl),
		es.Indices.PutIndexTemplate.WithContext(ctx))
	if err := esResult(res, err); err != nil {
		return fmt.Errorf("put index template %s: %w", prefix, err)
	}
	return nil
}

func esResult(res *esapi.Response, err error) error {
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.IsError() {
		return errors.New(res.String())
	}
	return nil
}
