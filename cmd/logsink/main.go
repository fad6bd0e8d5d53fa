// Command logsink consumes taskd's events from Kafka and indexes them into
// Elasticsearch. Configuration: DISPATCH_* environment variables or the matching flags
// (flags win); run with -h for the list.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/taskpull/taskd/internal/bind"
	"github.com/taskpull/taskd/internal/logcollapse"
	"github.com/taskpull/taskd/logsink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "logsink:", err)
		os.Exit(1)
	}
}

// run loads the configuration, then consumes until ctx is done (SIGINT or SIGTERM),
// shutting down gracefully: in-flight events are indexed and their offsets committed.
// With -h or --help it lists the settings on stdout and returns nil.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg := logsink.DefaultConfig()
	if err := cfg.Load(args, getenv, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("config: %w (logsink -h lists the settings)", err)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToLower(cfg.LogLevel))); err != nil {
		return fmt.Errorf("config: DISPATCH_LOG_LEVEL: %w", err)
	}
	// Repeated warnings (one per event during an outage) are written once per window
	// and counted; Close, deferred before anything that logs, writes the counts still
	// held when run returns.
	logs := logcollapse.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}), logcollapse.Options{})
	defer logs.Close()
	logger := slog.New(logs)
	// Bind before connecting anywhere: a busy port fails at once.
	var ln net.Listener
	if cfg.MetricsAddr != "" {
		var err error
		if ln, err = bind.Listen(cfg.MetricsAddr, cfg.Source("DISPATCH_LOGSINK_METRICS_ADDR")); err != nil {
			return err
		}
		defer ln.Close()
	}
	sink, err := logsink.NewSink(cfg, logger)
	if err != nil {
		return err
	}
	logger.Info("logsink starting", "component", "main", "kafka_brokers", strings.Join(cfg.KafkaBrokers, ","),
		"es_urls", redact(cfg.ESURLs), "topic", cfg.Topic, "group", cfg.Group)
	if ln != nil {
		srv := &http.Server{Handler: metricsHandler(sink), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		fmt.Fprintf(stdout, "logsink metrics on %s\n", ln.Addr())
	}
	return sink.Run(ctx)
}

// metricsHandler serves /metrics (the sink's throughput, dead letters, retries,
// refusals, in-flight messages, consumer lag and readiness, read at scrape time);
// /healthz and /readyz, which answer 503 with the reasons (and what is known of why)
// while the sink is not ready; and /livez, which says only that the process answers.
func metricsHandler(sink *logsink.Sink) http.Handler {
	reg := prometheus.NewRegistry()
	stat := func(v func(logsink.SinkStats) float64) func() float64 {
		return func() float64 { return v(sink.Stats()) }
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskd_logsink_indexed_events_total",
			Help: "Events Elasticsearch acknowledged (replays included)."},
			stat(func(s logsink.SinkStats) float64 { return float64(s.Indexed) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskd_logsink_dead_lettered_events_total",
			Help: "Events sent to the dead-letter topic (mapping errors, malformed messages)."},
			stat(func(s logsink.SinkStats) float64 { return float64(s.DeadLettered) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskd_logsink_es_bulk_failures_total",
			Help: "Bulk item attempts Elasticsearch refused with 429 or 5xx, or did not answer; each is retried."},
			stat(func(s logsink.SinkStats) float64 { return float64(s.Retries) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskd_logsink_es_unconfirmed_items_total",
			Help: "Bulk reply items that did not confirm their event (another _id, no 2xx status); each event was retried."},
			stat(func(s logsink.SinkStats) float64 { return float64(s.Unconfirmed) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskd_logsink_es_refused_batches_total",
			Help: "Bulk requests that stored none of their events (no answer, an error status, a reply that is not a bulk reply, every item refused); their events were retried."},
			stat(func(s logsink.SinkStats) float64 { return float64(s.RefusedBatches) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskd_logsink_es_refused_events_total",
			Help: "Events the server refused for a reason in the event itself (an item error other than 429/5xx, or found alone by splitting a request refused as a whole); each went to the dead-letter topic."},
			stat(func(s logsink.SinkStats) float64 { return float64(s.RefusedEvents) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskd_logsink_es_split_batches_total",
			Help: "Bulk requests the server refused as a whole (400, 413) for a reason in their documents, split to find the documents at fault."},
			stat(func(s logsink.SinkStats) float64 { return float64(s.SplitBatches) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskd_logsink_in_flight_events",
			Help: "Events fetched from Kafka and not yet indexed or dead-lettered."},
			stat(func(s logsink.SinkStats) float64 { return float64(s.InFlight) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskd_logsink_consumer_lag_events",
			Help: "Consumer group lag from the broker: high watermark minus committed offset, summed over every partition of the topic. NaN before the first measurement."},
			lagStat(sink, func(l logsink.Lag) float64 { return float64(l.Events) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskd_logsink_oldest_unindexed_event_age_seconds",
			Help: "Age of the oldest event in Kafka not yet indexed (by its Kafka timestamp); 0 without lag. NaN before the first measurement."},
			lagStat(sink, func(l logsink.Lag) float64 { return l.OldestAge.Seconds() })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskd_logsink_lag_measured_timestamp_seconds",
			Help: "When the lag and the oldest event's age were last measured (Unix time); 0 before the first measurement."},
			stat(func(s logsink.SinkStats) float64 { return unixSeconds(s.Lag.At) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskd_logsink_ready",
			Help: "1 while the sink is ready (see /readyz), else 0."},
			func() float64 { return boolValue(sink.Readiness().Ready) }),
	)
	for _, reason := range logsink.UnreadyReasons {
		labels := prometheus.Labels{"reason": reason}
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskd_logsink_unready", ConstLabels: labels,
				Help: "1 while the reason keeps the sink from being ready, else 0."},
				func() float64 { return boolValue(sink.Readiness().Holds(reason)) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskd_logsink_unready_total", ConstLabels: labels,
				Help: "Times the reason began to keep the sink from being ready."},
				func() float64 { return float64(sink.Readiness().Begins[reason]) }),
		)
	}
	ready := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		rd := sink.Readiness()
		if !rd.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			body := map[string]any{"status": "not_ready", "reasons": rd.Reasons}
			if len(rd.Details) > 0 {
				body["details"] = rd.Details
			}
			json.NewEncoder(w).Encode(body)
			return
		}
		io.WriteString(w, `{"status":"ok"}`)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", ready)
	mux.HandleFunc("GET /readyz", ready)
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok"}`)
	})
	return mux
}

// lagStat reads a lag figure at scrape time: NaN before the first measurement, so
// that a graph shows a gap rather than a reassuring 0.
func lagStat(sink *logsink.Sink, v func(logsink.Lag) float64) func() float64 {
	return func() float64 {
		l := sink.Stats().Lag
		if l.At.IsZero() {
			return math.NaN()
		}
		return v(l)
	}
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
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
