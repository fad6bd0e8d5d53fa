package logsink

import (
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
)

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
		if !reflect.DeepEqual(c, DefaultConfig()) {
			t.Errorf("%s: documented default %q is not DefaultConfig's", s.Env, s.Default)
		}
	}
}

func TestParseFlagDefaultsRefusesUsageWithoutEnv(t *testing.T) {
	t.Parallel()
	if _, err := parseFlagDefaults("  -x string\n    \tno env here\n"); err == nil {
		t.Fatal("want an error for a flag whose usage names no env variable")
	}
}

// TestRelaySettingsAreWhatLoadRelayConfigReads: the relay's reference lists exactly the
// variables LoadRelayConfig reads, and each one lands in the field the reference shows.
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
	def := RelayConfig{}.withDefaults()
	for _, s := range relaySettings {
		v, ok := sample[s.env]
		if !ok {
			t.Errorf("%s: no sample value in this test", s.env)
			continue
		}
		if got := s.get(c); got != v {
			t.Errorf("%s=%s: the field the reference shows holds %q", s.env, v, got)
		}
		if s.get(def) == v {
			t.Errorf("%s: sample %q equals the default, so it proves nothing", s.env, v)
		}
	}
	for _, s := range RelaySettings() {
		if s.Flag != "" || s.Usage == "" {
			t.Errorf("%s: relay settings are env only and need a meaning: %+v", s.Env, s)
		}
	}
}

func TestReferenceTable(t *testing.T) {
	t.Parallel()
	got := ReferenceTable([]Setting{{Env: "A", Flag: "a", Default: "1", Usage: "x | y"}, {Env: "B", Usage: "z"}})
	want := "| env | flag | default | meaning |\n|---|---|---|---|\n" +
		"| `A` | `-a` | `1` | x \\| y |\n" +
		"| `B` | — | (empty) | z |\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if !strings.Contains(ConfigReference(), "`DISPATCH_KAFKA_BROKERS` | `-kafka-brokers` | (empty)") {
		t.Errorf("ConfigReference lacks the brokers row:\n%s", ConfigReference())
	}
}
