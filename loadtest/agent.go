package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Endpoints whose latency is recorded.
const (
	EndpointFetch    = "fetch"
	EndpointComplete = "complete"
)

// newHistogram records latencies in microseconds from 1 µs to 10 minutes with three
// significant digits.
func newHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(1, 600_000_000, 3) }

// errKey is what errors are counted by.
type errKey struct {
	Endpoint string
	Status   int
	Code     string
}

// recorder is one agent's tally; agents never share one, and they are merged at the
// end, so the hot path takes no lock.
type recorder struct {
	hist       map[string]*hdrhistogram.Histogram
	errs       map[errKey]int64
	fetches    int64 // fetches answered 200
	dispatched int64 // of them, a new task
	redos      int64 // of them, the caller's open task again
	empty      int64 // of them, nothing due
	completed  int64 // completes answered 200
	failures   int64 // of them, reported as failure
	items      int64 // fetched tasks that were campaign items (redos too)
	lastItem   time.Time
	itemOf     map[string]ItemRef // a campaign item's log id -> the item
	// Log ids the agent received and the ones whose complete was acknowledged, for the
	// checker's cross-check.
	gotLogIDs  []string
	doneLogIDs []string
	// sentItems are the campaign items' log ids whose success complete was sent,
	// acknowledged or not; ackedItems the ones acknowledged.
	sentItems, ackedItems []string
	// The DDI workload's (its base polls count as fetches, its closing feedbacks as
	// completes): deployments read, feedbacks acknowledged; for the checker, the
	// actions the polls named (repeats too) and the feedbacks acknowledged; and the
	// actions this agent saw, to tell a held one shown again (a redo).
	deployments, feedbacks int64
	actions                []ActionRef
	acked                  []FeedbackRef
	seenActions            map[int64]bool
}

// endpoints are those whose latency is recorded, in the report's order.
var endpoints = []string{EndpointFetch, EndpointComplete, EndpointDDIPoll, EndpointDDIDeployment, EndpointDDIFeedback}

func newRecorder() *recorder {
	r := &recorder{
		hist:        map[string]*hdrhistogram.Histogram{},
		errs:        map[errKey]int64{},
		itemOf:      map[string]ItemRef{},
		seenActions: map[int64]bool{},
	}
	for _, ep := range endpoints {
		r.hist[ep] = newHistogram()
	}
	return r
}

func (r *recorder) latency(endpoint string, d time.Duration) {
	us := d.Microseconds()
	if us < 1 {
		us = 1
	}
	_ = r.hist[endpoint].RecordValue(us) // beyond 10 minutes: not recorded (timeouts are far shorter)
}

func (r *recorder) merge(o *recorder) {
	for k, h := range o.hist {
		r.hist[k].Merge(h)
	}
	for k, n := range o.errs {
		r.errs[k] += n
	}
	r.fetches += o.fetches
	r.dispatched += o.dispatched
	r.redos += o.redos
	r.empty += o.empty
	r.completed += o.completed
	r.failures += o.failures
	r.items += o.items
	for id, it := range o.itemOf {
		r.itemOf[id] = it
	}
	if o.lastItem.After(r.lastItem) {
		r.lastItem = o.lastItem
	}
	r.gotLogIDs = append(r.gotLogIDs, o.gotLogIDs...)
	r.doneLogIDs = append(r.doneLogIDs, o.doneLogIDs...)
	r.sentItems = append(r.sentItems, o.sentItems...)
	r.ackedItems = append(r.ackedItems, o.ackedItems...)
	r.deployments += o.deployments
	r.feedbacks += o.feedbacks
	r.actions = append(r.actions, o.actions...)
	r.acked = append(r.acked, o.acked...)
}

// received records a task an agent was handed.
func (r *recorder) received(t *Assignment) {
	if t.Redo {
		r.redos++
	} else {
		r.dispatched++
	}
	r.gotLogIDs = append(r.gotLogIDs, t.LogID)
	if t.CampaignID != 0 {
		r.items++
		r.lastItem = time.Now()
		r.itemOf[t.LogID] = ItemRef{Campaign: t.CampaignID, Item: string(t.Item)}
	}
}

// sending records a complete about to be sent.
func (r *recorder) sending(done *carried) {
	if done.success && done.item {
		r.sentItems = append(r.sentItems, done.logID)
	}
}

// counters are shared by all agents for the live progress line.
type counters struct {
	requests atomic.Int64
	errors   atomic.Int64
}

// phaseOptions shape one phase of agents.
type phaseOptions struct {
	agents   int
	deadline time.Time // stop starting cycles at this time
	// done, if not nil, ends the phase early once it is closed (every campaign of a
	// campaign run finished).
	done     <-chan struct{}
	cycles   int64   // stop after this many cycles in total; 0: no limit
	once     bool    // each user exactly once (the warm-up)
	rate     float64 // fetches per second in total; 0: closed loop
	think    time.Duration
	failRate float64
	seed     uint64
	combine  bool // carry each complete on the next fetch as the same user
	batch    int  // fetch up to this many tasks at once (0: single fetches)
	sdk      bool // the agents are the Go SDK's (runSDKAgents)
	// ddi: the users are DDI controllers (ddiCycle) of tenant.
	ddi    bool
	tenant string
}

// phaseResult is what a phase's agents did.
type phaseResult struct {
	rec     *recorder
	elapsed time.Duration
	ddi     bool // the agents were DDI controllers
}

// runAgents runs opts.agents agents over d's users until the deadline, the cycle
// limit or (with once) one cycle per user. Agent a serves users a, a+agents, … in
// turn (with opts.combine, an agent stays on a user while the user keeps getting tasks,
// carrying each complete on the next fetch; with opts.ddi, the users are DDI
// controllers and a cycle is ddiCycle). A cycle in progress at the deadline is
// finished (its complete is sent); only a dispatch whose reply was lost stays open
// (the checker counts it live); ctx ends everything at once.
func runAgents(ctx context.Context, c *Client, d *Deployed, opts phaseOptions, ctrs *counters) phaseResult {
	start := time.Now()
	var issued atomic.Int64 // cycles started (and, with a rate, the schedule's slot)
	recs := make([]*recorder, opts.agents)
	var wg sync.WaitGroup
	for a := 0; a < opts.agents; a++ {
		rec := newRecorder()
		recs[a] = rec
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := c.Node(a)
			rng := mrand.New(mrand.NewPCG(opts.seed, uint64(a)))
			users := len(d.Keys)
			u := a
			var pending *carried // a complete to carry on the next fetch as user u
			// Whatever ends the loop, a complete still carried is sent on its own.
			defer func() {
				if pending != nil {
					finish(context.WithoutCancel(ctx), c, d.Keys[u], pending, rec, ctrs)
				}
			}()
			for {
				if ctx.Err() != nil {
					return
				}
				if opts.once {
					if u >= users {
						return
					}
				} else if !time.Now().Before(opts.deadline) || closed(opts.done) {
					return
				}
				k := issued.Add(1) - 1
				if opts.cycles > 0 && k >= opts.cycles {
					return
				}
				begin := time.Now()
				if opts.rate > 0 {
					// Open model: slot k starts at start + k/rate whether or not the agents
					// kept up; latency counts from there, so queueing is not hidden.
					begin = start.Add(time.Duration(float64(k) * float64(time.Second) / opts.rate))
					if begin.After(opts.deadline) {
						return
					}
					if wait := time.Until(begin); wait > 0 {
						if !sleep(ctx, wait) {
							return
						}
					}
				}
				if opts.ddi {
					ddiCycle(ctx, c, d.Scenario.Users[u], d.Keys[u], begin, opts, rng, rec, ctrs)
				} else if pending = cycle(ctx, c, d.Keys[u], begin, opts, rng, rec, ctrs, pending); pending != nil {
					continue // the same user again, carrying the complete
				}
				u += opts.agents
				if u >= users && !opts.once {
					u = a % users
				}
			}
		}()
	}
	wg.Wait()
	total := newRecorder()
	for _, r := range recs {
		total.merge(r)
	}
	return phaseResult{rec: total, elapsed: time.Since(start), ddi: opts.ddi}
}

// carried is a complete an agent carries on its next fetch.
type carried struct {
	logID   string
	success bool
	item    bool // a campaign item's
}

// cycle is one agent cycle: fetch (carrying the previous complete, if any); if a task
// came, think, then complete it, or, with opts.combine, return it to be carried.
func cycle(ctx context.Context, c *Client, key string, begin time.Time, opts phaseOptions, rng *mrand.Rand, rec *recorder, ctrs *counters, prev *carried) *carried {
	if opts.batch > 0 {
		batchCycle(ctx, c, key, begin, opts, rng, rec, ctrs)
		return nil
	}
	var reply FetchReply
	var err error
	if prev != nil {
		rec.sending(prev)
		reply, err = c.FetchCompleting(ctx, key, prev.logID, prev.success)
	} else {
		reply, err = c.Fetch(ctx, key)
	}
	rec.latency(EndpointFetch, time.Since(begin))
	ctrs.requests.Add(1)
	if err != nil {
		recordErr(rec, ctrs, EndpointFetch, err)
		var apiErr *APIError
		if prev != nil && (!errors.As(err, &apiErr) || apiErr.Status == 0 || apiErr.Status == 429 || apiErr.Status >= 500) {
			// No answer, or the server failed after the complete may have been
			// applied, or the poll was refused (429: the whole request, complete
			// included): send it on its own (a repeat of an applied one is answered
			// 200). Another 4xx refused the complete itself; sending it again would
			// only count the same refusal twice.
			finish(context.WithoutCancel(ctx), c, key, prev, rec, ctrs)
		}
		return nil
	}
	if prev != nil {
		rec.completeDone(prev)
	}
	rec.fetches++
	t := reply.Task
	if t == nil {
		rec.empty++
		return nil
	}
	rec.received(t)
	if opts.think > 0 && !sleep(ctx, opts.think) {
		return nil
	}
	done := &carried{logID: t.LogID, success: opts.failRate == 0 || rng.Float64() >= opts.failRate, item: t.CampaignID != 0}
	if opts.combine && time.Now().Before(opts.deadline) && !closed(opts.done) {
		return done
	}
	finish(ctx, c, key, done, rec, ctrs)
	return nil
}

// batchCycle is a batch run's cycle: one batch fetch (max opts.batch); the tasks that
// came are worked together (think) and completed concurrently, as an agent holding
// several tasks would.
func batchCycle(ctx context.Context, c *Client, key string, begin time.Time, opts phaseOptions, rng *mrand.Rand, rec *recorder, ctrs *counters) {
	reply, err := c.FetchBatch(ctx, key, opts.batch)
	rec.latency(EndpointFetch, time.Since(begin))
	ctrs.requests.Add(1)
	if err != nil {
		recordErr(rec, ctrs, EndpointFetch, err)
		return
	}
	rec.fetches++
	if len(reply.Tasks) == 0 {
		rec.empty++
		return
	}
	dones := make([]*carried, len(reply.Tasks))
	for i, t := range reply.Tasks {
		rec.received(t)
		dones[i] = &carried{logID: t.LogID, success: opts.failRate == 0 || rng.Float64() >= opts.failRate, item: t.CampaignID != 0}
	}
	if opts.think > 0 && !sleep(ctx, opts.think) {
		return
	}
	// Each complete records into a recorder of its own; they are merged after.
	recs := make([]*recorder, len(dones))
	var wg sync.WaitGroup
	for i, done := range dones {
		recs[i] = newRecorder()
		wg.Go(func() { finish(ctx, c, key, done, recs[i], ctrs) })
	}
	wg.Wait()
	for _, r := range recs {
		rec.merge(r)
	}
}

// finish sends a complete on its own.
func finish(ctx context.Context, c *Client, key string, done *carried, rec *recorder, ctrs *counters) {
	rec.sending(done)
	t1 := time.Now()
	err := c.Complete(ctx, key, done.logID, done.success)
	rec.latency(EndpointComplete, time.Since(t1))
	ctrs.requests.Add(1)
	if err != nil {
		recordErr(rec, ctrs, EndpointComplete, err)
		return
	}
	rec.completeDone(done)
}

// completeDone counts an acknowledged complete.
func (r *recorder) completeDone(done *carried) {
	r.completed++
	if !done.success {
		r.failures++
	} else if done.item {
		r.ackedItems = append(r.ackedItems, done.logID)
	}
	r.doneLogIDs = append(r.doneLogIDs, done.logID)
}

func recordErr(rec *recorder, ctrs *counters, endpoint string, err error) {
	ctrs.errors.Add(1)
	k := errKey{Endpoint: endpoint, Code: "error"}
	var ae *APIError
	if errors.As(err, &ae) {
		k.Status, k.Code = ae.Status, ae.Code
		if ae.Status == 0 {
			k.Code = ae.Message
		}
	}
	rec.errs[k]++
}

// closed reports whether ch (nil: never) is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// progressLine writes a live line (elapsed, requests, errors, current rate) every
// interval until stop is closed. On a terminal the line is rewritten in place.
func progressLine(w io.Writer, tty bool, label string, interval time.Duration, ctrs *counters, stop <-chan struct{}) {
	if interval <= 0 || w == nil {
		return
	}
	start := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last int64
	lastAt := start
	width := 0
	for {
		select {
		case <-stop:
			if tty && width > 0 {
				fmt.Fprintln(w)
			}
			return
		case now := <-tick.C:
			req := ctrs.requests.Load()
			rate := float64(req-last) / now.Sub(lastAt).Seconds()
			last, lastAt = req, now
			line := fmt.Sprintf("%s  elapsed %5.1fs  requests %9d  errors %6d  rate %8.0f/s",
				label, now.Sub(start).Seconds(), req, ctrs.errors.Load(), rate)
			if tty {
				pad := ""
				if len(line) < width {
					pad = strings.Repeat(" ", width-len(line))
				}
				width = len(line)
				fmt.Fprint(w, "\r"+line+pad)
			} else {
				fmt.Fprintln(w, line)
			}
		}
	}
}
