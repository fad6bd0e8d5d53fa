package swutest

import (
	"slices"
	"strings"
	"testing"
)

func TestConfigCommandLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // -u's argument
	}{
		{"target token", Config{URL: "http://127.0.0.1:1", ControllerID: "d1", TargetToken: "tt", CertPath: "/c.pem"},
			"-t DEFAULT -u http://127.0.0.1:1 -i d1 -p 1 -k tt"},
		{"gateway token, confirm", Config{URL: "http://127.0.0.1:1", Tenant: "acme", ControllerID: "d2", GatewayToken: "gt",
			PollSeconds: 5, Confirm: ConfirmSuccess, CertPath: "/c.pem"},
			"-t acme -u http://127.0.0.1:1 -i d2 -p 5 -g gt -c 2"},
		{"no token, failure", Config{URL: "http://127.0.0.1:1", ControllerID: "d3", Confirm: ConfirmFailure, CertPath: "/c.pem"},
			"-t DEFAULT -u http://127.0.0.1:1 -i d3 -p 1 -c 3"},
	} {
		cfg := tc.cfg.withDefaults()
		if err := cfg.validate(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := []string{"-v", "-f", "/d/swupdate.cfg", "-B", "none", "-k", "/c.pem", "-H", "swutest:1.0", "-u", tc.want}
		if got := cfg.args("/d/swupdate.cfg"); !slices.Equal(got, want) {
			t.Errorf("%s: args\n got %q\nwant %q", tc.name, got, want)
		}
	}
}

func TestConfigRejects(t *testing.T) {
	t.Parallel()
	ok := Config{URL: "http://127.0.0.1:1", ControllerID: "d", CertPath: "/c.pem"}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no id", func(c *Config) { c.ControllerID = "" }, "ControllerID is required"},
		{"both tokens", func(c *Config) { c.TargetToken, c.GatewayToken = "a", "b" }, "exclusive"},
		{"space", func(c *Config) { c.TargetToken = "a b" }, "white space"},
		{"confirm", func(c *Config) { c.Confirm = 9 }, "not a Confirm"},
	} {
		cfg := ok
		tc.edit(&cfg)
		cfg = cfg.withDefaults()
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: validate = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestConfigFileIdentify(t *testing.T) {
	t.Parallel()
	cfg := Config{Identify: map[string]string{"serialNo": `a"b`, "hw": "1.0"}}
	want := "# written by internal/swutest\nglobals : {\n};\n" +
		"identify : (\n\t{ name = \"hw\"; value = \"1.0\"; },\n\t{ name = \"serialNo\"; value = \"a\\\"b\"; }\n);\n"
	if got := cfg.configFile(); got != want {
		t.Errorf("config file\n got %q\nwant %q", got, want)
	}
}
