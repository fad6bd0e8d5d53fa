package config

import (
	"errors"
	"flag"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// sample is a configuration with one setting of every kind.
type sample struct {
	Addr    string
	Brokers []string
	Workers int
	Wait    time.Duration
	Grace   time.Duration
	Rate    float64
	On      bool
	Level   string
	Events  int64
	Seed    uint64
	Only    string // flag only
	Hidden  int    // environment only
	Mode    string // set by a Func row, refined by Size
	Size    int
}

func (s *sample) table() Table {
	return Table{
		{Env: "T_ADDR", Flag: "addr", Default: ":80", Usage: "listen address", Value: String(&s.Addr, Required)},
		{Env: "T_BROKERS", Flag: "brokers", Usage: "brokers | comma-separated", Value: List(&s.Brokers)},
		{Env: "T_WORKERS", Flag: "workers", Default: "4", Usage: "workers", Value: Int(&s.Workers, Between(1, 64))},
		{Env: "T_WAIT", Flag: "wait", Default: "30s", Usage: "long poll cap", Value: Duration(&s.Wait, Positive, AtMost(5*time.Minute))},
		{Env: "T_GRACE", Flag: "grace", Default: "20s", Usage: "shutdown grace; 0: stop at once", Value: Duration(&s.Grace, NotNegative)},
		{Env: "T_RATE", Flag: "rate", Default: "10", Usage: "rate", Value: Float(&s.Rate, Positive)},
		{Env: "T_ON", Flag: "on", Default: "true", Usage: "switch", Value: Bool(&s.On)},
		{Env: "T_LEVEL", Flag: "level", Default: "info", Usage: "level", Value: String(&s.Level, OneOf("debug", "info"))},
		{Env: "T_EVENTS", Flag: "events", Default: "100", Usage: "events", Value: Int64(&s.Events, AtLeast[int64](10))},
		{Env: "T_SEED", Flag: "seed", Default: "1", Usage: "seed", Value: Uint64(&s.Seed)},
		{Flag: "only", Default: "x", Usage: "flag only", Value: String(&s.Only, Required), Skip: func() bool { return s.Level == "debug" }},
		{Env: "T_HIDDEN", Default: "3", Usage: "environment only", Value: Int(&s.Hidden, Positive)},
		{Flag: "mode", Default: "small", Usage: "mode: small or large", Value: Func(func(v string) error {
			switch v {
			case "small":
				s.Mode, s.Size = v, 1
			case "large":
				s.Mode, s.Size = v, 100
			default:
				return errors.New("unknown mode " + v)
			}
			return nil
		}, func() string { return s.Mode })},
		{Flag: "size", DefaultNote: "the mode's: small 1, large 100", Usage: "size", Value: Int(&s.Size, Positive)},
	}
}

func load(args []string, env map[string]string) (sample, Sources, error) {
	var s sample
	src, err := s.table().Load(args, func(k string) string { return env[k] })
	return s, src, err
}

func TestLoadDefaultsThenEnvThenFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{"T_ADDR": ":81", "T_WORKERS": "8", "T_BROKERS": " k1:9092, ,k2:9092 ", "T_ON": "false", "T_HIDDEN": "5"}
	s, src, err := load([]string{"-workers", "9", "-wait=1m", "-on", "-only", "y", "-size", "7", "-mode", "large"}, env)
	if err != nil {
		t.Fatal(err)
	}
	want := sample{Addr: ":81", Brokers: []string{"k1:9092", "k2:9092"}, Workers: 9, Wait: time.Minute, Grace: 20 * time.Second,
		Rate: 10, On: true, Level: "info", Events: 100, Seed: 1, Only: "y", Hidden: 5, Mode: "large", Size: 7}
	if !equalSample(s, want) {
		t.Errorf("loaded %+v\nwant   %+v", s, want)
	}
	for name, want := range map[string]string{
		"T_ADDR":    "T_ADDR",        // env over default
		"T_WORKERS": "flag -workers", // flag over env
		"T_WAIT":    "flag -wait",    // flag over default
		"T_ON":      "flag -on",      // a bool flag given alone
		"-only":     "flag -only",    // a flag-only setting
		"T_HIDDEN":  "T_HIDDEN",      // an environment-only setting
		"T_RATE":    "default",       // neither
		"-size":     "flag -size",    // given before -mode, applied after it (table order)
		"T_NOTHING": "default",       // not a setting at all
		"-mode":     "flag -mode",
	} {
		if got := src.Of(name); got != want {
			t.Errorf("Of(%s) = %q, want %q", name, got, want)
		}
	}
	if err := new(sample).table().Validate(src); err == nil {
		t.Error("Validate of a zero sample passed") // it checks the table's own variables
	}
	if err := s.table().Validate(src); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func equalSample(a, b sample) bool { return reflect.DeepEqual(a, b) }

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	s, src, err := load(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := sample{Addr: ":80", Workers: 4, Wait: 30 * time.Second, Grace: 20 * time.Second, Rate: 10, On: true,
		Level: "info", Events: 100, Seed: 1, Only: "x", Hidden: 3, Mode: "small", Size: 1}
	if !equalSample(s, want) || len(src) != 0 {
		t.Errorf("defaults %+v (sources %v)\nwant     %+v", s, src, want)
	}
	// A flag given the empty value sets it: an empty list, an empty string.
	s, _, err = load([]string{"-brokers=", "-addr="}, map[string]string{"T_BROKERS": "k:1"})
	if err != nil || s.Brokers != nil || s.Addr != "" {
		t.Errorf("empty flags: %v %q %q", err, s.Brokers, s.Addr)
	}
}

// A value that does not parse is an error naming the setting and where it came from;
// every such value is reported.
func TestLoadParseErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		args []string
		want []string
	}{
		{map[string]string{"T_WORKERS": "four"}, nil, []string{`T_WORKERS: not a whole number: "four"`}},
		{nil, []string{"-workers", "four"}, []string{`T_WORKERS (flag -workers): not a whole number: "four"`}},
		{map[string]string{"T_WAIT": "soon"}, nil, []string{`T_WAIT: not a duration like 500ms, 30s or 1h: "soon"`}},
		{map[string]string{"T_RATE": "fast"}, nil, []string{`T_RATE: not a number: "fast"`}},
		{map[string]string{"T_ON": "maybe"}, nil, []string{`T_ON: not true or false: "maybe"`}},
		{nil, []string{"-on=maybe"}, []string{`T_ON (flag -on): not true or false: "maybe"`}},
		{map[string]string{"T_EVENTS": "1e3"}, nil, []string{`T_EVENTS: not a whole number: "1e3"`}},
		{map[string]string{"T_SEED": "-1"}, nil, []string{`T_SEED: not a whole number from 0 up: "-1"`}},
		{nil, []string{"-mode", "huge"}, []string{"-mode: unknown mode huge"}},
		{map[string]string{"T_HIDDEN": "x", "T_WAIT": "y"}, []string{"-workers", "z"},
			[]string{"T_HIDDEN: not a whole number", "T_WAIT: not a duration", "T_WORKERS (flag -workers): not a whole number"}},
		{nil, []string{"-nope"}, []string{"flag provided but not defined: -nope"}},
		{nil, []string{"-workers"}, []string{"flag needs an argument: -workers"}},
		{nil, []string{"-hidden", "4"}, []string{"flag provided but not defined: -hidden"}}, // environment only
		{nil, []string{"-addr", ":1", "extra"}, []string{"unexpected arguments: [extra]"}},
	} {
		_, _, err := load(c.args, c.env)
		if err == nil {
			t.Errorf("env %v args %v: no error, want %q", c.env, c.args, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("env %v args %v: %q lacks %q", c.env, c.args, err, w)
			}
		}
	}
}

func TestLoadHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help", "-help"} {
		// A broken environment does not stand in the way of -h.
		if _, _, err := load([]string{arg}, map[string]string{"T_WORKERS": "four"}); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: %v, want flag.ErrHelp", arg, err)
		}
	}
}

// A value that does not pass its checks is an error naming the setting, its flag when
// the value came from it, and the value; every failure is reported.
func TestValidateNamesSettingAndSource(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		args []string
		want []string // "" when the values pass
	}{
		{map[string]string{"T_WAIT": "0"}, nil, []string{"T_WAIT: must be positive, got 0s"}},
		{nil, []string{"-wait", "0s"}, []string{"T_WAIT (flag -wait): must be positive, got 0s"}},
		{nil, []string{"-wait", "-1s"}, []string{"T_WAIT (flag -wait): must be positive, got -1s"}},
		{map[string]string{"T_WAIT": "6m"}, nil, []string{"T_WAIT: must be at most 5m, got 6m"}},
		{map[string]string{"T_GRACE": "0s"}, nil, nil}, // 0 means something here
		{map[string]string{"T_GRACE": "-1s"}, nil, []string{"T_GRACE: must not be negative, got -1s"}},
		{map[string]string{"T_WORKERS": "0"}, nil, []string{"T_WORKERS: must be 1..64, got 0"}},
		{map[string]string{"T_WORKERS": "65"}, nil, []string{"T_WORKERS: must be 1..64, got 65"}},
		{map[string]string{"T_RATE": "0"}, nil, []string{"T_RATE: must be positive, got 0"}},
		{map[string]string{"T_RATE": "NaN"}, nil, []string{"T_RATE: must be positive, got NaN"}},
		{map[string]string{"T_LEVEL": "loud"}, nil, []string{`T_LEVEL: must be one of debug, info, got "loud"`}},
		{map[string]string{"T_EVENTS": "9"}, nil, []string{"T_EVENTS: must be at least 10, got 9"}},
		{nil, []string{"-addr", ""}, []string{"T_ADDR (flag -addr): required"}},
		{nil, []string{"-only", ""}, []string{"-only: required"}},
		{map[string]string{"T_LEVEL": "debug"}, []string{"-only", ""}, nil}, // Skip passes over it
		{nil, []string{"-size", "0"}, []string{"-size: must be positive, got 0"}},
		{map[string]string{"T_HIDDEN": "-2"}, []string{"-wait", "0s", "-workers", "0"},
			[]string{"T_HIDDEN: must be positive, got -2", "T_WAIT (flag -wait): must be positive", "T_WORKERS (flag -workers): must be 1..64"}},
	} {
		s, src, err := load(c.args, c.env)
		if err != nil {
			t.Errorf("env %v args %v: load: %v", c.env, c.args, err)
			continue
		}
		err = s.table().Validate(src)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("env %v args %v: %v, want none", c.env, c.args, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("env %v args %v: passed, want %q", c.env, c.args, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("env %v args %v: %q lacks %q", c.env, c.args, err, w)
			}
		}
	}
}

func TestChecks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want string // "" for nil
	}{
		{"positive int", Positive(1), ""},
		{"zero int", Positive(0), "must be positive, got 0"},
		{"zero duration", Positive(time.Duration(0)), "must be positive, got 0s"},
		{"NaN", Positive(math.NaN()), "must be positive, got NaN"},
		{"not negative zero", NotNegative(0.0), ""},
		{"negative", NotNegative(-time.Second), "must not be negative, got -1s"},
		{"at least", AtLeast(time.Second)(time.Millisecond), "must be at least 1s, got 1ms"},
		{"at least ok", AtLeast(2)(2), ""},
		{"at most", AtMost(7 * 24 * time.Hour)(200 * time.Hour), "must be at most 168h, got 200h"},
		{"between", Between(time.Minute, time.Hour)(90 * time.Second), ""},
		{"between below", Between(0.0, 1.0)(-0.5), "must be 0..1, got -0.5"},
		{"one of", OneOf("a", "b")("c"), `must be one of a, b, got "c"`},
		{"one of ok", OneOf("a", "b")("b"), ""},
		{"required string", Required(""), "required"},
		{"required list", Required([]string(nil)), "required"},
		{"required list ok", Required([]string{"x"}), ""},
	} {
		got := ""
		if c.err != nil {
			got = c.err.Error()
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", time.Hour: "1h", 5 * time.Minute: "5m", 90 * time.Second: "1m30s", 500 * time.Millisecond: "500ms",
		90 * time.Minute: "1h30m", time.Hour + time.Second: "1h0m1s", -time.Minute: "-1m",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestSetDefaultsNamesABadDefault(t *testing.T) {
	t.Parallel()
	var n int
	err := Table{{Env: "T_N", Default: "many", Value: Int(&n)}}.SetDefaults()
	if err == nil || !strings.Contains(err.Error(), `default of T_N: not a whole number: "many"`) {
		t.Errorf("bad default: %v", err)
	}
}

func TestSourcesLabel(t *testing.T) {
	t.Parallel()
	src := Sources{"T_WAIT": "flag -wait", "T_ADDR": "T_ADDR", "-only": "flag -only"}
	for name, want := range map[string]string{
		"T_WAIT": "T_WAIT (flag -wait)", "T_ADDR": "T_ADDR", "-only": "-only", "T_RATE": "T_RATE",
	} {
		if got := src.Label(name); got != want {
			t.Errorf("Label(%s) = %q, want %q", name, got, want)
		}
	}
	if got := Sources(nil).Of("T_WAIT"); got != "default" {
		t.Errorf("nil Sources: %q", got)
	}
	if got := src.Errorf("T_WAIT", "bad %d", 1).Error(); got != "T_WAIT (flag -wait): bad 1" {
		t.Errorf("Errorf: %q", got)
	}
}

func TestEnvNamesAndWithout(t *testing.T) {
	t.Parallel()
	tb := new(sample).table()
	want := []string{"T_ADDR", "T_BROKERS", "T_WORKERS", "T_WAIT", "T_GRACE", "T_RATE", "T_ON", "T_LEVEL", "T_EVENTS", "T_SEED", "T_HIDDEN"}
	if got := tb.EnvNames(); !slices.Equal(got, want) {
		t.Errorf("EnvNames %v\nwant     %v", got, want)
	}
	// EnvNames is what Load reads.
	var read []string
	if _, err := tb.Load(nil, func(k string) string { read = append(read, k); return "" }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(read, want) {
		t.Errorf("Load reads %v", read)
	}
	rest := tb.Without([]string{"T_ADDR", "T_HIDDEN"})
	if len(rest) != len(tb)-2 || slices.Contains(rest.EnvNames(), "T_ADDR") || slices.Contains(rest.EnvNames(), "T_HIDDEN") {
		t.Errorf("Without: %v", rest.EnvNames())
	}
}

func TestWriteUsage(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	new(sample).table()[9:].WriteUsage(&b, "Usage: t [flags]\n\n")
	want := `Usage: t [flags]

  T_SEED, -seed (default "1")
      seed
  -only (default "x")
      flag only
  -mode (default "small")
      mode: small or large
  -size (default: the mode's: small 1, large 100)
      size

Environment only (no flag):

  T_HIDDEN (default "3")
      environment only
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestReference(t *testing.T) {
	t.Parallel()
	tb := new(sample).table()
	got := Table{tb[0], tb[1], tb[10], tb[11], tb[13]}.Reference()
	want := "| env | flag | default | meaning |\n|---|---|---|---|\n" +
		"| `T_ADDR` | `-addr` | `:80` | listen address |\n" +
		"| `T_BROKERS` | `-brokers` | (empty) | brokers \\| comma-separated |\n" +
		"| — | `-only` | `x` | flag only |\n" +
		"| `T_HIDDEN` | — | `3` | environment only |\n" +
		"| — | `-size` | the mode's: small 1, large 100 | size |\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
