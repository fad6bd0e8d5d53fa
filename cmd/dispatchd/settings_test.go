package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/logsink"
)

// A DSN nothing answers on: a run that got as far as opening MySQL fails fast.
const deadDSN = "root@tcp(127.0.0.1:1)/taskd?timeout=1s"

// row is one setting as the reference documents it.
type row struct{ env, flag, def string }

// documented lists every setting dispatchd reads, from the reference tables: its own,
// and the outbox relay's (environment only).
func documented(t *testing.T) []row {
	t.Helper()
	var rows []row
	for _, line := range strings.Split(app.ConfigReference(), "\n")[2:] {
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			continue
		}
		cell := func(i int) string { return strings.Trim(strings.TrimSpace(cells[i]), "`") }
		def := cell(3)
		if def == "(empty)" {
			def = ""
		}
		rows = append(rows, row{env: cell(1), flag: strings.TrimPrefix(cell(2), "-"), def: def})
	}
	for _, s := range logsink.RelaySettings() {
		if !slices.ContainsFunc(rows, func(r row) bool { return r.env == s.Env }) {
			rows = append(rows, row{env: s.Env, def: s.Default})
		}
	}
	if len(rows) < 20 {
		t.Fatalf("only %d settings documented: %v", len(rows), rows)
	}
	return rows
}

// -h and --help exit 0 (run returns nil) and list every setting with its env name, its
// flag if it has one, and its default; and every variable run reads at start is
// among them (the relay's too).
func TestHelpListsEverySetting(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help"} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), []string{arg}, func(string) string { return "" }, &stdout, &stderr); err != nil {
			t.Fatalf("%s: %v (exit status 1), want exit 0", arg, err)
		}
		help := stdout.String()
		for _, r := range documented(t) {
			line := settingLine(help, r.env)
			if line == "" {
				t.Errorf("%s does not list %s:\n%s", arg, r.env, help)
				continue
			}
			if r.flag != "" && !strings.Contains(line, "-"+r.flag+" ") {
				t.Errorf("%s: %s lacks its flag -%s: %q", arg, r.env, r.flag, line)
			}
			if !strings.Contains(line, "default "+strconv.Quote(r.def)) {
				t.Errorf("%s: %s lacks its default %q: %q", arg, r.env, r.def, line)
			}
		}
	}

	// Every variable read on the way to serving (stopped at a busy address).
	busy := listenBusy(t)
	var read []string
	getenv := func(k string) string {
		read = append(read, k)
		return map[string]string{"DISPATCH_ADDR": busy, "DISPATCH_MYSQL_DSN": deadDSN}[k]
	}
	if err := run(t.Context(), nil, getenv, io.Discard, io.Discard); err == nil {
		t.Fatal("run on a busy address succeeded")
	}
	var help bytes.Buffer
	run(t.Context(), []string{"-h"}, func(string) string { return "" }, &help, io.Discard)
	for _, name := range read {
		if settingLine(help.String(), name) == "" {
			t.Errorf("run reads %s, which -h does not list", name)
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

// listenBusy returns an address something already listens on.
func listenBusy(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// A bind error names the address and where it came from.
func TestBindErrorNamesAddressAndSource(t *testing.T) {
	t.Parallel()
	busy := listenBusy(t)
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
		in   error
	}{
		{map[string]string{"DISPATCH_ADDR": busy}, nil, "listen on " + busy + " (DISPATCH_ADDR): address already in use", syscall.EADDRINUSE},
		{map[string]string{"DISPATCH_ADDR": "127.0.0.1:1"}, []string{"-addr", busy}, "listen on " + busy + " (flag -addr): address already in use", syscall.EADDRINUSE},
		{map[string]string{"DISPATCH_ADDR": "nonsense"}, nil, "listen on nonsense (DISPATCH_ADDR): missing port in address", nil},
	} {
		c.env["DISPATCH_MYSQL_DSN"] = deadDSN
		err := run(t.Context(), c.args, func(k string) string { return c.env[k] }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("env %v args %v: %v, want %q", c.env, c.args, err, c.want)
		}
		if c.in != nil && !errors.Is(err, c.in) {
			t.Errorf("env %v args %v: %v does not wrap %v", c.env, c.args, err, c.in)
		}
	}
}

// A zero or negative duration, size or count is refused at start, with an error that
// names the setting and the value.
func TestNonPositiveSettingsAreRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ env, zero, negative string }{
		{"DISPATCH_CATCH_UP", "0s", "-1s"},
		{"DISPATCH_MAX_WAIT", "0s", "-1s"},
		{"DISPATCH_SWEEP_INTERVAL", "0s", "-1s"},
		{"DISPATCH_SHUTDOWN_TIMEOUT", "0s", "-1s"},
		{"DISPATCH_REQUEST_TIMEOUT", "0s", "-1s"},
		{"DISPATCH_KEY_RECHECK", "0s", "-1s"},
		{"DISPATCH_SEEN_RESOLUTION", "0s", "-1s"},
		{"DISPATCH_MYSQL_CONNS", "0", "-1"},
		{"DISPATCH_AUTH_FAILURE_BURST", "0", "-1"},
		{"DISPATCH_AUTH_FAILURE_RATE", "0", "-1"},
		{"DISPATCH_KEYS_PER_UID", "0", "-1"},
		{"DISPATCH_REDIS_DB", "", "-1"}, // database 0 is Redis's default
		{"DISPATCH_RELAY_BATCH_SIZE", "0", "-1"},
		{"DISPATCH_RELAY_BATCH_TIMEOUT", "0s", "-1s"},
		{"DISPATCH_RELAY_POLL_INTERVAL", "0s", "-1s"},
	} {
		for _, v := range []string{c.zero, c.negative} {
			if v == "" {
				continue
			}
			for _, brokers := range []string{"", "127.0.0.1:1"} { // with and without the relay
				env := map[string]string{c.env: v, "DISPATCH_MYSQL_DSN": deadDSN, "DISPATCH_ADDR": "127.0.0.1:0",
					"DISPATCH_KAFKA_BROKERS": brokers}
				err := run(t.Context(), nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
				if err == nil || !strings.Contains(err.Error(), c.env) || !strings.Contains(err.Error(), v) {
					t.Errorf("%s=%s (brokers %q): %v, want an error naming %s and %s", c.env, v, brokers, err, c.env, v)
				}
			}
		}
	}
	// A flag names its flag too.
	dead := map[string]string{"DISPATCH_MYSQL_DSN": deadDSN, "DISPATCH_ADDR": "127.0.0.1:0"}
	err := run(t.Context(), []string{"-max-wait", "0s"}, func(k string) string { return dead[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "DISPATCH_MAX_WAIT (flag -max-wait)") {
		t.Errorf("-max-wait 0s: %v", err)
	}
}
