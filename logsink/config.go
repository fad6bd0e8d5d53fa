package logsink

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/taskpull/taskd/internal/config"
)

// Config configures the log sink (cmd/logsink): DefaultConfig, or Load for the
// defaults, then the environment, then flags (flags win). Its table (see Settings) is
// the single source of every setting's names, default and checks.
type Config struct {
	// KafkaBrokers are the bootstrap addresses (DISPATCH_KAFKA_BROKERS, comma list).
	KafkaBrokers []string
	// Topic is consumed (DISPATCH_KAFKA_TOPIC, default taskd.events).
	Topic string
	// DLQTopic receives what cannot be indexed, with the reason in a header
	// (DISPATCH_KAFKA_DLQ_TOPIC, default taskd.events.dlq).
	DLQTopic string
	// Group is the consumer group (DISPATCH_KAFKA_GROUP, default taskd-logsink).
	Group string
	// CreateTopics creates Topic and DLQTopic at start if missing
	// (DISPATCH_KAFKA_CREATE_TOPICS, default true), with TopicPartitions partitions
	// (DISPATCH_KAFKA_PARTITIONS, default 6) and TopicReplication replicas
	// (DISPATCH_KAFKA_REPLICATION, default 1).
	CreateTopics     bool
	TopicPartitions  int
	TopicReplication int
	// SessionTimeout is the consumer group session timeout
	// (DISPATCH_KAFKA_SESSION_TIMEOUT, default 30s).
	SessionTimeout time.Duration
	// CommitInterval is how often acknowledged offsets are committed
	// (DISPATCH_KAFKA_COMMIT_INTERVAL, default 1s). A crash replays at most this much.
	CommitInterval time.Duration

	// ESURLs are the Elasticsearch nodes (DISPATCH_ES_URLS, comma list).
	ESURLs []string
	// ESUsername and ESPassword authenticate to Elasticsearch (DISPATCH_ES_USERNAME,
	// DISPATCH_ES_PASSWORD); empty for none. The password is never logged.
	ESUsername string
	ESPassword string
	// IndexPrefix names the daily indices prefix-YYYY.MM.DD, the index template and the
	// lifecycle policy (DISPATCH_ES_INDEX_PREFIX, default taskd-events).
	IndexPrefix string
	// RetentionDays is how long an index lives before ILM deletes it
	// (DISPATCH_ES_RETENTION_DAYS, default 30).
	RetentionDays int
	// SetupES installs the ILM policy and the index template at start
	// (DISPATCH_ES_SETUP, default true), skipping with a warning what the server does
	// not support. Turn it off where the operator manages them.
	SetupES bool
	// SetupWait is how long indexing waits for the setup to finish, so that the day's
	// first index is created from the template (DISPATCH_ES_SETUP_WAIT, default 30s);
	// past it indexing starts anyway. 0 does not wait.
	SetupWait time.Duration
	// Workers is the number of concurrent bulk requests (DISPATCH_ES_WORKERS, default 4).
	Workers int
	// FlushBytes is the bulk request size that triggers a flush
	// (DISPATCH_ES_FLUSH_BYTES, default 2 MiB).
	FlushBytes int
	// FlushInterval flushes partial bulk requests (DISPATCH_ES_FLUSH_INTERVAL,
	// default 500ms): the sink's added latency when traffic is low.
	FlushInterval time.Duration
	// RetryMin and RetryMax bound the backoff of items and requests that Elasticsearch
	// answered 429 or 5xx, or not at all (DISPATCH_ES_RETRY_MIN, default 100ms;
	// DISPATCH_ES_RETRY_MAX, default 30s). They are retried until they succeed.
	RetryMin time.Duration
	RetryMax time.Duration

	// MaxInFlight bounds the messages fetched but not yet indexed
	// (DISPATCH_LOGSINK_MAX_IN_FLIGHT, default 20000): when Elasticsearch is down the
	// sink stops fetching and the backlog waits in Kafka, not in memory.
	MaxInFlight int
	// ShutdownTimeout bounds the graceful flush at shutdown
	// (DISPATCH_LOGSINK_SHUTDOWN_TIMEOUT, default 20s); what is not indexed by then is
	// not committed and is consumed again at the next start. 0 stops at once.
	ShutdownTimeout time.Duration
	// LagInterval is how often the consumer lag and the age of the oldest unindexed
	// event are measured from the broker (DISPATCH_LOGSINK_LAG_INTERVAL, default 5s).
	LagInterval time.Duration
	// MaxEventAge is the readiness bound: the sink is not ready while its oldest
	// unindexed event is older (DISPATCH_LOGSINK_MAX_EVENT_AGE, default 5m).
	MaxEventAge time.Duration
	// LogLevel is debug, info, warn or error (DISPATCH_LOG_LEVEL, default info).
	LogLevel string
	// MetricsAddr serves /metrics, /healthz, /readyz and /livez
	// (DISPATCH_LOGSINK_METRICS_ADDR, default :9101); empty turns it off.
	MetricsAddr string
	// sources says where Load took each setting that is not its default; see Source.
	sources config.Sources
}

// table binds the log sink's configuration table to c: env name, flag, default,
// meaning and checks of every setting. It is the single source of loading, validation,
// -h and the reference (docs/CONFIG.md).
func (c *Config) table() config.Table {
	return config.Table{
		{Env: "DISPATCH_KAFKA_BROKERS", Flag: "kafka-brokers", Usage: "Kafka bootstrap brokers, comma-separated",
			Value: config.List(&c.KafkaBrokers, config.Required)},
		{Env: "DISPATCH_KAFKA_TOPIC", Flag: "kafka-topic", Default: "taskd.events", Usage: "events topic",
			Value: config.String(&c.Topic, config.Required)},
		{Env: "DISPATCH_KAFKA_DLQ_TOPIC", Flag: "kafka-dlq-topic", Default: "taskd.events.dlq", Usage: "dead-letter topic",
			Value: config.String(&c.DLQTopic, config.Required)},
		{Env: "DISPATCH_KAFKA_GROUP", Flag: "kafka-group", Default: "taskd-logsink", Usage: "consumer group",
			Value: config.String(&c.Group, config.Required)},
		{Env: "DISPATCH_KAFKA_CREATE_TOPICS", Flag: "kafka-create-topics", Default: "true", Usage: "create missing topics at start",
			Value: config.Bool(&c.CreateTopics)},
		// Checked even with topic creation off: no topic has zero partitions or replicas.
		{Env: "DISPATCH_KAFKA_PARTITIONS", Flag: "kafka-partitions", Default: "6", Usage: "partitions of created topics",
			Value: config.Int(&c.TopicPartitions, config.Positive)},
		{Env: "DISPATCH_KAFKA_REPLICATION", Flag: "kafka-replication", Default: "1", Usage: "replication factor of created topics",
			Value: config.Int(&c.TopicReplication, config.Positive)},
		{Env: "DISPATCH_KAFKA_SESSION_TIMEOUT", Flag: "kafka-session-timeout", Default: "30s", Usage: "consumer group session timeout",
			Value: config.Duration(&c.SessionTimeout, config.AtLeast(time.Second))},
		{Env: "DISPATCH_KAFKA_COMMIT_INTERVAL", Flag: "kafka-commit-interval", Default: "1s", Usage: "offset commit interval",
			Value: config.Duration(&c.CommitInterval, config.Positive)},
		{Env: "DISPATCH_ES_URLS", Flag: "es-urls", Usage: "Elasticsearch URLs, comma-separated",
			Value: config.List(&c.ESURLs, config.Required)},
		{Env: "DISPATCH_ES_USERNAME", Flag: "es-username", Usage: "Elasticsearch user",
			Value: config.String(&c.ESUsername)},
		{Env: "DISPATCH_ES_PASSWORD", Flag: "es-password", Usage: "Elasticsearch password",
			Value: config.String(&c.ESPassword)},
		{Env: "DISPATCH_ES_INDEX_PREFIX", Flag: "es-index-prefix", Default: "taskd-events", Usage: "daily index name prefix",
			Value: config.String(&c.IndexPrefix, validIndexPrefix)},
		{Env: "DISPATCH_ES_RETENTION_DAYS", Flag: "es-retention-days", Default: "30", Usage: "days before ILM deletes an index",
			Value: config.Int(&c.RetentionDays, config.Positive)},
		{Env: "DISPATCH_ES_SETUP", Flag: "es-setup", Default: "true", Usage: "install the ILM policy and index template at start, skipping what the server does not support",
			Value: config.Bool(&c.SetupES)},
		{Env: "DISPATCH_ES_SETUP_WAIT", Flag: "es-setup-wait", Default: "30s", Usage: "how long indexing waits for the setup at start; 0: not at all",
			Value: config.Duration(&c.SetupWait, config.NotNegative)},
		{Env: "DISPATCH_ES_WORKERS", Flag: "es-workers", Default: "4", Usage: "concurrent bulk requests",
			Value: config.Int(&c.Workers, config.Positive)},
		{Env: "DISPATCH_ES_FLUSH_BYTES", Flag: "es-flush-bytes", Default: "2097152", Usage: "bulk request size",
			Value: config.Int(&c.FlushBytes, config.AtLeast(1024))},
		{Env: "DISPATCH_ES_FLUSH_INTERVAL", Flag: "es-flush-interval", Default: "500ms", Usage: "bulk flush interval",
			Value: config.Duration(&c.FlushInterval, config.Positive)},
		{Env: "DISPATCH_ES_RETRY_MIN", Flag: "es-retry-min", Default: "100ms", Usage: "first retry backoff",
			Value: config.Duration(&c.RetryMin, config.Positive)},
		{Env: "DISPATCH_ES_RETRY_MAX", Flag: "es-retry-max", Default: "30s", Usage: "longest retry backoff",
			Value: config.Duration(&c.RetryMax, config.Positive)},
		{Env: "DISPATCH_LOGSINK_MAX_IN_FLIGHT", Flag: "max-in-flight", Default: "20000", Usage: "messages fetched but not yet indexed",
			Value: config.Int(&c.MaxInFlight, config.Positive)},
		{Env: "DISPATCH_LOGSINK_SHUTDOWN_TIMEOUT", Flag: "shutdown-timeout", Default: "20s", Usage: "graceful shutdown bound; 0: stop at once, what is in flight is consumed again at the next start",
			Value: config.Duration(&c.ShutdownTimeout, config.NotNegative)},
		{Env: "DISPATCH_LOGSINK_LAG_INTERVAL", Flag: "lag-interval", Default: "5s", Usage: "how often the lag and the oldest unindexed event's age are measured",
			Value: config.Duration(&c.LagInterval, config.Positive)},
		{Env: "DISPATCH_LOGSINK_MAX_EVENT_AGE", Flag: "max-event-age", Default: "5m", Usage: "not ready while the oldest unindexed event is older than this",
			Value: config.Duration(&c.MaxEventAge, config.Positive)},
		{Env: "DISPATCH_LOG_LEVEL", Flag: "log-level", Default: "info", Usage: "debug, info, warn or error",
			Value: config.String(&c.LogLevel, logLevel)},
		{Env: "DISPATCH_LOGSINK_METRICS_ADDR", Flag: "metrics-addr", Default: ":9101", Usage: "listen address of /metrics, /healthz, /readyz and /livez; empty: off",
			Value: config.String(&c.MetricsAddr)},
	}
}

// DefaultConfig returns the defaults; KafkaBrokers and ESURLs have none.
func DefaultConfig() Config {
	var c Config
	if err := c.table().SetDefaults(); err != nil {
		panic("logsink: " + err.Error())
	}
	return c
}

// usageIntro heads logsink -h.
const usageIntro = `Usage: logsink [flags]

Every setting is an environment variable and a flag; flags win over the environment.
Durations are Go durations (500ms, 30s, 1h); lists are comma-separated.
docs/CONFIG.md is the full reference.

`

// Load sets c from the defaults, then the environment (read with getenv), then the
// command-line args: flags win. A value that does not parse is an error naming its
// setting and where the value came from. With -h or --help it writes every setting to
// help and returns flag.ErrHelp. Load does not validate: see Validate.
func (c *Config) Load(args []string, getenv func(string) string, help io.Writer) error {
	t := c.table()
	src, err := t.Load(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		t.WriteUsage(help, usageIntro)
	}
	c.sources = src
	return err
}

// Source says where the setting named env got its value when Load set c: "flag
// -<name>", the environment variable's name, or "default". Error messages use it, e.g.
// a bind error's.
func (c Config) Source(env string) string { return c.sources.Of(env) }

// Validate reports every invalid setting by its environment name (and its flag when
// the value came from it), with its value. Durations, sizes and counts must be
// positive wherever zero means nothing.
func (c Config) Validate() error {
	errs := []error{c.table().Validate(c.sources)}
	if c.DLQTopic != "" && c.DLQTopic == c.Topic {
		errs = append(errs, c.sources.Errorf("DISPATCH_KAFKA_DLQ_TOPIC", "must differ from DISPATCH_KAFKA_TOPIC, both are %q", c.Topic))
	}
	if c.RetryMin > 0 && c.RetryMax > 0 && c.RetryMax < c.RetryMin {
		errs = append(errs, fmt.Errorf("%s, %s: need min <= max, got %s and %s", c.sources.Label("DISPATCH_ES_RETRY_MIN"),
			c.sources.Label("DISPATCH_ES_RETRY_MAX"), config.FormatDuration(c.RetryMin), config.FormatDuration(c.RetryMax)))
	}
	return errors.Join(errs...)
}

// Settings is the log sink's configuration table (bound to a Config of its own).
func Settings() config.Table { return new(Config).table() }

// EnvNames lists the environment variables Config.Load reads.
func EnvNames() []string { return Settings().EnvNames() }

// ConfigReference renders the log sink's settings as a Markdown table.
func ConfigReference() string { return Settings().Reference() }

func validIndexPrefix(p string) error {
	if p == "" || len(p) > 200 || p != strings.ToLower(p) || strings.ContainsAny(p, " \\/*?\"<>|,#:") ||
		strings.HasPrefix(p, "-") || strings.HasPrefix(p, "_") || strings.HasPrefix(p, "+") {
		return fmt.Errorf("%q is not a valid index name prefix (lowercase, no spaces or \\/*?\"<>|,#:, not starting with -, _ or +)", p)
	}
	return nil
}

// logLevel refuses a level slog does not know (in any case).
func logLevel(v string) error {
	switch strings.ToLower(v) {
	case "debug", "info", "warn", "error":
		return nil
	}
	return fmt.Errorf("%q is not one of debug, info, warn, error", v)
}
