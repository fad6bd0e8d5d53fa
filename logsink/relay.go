package logsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/config"
	"github.com/taskpull/taskd/internal/store"
)

// Outbox is what the relay needs from the store. StoreOutbox adapts *store.Store.
type Outbox interface {
	// TryLeaseOutbox tries, without waiting, to make this process the only relay of
	// the outbox; it returns a nil lease and no error when another process is.
	TryLeaseOutbox(ctx context.Context) (OutboxLease, error)
	// OutboxBacklog counts the rows waiting and finds the oldest.
	OutboxBacklog(ctx context.Context) (store.OutboxBacklog, error)
}

// OutboxLease is the exclusive right to relay, held until Release. *store.OutboxLease
// implements it.
type OutboxLease interface {
	// ReadOutbox returns up to limit rows, lowest id first. It fails once the lease is
	// lost.
	ReadOutbox(ctx context.Context, limit int) ([]store.OutboxRow, error)
	// DeleteOutbox removes rows Kafka acknowledged.
	DeleteOutbox(ctx context.Context, ids []int64) error
	// Release gives the lease up.
	Release(ctx context.Context) error
}

// StoreOutbox adapts the MySQL store to Outbox.
func StoreOutbox(s *store.Store) Outbox { return storeOutbox{s} }

type storeOutbox struct{ s *store.Store }

func (o storeOutbox) TryLeaseOutbox(ctx context.Context) (OutboxLease, error) {
	l, err := o.s.TryLeaseOutbox(ctx)
	if l == nil || err != nil {
		return nil, err // never a typed nil inside the interface
	}
	return l, nil
}

func (o storeOutbox) OutboxBacklog(ctx context.Context) (store.OutboxBacklog, error) {
	return o.s.OutboxBacklog(ctx)
}

// RelayConfig configures a Relay. Zero fields take the defaults documented on each.
type RelayConfig struct {
	// Brokers are the Kafka bootstrap addresses (DISPATCH_KAFKA_BROKERS). Required.
	Brokers []string
	// Topic is the events topic (DISPATCH_KAFKA_TOPIC, default taskd.events).
	Topic string
	// BatchSize is the number of outbox rows read and sent per round (default 1000).
	BatchSize int
	// BatchTimeout bounds how long the Kafka writer waits to fill a partition's batch
	// (default 10ms). Every round waits this long for its partial batches, so it is the
	// relay's added latency, not a throughput knob.
	BatchTimeout time.Duration
	// Compression of produced batches: none, gzip, snappy, lz4, zstd (default snappy).
	Compression string
	// WriteTimeout bounds one round's write to Kafka (default 30s).
	WriteTimeout time.Duration
	// PollInterval is the wait after finding the outbox empty (default 200ms); Notify
	// cuts it short.
	PollInterval time.Duration
	// StandbyInterval is how often a process that is not the relay tries to become it
	// (default 5s).
	StandbyInterval time.Duration
	// BackoffMin and BackoffMax bound the waits between failed rounds while Kafka or
	// MySQL is unavailable (defaults 100ms and 10s).
	BackoffMin, BackoffMax time.Duration
	// StatsInterval is how often the backlog is measured (default 5s).
	StatsInterval time.Duration
	// Clock tells the time for backlog age (default the wall clock).
	Clock clock.Clock
}

func (c RelayConfig) withDefaults() RelayConfig {
	setDefault(&c.Topic, "taskd.events")
	setDefault(&c.BatchSize, 1000)
	setDefault(&c.BatchTimeout, 10*time.Millisecond)
	setDefault(&c.Compression, "snappy")
	setDefault(&c.WriteTimeout, 30*time.Second)
	setDefault(&c.PollInterval, 200*time.Millisecond)
	setDefault(&c.StandbyInterval, 5*time.Second)
	setDefault(&c.BackoffMin, 100*time.Millisecond)
	setDefault(&c.BackoffMax, 10*time.Second)
	setDefault(&c.StatsInterval, 5*time.Second)
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	return c
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate reports the first invalid setting, by its environment name.
func (c RelayConfig) Validate() error {
	c = c.withDefaults()
	if len(c.Brokers) == 0 {
		return errors.New("DISPATCH_KAFKA_BROKERS: required for the outbox relay")
	}
	if c.BatchSize < 1 {
		return fmt.Errorf("DISPATCH_RELAY_BATCH_SIZE: must be at least 1, got %d", c.BatchSize)
	}
	if _, err := parseCompression(c.Compression); err != nil {
		return fmt.Errorf("DISPATCH_KAFKA_COMPRESSION: %w", err)
	}
	if c.BackoffMin > c.BackoffMax {
		return errors.New("relay backoff: minimum above maximum")
	}
	return nil
}

// relayTable binds the settings LoadRelayConfig reads to c: the relay runs inside
// dispatchd and reads the environment only.
func (c *RelayConfig) relayTable() config.Table {
	return config.Table{
		{Env: "DISPATCH_KAFKA_BROKERS", Usage: "Kafka bootstrap brokers, comma-separated; empty: no relay",
			Value: config.List(&c.Brokers)},
		{Env: "DISPATCH_KAFKA_TOPIC", Default: "taskd.events", Usage: "events topic the outbox is relayed to",
			Value: config.String(&c.Topic)},
		{Env: "DISPATCH_KAFKA_COMPRESSION", Default: "snappy", Usage: "compression of produced batches: none, gzip, snappy, lz4 or zstd",
			Value: config.String(&c.Compression, func(v string) error { _, err := parseCompression(v); return err })},
		{Env: "DISPATCH_RELAY_BATCH_SIZE", Default: "1000", Usage: "outbox rows read and sent per round",
			Value: config.Int(&c.BatchSize, config.Positive)},
		{Env: "DISPATCH_RELAY_BATCH_TIMEOUT", Default: "10ms", Usage: "how long the Kafka writer waits to fill a partition's batch: the relay's added latency, not a throughput knob",
			Value: config.Duration(&c.BatchTimeout, config.Positive)},
		{Env: "DISPATCH_RELAY_POLL_INTERVAL", Default: "200ms", Usage: "wait after finding the outbox empty; a new event cuts it short",
			Value: config.Duration(&c.PollInterval, config.Positive)},
	}
}

// LoadRelayConfig reads the relay's settings from the environment (RelaySettings lists
// them) over their defaults. A value that does not parse, or is zero or negative where
// that means nothing, is an error naming the variable and the value. The broker list
// is not required: empty means no relay (Validate requires it).
func LoadRelayConfig(getenv func(string) string) (RelayConfig, error) {
	var c RelayConfig
	t := c.relayTable()
	src, err := t.Load(nil, getenv)
	if err == nil {
		err = t.Validate(src)
	}
	return c.withDefaults(), err
}

// RelaySettings lists the environment variables LoadRelayConfig reads (the relay runs
// inside dispatchd and has no flags), with their defaults.
func RelaySettings() config.Table { return new(RelayConfig).relayTable() }

// RelayEnvNames lists the environment variables LoadRelayConfig reads.
func RelayEnvNames() []string { return RelaySettings().EnvNames() }

// RelayStats is a snapshot of the relay's progress, for metrics and logs.
type RelayStats struct {
	// Active is true while this process holds the relay lease.
	Active bool
	// Backlog is the number of outbox rows waiting at the last measurement.
	Backlog int64
	// OldestAge is how long the oldest waiting row has waited (0 when none).
	OldestAge time.Duration
	// MeasuredAt is when Backlog and OldestAge were measured (zero before the first).
	MeasuredAt time.Time
	// Sent counts events Kafka acknowledged and the outbox forgot, since start.
	Sent uint64
	// Failures counts rounds that failed (Kafka or MySQL unavailable), since start.
	Failures uint64
}

// Relay moves events from the MySQL outbox to Kafka: rows are read in id order, written
// with acks from all in-sync replicas, keyed by uid (so one user's events stay in one
// partition, in order), and deleted only after Kafka acknowledged them. Delivery is
// at-least-once: a crash between the write and the delete sends rows again, which the
// logsink absorbs because the event id is the document id.
//
// Any number of processes may run a Relay on the same database: one holds the lease and
// relays, the others stand by and take over when it stops or dies.
type Relay struct {
	cfg    RelayConfig
	outbox Outbox
	log    *slog.Logger
	writer *kafka.Writer
	wake   chan struct{}

	active   atomic.Bool
	sent     atomic.Uint64
	failures atomic.Uint64
	mu       sync.Mutex
	backlog  store.OutboxBacklog
	measured time.Time
}

// NewRelay checks the configuration and prepares a relay; nothing connects until Run.
func NewRelay(cfg RelayConfig, outbox Outbox, logger *slog.Logger) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	codec, _ := parseCompression(cfg.Compression)
	log := logger.With("component", "outbox_relay")
	info, errs := kafkaLoggers(log)
	w := &kafka.Writer{
		Addr:  kafka.TCP(cfg.Brokers...),
		Topic: cfg.Topic,
		// Murmur2 is the Java client's partitioner: a uid lands in the same partition
		// whichever client produced it.
		Balancer:     &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll,
		BatchSize:    cfg.BatchSize,
		BatchBytes:   16 << 20,
		BatchTimeout: cfg.BatchTimeout,
		Compression:  codec,
		// A few quick retries inside the writer ride out leader elections; longer
		// outages are the relay's own backoff, which keeps the lease meanwhile.
		MaxAttempts:            3,
		WriteBackoffMin:        50 * time.Millisecond,
		WriteBackoffMax:        500 * time.Millisecond,
		AllowAutoTopicCreation: true,
		Logger:                 info,
		ErrorLogger:            errs,
	}
	return &Relay{cfg: cfg, outbox: outbox, log: log, writer: w, wake: make(chan struct{}, 1)}, nil
}

// Notify tells the relay that rows were just committed, so it need not wait for its next
// poll. It never blocks; the dispatch path may call it after every commit.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Stats returns the relay's latest figures.
func (r *Relay) Stats() RelayStats {
	r.mu.Lock()
	b, at := r.backlog, r.measured
	r.mu.Unlock()
	s := RelayStats{
		Active: r.active.Load(), Backlog: b.Rows, MeasuredAt: at,
		Sent: r.sent.Load(), Failures: r.failures.Load(),
	}
	if !b.Oldest.IsZero() {
		s.OldestAge = max(0, at.Sub(b.Oldest))
	}
	return s
}

// Run relays until ctx is done, then closes the Kafka writer and returns nil. Failures
// of Kafka or MySQL are logged and retried, never returned: the outbox keeps the events
// and the backlog grows until they are back.
func (r *Relay) Run(ctx context.Context) error {
	defer r.writer.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.measureLoop(ctx)
	}()
	defer wg.Wait()

	b := backoff{min: r.cfg.BackoffMin, max: r.cfg.BackoffMax}
	standby := false
	for ctx.Err() == nil {
		lease, err := r.outbox.TryLeaseOutbox(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.failures.Add(1)
				r.log.Warn("outbox lease", "err", err)
			}
			sleep(ctx, b.next())
			continue
		}
		if lease == nil {
			if !standby {
				r.log.Info("another process is relaying the outbox; standing by")
				standby = true
			}
			sleep(ctx, jitter(r.cfg.StandbyInterval))
			continue
		}
		standby = false
		r.active.Store(true)
		r.log.Info("relaying the outbox")
		err = r.relay(ctx, lease)
		r.active.Store(false)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if rerr := lease.Release(rctx); rerr != nil {
			r.log.Warn("outbox lease release", "err", rerr)
		}
		cancel()
		if ctx.Err() != nil {
			break
		}
		r.failures.Add(1)
		r.log.Warn("outbox relay interrupted; will try to take over again", "err", err)
		sleep(ctx, b.next())
	}
	r.log.Info("outbox relay stopped", "sent", r.sent.Load())
	return nil
}

// relay drains the outbox while the lease holds. It returns when ctx is done or the
// store fails (the lease may be gone). Kafka failures are retried here, keeping the
// lease: a standby could do no better.
func (r *Relay) relay(ctx context.Context, lease OutboxLease) error {
	b := backoff{min: r.cfg.BackoffMin, max: r.cfg.BackoffMax}
	down := false
	for {
		rows, err := lease.ReadOutbox(ctx, r.cfg.BatchSize)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-r.wake:
			case <-time.After(r.cfg.PollInterval):
			}
			continue
		}
		sent, err := r.send(ctx, rows)
		if len(sent) > 0 {
			// Kafka has these: forget them even if shutdown began meanwhile, or the next
			// relay sends them again.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			derr := lease.DeleteOutbox(dctx, sent)
			cancel()
			if derr != nil {
				// Kafka has them; they will be sent again, and deduplicated downstream.
				return derr
			}
			r.sent.Add(uint64(len(sent)))
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.failures.Add(1)
			if !down {
				r.log.Warn("kafka write failed; retrying with backoff, the outbox keeps the events",
					"err", err, "rows", len(rows), "sent", len(sent))
				down = true
			}
			sleep(ctx, b.next())
			continue
		}
		if down {
			r.log.Info("kafka writes succeed again")
			down = false
		}
		b.reset()
	}
}

// send writes rows to Kafka and returns the ids of the rows Kafka acknowledged, which on
// a partial failure is fewer than all.
func (r *Relay) send(ctx context.Context, rows []store.OutboxRow) ([]int64, error) {
	msgs := make([]kafka.Message, len(rows))
	for i, row := range rows {
		msgs[i] = kafka.Message{
			Key:     []byte(row.UID),
			Value:   row.Payload,
			Headers: []kafka.Header{{Key: "event_id", Value: []byte(row.EventID)}},
			Time:    row.CreatedAt,
		}
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	err := r.writer.WriteMessages(wctx, msgs...)
	ids := make([]int64, 0, len(rows))
	var werrs kafka.WriteErrors
	switch {
	case err == nil:
		for _, row := range rows {
			ids = append(ids, row.ID)
		}
	case errors.As(err, &werrs) && len(werrs) == len(rows):
		for i, row := range rows {
			if werrs[i] == nil {
				ids = append(ids, row.ID)
			}
		}
	}
	if err != nil {
		return ids, fmt.Errorf("kafka write %d events: %w", len(rows), err)
	}
	return ids, nil
}

// measureLoop refreshes the backlog figures, standby or not: any process can report
// how far behind the relay is.
func (r *Relay) measureLoop(ctx context.Context) {
	for {
		b, err := r.outbox.OutboxBacklog(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("outbox backlog", "err", err)
		} else {
			r.mu.Lock()
			r.backlog, r.measured = b, r.cfg.Clock.Now()
			r.mu.Unlock()
			if b.Rows > 0 && r.active.Load() {
				r.log.Debug("outbox backlog", "rows", b.Rows, "oldest_age", r.Stats().OldestAge.String())
			}
		}
		if !sleep(ctx, r.cfg.StatsInterval) {
			return
		}
	}
}
