package logsink

import (
	"io"
	"reflect"
	"slices"
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
		{"DISPATCH_LOGSINK_LAG_INTERVAL", "0s", "-1s"},
		{"DISPATCH_LOGSINK_MAX_EVENT_AGE", "0s", "-1s"},
		{"DISPATCH_LOGSINK_SHUTDOWN_TIMEOUT", "", "-1s"}, // 0: stop at once, replay the rest
		{"DISPATCH_ES_SETUP_WAIT", "", "-1s"},            // 0: do not wait
	} {
		for _, v := range []string{c.zero, c.negative} {
			if v == "" {
				continue
			}
			err := loadAndValidate(nil, base, c.env, v)
			if err == nil || !strings.Contains(err.Error(), c.env) || !strings.Contains(err.Error(), "got "+v) {
				t.Errorf("%s=%s: %v, want an error naming %s and %s", c.env, v, err, c.env, v)
			}
		}
	}
	// Where 0 means something, it is accepted.
	for _, env := range []string{"DISPATCH_LOGSINK_SHUTDOWN_TIMEOUT", "DISPATCH_ES_SETUP_WAIT"} {
		if err := loadAndValidate(nil, base, env, "0"); err != nil {
			t.Errorf("%s=0: %v", env, err)
		}
	}
	// A flag is named with its setting.
	err := loadAndValidate([]string{"-es-workers", "0"}, base, "", "")
	if err == nil || !strings.Contains(err.Error(), "DISPATCH_ES_WORKERS (flag -es-workers): must be positive, got 0") {
		t.Errorf("-es-workers 0: %v", err)
	}
}

// loadAndValidate loads args over the environment base plus name=value (if name is
// not ""), and validates.
func loadAndValidate(args []string, base map[string]string, name, value string) error {
	env := map[string]string{name: value}
	for k, v := range base {
		env[k] = v
	}
	cfg := DefaultConfig()
	if err := cfg.Load(args, func(k string) string { return env[k] }, io.Discard); err != nil {
		return err
	}
	return cfg.Validate()
}

// LoadRelayConfig refuses the relay settings given as zero or negative, naming them
// and the value, instead of taking zero for "not set".
func TestLoadRelayConfigRefusesNonPositive(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ env, value, want string }{
		{"DISPATCH_RELAY_BATCH_SIZE", "0", "got 0"},
		{"DISPATCH_RELAY_BATCH_SIZE", "-5", "got -5"},
		{"DISPATCH_RELAY_BATCH_TIMEOUT", "0s", "got 0s"},
		{"DISPATCH_RELAY_BATCH_TIMEOUT", "-1ms", "got -1ms"},
		{"DISPATCH_RELAY_POLL_INTERVAL", "0", "got 0s"},
		{"DISPATCH_RELAY_POLL_INTERVAL", "-2s", "got -2s"},
		{"DISPATCH_KAFKA_COMPRESSION", "brotli", "brotli"},
	} {
		_, err := LoadRelayConfig(func(k string) string { return map[string]string{c.env: c.value}[k] })
		if err == nil || !strings.Contains(err.Error(), c.env+": ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%s: %v, want an error naming %s and saying %q", c.env, c.value, err, c.env, c.want)
		}
	}
	ok := map[string]string{"DISPATCH_RELAY_BATCH_SIZE": "10", "DISPATCH_RELAY_BATCH_TIMEOUT": "5ms",
		"DISPATCH_RELAY_POLL_INTERVAL": "1s", "DISPATCH_KAFKA_COMPRESSION": "none"}
	if _, err := LoadRelayConfig(func(k string) string { return ok[k] }); err != nil {
		t.Errorf("valid relay settings: %v", err)
	}
	c, err := LoadRelayConfig(func(string) string { return "" })
	if err != nil {
		t.Errorf("no relay settings: %v", err)
	}
	// The table's defaults are the ones a RelayConfig built in code gets.
	if c.Clock = nil; !reflect.DeepEqual(c, withoutClock(RelayConfig{}.withDefaults())) {
		t.Errorf("defaults %+v\nwant     %+v", c, withoutClock(RelayConfig{}.withDefaults()))
	}
}

func withoutClock(c RelayConfig) RelayConfig { c.Clock = nil; return c }

func TestSource(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DISPATCH_LOGSINK_METRICS_ADDR": ":9", "DISPATCH_ES_WORKERS": "2"}
	c := DefaultConfig()
	if err := c.Load([]string{"-es-workers", "3"}, func(k string) string { return env[k] }, io.Discard); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"DISPATCH_LOGSINK_METRICS_ADDR": "DISPATCH_LOGSINK_METRICS_ADDR",
		"DISPATCH_ES_WORKERS":           "flag -es-workers",
		"DISPATCH_KAFKA_TOPIC":          "default",
	} {
		if got := c.Source(name); got != want {
			t.Errorf("Source(%s) = %q, want %q", name, got, want)
		}
	}
	if got := DefaultConfig().Source("DISPATCH_ES_WORKERS"); got != "default" {
		t.Errorf("DefaultConfig: Source = %q", got)
	}
}

// recordEnv returns a getenv that answers from env and remembers every name asked for.
func recordEnv(env map[string]string) (func(string) string, *[]string) {
	var read []string
	return func(k string) string {
		if !slices.Contains(read, k) {
			read = append(read, k)
		}
		return env[k]
	}, &read
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// TestSettingsAreWhatLoadReads: the reference lists exactly the variables Load reads,
// every one with a flag, and each default, given back as its flag, leaves
// DefaultConfig unchanged (the documented default is the real one).
func TestSettingsAreWhatLoadReads(t *testing.T) {
	t.Parallel()
	getenv, read := recordEnv(nil)
	c := DefaultConfig()
	if err := c.Load(nil, getenv, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got, want := sorted(EnvNames()), sorted(*read); !slices.Equal(got, want) {
		t.Errorf("EnvNames %v\nLoad reads %v", got, want)
	}
	for _, s := range Settings() {
		if s.Flag == "" || s.Usage == "" {
			t.Errorf("%s: no flag or no usage: %+v", s.Env, s)
			continue
		}
		c := DefaultConfig()
		if err := c.Load([]string{"-" + s.Flag + "=" + s.Default}, func(string) string { return "" }, io.Discard); err != nil {
			t.Errorf("%s: -%s=%s: %v", s.Env, s.Flag, s.Default, err)
			continue
		}
		if c.sources = nil; !reflect.DeepEqual(c, DefaultConfig()) {
			t.Errorf("%s: documented default %q is not DefaultConfig's", s.Env, s.Default)
		}
	}
}

// TestRelaySettingsAreWhatLoadRelayConfigReads: the relay's reference lists exactly the
// variables LoadRelayConfig reads, each with a meaning and no flag.
func TestRelaySettingsAreWhatLoadRelayConfigReads(t *testing.T) {
	t.Parallel()
	sample := map[string]string{
		"DISPATCH_KAFKA_BROKERS":       "k1:9092,k2:9092",
		"DISPATCH_KAFKA_TOPIC":         "other.topic",
		"DISPATCH_KAFKA_COMPRESSION":   "zstd",
		"DISPATCH_RELAY_BATCH_SIZE":    "7",
		"DISPATCH_RELAY_BATCH_TIMEOUT": "3ms",
		"DISPATCH_RELAY_POLL_INTERVAL": "2s",
	}
	getenv, read := recordEnv(sample)
	c, err := LoadRelayConfig(getenv)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sorted(RelayEnvNames()), sorted(*read); !slices.Equal(got, want) {
		t.Errorf("RelayEnvNames %v\nLoadRelayConfig reads %v", got, want)
	}
	want := RelayConfig{Brokers: []string{"k1:9092", "k2:9092"}, Topic: "other.topic", Compression: "zstd",
		BatchSize: 7, BatchTimeout: 3 * time.Millisecond, PollInterval: 2 * time.Second}.withDefaults()
	if c.Clock, want.Clock = nil, nil; !reflect.DeepEqual(c, want) {
		t.Errorf("loaded %+v\nwant   %+v", c, want)
	}
	for _, s := range RelaySettings() {
		if s.Flag != "" || s.Usage == "" {
			t.Errorf("%s: relay settings are env only and need a meaning: %+v", s.Env, s)
		}
		if s.Default == sample[s.Env] {
			t.Errorf("%s: sample %q equals the default, so it proves nothing", s.Env, s.Default)
		}
	}
}

func TestConfigReference(t *testing.T) {
	t.Parallel()
	if !strings.Contains(ConfigReference(), "| `DISPATCH_KAFKA_BROKERS` | `-kafka-brokers` | (empty) |") {
		t.Errorf("ConfigReference lacks the brokers row:\n%s", ConfigReference())
	}
}
