package swutest

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// stopGrace is SIGTERM to SIGKILL in Stop. SWUpdate 2022.12's main process usually
	// exits within milliseconds of SIGTERM, but about one stop in fifteen it hangs in a
	// futex wait for good (its children already gone); waiting longer gains nothing.
	stopGrace = time.Second
	// maxSocketPath is sun_path's size less its NUL: SWUpdate's sockets live in the
	// client's directory, so that directory's path must leave room for their names.
	maxSocketPath = 107
	longestSocket = "/sockinstctrl"
	failTailLines = 60
)

// Confirm is what a restarted client reports upstream about the update it installed
// before the restart, standing in for the bootloader's update state that this build
// keeps in RAM only (suricatta -c).
type Confirm int

const (
	// NoConfirm passes no -c: the client reports nothing at start.
	NoConfirm Confirm = iota
	// ConfirmSuccess passes -c 2: at start the client POSTs closed/success
	// ["Update Installed."] for the action its deploymentBase link names.
	ConfirmSuccess
	// ConfirmFailure passes -c 3: closed/failure ["Update Failed."].
	ConfirmFailure
)

// Config is one SWUpdate client's identity and settings. URL, ControllerID and CertPath
// are required; values passed on suricatta's command line may not contain white space,
// since SWUpdate splits -u's argument at white space and honours no quotes.
type Config struct {
	// URL is the DDI server's base, e.g. "http://127.0.0.1:40123" (suricatta -u);
	// requests go to URL/Tenant/controller/v1/ControllerID.
	URL string
	// Tenant is suricatta -t (default "DEFAULT").
	Tenant string
	// ControllerID is suricatta -i.
	ControllerID string
	// TargetToken (suricatta -k) or GatewayToken (-g), at most one: SWUpdate exits
	// when given both. Neither sends no Authorization header.
	TargetToken  string
	GatewayToken string
	// PollSeconds is suricatta -p (default 1). A base poll's config.polling.sleep
	// overrides it.
	PollSeconds int
	// Identify, if not empty, is written as the config file's identify section; the
	// client then PUTs it as configData's "data" after its first base poll.
	Identify map[string]string
	// Confirm is what the client reports at start (see Confirm; default NoConfirm).
	Confirm Confirm
	// CertPath verifies images (swupdate -k): a Signer's CertPath.
	CertPath string
	// Hardware is the revision the client reports (-H swutest:<Hardware>; default
	// DefaultHardware).
	Hardware string
}

func (c *Config) withDefaults() Config {
	cfg := *c
	if cfg.Tenant == "" {
		cfg.Tenant = "DEFAULT"
	}
	if cfg.PollSeconds == 0 {
		cfg.PollSeconds = 1
	}
	if cfg.Hardware == "" {
		cfg.Hardware = DefaultHardware
	}
	cfg.Identify = maps.Clone(cfg.Identify)
	return cfg
}

func (c *Config) validate() error {
	for name, v := range map[string]string{"URL": c.URL, "ControllerID": c.ControllerID, "CertPath": c.CertPath} {
		if v == "" {
			return fmt.Errorf("Config.%s is required", name)
		}
	}
	if c.TargetToken != "" && c.GatewayToken != "" {
		return errors.New("Config.TargetToken and Config.GatewayToken are exclusive: SWUpdate exits when given both")
	}
	for name, v := range map[string]string{"URL": c.URL, "Tenant": c.Tenant, "ControllerID": c.ControllerID,
		"TargetToken": c.TargetToken, "GatewayToken": c.GatewayToken, "Hardware": c.Hardware} {
		if strings.ContainsFunc(v, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f' }) {
			return fmt.Errorf("Config.%s %q contains white space, which SWUpdate's -u splitting cannot carry", name, v)
		}
	}
	if c.PollSeconds < 0 {
		return fmt.Errorf("Config.PollSeconds %d is negative", c.PollSeconds)
	}
	if c.Confirm < NoConfirm || c.Confirm > ConfirmFailure {
		return fmt.Errorf("Config.Confirm %d is not a Confirm", c.Confirm)
	}
	return nil
}

// args is swupdate's command line for cfg, with its config file at cfgPath.
func (c *Config) args(cfgPath string) []string {
	suricatta := []string{"-t", c.Tenant, "-u", c.URL, "-i", c.ControllerID, "-p", strconv.Itoa(c.PollSeconds)}
	if c.TargetToken != "" {
		suricatta = append(suricatta, "-k", c.TargetToken)
	}
	if c.GatewayToken != "" {
		suricatta = append(suricatta, "-g", c.GatewayToken)
	}
	switch c.Confirm {
	case ConfirmSuccess:
		suricatta = append(suricatta, "-c", "2")
	case ConfirmFailure:
		suricatta = append(suricatta, "-c", "3")
	}
	return []string{
		"-v",          // every log line, so tests can wait for them
		"-f", cfgPath, // ours, never /etc/swupdate.cfg
		"-B", "none", // the bootloader environment in RAM; grub is compiled in too
		"-k", c.CertPath,
		"-H", "swutest:" + c.Hardware,
		"-u", strings.Join(suricatta, " "),
	}
}

// configFile is the libconfig text of the client's config file: an empty globals
// section (SWUpdate exits without one) and the identify section; everything else is on
// the command line.
func (c *Config) configFile() string {
	var b strings.Builder
	b.WriteString("# written by internal/swutest\nglobals : {\n};\n")
	if len(c.Identify) > 0 {
		b.WriteString("identify : (\n")
		keys := make([]string, 0, len(c.Identify))
		for k := range c.Identify {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			sep := ","
			if i == len(keys)-1 {
				sep = ""
			}
			fmt.Fprintf(&b, "\t{ name = %s; value = %s; }%s\n", strconv.Quote(k), strconv.Quote(c.Identify[k]), sep)
		}
		b.WriteString(");\n")
	}
	return b.String()
}

// Client is one running SWUpdate process in suricatta mode, with its own directory
// (TMPDIR: its IPC sockets and scratch files) and its own captured output. Its methods
// are safe for concurrent use; WaitFor may be called from any goroutine.
type Client struct {
	t   testing.TB
	id  string // cfg.ControllerID, for messages
	dir string

	mu   sync.Mutex
	cfg  Config
	runs []*run // every process started, the last one current
}

// run is one process of a Client: the first, or one after a Restart.
type run struct {
	cmd      *exec.Cmd
	out      *lineBuffer
	exited   chan struct{} // closed when cmd.Wait has returned
	waitErr  error         // cmd.Wait's result, set before exited is closed
	stopOnce sync.Once
}

// Start runs `swupdate` in suricatta mode for cfg and returns once the process has
// started (not once it has polled). The process, its children and its directory are
// gone when t ends; if t failed, the tail of each run's output is logged first. Start
// skips t when swupdate is missing (see Require) and fails it when cfg is invalid. It
// may wait for a free slot (at most ten clients run at once on a machine; see the
// package doc). Call it, and Restart, from the test's goroutine.
func Start(t testing.TB, cfg Config) *Client {
	t.Helper()
	Require(t)
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatalf("swutest: %v", err)
	}
	slot, err := acquireSlot(t)
	if err != nil {
		t.Fatalf("swutest: %v", err)
	}
	// Not t.TempDir: its path grows with the test's name, and the sockets inside must
	// fit in sun_path.
	dir, err := os.MkdirTemp("", "swu-")
	if err != nil {
		slot.Close()
		t.Fatalf("swutest: %v", err)
	}
	c := &Client{t: t, id: cfg.ControllerID, dir: dir, cfg: cfg}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			c.logTails()
		}
		os.RemoveAll(dir)
		slot.Close()
	})
	if len(dir)+len(longestSocket) > maxSocketPath {
		t.Fatalf("swutest: temp dir %s is too long for a unix socket path; set TMPDIR shorter", dir)
	}
	if err := c.start(); err != nil {
		t.Fatalf("swutest: start swupdate for %s: %v", cfg.ControllerID, err)
	}
	return c
}

// Dir is the client's directory, its TMPDIR: SWUpdate's sockinstctrl and swupdateprog
// sockets and scratch files are there.
func (c *Client) Dir() string { return c.dir }

func (c *Client) start() error {
	cfgPath := filepath.Join(c.dir, "swupdate.cfg")
	if err := os.WriteFile(cfgPath, []byte(c.cfg.configFile()), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(swupdatePath, c.cfg.args(cfgPath)...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "TMPDIR="+c.dir)
	out := &lineBuffer{changed: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so Stop reaches the suricatta and downloader children as
	// well; and killed if this test binary dies without running its cleanups (the
	// children follow: SWUpdate sets PR_SET_PDEATHSIG on them). Pdeathsig follows the
	// OS thread that forked, which the Go runtime ends only under a goroutine that
	// exits locked to it; nothing here does that.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	r := &run{cmd: cmd, out: out, exited: make(chan struct{})}
	go func() {
		r.waitErr = cmd.Wait()
		close(r.exited)
	}()
	c.mu.Lock()
	c.runs = append(c.runs, r)
	c.mu.Unlock()
	return nil
}

func (c *Client) current() *run {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[len(c.runs)-1]
}

// Stop ends the current process: SIGTERM to its process group, SIGKILL after a
// second, then SIGKILL to whatever of the group is left. It returns once the process
// has exited; calling it again does nothing.
func (c *Client) Stop() {
	c.mu.Lock()
	var r *run
	if n := len(c.runs); n > 0 {
		r = c.runs[n-1]
	}
	c.mu.Unlock()
	if r != nil {
		r.stop()
	}
}

func (r *run) stop() {
	r.stopOnce.Do(func() {
		pgid := r.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(stopGrace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-r.exited
		}
		// Children normally follow the main process out (SIGTERM reaches all of them,
		// and each has a parent-death signal), but none may outlive the test.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
}

// Restart stops the current process and starts another with the same identity and
// directory and the given Confirm, as a device reboots into an installed update. Its
// output is captured afresh: WaitFor and Output see only the new process.
func (c *Client) Restart(confirm Confirm) {
	c.t.Helper()
	c.Stop()
	c.mu.Lock()
	c.cfg.Confirm = confirm
	err := c.cfg.validate()
	c.mu.Unlock()
	if err != nil {
		c.t.Fatalf("swutest: restart: %v", err)
	}
	if err := c.start(); err != nil {
		c.t.Fatalf("swutest: restart swupdate for %s: %v", c.id, err)
	}
}

// Exited is closed when the current process has exited, for whatever reason: a test
// waiting on its server for the client's next request can give up early.
func (c *Client) Exited() <-chan struct{} {
	return c.current().exited
}

// Output is everything the current process has written to stdout and stderr so far.
func (c *Client) Output() string {
	return c.current().out.String()
}

// WaitFor waits up to timeout for a line of the current process's output that
// contains substr, and returns the first such line. It fails early if the process exits without having
// written one; the error then, or on timeout, ends with the output's last lines.
func (c *Client) WaitFor(substr string, timeout time.Duration) (string, error) {
	r := c.current()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		text, changed := r.out.snapshot()
		if line, ok := firstLineWith(text, substr); ok {
			return line, nil
		}
		select {
		case <-changed:
		case <-r.exited:
			text, _ := r.out.snapshot()
			if line, ok := firstLineWith(text, substr); ok {
				return line, nil
			}
			return "", fmt.Errorf("swupdate %s exited (%v) before writing %q; last lines:\n%s",
				c.id, r.waitErr, substr, tail(text, failTailLines))
		case <-deadline.C:
			return "", fmt.Errorf("swupdate %s wrote no line with %q in %s; last lines:\n%s",
				c.id, substr, timeout, tail(r.out.String(), failTailLines))
		}
	}
}

func firstLineWith(text, substr string) (string, bool) {
	for line := range strings.Lines(text) {
		if strings.Contains(line, substr) {
			return strings.TrimRight(line, "\r\n"), true
		}
	}
	return "", false
}

func (c *Client) logTails() {
	c.mu.Lock()
	runs := slices.Clone(c.runs)
	c.mu.Unlock()
	for i, r := range runs {
		c.t.Logf("swupdate %s, run %d of %d, last lines:\n%s", c.id, i+1, len(runs),
			tail(r.out.String(), failTailLines))
	}
}

func tail(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// lineBuffer collects a process's output and tells waiters when it grows.
type lineBuffer struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{} // closed and replaced on every Write
}

func (l *lineBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

func (l *lineBuffer) String() string {
	s, _ := l.snapshot()
	return s
}

// snapshot is the text so far and a channel closed when more arrives.
func (l *lineBuffer) snapshot() (string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String(), l.changed
}
