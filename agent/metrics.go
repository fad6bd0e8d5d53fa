package agent

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are an agent's Prometheus metrics. It is a prometheus.Collector: a program
// registers it (reg.MustRegister(m)) and passes it in Config.Metrics; several agents
// of one process may share one.
//
//   - taskd_agent_fetch_seconds{result}: fetch latency, long polls included
//     (result: task, empty, error)
//   - taskd_agent_in_flight: tasks running
//   - taskd_agent_task_seconds{template, outcome}: handler run time by template and
//     outcome (success, next_stage, failure, permanent_failure, given_back, panic);
//     the first 100 template ids seen have a label of their own, later ones share
//     template="other", so that a server naming ever new ids cannot grow the series
//     without bound
//   - taskd_agent_lease_lost_total: tasks whose lease lapsed or that the server took
//     away before their result was in
//   - taskd_agent_retries_total{request}: requests sent again after a failure
//     (request: fetch, complete, progress, enroll)
//   - taskd_agent_rate_limited_total{request}: 429 answers
type Metrics struct {
	fetch       *prometheus.HistogramVec
	inFlight    prometheus.Gauge
	tasks       *prometheus.HistogramVec
	leaseLost   prometheus.Counter
	retries     *prometheus.CounterVec
	rateLimited *prometheus.CounterVec

	mu        sync.Mutex
	templates map[int64]bool // the template ids with a label of their own
}

// maxTemplateLabels bounds the template ids with a series of their own.
const maxTemplateLabels = 100

// NewMetrics returns an agent's metrics, registered nowhere.
func NewMetrics() *Metrics {
	return &Metrics{
		templates: map[int64]bool{},
		fetch: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskd_agent_fetch_seconds",
			Help:    "Fetch latency (long polls included), by result: task, empty, error.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30}}, []string{"result"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskd_agent_in_flight",
			Help: "Tasks running."}),
		tasks: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskd_agent_task_seconds",
			Help:    "Handler run time, by template and outcome.",
			Buckets: prometheus.ExponentialBuckets(.01, 4, 10)}, []string{"template", "outcome"}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskd_agent_lease_lost_total",
			Help: "Tasks whose lease lapsed, or that the server took away, before their result was in."}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskd_agent_retries_total",
			Help: "Requests sent again after a failure, by request."}, []string{"request"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskd_agent_rate_limited_total",
			Help: "429 answers, by request."}, []string{"request"}),
	}
}

// Describe is prometheus.Collector's.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect is prometheus.Collector's.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.fetch, m.inFlight, m.tasks, m.leaseLost, m.retries, m.rateLimited}
}

func (m *Metrics) fetched(result string, d time.Duration) {
	m.fetch.WithLabelValues(result).Observe(d.Seconds())
}

func (m *Metrics) ran(templateID int64, outcome string, d time.Duration) {
	m.tasks.WithLabelValues(m.templateLabel(templateID), outcome).Observe(d.Seconds())
}

// templateLabel is templateID's label: its own for the first maxTemplateLabels ids,
// "other" past them.
func (m *Metrics) templateLabel(templateID int64) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.templates[templateID] {
		if len(m.templates) >= maxTemplateLabels {
			return "other"
		}
		m.templates[templateID] = true
	}
	return strconv.FormatInt(templateID, 10)
}
