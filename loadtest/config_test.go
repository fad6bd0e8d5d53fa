package loadtest

import (
	"errors"
	"flag"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseConfigPresetThenFlags(t *testing.T) {
	env := map[string]string{"LOADTEST_URL": "http://127.0.0.1:9999", "DISPATCH_ADMIN_TOKEN": "ops=secret-token,other"}
	c, err := ParseConfig([]string{"-preset", "medium", "-agents", "7", "-rate", "500", "-json"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Presets["medium"]
	want.Agents = 7
	if c.Size != want {
		t.Errorf("size %+v, want %+v", c.Size, want)
	}
	if c.URL != "http://127.0.0.1:9999" || c.AdminToken != "secret-token" || c.Rate != 500 || !c.JSON {
		t.Errorf("config %+v", c)
	}
	// a flag wins over env
	c, err = ParseConfig([]string{"-url", "http://127.0.0.1:1", "-admin-token", "abcdefgh"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil || c.URL != "http://127.0.0.1:1" || c.AdminToken != "abcdefgh" {
		t.Errorf("flags over env: %+v %v", c, err)
	}
	if c.Size != Presets["small"] {
		t.Errorf("default size %+v", c.Size)
	}
}

func TestParseConfigRejects(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-preset", "huge"}, "-preset"},
		{[]string{"-workload", "busy"}, "-workload"},
		{[]string{"-users", "5", "-agents", "6", "-groups", "1"}, "-agents"},
		{[]string{"-groups", "0"}, "-groups"},
		{[]string{"-fail-rate", "2"}, "-fail-rate"},
		{[]string{"-url", "127.0.0.1:8080"}, "-url"},
		{[]string{"-check-only"}, "-run-id"},
		{[]string{"-run-id", "has space"}, "-run-id"},
		{[]string{"-duration", "0s"}, "-duration"},
		{[]string{"extra"}, "unexpected"},
		{[]string{"-workload", "cycles", "-users", "10000", "-groups", "50", "-rotate", "8"}, "-rotate"},
		{[]string{"-workload", "campaign", "-items", "3"}, "-items"},
		{[]string{"-workload", "campaign", "-item-rate", "0.002"}, "-item-rate"},
		{[]string{"-workload", "campaign", "-item-rate", "1000000"}, "-item-rate"},
		{[]string{"-workload", "campaign", "-item-rate", "0"}, "-item-rate"},
		{[]string{"-workload", "ddi", "-batch", "5"}, "-workload"},
		{[]string{"-workload", "ddi", "-combine"}, "-workload"},
		{[]string{"-workload", "ddi", "-sdk"}, "-sdk"},
		{[]string{"-workload", "ddi", "-ddi-tenant", "a/b"}, "-ddi-tenant"},
		{[]string{"-workload", "ddi", "-ddi-tenant", ""}, "-ddi-tenant"},
	} {
		_, err := ParseConfig(c.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want it to name %s", c.args, err, c.want)
		}
	}
}

func TestPresetsValid(t *testing.T) {
	for name, p := range Presets {
		for _, w := range []Workload{WorkloadMixed, WorkloadEmpty, WorkloadCycles, WorkloadCampaign, WorkloadRollout, WorkloadDDI} {
			c := DefaultConfig()
			c.Preset, c.Size, c.Workload = name, p, w
			if err := c.Validate(); err != nil {
				t.Errorf("preset %s, workload %s: %v", name, w, err)
			}
		}
		if p.Users/p.Groups != 200 && name != "small" {
			t.Errorf("preset %s: %d users per group, want 200 (a flat scale curve compares like with like)", name, p.Users/p.Groups)
		}
	}
	if Presets["small"].Duration > time.Minute {
		t.Error("small preset should be quick")
	}
}

// A zero or negative duration, size or count is refused where zero means nothing (in
// -check-only runs too), with an error naming the flag and the value.
func TestParseConfigRefusesNonPositive(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args      []string
		flag, got string
	}{
		{[]string{"-users", "0"}, "-users", "got 0"},
		{[]string{"-users", "-1"}, "-users", "got -1"},
		{[]string{"-groups", "0"}, "-groups", "got 0"},
		{[]string{"-templates", "0"}, "-templates", "got 0"},
		{[]string{"-agents", "0"}, "-agents", "got 0"},
		{[]string{"-once", "-1"}, "-once", "got -1"},
		{[]string{"-once", "0", "-rotate", "0"}, "-once, -rotate", "got 0 and 0"},
		{[]string{"-duration", "0s"}, "-duration", "got 0s"},
		{[]string{"-duration", "-1s"}, "-duration", "got -1s"},
		{[]string{"-timeout", "0s"}, "-timeout", "got 0s"},
		{[]string{"-backlog", "0s"}, "-backlog", "got 0s"},
		{[]string{"-setup-concurrency", "0"}, "-setup-concurrency", "got 0"},
		{[]string{"-max-events", "0"}, "-max-events", "got 0"},
		{[]string{"-cycles", "-1"}, "-cycles", "got -1"},
		{[]string{"-rate", "-1"}, "-rate", "got -1"},
		{[]string{"-think", "-1s"}, "-think", "got -1s"},
		{[]string{"-progress", "-1s"}, "-progress", "got -1s"},
		{[]string{"-check-only", "-run-id", "r1", "-timeout", "0s"}, "-timeout", "got 0s"},
		{[]string{"-check-only", "-run-id", "r1", "-max-events", "0"}, "-max-events", "got 0"},
	} {
		_, err := ParseConfig(c.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.flag+": ") || !strings.Contains(err.Error(), c.got) {
			t.Errorf("%v: %v, want an error naming %s and saying %q", c.args, err, c.flag, c.got)
		}
	}
}

// -h lists every flag with its default, and the environment variables ParseConfig
// reads, and returns flag.ErrHelp.
func TestParseConfigHelpListsEverySetting(t *testing.T) {
	t.Parallel()
	var read []string
	getenv := func(k string) string { read = append(read, k); return "" }
	if _, err := ParseConfig(nil, getenv, io.Discard); err != nil {
		t.Fatal(err)
	}
	var help strings.Builder
	if _, err := ParseConfig([]string{"-h"}, getenv, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	settings := Settings()
	if len(settings) < 20 {
		t.Fatalf("only %d settings", len(settings))
	}
	for _, st := range settings {
		head := "-" + st.Flag
		if st.Flag == "" {
			head = st.Env
		} else if st.Env != "" {
			head = st.Env + ", -" + st.Flag
		}
		line := ""
		for _, l := range strings.Split(help.String(), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), head+" (default") {
				line = l
			}
		}
		if line == "" {
			t.Errorf("-h lacks %s with its default:\n%s", head, help.String())
		}
		if st.DefaultNote == "" && !strings.Contains(line, strconv.Quote(st.Default)) {
			t.Errorf("%s: default %q not shown: %q", head, st.Default, line)
		}
	}
	for _, name := range read {
		if !strings.Contains(help.String(), name) {
			t.Errorf("ParseConfig reads %s, which -h does not list", name)
		}
	}
	if !strings.Contains(help.String(), "-users (default: the preset's: small 200, medium 10000, large 100000)") {
		t.Errorf("size flags do not show the presets' values:\n%s", help.String())
	}
}

// Env over defaults, flags over env and over the preset whatever their order, and
// DISPATCH_ADMIN_TOKEN only where LOADTEST_ADMIN_TOKEN is unset.
func TestParseConfigPrecedence(t *testing.T) {
	t.Parallel()
	env := map[string]string{"LOADTEST_URL": "http://e:1", "LOADTEST_ADMIN_TOKEN": "from-loadtest-env", "DISPATCH_ADMIN_TOKEN": "x=from-dispatch-env"}
	c, err := ParseConfig([]string{"-agents", "7", "-preset", "medium"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Preset != "medium" || c.Size.Agents != 7 || c.Size.Users != Presets["medium"].Users {
		t.Errorf("-agents before -preset: %+v", c.Size)
	}
	if c.URL != "http://e:1" || c.AdminToken != "from-loadtest-env" {
		t.Errorf("env: %q %q", c.URL, c.AdminToken)
	}
	if got := c.sources.Of("LOADTEST_URL"); got != "LOADTEST_URL" {
		t.Errorf("source of the URL: %q", got)
	}
	delete(env, "LOADTEST_ADMIN_TOKEN")
	c, err = ParseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil || c.AdminToken != "from-dispatch-env" {
		t.Errorf("DISPATCH_ADMIN_TOKEN fallback: %q %v", c.AdminToken, err)
	}
	// A -check-only run does not check the settings it does not use.
	if _, err := ParseConfig([]string{"-check-only", "-run-id", "r1", "-agents", "0", "-workload", "busy"},
		func(string) string { return "" }, io.Discard); err != nil {
		t.Errorf("-check-only with unused bad settings: %v", err)
	}
	// A flag that comes with its environment variable is named with both.
	_, err = ParseConfig([]string{"-url", "ftp://x"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `LOADTEST_URL (flag -url): want http://host:port (or several, comma-separated), got "ftp://x"`) {
		t.Errorf("-url ftp://x: %v", err)
	}
}

func TestDefaultConfig(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	want := Config{URL: "http://127.0.0.1:8080", AdminToken: "dev-admin-token", Preset: "small", Size: Presets["small"],
		Workload: WorkloadMixed, DDITenant: "DEFAULT", Backlog: 50 * time.Minute, Seed: 1, FailRate: 0.05, Warmup: true, Timeout: 10 * time.Second,
		SetupConcurrency: 32, Progress: time.Second, Check: true, MaxEvents: 20_000_000}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("DefaultConfig %+v\nwant          %+v", c, want)
	}
}

// Several servers in -url: agent i talks to the i-th (modulo), setup to the first.
func TestClientNodes(t *testing.T) {
	t.Parallel()
	c := NewClient("http://10.0.0.1:8080, http://10.0.0.2:8080/", "", 4, time.Second)
	for i, want := range []string{"http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.1:8080"} {
		if got := c.Node(i).base; got != want {
			t.Errorf("Node(%d) = %s, want %s", i, got, want)
		}
	}
	if c.base != "http://10.0.0.1:8080" {
		t.Errorf("setup's base = %s, want the first", c.base)
	}
	if err := validURL("http://a:1,ftp://b"); err == nil {
		t.Error("a list with a bad URL passed")
	}
}
