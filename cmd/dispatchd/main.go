// Command dispatchd is the task dispatch server. Configuration: env DISPATCH_* or flags
// (see -h and docs/CONFIG.md); with none, it runs on MySQL and Redis on localhost.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/bind"
	"github.com/taskpull/taskd/internal/logcollapse"
	"github.com/taskpull/taskd/internal/metrics"
	"github.com/taskpull/taskd/logsink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dispatchd:", err)
		os.Exit(1)
	}
}

// run starts the server and blocks until ctx is done, then shuts down gracefully:
// in-flight requests finish (up to the shutdown timeout), so do the campaign syncs, and
// the node leaves the membership before the clients close. With -h or --help it lists
// the settings on stdout and returns nil.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := app.LoadConfig(args, getenv, stdout, logsink.RelaySettings()...)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	rc, err := loadRelayConfig(cfg, getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	// Repeated warnings (one per failed request during an outage) are written once per
	// window and counted; Close, deferred first so it runs last, writes the counts still
	// held when run returns.
	logs := logcollapse.New(slog.NewJSONHandler(stderr, nil), logcollapse.Options{})
	defer logs.Close()
	log := slog.New(logs)

	// Bind before opening MySQL: a busy port fails at once, not after migrations.
	ln, err := bind.Listen(cfg.Addr, cfg.Source("DISPATCH_ADDR"))
	if err != nil {
		return err
	}
	defer ln.Close()
	deps, closeDeps, err := app.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeDeps()
	a := app.New(cfg, deps)
	if err := a.PrepareArtifacts(ctx); err != nil {
		return err
	}
	// A second process under a live node's name would be listed as that node and hold
	// its leases: it does not start.
	if err := a.Join(ctx); err != nil {
		return err
	}
	if len(cfg.AdminTokens) == 0 {
		log.Warn("DISPATCH_ADMIN_TOKEN is not set: the admin API refuses every request")
	}

	srv := &http.Server{
		Handler:           a.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      cfg.MaxWait + 30*time.Second, // a long poll may hold the reply
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	// The stop, in order: when ctx ends the server takes no new requests and the
	// background work no new rounds; then the requests in flight and the campaign syncs
	// finish, the node gives its leases up and leaves the membership, and only then,
	// deferred before this, are the clients closed.
	bg, stopBG := context.WithCancel(ctx)
	background := make(chan struct{})
	var relay relayDone
	defer func() {
		stopBG()
		<-background
		if relay != nil {
			relay.Wait() // the relay finishes its round; what it did not send stays in the outbox
		}
	}()
	go func() {
		defer close(background)
		a.RunBackground(bg)
	}()
	if len(cfg.KafkaBrokers) > 0 {
		if relay, err = startRelay(bg, rc, deps, a, log); err != nil {
			return err
		}
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String(), "node", cfg.Node, "console", consoleURL(ln.Addr()))
	fmt.Fprintf(stdout, "dispatchd listening on %s\n", ln.Addr())

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Shutdown)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// loadRelayConfig reads the relay's settings at start, whether or not Kafka is
// configured, so a bad one stops dispatchd before it serves. The brokers come from the
// merged config (flags win); the relay's tuning from env.
func loadRelayConfig(cfg app.Config, getenv func(string) string) (logsink.RelayConfig, error) {
	rc, err := logsink.LoadRelayConfig(getenv)
	if err != nil {
		return rc, err
	}
	rc.Brokers = cfg.KafkaBrokers
	if len(rc.Brokers) > 0 {
		if err := rc.Validate(); err != nil {
			return rc, err
		}
	}
	return rc, nil
}

// relayDone waits for the relay to stop.
type relayDone chan struct{}

func (d relayDone) Wait() { <-d }

// startRelay runs the outbox relay to Kafka in the background until ctx is done.
func startRelay(ctx context.Context, rc logsink.RelayConfig, deps app.Deps, a *app.App, log *slog.Logger) (relayDone, error) {
	relay, err := logsink.NewRelay(rc, logsink.StoreOutbox(deps.Store), log)
	if err != nil {
		return nil, err
	}
	a.AddRole("relay", func() bool { return relay.Stats().Active })
	metrics.RegisterRelay(a.Registry, func() metrics.RelayStats {
		s := relay.Stats()
		return metrics.RelayStats{Active: s.Active, Backlog: s.Backlog, OldestAge: s.OldestAge, Sent: s.Sent, Failures: s.Failures}
	})
	done := make(relayDone)
	go func() {
		defer close(done)
		if err := relay.Run(ctx); err != nil {
			log.Error("outbox relay stopped", "component", "relay", "err", err)
		}
	}()
	return done, nil
}

// consoleURL is where the web console of a server listening on addr answers, as a
// browser on the same machine would open it.
func consoleURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "/console/"
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/console/"
}
