package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The stats page: the admin API's per-task stats for a period, and charts of the
// period bucket by bucket (one stats call per bucket). The charts are SVG drawn here,
// with a table of the same numbers for whoever cannot see them: no script, no
// library.

// statsRanges are the periods the page offers: the period and the bucket width.
var statsRanges = []struct {
	Key          string
	Label        string
	Span, Bucket time.Duration
}{
	{"1h", "last hour", time.Hour, 5 * time.Minute},
	{"24h", "last 24 hours", 24 * time.Hour, time.Hour},
	{"7d", "last 7 days", 7 * 24 * time.Hour, 12 * time.Hour},
}

// bucketStats is one bucket's totals over every task.
type bucketStats struct {
	From                                         time.Time
	Dispatched, Completed, Failed, Expired, Redo float64
	P50, P95                                     float64 // see statsOf
	HasLatency                                   bool
}

func (c *Console) stats(w http.ResponseWriter, r *http.Request) {
	rng := statsRanges[1]
	for _, s := range statsRanges {
		if s.Key == r.URL.Query().Get("range") {
			rng = s
		}
	}
	now := time.Now().UTC().Truncate(time.Second).Add(time.Second) // the periods end after this second
	from := now.Add(-rng.Span)
	fetch := func(from, to time.Time) ([]map[string]any, bool) {
		var body struct{ Tasks []map[string]any }
		ok := c.fetch(w, r, query("/v1/admin/stats", "from", from.Format(time.RFC3339), "to", to.Format(time.RFC3339)), &body)
		return body.Tasks, ok
	}
	tasks, ok := fetch(from, now)
	if !ok {
		return
	}
	sort.Slice(tasks, func(i, j int) bool { return num(tasks[i]["dispatched"]) > num(tasks[j]["dispatched"]) })
	var buckets []bucketStats
	for at := from; at.Before(now); at = at.Add(rng.Bucket) {
		ts, ok := fetch(at, at.Add(rng.Bucket))
		if !ok {
			return
		}
		buckets = append(buckets, statsOf(at, ts))
	}
	label := func(b bucketStats) string {
		if rng.Bucket >= 12*time.Hour {
			return b.From.Format("Jan 2 15:04")
		}
		return b.From.Format("15:04")
	}
	counts := newChart("Dispatches and completions per "+showDuration(rng.Bucket), buckets, label, []seriesDef{
		{"dispatched", "#0b5cad", func(b bucketStats) (float64, bool) { return b.Dispatched, true }},
		{"completed", "#1a7f37", func(b bucketStats) (float64, bool) { return b.Completed, true }},
		{"failed", "#b3261e", func(b bucketStats) (float64, bool) { return b.Failed, true }},
		{"expired", "#9a6700", func(b bucketStats) (float64, bool) { return b.Expired, true }},
	})
	latency := newChart("Latency, dispatch to completion (ms)", buckets, label, []seriesDef{
		{"p50", "#0b5cad", func(b bucketStats) (float64, bool) { return b.P50, b.HasLatency }},
		{"p95", "#b3261e", func(b bucketStats) (float64, bool) { return b.P95, b.HasLatency }},
	})
	var versions struct{ Versions []map[string]any }
	if !c.fetch(w, r, query("/v1/admin/stats/agents", "from", from.Format(time.RFC3339), "to", now.Format(time.RFC3339)), &versions) {
		return
	}
	c.render(w, r, http.StatusOK, "stats", "Statistics", map[string]any{
		"Ranges": statsRanges, "Range": rng.Key, "RangeLabel": rng.Label, "Tasks": tasks,
		"Charts": []chart{counts, latency}, "Versions": versions.Versions,
	})
}

// statsOf adds up one bucket's per-task stats. The API gives latency percentiles per
// task, which do not add up: the bucket's p50 is the tasks' medians weighted by their
// completions, its p95 the highest of the tasks' p95s.
func statsOf(at time.Time, tasks []map[string]any) bucketStats {
	b := bucketStats{From: at}
	var weighted, weight float64
	for _, t := range tasks {
		b.Dispatched += num(t["dispatched"])
		b.Completed += num(t["completed"])
		b.Failed += num(t["failed"])
		b.Expired += num(t["expired"])
		b.Redo += num(t["redo"])
		if p50, ok := numOK(t["latency_ms_p50"]); ok {
			n := max(num(t["completed"]), 1)
			weighted += p50 * n
			weight += n
			b.HasLatency = true
		}
		if p95, ok := numOK(t["latency_ms_p95"]); ok && p95 > b.P95 {
			b.P95 = p95
		}
	}
	if weight > 0 {
		b.P50 = weighted / weight
	}
	return b
}

// num is a number of an API reply (json.Number, or float64 in tests), 0 if none.
func num(v any) float64 {
	f, _ := numOK(v)
	return f
}

func numOK(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

func showDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0 && d == time.Hour:
		return "hour"
	case d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + " hours"
	}
	return strconv.Itoa(int(d/time.Minute)) + " minutes"
}

// ---- the charts: SVG line charts drawn on the server ----

type seriesDef struct {
	Name, Color string
	Value       func(bucketStats) (float64, bool)
}

type chart struct {
	Title         string
	Width, Height int
	Left, Bottom  int // the plot's left and bottom edges
	Series        []chartSeries
	YTicks        []chartTick
	XTicks        []chartTick
	Rows          []chartRow // the same numbers as a table
	Names         []string
}

type chartSeries struct {
	Name, Color, Points string
	Dots                []chartDot // each point, so that a lone one shows too
}

type chartDot struct{ X, Y float64 }

type chartTick struct {
	Pos   float64
	Label string
}

type chartRow struct {
	Label  string
	Values []string
}

func newChart(title string, buckets []bucketStats, label func(bucketStats) string, defs []seriesDef) chart {
	const width, height, left, right, top, bottom = 720, 240, 48, 10, 10, 200
	ch := chart{Title: title, Width: width, Height: height, Left: left, Bottom: bottom}
	top0 := 0.0
	for _, b := range buckets {
		for _, d := range defs {
			if v, ok := d.Value(b); ok && v > top0 {
				top0 = v
			}
		}
	}
	top1 := niceCeil(top0)
	x := func(i int) float64 {
		if len(buckets) < 2 {
			return left
		}
		return left + float64(i)*float64(width-left-right)/float64(len(buckets)-1)
	}
	y := func(v float64) float64 { return bottom - v/top1*float64(bottom-top) }
	for _, d := range defs {
		ch.Names = append(ch.Names, d.Name)
		s := chartSeries{Name: d.Name, Color: d.Color}
		var pts []string
		for i, b := range buckets {
			if v, ok := d.Value(b); ok {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
				s.Dots = append(s.Dots, chartDot{X: x(i), Y: y(v)})
			}
		}
		s.Points = strings.Join(pts, " ")
		ch.Series = append(ch.Series, s)
	}
	for i := 0; i <= 4; i++ {
		v := top1 * float64(i) / 4
		ch.YTicks = append(ch.YTicks, chartTick{Pos: y(v), Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	step := max(1, len(buckets)/6)
	for i := 0; i < len(buckets); i += step {
		ch.XTicks = append(ch.XTicks, chartTick{Pos: x(i), Label: label(buckets[i])})
	}
	for _, b := range buckets {
		row := chartRow{Label: label(b)}
		for _, d := range defs {
			if v, ok := d.Value(b); ok {
				row.Values = append(row.Values, strconv.FormatFloat(v, 'f', -1, 64))
			} else {
				row.Values = append(row.Values, "")
			}
		}
		ch.Rows = append(ch.Rows, row)
	}
	return ch
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1), for the axis.
func niceCeil(v float64) float64 {
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
