// Package metrics defines the server's Prometheus metrics in one place, so names,
// labels and help texts are consistent and reviewable. Labels are bounded: task kinds,
// results, routes (patterns, never raw paths), status codes; never a user or task id.
//
// Every method is safe on a nil *Metrics, which records nothing (tests and benchmarks
// that do not care pass nil).
package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics holds the collectors.
type Metrics struct {
	requests      *prometheus.HistogramVec
	fetches       *prometheus.CounterVec
	dispatches    *prometheus.CounterVec
	completions   *prometheus.CounterVec
	expiries      *prometheus.CounterVec
	missed        *prometheus.CounterVec
	claimRefusals *prometheus.CounterVec
	heapLookups   *prometheus.CounterVec
	rebuilds      prometheus.Histogram
	heapPuts      *prometheus.CounterVec
	overBudget    prometheus.Counter
	degraded      *prometheus.CounterVec
	batches       *prometheus.HistogramVec
	fallbacks     *prometheus.CounterVec
	rateLimited   *prometheus.CounterVec
	pruned        *prometheus.CounterVec
	contention    *prometheus.CounterVec

	// The series every poll moves, looked up once: a label lookup hashes and compares
	// every label value. observers holds the request histogram's series by request (a
	// closed set: see Request).
	observers  sync.Map // requestLabels -> prometheus.Observer
	emptyFetch prometheus.Counter
	heapHit    prometheus.Counter
}

// requestLabels are a request's labels before they are made strings.
type requestLabels struct {
	route, method string
	status        int
}

// New registers the server's metrics (and the Go and process collectors) on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskd_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern, method and status code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 30},
		}, []string{"route", "method", "status"}),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_fetches_total",
			Help: "Fetches answered, by outcome: task (a new dispatch), redo (the open one again) or empty.",
		}, []string{"outcome"}),
		dispatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_dispatches_total",
			Help: "Dispatches made (new claims and retry attempts), by task kind.",
		}, []string{"kind"}),
		completions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_completions_total",
			Help: "Completions recorded, by task kind and result: success, failure, or for a task with confirm_seconds a success unconfirmed at its complete, then confirmed or lapsed (a failure).",
		}, []string{"kind", "result"}),
		expiries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_lease_expiries_total",
			Help: "Open dispatches expired past their lease, by task kind.",
		}, []string{"kind"}),
		missed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_missed_occurrences_total",
			Help: "Occurrences of rotate tasks users will never get because of the tasks' misfire policy (latest, skip), by task kind.",
		}, []string{"kind"}),
		claimRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_quota_claim_conflicts_total",
			Help: "Claims refused, by reason: exhausted, already_had, gone, not_targeted (the user left the task's group), not_in_rollout, user_busy (also an occurrence the user holds in another slot), rate_bound (the task's dispatch_rate_per_minute), phase_bound (a rollout phase's cap), outside_window (the task's maintenance windows are closed).",
		}, []string{"reason"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_degraded_requests_total",
			Help: "Requests served while a dependency was away, by dependency: redis (a fetch's key check and heap read from MySQL instead), mysql (an open dispatch handed out again from the copy Redis keeps).",
		}, []string{"dependency"}),
		overBudget: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskd_heap_rebuilds_over_budget_total",
			Help: "Polls answered 503 because this node was over its heap rebuild budget (DISPATCH_REBUILD_RATE), instead of reading MySQL.",
		}),
		heapLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_heap_cache_lookups_total",
			Help: "Heap cache lookups by result: hit, or miss (cold or stale: rebuilt).",
		}, []string{"result"}),
		heapPuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_heap_waiting_puts_total",
			Help: "Waiting dispatches (retries, next stages) a complete put into its user's heap (result put), or whose heap it made stale instead (result stale: the next fetch rebuilds).",
		}, []string{"result"}),
		rebuilds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "taskd_heap_rebuild_duration_seconds",
			Help:    "Heap rebuilds from MySQL (count and duration).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		batches: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskd_group_commit_batch_size",
			Help:    "Requests per group-commit transaction, by kind: claim or complete.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}, []string{"kind"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_group_commit_fallbacks_total",
			Help: "Group-commit batches that failed as a whole and ran their requests one by one, by kind.",
		}, []string{"kind"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_rate_limited_total",
			Help: "Requests answered 429 rate_limited, by limit: poll (a client polling faster than DISPATCH_POLL_RATE).",
		}, []string{"limit"}),
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_retention_deleted_rows_total",
			Help: "Rows the retention janitor deleted, by table: dispatch (finished records past DISPATCH_RETAIN_DISPATCHES), event_outbox (past DISPATCH_RETAIN_OUTBOX), client_agent (uids quiet past DISPATCH_RETAIN_AGENTS), heap_change (heap invalidations noted for the feed, after 15 minutes).",
		}, []string{"table"}),
		contention: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskd_mysql_contention_total",
			Help: "MySQL transactions rolled back for meeting a concurrent one, by reason (deadlock, lock_wait, write_conflict) and outcome: retried inside the server, or gave_up (the request's deadline left no room: it answered 503 with Retry-After).",
		}, []string{"reason", "outcome"}),
	}
	reg.MustRegister(m.contention, m.requests, m.fetches, m.dispatches, m.completions, m.expiries, m.missed, m.claimRefusals,
		m.heapLookups, m.rebuilds, m.heapPuts, m.overBudget, m.degraded, m.batches, m.fallbacks, m.rateLimited, m.pruned,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.emptyFetch = m.fetches.WithLabelValues("empty")
	m.heapHit = m.heapLookups.WithLabelValues("hit")
	return m
}

// RelayStats is what the outbox relay reports about itself.
type RelayStats struct {
	Active    bool
	Backlog   int64
	OldestAge time.Duration
	Sent      uint64
	Failures  uint64
}

// RegisterQueued exposes how many claims and completes wait for a group-commit lane,
// read at scrape time.
func RegisterQueued(reg prometheus.Registerer, queued func() (claims, completes int)) {
	gauge := func(kind string, v func() int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "taskd_group_commit_queued",
			Help:        "Requests waiting for a group-commit lane, by kind: claim or complete.",
			ConstLabels: prometheus.Labels{"kind": kind},
		}, func() float64 { return float64(v()) })
	}
	reg.MustRegister(
		gauge("claim", func() int { c, _ := queued(); return c }),
		gauge("complete", func() int { _, k := queued(); return k }))
}

// RegisterResultWaits exposes how many requests wait for a task's results on this node
// (GET /v1/admin/tasks/{kind}/{id}/results with wait: a read found nothing new), read
// at scrape time.
func RegisterResultWaits(reg prometheus.Registerer, waiting func() int) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "taskd_result_waits",
		Help: "Requests waiting for a task's results on this node: their read found nothing new, and they wait for a dispatch of the task to finish.",
	}, func() float64 { return float64(waiting()) }))
}

// RegisterRelay exposes the outbox relay's progress, read from stats at scrape time.
func RegisterRelay(reg prometheus.Registerer, stats func() RelayStats) {
	gauge := func(name, help string, v func(RelayStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return v(stats()) })
	}
	counter := func(name, help string, v func(RelayStats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return v(stats()) })
	}
	reg.MustRegister(
		gauge("taskd_outbox_backlog_events", "Outbox rows waiting for Kafka (as last measured).",
			func(s RelayStats) float64 { return float64(s.Backlog) }),
		gauge("taskd_outbox_oldest_age_seconds", "Age of the oldest outbox row waiting for Kafka.",
			func(s RelayStats) float64 { return s.OldestAge.Seconds() }),
		gauge("taskd_outbox_relay_active", "1 while this process holds the relay lease.",
			func(s RelayStats) float64 {
				if s.Active {
					return 1
				}
				return 0
			}),
		counter("taskd_outbox_relayed_events_total", "Events Kafka acknowledged and the outbox forgot.",
			func(s RelayStats) float64 { return float64(s.Sent) }),
		counter("taskd_outbox_relay_failures_total", "Relay rounds that failed (Kafka or MySQL unavailable).",
			func(s RelayStats) float64 { return float64(s.Failures) }),
	)
}

// Request records one HTTP request. Every label comes from a closed set, whatever the
// request says: route is the matched pattern (the caller's; "unmatched" for none), a
// method other than the standard ones is "other", and a status outside 100..599 is
// "other". A label an outsider could choose would let anyone grow /metrics (and the
// server's memory) without bound.
func (m *Metrics) Request(route, method string, status int, d time.Duration) {
	if m == nil {
		return
	}
	method = knownMethod(method)
	if status < 100 || status > 599 {
		status = 0
	}
	key := requestLabels{route, method, status}
	o, ok := m.observers.Load(key)
	if !ok {
		code := "other"
		if status != 0 {
			code = strconv.Itoa(status)
		}
		o, _ = m.observers.LoadOrStore(key, m.requests.WithLabelValues(route, method, code))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

// knownMethod is method if it is one of HTTP's standard methods, else "other".
func knownMethod(method string) string {
	switch method {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE":
		return method
	}
	return "other"
}

// Fetch records a fetch's outcome: "task", "redo" or "empty".
func (m *Metrics) Fetch(outcome string) {
	switch {
	case m == nil:
	case outcome == "empty":
		m.emptyFetch.Inc()
	default:
		m.fetches.WithLabelValues(outcome).Inc()
	}
}

// Dispatched records a dispatch of a task of kind.
func (m *Metrics) Dispatched(kind string) {
	if m != nil {
		m.dispatches.WithLabelValues(kind).Inc()
	}
}

// Completed records a completion.
func (m *Metrics) Completed(kind, result string) {
	if m != nil {
		m.completions.WithLabelValues(kind, result).Inc()
	}
}

// Expired records a lease expiry.
func (m *Metrics) Expired(kind string) {
	if m != nil {
		m.expiries.WithLabelValues(kind).Inc()
	}
}

// Missed records n occurrences of a task of kind missed by its misfire policy.
func (m *Metrics) Missed(kind string, n int) {
	if m != nil {
		m.missed.WithLabelValues(kind).Add(float64(n))
	}
}

// ClaimRefused records a refused claim.
func (m *Metrics) ClaimRefused(reason string) {
	if m != nil {
		m.claimRefusals.WithLabelValues(reason).Inc()
	}
}

// HeapLookup records a heap cache lookup: hit or miss.
func (m *Metrics) HeapLookup(hit bool) {
	switch {
	case m == nil:
	case hit:
		m.heapHit.Inc()
	default:
		m.heapLookups.WithLabelValues("miss").Inc()
	}
}

// Batch records a group-commit batch of size requests of kind; fellBack says it failed
// as a whole and its requests ran one by one.
func (m *Metrics) Batch(kind string, size int, fellBack bool) {
	if m != nil {
		m.batches.WithLabelValues(kind).Observe(float64(size))
		if fellBack {
			m.fallbacks.WithLabelValues(kind).Inc()
		}
	}
}

// Contended records a MySQL transaction rolled back for meeting a concurrent one: why
// (deadlock, lock_wait, write_conflict) and whether it was run again.
func (m *Metrics) Contended(reason string, retried bool) {
	if m != nil {
		outcome := "gave_up"
		if retried {
			outcome = "retried"
		}
		m.contention.WithLabelValues(reason, outcome).Inc()
	}
}

// Rebuilt records a heap rebuild and its duration.
func (m *Metrics) Rebuilt(d time.Duration) {
	if m != nil {
		m.rebuilds.Observe(d.Seconds())
	}
}

// HeapPut records a complete's waiting dispatch put into its user's heap (put), or
// the heap made stale instead.
func (m *Metrics) HeapPut(put bool) {
	if m != nil {
		m.heapPuts.WithLabelValues(map[bool]string{true: "put", false: "stale"}[put]).Inc()
	}
}

// Pruned records rows the retention janitor deleted from table.
func (m *Metrics) Pruned(table string, n int64) {
	if m != nil && n > 0 {
		m.pruned.WithLabelValues(table).Add(float64(n))
	}
}

// RateLimited records a request answered 429 by limit.
func (m *Metrics) RateLimited(limit string) {
	if m != nil {
		m.rateLimited.WithLabelValues(limit).Inc()
	}
}

// RegisterLimits exposes the configured limits: the poll rate (per second, per user and
// node; 0 for none) and its burst, and how many users hold a bucket of it on this node
// (read from users at scrape time).
func RegisterLimits(reg prometheus.Registerer, pollRate float64, pollBurst int, users func() int) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskd_poll_rate_limit",
			Help: "Polls a second allowed to each user on each node (DISPATCH_POLL_RATE); 0: no limit."},
			func() float64 { return pollRate }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskd_poll_burst_limit",
			Help: "Polls at once allowed to each user on each node (DISPATCH_POLL_BURST)."},
			func() float64 { return float64(pollBurst) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskd_poll_limit_users",
			Help: "Users this node holds a poll-limit bucket for: those that polled it within the time a bucket takes to fill (DISPATCH_POLL_BURST / DISPATCH_POLL_RATE)."},
			func() float64 { return float64(users()) }))
}

// Degraded counts a request served while dependency ("redis" or "mysql") was away.
func (m *Metrics) Degraded(dependency string) {
	if m != nil {
		m.degraded.WithLabelValues(dependency).Inc()
	}
}

// OverBudget records a poll turned away because the node's rebuild budget was spent.
func (m *Metrics) OverBudget() {
	if m != nil {
		m.overBudget.Inc()
	}
}
