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
