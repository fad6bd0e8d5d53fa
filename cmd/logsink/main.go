// Command logsink consumes taskd's events from Kafka and indexes them into
// Elasticsearch. Configuration: DISPATCH_* environment variables or the matching flags
// (flags win); run with -h for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/taskpull/taskd/logsink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "logsink:", err)
		}
		os.Exit(1)
	}
}

// run loads the configuration, then consumes until ctx is done (SIGINT or SIGTERM),
// shutting down gracefully: in-flight events are indexed and their offsets committed.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg := logsink.DefaultConfig()
	if err := cfg.Load(args, getenv, stderr); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToLower(cfg.LogLevel))); err != nil {
		return fmt.Errorf("config: DISPATCH_LOG_LEVEL: %w", err)
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	sink, err := logsink.NewSink(cfg, logger)
	if err != nil {
		return err
	}
	logger.Info("logsink starting", "component", "main", "kafka_brokers", strings.Join(cfg.KafkaBrokers, ","),
		"es_urls", redact(cfg.ESURLs), "topic", cfg.Topic, "group", cfg.Group)
	return sink.Run(ctx)
}

// redact drops credentials embedded in URLs, which must not reach the logs.
func redact(urls []string) string {
	out := make([]string, len(urls))
	for i, s := range urls {
		u, err := url.Parse(s)
		if err != nil {
			out[i] = "(unparsable)"
			continue
		}
		u.User = nil
		out[i] = u.String()
	}
	return strings.Join(out, ",")
}
