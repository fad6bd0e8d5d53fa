package app

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// Source tells where a setting came from, for messages such as a bind error's.
func TestConfigSource(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DISPATCH_ADDR": "127.0.0.1:9", "DISPATCH_CATCH_UP": "2h"}
	c, err := LoadConfig([]string{"-catch-up", "3h"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for env, want := range map[string]string{
		"DISPATCH_ADDR":       "DISPATCH_ADDR",
		"DISPATCH_CATCH_UP":   "flag -catch-up",
		"DISPATCH_REDIS_ADDR": "default",
	} {
		if got := c.Source(env); got != want {
			t.Errorf("Source(%s) = %q, want %q", env, got, want)
		}
	}
	if got := (Config{}).Source("DISPATCH_ADDR"); got != "default" {
		t.Errorf("a Config not loaded: Source = %q, want default", got)
	}
}

// A value that does not parse or validate is refused naming the setting, its flag when
// it came from one, and the value; 0 is refused wherever it means nothing.
func TestLoadConfigRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"DISPATCH_MAX_WAIT": "0"}, nil, "DISPATCH_MAX_WAIT: must be positive, got 0s"},
		{nil, []string{"-max-wait", "0s"}, "DISPATCH_MAX_WAIT (flag -max-wait): must be positive, got 0s"},
		{map[string]string{"DISPATCH_MAX_WAIT": "6m"}, nil, "DISPATCH_MAX_WAIT: must be at most 5m, got 6m"},
		{map[string]string{"DISPATCH_CATCH_UP": "soon"}, nil, `DISPATCH_CATCH_UP: not a duration like 500ms, 30s or 1h: "soon"`},
		{nil, []string{"-redis-db", "16"}, "DISPATCH_REDIS_DB (flag -redis-db): must be 0..15, got 16"},
		{map[string]string{"DISPATCH_AUTH_FAILURE_RATE": "0"}, nil, "DISPATCH_AUTH_FAILURE_RATE: must be positive, got 0"},
		{map[string]string{"DISPATCH_ADMIN_TOKEN": "ops=long-enough,short"}, nil, "DISPATCH_ADMIN_TOKEN: each token must be at least 8 characters"},
		{map[string]string{"DISPATCH_ADMIN_TOKEN": "op\u202es=long-enough"}, nil, "DISPATCH_ADMIN_TOKEN: token name: must not hold control, format or invisible characters (got U+202E at byte 2)"},
		{map[string]string{"DISPATCH_ADDR": " "}, []string{"-addr="}, "DISPATCH_ADDR (flag -addr): required"},
		{map[string]string{"DISPATCH_REDIS_ADDR": "10.0.0.1:6379,10.0.0.2:6379"}, nil, "DISPATCH_REDIS_ADDR: names 2 addresses, but DISPATCH_REDIS_MODE is standalone (one Redis); set it to cluster or sentinel"},
		{map[string]string{"DISPATCH_REDIS_ADDR": " , "}, nil, "DISPATCH_REDIS_ADDR: must name at least one host:port"},
		{map[string]string{"DISPATCH_REDIS_MODE": "replica"}, nil, `DISPATCH_REDIS_MODE: must be one of standalone, cluster, sentinel, got "replica"`},
		{map[string]string{"DISPATCH_REDIS_MODE": "cluster", "DISPATCH_REDIS_DB": "2"}, nil, "DISPATCH_REDIS_DB: must be 0 with DISPATCH_REDIS_MODE=cluster (a cluster has only database 0), got 2"},
		{map[string]string{"DISPATCH_REDIS_MODE": "sentinel"}, nil, "DISPATCH_REDIS_MASTER_NAME: is required with DISPATCH_REDIS_MODE=sentinel"},
		{map[string]string{"DISPATCH_REDIS_MASTER_NAME": "mymaster"}, nil, "DISPATCH_REDIS_MASTER_NAME: is only for DISPATCH_REDIS_MODE=sentinel, and the mode is standalone"},
		{map[string]string{"DISPATCH_NODE_TIMEOUT": "2s"}, nil, "DISPATCH_CAMPAIGN_SYNC: must be at most a third of DISPATCH_NODE_TIMEOUT (2s): the campaign runners renew their leases at each sync, got 1s"},
		{map[string]string{"DISPATCH_NODE_TIMEOUT": "50ms", "DISPATCH_CAMPAIGN_SYNC": "10ms"}, nil, "DISPATCH_NODE_TIMEOUT: must be at least 100ms, got 50ms"},
		{nil, []string{"-no-such-flag"}, "flag provided but not defined: -no-such-flag (dispatchd -h lists the settings)"},
		{map[string]string{"DISPATCH_ENROLL_UIDS": "host-[0-9"}, nil, "DISPATCH_ENROLL_UIDS: not a regular expression: error parsing regexp: missing closing ]"},
		{nil, []string{"-enroll-rate", "-1"}, "DISPATCH_ENROLL_RATE (flag -enroll-rate): must not be negative, got -1"},
		{map[string]string{"DISPATCH_ENROLL_BURST": "0"}, nil, "DISPATCH_ENROLL_BURST: must be positive, got 0"},
		{map[string]string{"DISPATCH_ADMIN_KEYS_PER_UID": "0"}, nil, "DISPATCH_ADMIN_KEYS_PER_UID: must be 1..1000, got 0"},
	} {
		_, err := LoadConfig(c.args, func(k string) string { return c.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("env %v args %v: %v, want %q", c.env, c.args, err, c.want)
		}
	}
	if _, err := LoadConfig(nil, func(k string) string { return "" }, io.Discard); err != nil {
		t.Errorf("defaults: %v", err)
	}
	for _, env := range []map[string]string{
		{"DISPATCH_REDIS_MODE": "cluster", "DISPATCH_REDIS_ADDR": "10.0.0.1:7000,10.0.0.2:7000"},
		{"DISPATCH_REDIS_MODE": "sentinel", "DISPATCH_REDIS_ADDR": "10.0.0.1:26379,10.0.0.2:26379", "DISPATCH_REDIS_MASTER_NAME": "mymaster", "DISPATCH_REDIS_DB": "3"},
	} {
		c, err := LoadConfig(nil, func(k string) string { return env[k] }, io.Discard)
		if err != nil || len(c.RedisAddrs) != 2 {
			t.Errorf("env %v: %v, addresses %q", env, err, c.RedisAddrs)
		}
	}
}

// The enrollment bounds are off by default (any uid, no rate), and an operator's
// pattern is taken as written; enrolled and admin-issued keys have caps of their own.
func TestEnrollSettings(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.EnrollUIDs != nil || c.EnrollRate != 0 || c.EnrollBurst != 100 || c.KeysPerUID != 5 || c.AdminKeysPerUID != 5 {
		t.Errorf("defaults: uids %v, rate %g, burst %d, enrolled keys %d, admin keys %d",
			c.EnrollUIDs, c.EnrollRate, c.EnrollBurst, c.KeysPerUID, c.AdminKeysPerUID)
	}
	env := map[string]string{"DISPATCH_ENROLL_UIDS": "host-[0-9]+", "DISPATCH_ENROLL_RATE": "2.5"}
	c, err = LoadConfig([]string{"-enroll-burst", "20", "-admin-keys-per-uid", "3"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.EnrollUIDs == nil || c.EnrollUIDs.String() != "host-[0-9]+" || c.EnrollRate != 2.5 || c.EnrollBurst != 20 || c.AdminKeysPerUID != 3 {
		t.Errorf("set: uids %v, rate %g, burst %d, admin keys %d", c.EnrollUIDs, c.EnrollRate, c.EnrollBurst, c.AdminKeysPerUID)
	}
}

// TestEnvNamesAreWhatLoadConfigReads: EnvNames (and so docs/CONFIG.md) lists exactly the
// variables LoadConfig asks the environment for.
func TestEnvNamesAreWhatLoadConfigReads(t *testing.T) {
	t.Parallel()
	var read []string
	getenv := func(k string) string {
		if !slices.Contains(read, k) {
			read = append(read, k)
		}
		return ""
	}
	if _, err := LoadConfig(nil, getenv, io.Discard); err != nil {
		t.Fatalf("LoadConfig with defaults: %v", err)
	}
	if !slices.Equal(read, EnvNames()) {
		t.Errorf("LoadConfig reads %v\nEnvNames says %v", read, EnvNames())
	}
}

func TestConfigReferenceHasEverySetting(t *testing.T) {
	t.Parallel()
	ref := ConfigReference()
	rows := strings.Split(strings.TrimSuffix(ref, "\n"), "\n")
	settings := Settings()
	if got, want := len(rows), len(settings)+2; got != want {
		t.Fatalf("reference has %d lines, want %d (header, rule, one per setting):\n%s", got, want, ref)
	}
	for i, s := range settings {
		row := rows[i+2]
		def := "(empty)"
		if s.Default != "" {
			def = "`" + s.Default + "`"
		}
		for _, want := range []string{"`" + s.Env + "`", "`-" + s.Flag + "`", def} {
			if !strings.Contains(row, want) {
				t.Errorf("row %q lacks %s", row, want)
			}
		}
		if strings.Count(row, "|") != 5 {
			t.Errorf("row %q does not have four cells", row)
		}
	}
}
