package logsink

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Setting describes one configuration setting for the reference (docs/CONFIG.md): its
// environment variable, its flag (empty when it has none), its default ("" when empty)
// and what it means.
type Setting struct {
	Env, Flag, Default, Usage string
}

// Settings lists the log sink's settings exactly as Config.Load defines them, with
// DefaultConfig's defaults. They are read back from the flag set Load builds (through
// its -h listing), so a setting added to Load appears here without another edit.
func Settings() []Setting {
	var out bytes.Buffer
	c := DefaultConfig()
	err := c.Load([]string{"-h"}, func(string) string { return "" }, &out)
	if !errors.Is(err, flag.ErrHelp) {
		panic(fmt.Sprintf("logsink: listing the flags: %v", err))
	}
	settings, err := parseFlagDefaults(out.String())
	if err != nil {
		panic(fmt.Sprintf("logsink: listing the flags: %v", err))
	}
	return settings
}

// usageLine is the description line flag.PrintDefaults writes for a setting of Load:
// "usage (ENV)" and, for a non-zero default, " (default X)".
var usageLine = regexp.MustCompile(`^(.*) \((DISPATCH_[A-Z0-9_]+)\)(?: \(default (.*)\))?$`)

// parseFlagDefaults reads flag.PrintDefaults output: a line "  -name [type]" followed by
// a line "    \tusage".
func parseFlagDefaults(text string) ([]Setting, error) {
	var settings []Setting
	var name string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "  -"):
			name, _, _ = strings.Cut(strings.TrimPrefix(line, "  -"), " ")
		case strings.HasPrefix(line, "    \t") && name != "":
			m := usageLine.FindStringSubmatch(strings.TrimPrefix(line, "    \t"))
			if m == nil {
				return nil, fmt.Errorf("flag -%s: usage %q does not end with its env name", name, line)
			}
			def := m[3]
			if uq, err := strconv.Unquote(def); err == nil {
				def = uq // string defaults are printed quoted
			}
			settings = append(settings, Setting{Env: m[2], Flag: name, Default: def, Usage: m[1]})
			name = ""
		}
	}
	if len(settings) == 0 {
		return nil, errors.New("no flags found")
	}
	return settings, nil
}

// EnvNames lists the environment variables Config.Load reads.
func EnvNames() []string {
	var names []string
	for _, s := range Settings() {
		names = append(names, s.Env)
	}
	return names
}

// relaySetting is one environment variable LoadRelayConfig reads; get reads the field
// it sets, after defaults, as text.
type relaySetting struct {
	env, usage string
	get        func(RelayConfig) string
}

var relaySettings = []relaySetting{
	{"DISPATCH_KAFKA_BROKERS", "Kafka bootstrap brokers, comma-separated; empty: no relay", func(c RelayConfig) string { return strings.Join(c.Brokers, ",") }},
	{"DISPATCH_KAFKA_TOPIC", "events topic the outbox is relayed to", func(c RelayConfig) string { return c.Topic }},
	{"DISPATCH_KAFKA_COMPRESSION", "compression of produced batches: none, gzip, snappy, lz4 or zstd", func(c RelayConfig) string { return c.Compression }},
	{"DISPATCH_RELAY_BATCH_SIZE", "outbox rows read and sent per round", func(c RelayConfig) string { return strconv.Itoa(c.BatchSize) }},
	{"DISPATCH_RELAY_BATCH_TIMEOUT", "how long the Kafka writer waits to fill a partition's batch: the relay's added latency, not a throughput knob", func(c RelayConfig) string { return c.BatchTimeout.String() }},
	{"DISPATCH_RELAY_POLL_INTERVAL", "wait after finding the outbox empty; a new event cuts it short", func(c RelayConfig) string { return c.PollInterval.String() }},
}

// RelaySettings lists the environment variables LoadRelayConfig reads (the relay runs
// inside dispatchd and has no flags), with their defaults.
func RelaySettings() []Setting {
	def := RelayConfig{}.withDefaults()
	out := make([]Setting, len(relaySettings))
	for i, s := range relaySettings {
		out[i] = Setting{Env: s.env, Default: s.get(def), Usage: s.usage}
	}
	return out
}

// RelayEnvNames lists the environment variables LoadRelayConfig reads.
func RelayEnvNames() []string {
	names := make([]string, len(relaySettings))
	for i, s := range relaySettings {
		names[i] = s.env
	}
	return names
}

// ReferenceTable renders settings as a Markdown table (env, flag, default, meaning).
func ReferenceTable(settings []Setting) string {
	cell := strings.NewReplacer("|", `\|`, "\n", " ").Replace
	var b strings.Builder
	b.WriteString("| env | flag | default | meaning |\n|---|---|---|---|\n")
	for _, s := range settings {
		fl, def := "—", "(empty)"
		if s.Flag != "" {
			fl = "`-" + s.Flag + "`"
		}
		if s.Default != "" {
			def = "`" + s.Default + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.Env, fl, def, cell(s.Usage))
	}
	return b.String()
}

// ConfigReference renders the log sink's settings as a Markdown table.
func ConfigReference() string { return ReferenceTable(Settings()) }
