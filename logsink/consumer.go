package logsink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elastic/elastic-transport-go/v8/elastictransport"
	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/segmentio/kafka-go"

	"github.com/taskpull/taskd"
)

// SinkStats is a snapshot of the sink's progress since start.
type SinkStats struct {
	Indexed      uint64 // events Elasticsearch acknowledged (replays included)
	DeadLettered uint64 // events sent to the dead-letter topic
	Retries      uint64 // item attempts that will be tried again
	// Unconfirmed counts reply items that did not confirm their event (another _id, no
	// 2xx status, or a short reply list); each such event was retried.
	Unconfirmed uint64
	// RefusedBatches counts bulk requests that stored none of their events: no
	// answer, an error status, a reply that is not a true bulk reply, or every item
	// refused. Their events were retried.
	RefusedBatches uint64
	// RefusedEvents counts events the server refused for a reason in the event itself
	// (an item error that retrying cannot mend, or a request refused as a whole that
	// was split down to this event); each went to the dead-letter topic.
	RefusedEvents uint64
	// SplitBatches counts bulk requests the server refused as a whole for a reason in
	// their documents, split to find the documents at fault.
	SplitBatches uint64
	InFlight     int // messages fetched and not yet done
	// Lag is the consumer group's lag and the age of its oldest unindexed event, last
	// measured from the broker.
	Lag Lag
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
	es      *elastictransport.Client // every call to the search server goes through it
	api     *esapi.API
	dlq     *kafka.Writer
	tracker *tracker
	health  *health
	lag     atomic.Pointer[Lag]

	sem      chan struct{} // one token per message in flight
	lanes    []*lane
	nextLane atomic.Uint64
	retryCh  chan *job
	dlqCh    chan *job
	splitCh  chan splitBatch
	abortCtx context.Context // ends in-flight bulk requests when shutdown gives up

	mu     sync.Mutex
	reader *kafka.Reader
	crash  context.CancelCauseFunc

	indexed, deadLettered, retries, unconfirmed, refusedBatches atomic.Uint64
	refusedEvents, splitBatches                                 atomic.Uint64

	// storing says the server stored a document since it last refused events as
	// such; incompat is the reason it refuses them as such, nil while it does not.
	storing    atomic.Bool
	incompatMu sync.Mutex
	incompat   *refusal

	warnMu   sync.Mutex
	lastWarn map[string]time.Time // warning message -> when last logged

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
	es, err := newESTransport(cfg)
	if err != nil {
		return nil, err
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
		cfg:      cfg,
		log:      log,
		es:       es,
		api:      esapi.New(es),
		dlq:      dlq,
		tracker:  newTracker(),
		health:   newHealth(),
		sem:      make(chan struct{}, cfg.MaxInFlight),
		retryCh:  make(chan *job, cfg.MaxInFlight),
		dlqCh:    make(chan *job, cfg.MaxInFlight),
		splitCh:  make(chan splitBatch, cfg.MaxInFlight),
		lastWarn: map[string]time.Time{},
	}, nil
}

// Stats returns the sink's figures.
func (s *Sink) Stats() SinkStats {
	st := SinkStats{
		Indexed: s.indexed.Load(), DeadLettered: s.deadLettered.Load(),
		Retries: s.retries.Load(), Unconfirmed: s.unconfirmed.Load(),
		RefusedBatches: s.refusedBatches.Load(), RefusedEvents: s.refusedEvents.Load(),
		SplitBatches: s.splitBatches.Load(), InFlight: len(s.sem),
	}
	if l := s.lag.Load(); l != nil {
		st.Lag = *l
	}
	return st
}

// Readiness says whether the sink is doing its job: Elasticsearch setup finished, the
// server storing what it is sent and not refusing events as such, and no unindexed
// event older than MaxEventAge.
func (s *Sink) Readiness() Readiness { return s.health.readiness() }

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

// Run creates the Kafka topics (waiting for Kafka to answer), sets Elasticsearch up
// in the background (see esSetup), then consumes until ctx is done. Indexing waits for
// the setup, so that the day's first index is created from the template, but never
// longer than SetupWait. At shutdown it stops fetching, lets what is in flight finish
// for up to ShutdownTimeout, commits, and returns nil. It returns an error only when
// consuming cannot go on (the reader was closed under it).
func (s *Sink) Run(ctx context.Context) error {
	// The lag monitor runs as long as Run; the setup until it is done or ctx ends.
	var background sync.WaitGroup
	monitorCtx, stopMonitor := context.WithCancel(context.WithoutCancel(ctx))
	setupCtx, stopSetup := context.WithCancel(ctx)
	defer func() {
		stopMonitor()
		stopSetup()
		background.Wait()
	}()
	background.Go(func() { s.monitor(monitorCtx) })
	if err := s.createTopics(ctx); err != nil {
		return nil // only when ctx ended
	}
	setupDone := make(chan struct{})
	if s.cfg.SetupES {
		s.health.set(UnreadySetup, true)
		background.Go(func() {
			defer close(setupDone)
			s.setupElasticsearch(setupCtx)
		})
	} else {
		close(setupDone)
	}
	if !s.awaitSetup(ctx, setupDone) {
		return nil
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
	for _, loop := range []func(context.Context){s.retryLoop, s.dlqLoop, s.splitLoop, func(ctx context.Context) { s.commitLoop(ctx, reader) }} {
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
	if runErr == nil { // a closed reader cannot commit: it would only wait out closeCtx
		if err := s.commit(closeCtx, reader); err != nil {
			s.log.Warn("final commit", "err", err)
		}
	}
	reader.Close()
	s.dlq.Close()
	st := s.Stats()
	s.log.Info("stopped", "indexed", st.Indexed, "dead_lettered", st.DeadLettered, "retries", st.Retries)
	return runErr
}

// createTopics creates the topics, when configured to, retrying while Kafka does not
// answer: the sink may start before it. A refusal that retrying cannot mend (no right
// to create topics, say) is logged, and consuming goes on: the topics may exist. It
// returns an error only when ctx ends.
func (s *Sink) createTopics(ctx context.Context) error {
	if !s.cfg.CreateTopics {
		return nil
	}
	b := backoff{min: s.cfg.RetryMin, max: min(s.cfg.RetryMax, 10*time.Second)}
	for {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := ensureTopics(tctx, s.cfg.KafkaBrokers, s.cfg.TopicPartitions, s.cfg.TopicReplication,
			s.cfg.Topic, s.cfg.DLQTopic)
		cancel()
		var kerr kafka.Error
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &kerr) && !kerr.Temporary():
			s.log.Warn("kafka topics not created; consuming anyway, they may exist (DISPATCH_KAFKA_CREATE_TOPICS=false skips this step)",
				"err", err, "topics", s.cfg.Topic+","+s.cfg.DLQTopic)
			return nil
		}
		s.warnf("kafka topics not ready; retrying", "err", err)
		sleep(ctx, b.next())
	}
}

// setupElasticsearch runs esSetup; readiness says setup_pending until it is done.
func (s *Sink) setupElasticsearch(ctx context.Context) {
	setup := &esSetup{
		api: s.api, prefix: s.cfg.IndexPrefix, retentionDays: s.cfg.RetentionDays, log: s.log,
		backoff: backoff{min: s.cfg.RetryMin, max: min(s.cfg.RetryMax, 10*time.Second)},
		warnf:   s.warnf, now: time.Now,
	}
	rep, err := setup.run(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil { // the embedded objects do not load: a build defect, which tests catch
		s.log.Error("elasticsearch setup", "err", err)
	}
	if rep.Proven {
		s.storing.Store(true) // the server stored a real event: a lone refusal is the event's fault
	}
	s.health.set(UnreadySetup, false)
	tpl, retention := rep.Template, "none"
	if tpl == "" {
		tpl = "none"
	}
	if rep.Policy {
		retention = fmt.Sprintf("%dd", s.cfg.RetentionDays)
	}
	s.log.Info("elasticsearch setup finished", "lifecycle_policy", rep.Policy, "index_template", tpl, "template_proven", rep.Proven,
		"index_pattern", s.cfg.IndexPrefix+"-*", "retention", retention)
}

// awaitSetup holds indexing back until setup is done, or SetupWait has passed: setup
// never blocks indexing. It reports false when ctx ended first.
func (s *Sink) awaitSetup(ctx context.Context, done <-chan struct{}) bool {
	if s.cfg.SetupWait == 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(s.cfg.SetupWait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	case <-t.C:
		s.log.Warn("elasticsearch setup has not finished; indexing without it (an index created meanwhile gets dynamic mappings)",
			"waited", s.cfg.SetupWait)
		return true
	}
}

// monitor measures the lag every LagInterval, and says the sink is behind while the
// oldest unindexed event is older than MaxEventAge.
func (s *Sink) monitor(ctx context.Context) {
	probe := newLagProbe(s.cfg.KafkaBrokers, s.cfg.Topic, s.cfg.Group)
	defer probe.close()
	t := time.NewTicker(s.cfg.LagInterval)
	defer t.Stop()
	for {
		mctx, cancel := context.WithTimeout(ctx, max(s.cfg.LagInterval, 10*time.Second))
		lag, err := probe.measure(mctx, time.Now())
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.warnf("consumer lag: cannot measure it; the last figures stand", "err", err)
		default:
			s.lag.Store(&lag)
			s.health.set(UnreadyBehind, lag.OldestAge > s.cfg.MaxEventAge)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
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

// warnf logs a warning at most every few seconds per message: during an outage the
// same failure repeats for every request.
func (s *Sink) warnf(msg string, args ...any) {
	now := time.Now()
	s.warnMu.Lock()
	last, seen := s.lastWarn[msg]
	if seen && now.Sub(last) < 5*time.Second {
		s.warnMu.Unlock()
		return
	}
	s.lastWarn[msg] = now
	s.warnMu.Unlock()
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
