package logsink

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Config configures the log sink (cmd/logsink). Start from DefaultConfig, then Load
// environment and flags; flags win over the environment.
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
}

// DefaultConfig returns the defaults; KafkaBrokers and ESURLs have none.
func DefaultConfig() Config {
	return Config{
		Topic:            "taskd.events",
		DLQTopic:         "taskd.events.dlq",
		Group:            "taskd-logsink",
		CreateTopics:     true,
		TopicPartitions:  6,
		TopicReplication: 1,
		SessionTimeout:   30 * time.Second,
		CommitInterval:   time.Second,
		IndexPrefix:      "taskd-events",
		RetentionDays:    30,
		SetupES:          true,
		SetupWait:        30 * time.Second,
		Workers:          4,
		FlushBytes:       2 << 20,
		FlushInterval:    500 * time.Millisecond,
		RetryMin:         100 * time.Millisecond,
		RetryMax:         30 * time.Second,
		MaxInFlight:      20000,
		ShutdownTimeout:  20 * time.Second,
		LagInterval:      5 * time.Second,
		MaxEventAge:      5 * time.Minute,
		LogLevel:         "info",
		MetricsAddr:      ":9101",
	}
}

// listValue is a comma-separated flag.
type listValue struct{ dst *[]string }

func (v listValue) String() string {
	if v.dst == nil {
		return ""
	}
	return strings.Join(*v.dst, ",")
}

func (v listValue) Set(s string) error { *v.dst = splitList(s); return nil }

// Load applies the environment (read with getenv) and then the command-line args to c.
// A value that does not parse is an error naming its variable or flag. With -h it
// writes the flags to output (flag.PrintDefaults) and returns flag.ErrHelp.
func (c *Config) Load(args []string, getenv func(string) string, output io.Writer) error {
	fs, _, errs := c.flagSet(getenv, output)
	if errs != nil {
		return errs
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return nil
}

// Source says where the setting named env gets its value when Load reads args and
// getenv: "flag -<name>", the environment variable's name, or "default". Error
// messages use it, e.g. a bind error's.
func Source(args []string, getenv func(string) string, env string) string {
	c := DefaultConfig()
	fs, envOf, _ := c.flagSet(getenv, io.Discard)
	fs.Usage = func() {}
	_ = fs.Parse(args) // Load reports the errors
	src := "default"
	if getenv(env) != "" {
		src = env
	}
	fs.Visit(func(f *flag.Flag) {
		if envOf[f.Name] == env {
			src = "flag -" + f.Name
		}
	})
	return src
}

// flagSet applies the environment to c and returns the flag set that applies args,
// the environment variable of each flag, and the environment values that did not parse.
func (c *Config) flagSet(getenv func(string) string, output io.Writer) (*flag.FlagSet, map[string]string, error) {
	fs := flag.NewFlagSet("logsink", flag.ContinueOnError)
	fs.SetOutput(output)
	envOf := map[string]string{}
	var errs []error
	env := func(name string) (string, bool) {
		v := getenv(name)
		return v, v != ""
	}
	str := func(dst *string, flagName, envName, usage string) {
		envOf[flagName] = envName
		if v, ok := env(envName); ok {
			*dst = v
		}
		fs.StringVar(dst, flagName, *dst, usage+" ("+envName+")")
	}
	list := func(dst *[]string, flagName, envName, usage string) {
		envOf[flagName] = envName
		if v, ok := env(envName); ok {
			*dst = splitList(v)
		}
		fs.Var(listValue{dst}, flagName, usage+", comma-separated ("+envName+")")
	}
	integer := func(dst *int, flagName, envName, usage string) {
		envOf[flagName] = envName
		if v, ok := env(envName); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: not an integer: %q", envName, v))
			}
			*dst = n
		}
		fs.IntVar(dst, flagName, *dst, usage+" ("+envName+")")
	}
	boolean := func(dst *bool, flagName, envName, usage string) {
		envOf[flagName] = envName
		if v, ok := env(envName); ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: not a boolean: %q", envName, v))
			}
			*dst = b
		}
		fs.BoolVar(dst, flagName, *dst, usage+" ("+envName+")")
	}
	duration := func(dst *time.Duration, flagName, envName, usage string) {
		envOf[flagName] = envName
		if v, ok := env(envName); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: not a duration (like 500ms or 2s): %q", envName, v))
			}
			*dst = d
		}
		fs.DurationVar(dst, flagName, *dst, usage+" ("+envName+")")
	}

	list(&c.KafkaBrokers, "kafka-brokers", "DISPATCH_KAFKA_BROKERS", "Kafka bootstrap brokers")
	str(&c.Topic, "kafka-topic", "DISPATCH_KAFKA_TOPIC", "events topic")
	str(&c.DLQTopic, "kafka-dlq-topic", "DISPATCH_KAFKA_DLQ_TOPIC", "dead-letter topic")
	str(&c.Group, "kafka-group", "DISPATCH_KAFKA_GROUP", "consumer group")
	boolean(&c.CreateTopics, "kafka-create-topics", "DISPATCH_KAFKA_CREATE_TOPICS", "create missing topics at start")
	integer(&c.TopicPartitions, "kafka-partitions", "DISPATCH_KAFKA_PARTITIONS", "partitions of created topics")
	integer(&c.TopicReplication, "kafka-replication", "DISPATCH_KAFKA_REPLICATION", "replication factor of created topics")
	duration(&c.SessionTimeout, "kafka-session-timeout", "DISPATCH_KAFKA_SESSION_TIMEOUT", "consumer group session timeout")
	duration(&c.CommitInterval, "kafka-commit-interval", "DISPATCH_KAFKA_COMMIT_INTERVAL", "offset commit interval")
	list(&c.ESURLs, "es-urls", "DISPATCH_ES_URLS", "Elasticsearch URLs")
	str(&c.ESUsername, "es-username", "DISPATCH_ES_USERNAME", "Elasticsearch user")
	str(&c.ESPassword, "es-password", "DISPATCH_ES_PASSWORD", "Elasticsearch password")
	str(&c.IndexPrefix, "es-index-prefix", "DISPATCH_ES_INDEX_PREFIX", "daily index name prefix")
	integer(&c.RetentionDays, "es-retention-days", "DISPATCH_ES_RETENTION_DAYS", "days before ILM deletes an index")
	boolean(&c.SetupES, "es-setup", "DISPATCH_ES_SETUP", "install the ILM policy and index template at start, skipping what the server does not support")
	duration(&c.SetupWait, "es-setup-wait", "DISPATCH_ES_SETUP_WAIT", "how long indexing waits for the setup at start; 0: not at all")
	integer(&c.Workers, "es-workers", "DISPATCH_ES_WORKERS", "concurrent bulk requests")
	integer(&c.FlushBytes, "es-flush-bytes", "DISPATCH_ES_FLUSH_BYTES", "bulk request size")
	duration(&c.FlushInterval, "es-flush-interval", "DISPATCH_ES_FLUSH_INTERVAL", "bulk flush interval")
	duration(&c.RetryMin, "es-retry-min", "DISPATCH_ES_RETRY_MIN", "first retry backoff")
	duration(&c.RetryMax, "es-retry-max", "DISPATCH_ES_RETRY_MAX", "longest retry backoff")
	integer(&c.MaxInFlight, "max-in-flight", "DISPATCH_LOGSINK_MAX_IN_FLIGHT", "messages fetched but not yet indexed")
	duration(&c.ShutdownTimeout, "shutdown-timeout", "DISPATCH_LOGSINK_SHUTDOWN_TIMEOUT", "graceful shutdown bound; 0: stop at once, what is in flight is consumed again at the next start")
	duration(&c.LagInterval, "lag-interval", "DISPATCH_LOGSINK_LAG_INTERVAL", "how often the lag and the oldest unindexed event's age are measured")
	duration(&c.MaxEventAge, "max-event-age", "DISPATCH_LOGSINK_MAX_EVENT_AGE", "not ready while the oldest unindexed event is older than this")
	str(&c.LogLevel, "log-level", "DISPATCH_LOG_LEVEL", "debug, info, warn or error")
	str(&c.MetricsAddr, "metrics-addr", "DISPATCH_LOGSINK_METRICS_ADDR", "listen address of /metrics, /healthz, /readyz and /livez; empty: off")

	return fs, envOf, errors.Join(errs...)
}

// Validate reports the first invalid setting, by its environment name, with its
// value. Durations, sizes and counts must be positive wherever zero means nothing.
func (c Config) Validate() error {
	switch {
	case len(c.KafkaBrokers) == 0:
		return errors.New("DISPATCH_KAFKA_BROKERS: required (comma-separated host:port list)")
	case len(c.ESURLs) == 0:
		return errors.New("DISPATCH_ES_URLS: required (comma-separated list, e.g. http://localhost:9200)")
	case c.Topic == "":
		return errors.New("DISPATCH_KAFKA_TOPIC: must not be empty")
	case c.DLQTopic == "":
		return errors.New("DISPATCH_KAFKA_DLQ_TOPIC: must not be empty")
	case c.DLQTopic == c.Topic:
		return errors.New("DISPATCH_KAFKA_DLQ_TOPIC: must differ from DISPATCH_KAFKA_TOPIC")
	case c.Group == "":
		return errors.New("DISPATCH_KAFKA_GROUP: must not be empty")
	// Checked even with topic creation off: no topic has zero partitions or replicas.
	case c.TopicPartitions < 1:
		return fmt.Errorf("DISPATCH_KAFKA_PARTITIONS: must be at least 1, got %d", c.TopicPartitions)
	case c.TopicReplication < 1:
		return fmt.Errorf("DISPATCH_KAFKA_REPLICATION: must be at least 1, got %d", c.TopicReplication)
	case c.SessionTimeout < time.Second:
		return fmt.Errorf("DISPATCH_KAFKA_SESSION_TIMEOUT: must be at least 1s, got %s", c.SessionTimeout)
	case c.CommitInterval <= 0:
		return fmt.Errorf("DISPATCH_KAFKA_COMMIT_INTERVAL: must be positive, got %s", c.CommitInterval)
	case !validIndexPrefix(c.IndexPrefix):
		return fmt.Errorf("DISPATCH_ES_INDEX_PREFIX: %q is not a valid index name prefix (lowercase, no spaces or \\/*?\"<>|,#:, not starting with -, _ or +)", c.IndexPrefix)
	case c.RetentionDays < 1:
		return fmt.Errorf("DISPATCH_ES_RETENTION_DAYS: must be at least 1, got %d", c.RetentionDays)
	case c.Workers < 1:
		return fmt.Errorf("DISPATCH_ES_WORKERS: must be at least 1, got %d", c.Workers)
	case c.FlushBytes < 1024:
		return fmt.Errorf("DISPATCH_ES_FLUSH_BYTES: must be at least 1024, got %d", c.FlushBytes)
	case c.FlushInterval <= 0:
		return fmt.Errorf("DISPATCH_ES_FLUSH_INTERVAL: must be positive, got %s", c.FlushInterval)
	case c.RetryMin <= 0:
		return fmt.Errorf("DISPATCH_ES_RETRY_MIN: must be positive, got %s", c.RetryMin)
	case c.RetryMax <= 0:
		return fmt.Errorf("DISPATCH_ES_RETRY_MAX: must be positive, got %s", c.RetryMax)
	case c.RetryMax < c.RetryMin:
		return fmt.Errorf("DISPATCH_ES_RETRY_MIN, DISPATCH_ES_RETRY_MAX: need min <= max, got %s and %s", c.RetryMin, c.RetryMax)
	case c.MaxInFlight < 1:
		return fmt.Errorf("DISPATCH_LOGSINK_MAX_IN_FLIGHT: must be at least 1, got %d", c.MaxInFlight)
	case c.SetupWait < 0: // 0 is meaningful: index at once
		return fmt.Errorf("DISPATCH_ES_SETUP_WAIT: must not be negative, got %s", c.SetupWait)
	case c.LagInterval <= 0:
		return fmt.Errorf("DISPATCH_LOGSINK_LAG_INTERVAL: must be positive, got %s", c.LagInterval)
	case c.MaxEventAge <= 0:
		return fmt.Errorf("DISPATCH_LOGSINK_MAX_EVENT_AGE: must be positive, got %s", c.MaxEventAge)
	case c.ShutdownTimeout < 0: // 0 is meaningful: stop at once, replay what was in flight
		return fmt.Errorf("DISPATCH_LOGSINK_SHUTDOWN_TIMEOUT: must not be negative, got %s", c.ShutdownTimeout)
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("DISPATCH_LOG_LEVEL: %q is not one of debug, info, warn, error", c.LogLevel)
	}
	return nil
}

func validIndexPrefix(p string) bool {
	if p == "" || len(p) > 200 || p != strings.ToLower(p) || strings.ContainsAny(p, " \\/*?\"<>|,#:") {
		return false
	}
	return !strings.HasPrefix(p, "-") && !strings.HasPrefix(p, "_") && !strings.HasPrefix(p, "+")
}

// CheckRelayEnv refuses an outbox relay setting given as zero or a negative value.
// LoadRelayConfig takes zero for "not set" and puts the default in its place, so
// without this DISPATCH_RELAY_BATCH_SIZE=0 would start with 1000 and say nothing. Values
// that do not parse are LoadRelayConfig's to report.
func CheckRelayEnv(getenv func(string) string) error {
	var errs []error
	if v := getenv("DISPATCH_RELAY_BATCH_SIZE"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n < 1 {
			errs = append(errs, fmt.Errorf("DISPATCH_RELAY_BATCH_SIZE: must be at least 1, got %s", v))
		}
	}
	for _, name := range []string{"DISPATCH_RELAY_BATCH_TIMEOUT", "DISPATCH_RELAY_POLL_INTERVAL"} {
		if v := getenv(name); v != "" {
			if d, err := time.ParseDuration(v); err == nil && d <= 0 {
				errs = append(errs, fmt.Errorf("%s: must be positive, got %s", name, v))
			}
		}
	}
	return errors.Join(errs...)
}
