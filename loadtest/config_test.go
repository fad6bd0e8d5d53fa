package loadtest

import (
	"io"
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
	} {
		_, err := ParseConfig(c.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want it to name %s", c.args, err, c.want)
		}
	}
}

func TestPresetsValid(t *testing.T) {
	for name, p := range Presets {
		c := DefaultConfig()
		c.Preset, c.Size = name, p
		if err := c.Validate(); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
		if p.Users/p.Groups != 200 && name != "small" {
			t.Errorf("preset %s: %d users per group, want 200 (a flat scale curve compares like with like)", name, p.Users/p.Groups)
		}
	}
	if Presets["small"].Duration > time.Minute {
		t.Error("small preset should be quick")
	}
}
