package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Report is a run's outcome, as the table and -json show it.
type Report struct {
	RunID    string     `json:"run_id"`
	URL      string     `json:"url"`
	Preset   string     `json:"preset,omitempty"`
	Workload Workload   `json:"workload,omitempty"`
	Scenario *SizeJSON  `json:"scenario,omitempty"`
	Setup    *SetupJSON `json:"setup,omitempty"`
	Rate     float64    `json:"rate,omitempty"` // the fixed fetch rate asked for; 0: closed loop
	Think    float64    `json:"think_ms"`
	Combine  bool       `json:"combine"`
	SDK      bool       `json:"sdk,omitempty"`   // the timed run's agents were the Go SDK's
	Batch    int        `json:"batch,omitempty"` // a batch run's max per fetch; 0: single fetches
	FailRate float64    `json:"fail_rate"`
	Warmup   *Phase     `json:"warmup,omitempty"`
	Run      *Phase     `json:"run,omitempty"`
	// Campaigns is the campaign workload's outcome.
	Campaigns *CampaignsJSON `json:"campaigns,omitempty"`
	Check     *CheckResult   `json:"check,omitempty"`
	// checkErr is why the check could not be completed (nil: it was, or was not asked
	// for). The JSON carries it as check_error.
	checkErr error
}

// Verdict is the run's outcome and the one source of every form of it: the table's
// PASS or FAIL line, the JSON's "passed", and the command's exit status. It is nil when
// the run passed; otherwise it wraps ErrCheckIncomplete (the check could not be
// completed: nothing says the invariants hold) or ErrViolations (the check found
// broken invariants).
func (r *Report) Verdict() error {
	switch {
	case r.checkErr != nil:
		return fmt.Errorf("run %s: %w: %w", r.RunID, ErrCheckIncomplete, r.checkErr)
	case r.Check != nil && !r.Check.OK():
		return fmt.Errorf("run %s: %d %w", r.RunID, r.Check.ViolationCount, ErrViolations)
	}
	return nil
}

// Passed reports whether the run passed: Verdict is nil.
func (r *Report) Passed() bool { return r.Verdict() == nil }

// MarshalJSON adds what Verdict says to the report's fields: "passed", and
// "check_error" when the check could not be completed.
func (r *Report) MarshalJSON() ([]byte, error) {
	type fields Report // without this method
	var checkErr string
	if r.checkErr != nil {
		checkErr = r.checkErr.Error()
	}
	return json.Marshal(struct {
		*fields
		CheckError string `json:"check_error,omitempty"`
		Passed     bool   `json:"passed"`
	}{(*fields)(r), checkErr, r.Passed()})
}

// SizeJSON is the scenario's size.
type SizeJSON struct {
	Users     int `json:"users"`
	Groups    int `json:"groups"`
	Templates int `json:"templates"`
	Once      int `json:"once_tasks"`
	Rotate    int `json:"rotate_tasks"`
	Agents    int `json:"agents"`
	// The campaign workload's items over all campaigns, and the rate asked of them.
	Items    int     `json:"campaign_items,omitempty"`
	ItemRate float64 `json:"campaign_item_rate,omitempty"`
}

// CampaignsJSON is how the run's campaigns went: their progress read back after the
// run, and the items finished per second against the rate asked.
type CampaignsJSON struct {
	Campaigns int     `json:"campaigns"`
	Finished  int     `json:"finished"` // campaigns that reached finished
	Items     int64   `json:"items"`
	RateAsked float64 `json:"rate_asked"` // items per second, all campaigns together
	Done      int64   `json:"done"`
	Failed    int64   `json:"failed"`
	InFlight  int64   `json:"in_flight"`
	Handouts  int64   `json:"handouts"` // items handed to the agents, each attempt once
	// Seconds is from the start to the last item handed out if every campaign
	// finished, else to the end of the run; ItemsPerSec is (done + failed) / Seconds,
	// HandoutsPerSec, which the rate bounds, Handouts / Seconds.
	Seconds        float64 `json:"seconds"`
	ItemsPerSec    float64 `json:"items_per_second"`
	HandoutsPerSec float64 `json:"handouts_per_second"`
}

// campaignReport reads the campaigns ids back (their live progress) and sums them up.
func campaignReport(ctx context.Context, c *Client, ids []int64, started, ended, lastItem time.Time, handouts int64) (*CampaignsJSON, error) {
	list, err := c.CampaignsOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	r := &CampaignsJSON{Handouts: handouts}
	for _, cp := range list {
		r.Campaigns++
		r.Items += cp.Total
		r.RateAsked += cp.RatePerSecond
		r.Done, r.Failed, r.InFlight = r.Done+cp.Done, r.Failed+cp.Failed, r.InFlight+cp.InFlight
		if cp.State == "finished" {
			r.Finished++
		}
	}
	end := ended
	if r.Finished == r.Campaigns && lastItem.After(started) {
		end = lastItem
	}
	r.Seconds = end.Sub(started).Seconds()
	if r.Seconds > 0 {
		r.ItemsPerSec = float64(r.Done+r.Failed) / r.Seconds
		r.HandoutsPerSec = float64(r.Handouts) / r.Seconds
	}
	return r, nil
}

// SetupJSON is how the setup went.
type SetupJSON struct {
	Requests int64   `json:"requests"`
	Seconds  float64 `json:"seconds"`
	PerSec   float64 `json:"requests_per_second"`
}

// Phase is what the agents did in one phase.
type Phase struct {
	Seconds    float64 `json:"seconds"`
	Fetches    int64   `json:"fetches"`    // answered 200
	Dispatched int64   `json:"dispatched"` // new tasks handed out
	Redos      int64   `json:"redos"`
	Empty      int64   `json:"empty"`
	Cycles     int64   `json:"cycles"`                   // completes acknowledged: dispatch+complete cycles
	Items      int64   `json:"campaign_items,omitempty"` // of the tasks fetched, campaign items
	Failures   int64   `json:"failures_reported"`
	Errors     int64   `json:"errors"`

	FetchPerSec  float64 `json:"fetch_per_second"`
	EmptyRatio   float64 `json:"empty_poll_ratio"`
	CyclesPerSec float64 `json:"cycles_per_second"`
	// PollInterval is how often each user polled on average: users / fetch rate.
	PollInterval float64 `json:"poll_interval_per_user_seconds"`

	Latency  map[string]Latency `json:"latency_ms"`
	ErrorsBy []ErrorCount       `json:"errors_by_status"`

	// DDI is the DDI workload's part (nil in the others): its base polls are the
	// fetches above, its closing feedbacks the cycles.
	DDI *DDIPhase `json:"ddi,omitempty"`
}

// DDIPhase is what the DDI controllers did in a phase: base polls answered,
// deploymentBase reads answered, feedbacks acknowledged (proceeding and closing), and
// of them the closing ones.
type DDIPhase struct {
	Polls       int64 `json:"polls"`
	Deployments int64 `json:"deployments"`
	Feedbacks   int64 `json:"feedbacks"`
	Closed      int64 `json:"closed"`
}

// Latency summarises one endpoint's latencies, in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// ErrorCount is how many requests to an endpoint failed with one status and code
// (status 0: no reply; code is then the transport's reason).
type ErrorCount struct {
	Endpoint string `json:"endpoint"`
	Status   int    `json:"status"`
	Code     string `json:"code"`
	Count    int64  `json:"count"`
}

func summarize(h *hdrhistogram.Histogram) Latency {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{Count: h.TotalCount(), P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)),
		P99: ms(h.ValueAtQuantile(99)), Max: ms(h.Max())}
}

// newPhase turns a phase's tally into its report.
func newPhase(res phaseResult, users int) *Phase {
	rec := res.rec
	p := &Phase{Seconds: res.elapsed.Seconds(), Fetches: rec.fetches, Dispatched: rec.dispatched,
		Redos: rec.redos, Empty: rec.empty, Items: rec.items, Cycles: rec.completed, Failures: rec.failures,
		Latency: map[string]Latency{}}
	for k, n := range rec.errs {
		p.Errors += n
		p.ErrorsBy = append(p.ErrorsBy, ErrorCount{Endpoint: k.Endpoint, Status: k.Status, Code: k.Code, Count: n})
	}
	sort.Slice(p.ErrorsBy, func(i, j int) bool {
		a, b := p.ErrorsBy[i], p.ErrorsBy[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return fmt.Sprint(a.Endpoint, a.Status, a.Code) < fmt.Sprint(b.Endpoint, b.Status, b.Code)
	})
	for k, h := range rec.hist {
		if h.TotalCount() > 0 {
			p.Latency[k] = summarize(h)
		}
	}
	if s := p.Seconds; s > 0 {
		p.FetchPerSec = float64(p.Fetches) / s
		p.CyclesPerSec = float64(p.Cycles) / s
	}
	if p.Fetches > 0 {
		p.EmptyRatio = float64(p.Empty) / float64(p.Fetches)
	}
	if p.FetchPerSec > 0 {
		p.PollInterval = float64(users) / p.FetchPerSec
	}
	if res.ddi {
		p.DDI = &DDIPhase{Polls: rec.fetches, Deployments: rec.deployments, Feedbacks: rec.feedbacks, Closed: rec.completed}
	}
	return p
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for people.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "run\t%s against %s\n", r.RunID, r.URL)
	if r.Scenario != nil {
		s := r.Scenario
		fmt.Fprintf(tw, "scenario\t%s workload, preset %s: %d users, %d groups, %d templates, %d once + %d rotate tasks\n",
			r.Workload, r.Preset, s.Users, s.Groups, s.Templates, s.Once, s.Rotate)
		mode := "closed loop"
		if r.Rate > 0 {
			mode = fmt.Sprintf("open model at %.0f fetch/s", r.Rate)
		}
		if r.Combine {
			mode += ", complete carried on the next fetch"
		}
		if r.SDK {
			mode += ", agents on the Go SDK (one per user, results carried on the next fetch)"
		}
		if r.Batch > 0 {
			mode += fmt.Sprintf(", batch fetches of up to %d (max_in_flight %d)", r.Batch, r.Batch)
		}
		fmt.Fprintf(tw, "agents\t%d, %s, think %.0f ms, fail rate %.2f\n", s.Agents, mode, r.Think, r.FailRate)
	}
	if s := r.Scenario; s != nil && s.Items > 0 {
		fmt.Fprintf(tw, "campaigns\t%d items at %g/s asked, one campaign per group\n", s.Items, s.ItemRate)
	}
	if r.Setup != nil {
		fmt.Fprintf(tw, "setup\t%d admin requests in %.1fs (%.0f/s)\n", r.Setup.Requests, r.Setup.Seconds, r.Setup.PerSec)
	}
	tw.Flush()
	for _, ph := range []struct {
		name string
		p    *Phase
	}{{"warm-up (every user once)", r.Warmup}, {"run", r.Run}} {
		if ph.p != nil {
			fmt.Fprintln(w)
			writePhase(w, ph.name, ph.p)
		}
	}
	if cs := r.Campaigns; cs != nil {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "campaigns: %d of %d finished; %d items: %d done, %d failed, %d in flight; %d handouts\n",
			cs.Finished, cs.Campaigns, cs.Items, cs.Done, cs.Failed, cs.InFlight, cs.Handouts)
		fmt.Fprintf(w, "  %.0f items/s finished (%.0f handouts/s, retries included) over %.1fs, against %g/s asked\n",
			cs.ItemsPerSec, cs.HandoutsPerSec, cs.Seconds, cs.RateAsked)
	}
	if c := r.Check; c != nil {
		fmt.Fprintln(w)
		campaigns := ""
		if c.Campaigns > 0 {
			campaigns = fmt.Sprintf(", %d campaigns", c.Campaigns)
		}
		fmt.Fprintf(w, "check (%.1fs): %d tasks%s, %d occurrences dispatched; events: %d dispatch, %d expire, %d complete\n",
			c.Took, c.Tasks, campaigns, c.Occurrences, c.DispatchEvents, c.ExpireEvents, c.CompleteEvents)
		fmt.Fprintf(w, "  agents received %d dispatches and saw %d completes acknowledged; events no agent saw: %d dispatch, %d complete\n",
			c.AgentReceived, c.AgentCompleted, c.UnseenDispatches, c.UnseenCompletes)
		if c.DDIActions > 0 || c.DDIFeedbacks > 0 {
			fmt.Fprintf(w, "  DDI controllers received %d actions (%d untied to a record) and had %d feedbacks acknowledged\n",
				c.DDIActions, c.DDIUntied, c.DDIFeedbacks)
		}
		for _, n := range c.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		for _, p := range c.RolloutPhases {
			fmt.Fprintf(w, "  rollout %s\n", p)
		}
		if c.OK() {
			fmt.Fprintln(w, "  invariants hold: quotas, once_per_user, claimed counters, durable dispatches, recorded completes")
			if c.Campaigns > 0 {
				fmt.Fprintln(w, "  and campaigns: counts that add up, every item acknowledged done counted once, handouts within the rate")
			}
			if c.Rollouts > 0 {
				fmt.Fprintf(w, "  and %d rollouts: no phase's cap exceeded, no gate passed on too few finished dispatches\n", c.Rollouts)
			}
			if c.DDIFeedbacks > 0 {
				fmt.Fprintln(w, "  and DDI: every feedback acknowledged on its controller's dispatch, every closing one with the result reported")
			}
		} else {
			kinds := make([]string, 0, len(c.ByKind))
			for k, n := range c.ByKind {
				kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
			}
			sort.Strings(kinds)
			fmt.Fprintf(w, "  VIOLATIONS: %d (%s)\n", c.ViolationCount, strings.Join(kinds, ", "))
			for _, v := range c.Violations {
				fmt.Fprintf(w, "    %s\n", v)
			}
		}
	}
	switch {
	case r.checkErr != nil:
		fmt.Fprintf(w, "\ncheck could not be completed: %v\n", r.checkErr)
	case r.Check == nil:
		fmt.Fprintln(w, "\ncheck skipped: the invariants were not checked")
	}
	verdict := "PASS"
	if !r.Passed() {
		verdict = "FAIL"
	}
	_, err := fmt.Fprintf(w, "\n%s\n", verdict)
	return err
}

func writePhase(w io.Writer, name string, p *Phase) {
	fmt.Fprintf(w, "%s: %.1fs\n", name, p.Seconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  fetch/s\tempty-poll ratio\tcycles/s\tfetches\tdispatched\tredo\tcycles\terrors\tpoll interval/user\t\n")
	fmt.Fprintf(tw, "  %.0f\t%.3f\t%.0f\t%d\t%d\t%d\t%d\t%d\t%s\t\n", p.FetchPerSec, p.EmptyRatio, p.CyclesPerSec,
		p.Fetches, p.Dispatched, p.Redos, p.Cycles, p.Errors, roundDur(p.PollInterval))
	tw.Flush()
	if p.Items > 0 {
		fmt.Fprintf(w, "  of the tasks fetched, %d were campaign items\n", p.Items)
	}
	if d := p.DDI; d != nil {
		fmt.Fprintf(w, "  DDI: %d base polls (the fetches), %d deployments read, %d feedbacks acknowledged (%d closing: the cycles)\n",
			d.Polls, d.Deployments, d.Feedbacks, d.Closed)
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  latency (ms)\tcount\tp50\tp90\tp99\tmax\t\n")
	for _, ep := range endpoints {
		if l, ok := p.Latency[ep]; ok {
			fmt.Fprintf(tw, "  %s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t\n", ep, l.Count, l.P50, l.P90, l.P99, l.Max)
		}
	}
	tw.Flush()
	if len(p.ErrorsBy) > 0 {
		fmt.Fprintln(w, "  errors:")
		for _, e := range p.ErrorsBy {
			fmt.Fprintf(w, "    %-14s %3d %-24s %d\n", e.Endpoint, e.Status, e.Code, e.Count)
		}
	}
}

func roundDur(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second))
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}
