package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/taskpull/taskd/logsink"
)

// -h and --help exit 0 (run returns nil) and list every setting with its env name, its
// flag and its default; every variable run reads is among them.
func TestHelpListsEverySetting(t *testing.T) {
	t.Parallel()
	var read []string
	getenv := func(k string) string { read = append(read, k); return "" }
	for _, arg := range []string{"-h", "--help"} {
		var stdout bytes.Buffer
		if err := run(t.Context(), []string{arg}, getenv, &stdout, io.Discard); err != nil {
			t.Fatalf("%s: %v (exit status 1), want exit 0", arg, err)
		}
		help := stdout.String()
		settings := logsink.Settings()
		if len(settings) < 20 {
			t.Fatalf("only %d settings", len(settings))
		}
		for _, s := range settings {
			line := settingLine(help, s.Env)
			if line == "" {
				t.Errorf("%s does not list %s:\n%s", arg, s.Env, help)
				continue
			}
			if !strings.Contains(line, "-"+s.Flag+" ") || !strings.Contains(line, "default "+strconv.Quote(s.Default)) {
				t.Errorf("%s: %s lacks -%s or default %q: %q", arg, s.Env, s.Flag, s.Default, line)
			}
		}
		for _, name := range read {
			if settingLine(help, name) == "" {
				t.Errorf("run reads %s, which %s does not list", name, arg)
			}
		}
	}
}

// settingLine is the line of help that starts with env's name ("" if none).
func settingLine(help, env string) string {
	for _, line := range strings.Split(help, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.TrimSuffix(f[0], ",") == env {
			return line
		}
	}
	return ""
}

// The metrics listener's bind error names the address and where it came from.
func TestMetricsBindErrorNamesAddressAndSource(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"DISPATCH_LOGSINK_METRICS_ADDR": busy}, nil,
			"listen on " + busy + " (DISPATCH_LOGSINK_METRICS_ADDR): address already in use"},
		{map[string]string{"DISPATCH_LOGSINK_METRICS_ADDR": "127.0.0.1:1"}, []string{"-metrics-addr", busy},
			"listen on " + busy + " (flag -metrics-addr): address already in use"},
		{map[string]string{"DISPATCH_LOGSINK_METRICS_ADDR": "nonsense"}, nil,
			"listen on nonsense (DISPATCH_LOGSINK_METRICS_ADDR): missing port in address"},
	} {
		// Kafka and Elasticsearch are never reached: the bind comes first.
		c.env["DISPATCH_KAFKA_BROKERS"], c.env["DISPATCH_ES_URLS"] = "127.0.0.1:1", "http://127.0.0.1:1"
		err := run(t.Context(), c.args, env(c.env), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("env %v args %v: %v, want %q", c.env, c.args, err, c.want)
		}
		if strings.Contains(c.want, "in use") && !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("env %v args %v: %v does not wrap EADDRINUSE", c.env, c.args, err)
		}
	}
}

// A zero duration or count is refused at start with the setting's name and value.
func TestRunRefusesNonPositive(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"-es-flush-interval", "0s"}, env(map[string]string{
		"DISPATCH_KAFKA_BROKERS": "127.0.0.1:1", "DISPATCH_ES_URLS": "http://127.0.0.1:1"}), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "DISPATCH_ES_FLUSH_INTERVAL") || !strings.Contains(err.Error(), "0s") {
		t.Errorf("-es-flush-interval 0s: %v", err)
	}
}
