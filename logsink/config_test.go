package logsink

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestConfigLoad(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DISPATCH_KAFKA_BROKERS":     "k1:9092,k2:9092",
		"DISPATCH_ES_URLS":           "http://es1:9200",
		"DISPATCH_KAFKA_TOPIC":       "from-env",
		"DISPATCH_ES_RETENTION_DAYS": "14",
		"DISPATCH_ES_SETUP":          "false",
		"DISPATCH_ES_FLUSH_INTERVAL": "2s",
	}
	c := DefaultConfig()
	err := c.Load([]string{"-kafka-topic", "from-flag", "-es-urls", "http://a:9200,http://b:9200"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	switch {
	case c.Topic != "from-flag":
		t.Errorf("topic %q: the flag must win over the environment", c.Topic)
	case len(c.ESURLs) != 2 || c.ESURLs[1] != "http://b:9200":
		t.Errorf("es urls %v", c.ESURLs)
	case len(c.KafkaBrokers) != 2 || c.RetentionDays != 14 || c.SetupES || c.FlushInterval != 2*time.Second:
		t.Errorf("env not applied: %+v", c)
	case c.DLQTopic != "taskd.events.dlq" || c.Group != "taskd-logsink" || c.IndexPrefix != "taskd-events":
		t.Errorf("defaults not kept: %+v", c)
	}
}

func TestConfigValidateNamesTheSetting(t *testing.T) {
	t.Parallel()
	valid := DefaultConfig()
	valid.KafkaBrokers = []string{"k:9092"}
	valid.ESURLs = []string{"http://es:9200"}
	if err := valid.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Config){
		"DISPATCH_KAFKA_BROKERS":         func(c *Config) { c.KafkaBrokers = nil },
		"DISPATCH_ES_URLS":               func(c *Config) { c.ESURLs = nil },
		"DISPATCH_KAFKA_DLQ_TOPIC":       func(c *Config) { c.DLQTopic = c.Topic },
		"DISPATCH_ES_INDEX_PREFIX":       func(c *Config) { c.IndexPrefix = "Events" },
		"DISPATCH_ES_RETENTION_DAYS":     func(c *Config) { c.RetentionDays = 0 },
		"DISPATCH_ES_WORKERS":            func(c *Config) { c.Workers = 0 },
		"DISPATCH_LOGSINK_MAX_IN_FLIGHT": func(c *Config) { c.MaxInFlight = 0 },
		"DISPATCH_LOG_LEVEL":             func(c *Config) { c.LogLevel = "loud" },
		"DISPATCH_ES_RETRY_MIN":          func(c *Config) { c.RetryMin = time.Minute },
	} {
		c := valid
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	c := DefaultConfig()
	err := c.Load(nil, func(k string) string {
		if k == "DISPATCH_ES_WORKERS" {
			return "four"
		}
		return ""
	}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "DISPATCH_ES_WORKERS") {
		t.Errorf("unparsable env: %v", err)
	}
}

// A zero or negative duration, size or count is refused, naming the setting and the
// value, wherever zero means nothing.
func TestConfigRefusesNonPositive(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DISPATCH_KAFKA_BROKERS": "k:9092", "DISPATCH_ES_URLS": "http://es:9200"}
	for _, c := range []struct{ env, zero, negative string }{
		{"DISPATCH_KAFKA_PARTITIONS", "0", "-1"},
		{"DISPATCH_KAFKA_REPLICATION", "0", "-1"},
		{"DISPATCH_KAFKA_SESSION_TIMEOUT", "0s", "-1s"},
		{"DISPATCH_KAFKA_COMMIT_INTERVAL", "0s", "-1s"},
		{"DISPATCH_ES_RETENTION_DAYS", "0", "-1"},
		{"DISPATCH_ES_WORKERS", "0", "-1"},
		{"DISPATCH_ES_FLUSH_BYTES", "0", "-1"},
		{"DISPATCH_ES_FLUSH_INTERVAL", "0s", "-1s"},
		{"DISPATCH_ES_RETRY_MIN", "0s", "-1s"},
		{"DISPATCH_ES_RETRY_MAX", "0s", "-1s"},
		{"DISPATCH_LOGSINK_MAX_IN_FLIGHT", "0", "-1"},
		{"DISPATCH_LOGSINK_SHUTDOWN_TIMEOUT", "", "-1s"}, // 0: stop at once, replay the rest
	} {
		for _, v := range []string{c.zero, c.negative} {
			if v == "" {
				continue
			}
			env := map[string]string{c.env: v}
			for k, v := range base {
				env[k] = v
			}
			cfg := DefaultConfig()
			err := cfg.Load(nil, func(k string) string { return env[k] }, io.Discard)
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), c.env) || !strings.Contains(err.Error(), "got "+v) {
				t.Errorf("%s=%s: %v, want an error naming %s and %s", c.env, v, err, c.env, v)
			}
		}
	}
}

// CheckRelayEnv refuses the relay settings LoadRelayConfig would quietly replace by
// their defaults (zero) or take as they are (negative durations).
func TestCheckRelayEnv(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ env, value string }{
		{"DISPATCH_RELAY_BATCH_SIZE", "0"},
		{"DISPATCH_RELAY_BATCH_SIZE", "-5"},
		{"DISPATCH_RELAY_BATCH_TIMEOUT", "0s"},
		{"DISPATCH_RELAY_BATCH_TIMEOUT", "-1ms"},
		{"DISPATCH_RELAY_POLL_INTERVAL", "0"},
		{"DISPATCH_RELAY_POLL_INTERVAL", "-2s"},
	} {
		err := CheckRelayEnv(func(k string) string { return map[string]string{c.env: c.value}[k] })
		if err == nil || !strings.Contains(err.Error(), c.env) || !strings.Contains(err.Error(), "got "+c.value) {
			t.Errorf("%s=%s: %v", c.env, c.value, err)
		}
	}
	ok := map[string]string{"DISPATCH_RELAY_BATCH_SIZE": "10", "DISPATCH_RELAY_BATCH_TIMEOUT": "5ms",
		"DISPATCH_RELAY_POLL_INTERVAL": "1s"}
	if err := CheckRelayEnv(func(k string) string { return ok[k] }); err != nil {
		t.Errorf("valid relay settings: %v", err)
	}
	if err := CheckRelayEnv(func(string) string { return "" }); err != nil {
		t.Errorf("no relay settings: %v", err)
	}
}

func TestSource(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DISPATCH_LOGSINK_METRICS_ADDR": ":9", "DISPATCH_ES_WORKERS": "2"}
	getenv := func(k string) string { return env[k] }
	args := []string{"-es-workers", "3"}
	for name, want := range map[string]string{
		"DISPATCH_LOGSINK_METRICS_ADDR": "DISPATCH_LOGSINK_METRICS_ADDR",
		"DISPATCH_ES_WORKERS":           "flag -es-workers",
		"DISPATCH_KAFKA_TOPIC":          "default",
	} {
		if got := Source(args, getenv, name); got != want {
			t.Errorf("Source(%s) = %q, want %q", name, got, want)
		}
	}
}
