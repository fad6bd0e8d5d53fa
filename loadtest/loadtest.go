package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// ErrViolations is returned (wrapped) when the check found a broken invariant: the
// command exits 1.
var ErrViolations = errors.New("invariant violations")

// ErrCheckIncomplete is returned (wrapped) when the check could not be completed (the
// admin API failed, or the run was interrupted during the check): nothing says the
// invariants hold, so the run fails and the command exits 1.
var ErrCheckIncomplete = errors.New("invariant check not completed")

// Progress is where the live line and stage messages go.
type Progress struct {
	W   io.Writer // nil: silent
	TTY bool      // rewrite the line in place
}

func (p Progress) printf(format string, args ...any) {
	if p.W != nil {
		fmt.Fprintf(p.W, format+"\n", args...)
	}
}

// warmupLimit bounds the warm-up phase in time.
const warmupLimit = 15 * time.Minute

// Run performs a whole run of cfg: setup, warm-up, the timed run and the check (or
// only the check, with CheckOnly). Once the agents have run (or, with CheckOnly,
// from the start) a report is returned, and the error is then always its Verdict:
// it wraps ErrViolations or ErrCheckIncomplete when the run failed. Without a report
// (a bad config, a failed setup, an interrupted run) the error says why.
func Run(ctx context.Context, cfg Config, prog Progress) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := NewClient(cfg.URL, cfg.AdminToken, 2*cfg.Size.Agents+cfg.SetupConcurrency, cfg.Timeout)
	defer c.Close()
	rep := &Report{URL: cfg.URL}

	if cfg.CheckOnly {
		rep.RunID = cfg.RunID
		now := time.Now()
		res, err := CheckServer(ctx, c, CheckTarget{RunID: cfg.RunID, ClaimsFrom: now.Add(-8 * 24 * time.Hour),
			ClaimsTo: now.Add(time.Minute), MaxEvents: cfg.MaxEvents}, nil)
		rep.Check, rep.checkErr = res, err
		return rep, rep.Verdict()
	}

	runID := cfg.RunID
	if runID == "" {
		runID = NewRunID()
	}
	s := cfg.Size
	rep.RunID, rep.Preset, rep.Workload, rep.Rate = runID, cfg.Preset, cfg.Workload, cfg.Rate
	rep.Think, rep.FailRate, rep.Combine = float64(cfg.Think)/float64(time.Millisecond), cfg.FailRate, cfg.Combine
	rep.Batch, rep.SDK = cfg.Batch, cfg.SDK
	rep.Scenario = &SizeJSON{Users: s.Users, Groups: s.Groups, Templates: s.Templates, Once: s.Once, Rotate: s.Rotate, Agents: s.Agents}
	if cfg.Workload == WorkloadCampaign {
		rep.Scenario.Items, rep.Scenario.ItemRate = s.Items, s.ItemRate
	}

	sc := NewScenario(cfg, runID, time.Now())
	prog.printf("setup: run %s, %s", runID, s)
	if cfg.Workload == WorkloadCampaign {
		prog.printf("setup: %s", s.campaignString())
	}
	d, err := Setup(ctx, c, sc, cfg.SetupConcurrency, func(stage string, done, total int) {
		prog.printf("setup: %s %d/%d", stage, done, total)
	})
	if err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	rep.Setup = &SetupJSON{Requests: d.Requests, Seconds: d.Took.Seconds(), PerSec: float64(d.Requests) / d.Took.Seconds()}
	prog.printf("setup: %d admin requests in %.1fs", d.Requests, d.Took.Seconds())

	obs := Observed{Items: map[string]ItemRef{}}
	var lastItem time.Time
	phase := func(label string, opts phaseOptions) *Phase {
		var ctrs counters
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { progressLine(prog.W, prog.TTY, label, cfg.Progress, &ctrs, stop); close(done) }()
		run := runAgents
		if opts.sdk {
			run = runSDKAgents
		}
		res := run(ctx, c, d, opts, &ctrs)
		close(stop)
		<-done
		obs.Got = append(obs.Got, res.rec.gotLogIDs...)
		obs.Done = append(obs.Done, res.rec.doneLogIDs...)
		obs.SentItems = append(obs.SentItems, res.rec.sentItems...)
		obs.AckedItems = append(obs.AckedItems, res.rec.ackedItems...)
		obs.Actions = append(obs.Actions, res.rec.actions...)
		obs.Feedbacks = append(obs.Feedbacks, res.rec.acked...)
		for id, it := range res.rec.itemOf {
			obs.Items[id] = it
		}
		if res.rec.lastItem.After(lastItem) {
			lastItem = res.rec.lastItem
		}
		return newPhase(res, s.Users)
	}
	base := phaseOptions{agents: s.Agents, think: cfg.Think, failRate: cfg.FailRate, seed: cfg.Seed,
		ddi: cfg.Workload == WorkloadDDI, tenant: cfg.DDITenant}
	if cfg.Warmup {
		opts := base
		opts.once, opts.deadline = true, time.Now().Add(warmupLimit)
		rep.Warmup = phase("warm-up", opts)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The campaigns start now, after the warm-up: the run measures them from their
	// start.
	started := time.Now()
	for _, id := range d.Campaigns {
		if err := c.StartCampaign(ctx, id); err != nil {
			return nil, fmt.Errorf("start campaign %d: %w", id, err)
		}
	}
	opts := base
	opts.deadline, opts.cycles, opts.rate, opts.combine = time.Now().Add(s.Duration), cfg.Cycles, cfg.Rate, cfg.Combine
	opts.batch, opts.sdk = cfg.Batch, cfg.SDK
	opts.seed++
	stopWatching := func() {}
	if len(d.Campaigns) > 0 { // the run ends early once every campaign finished
		finished := make(chan struct{})
		var watch context.Context
		watch, stopWatching = context.WithCancel(ctx)
		go watchCampaigns(watch, c, d.Campaigns, finished)
		opts.done = finished
	}
	rep.Run = phase("run", opts)
	stopWatching()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Every user fetches once more, for no task: the successes of tasks with
	// confirm_seconds completed last are confirmed (their complete events written),
	// as a device that comes back does.
	if err := confirmAll(ctx, c, d.Keys, s.Agents); err != nil {
		prog.printf("confirm: %v", err)
	}
	ended := time.Now()
	obs.CampaignSeconds = ended.Sub(started).Seconds()
	if len(d.Campaigns) > 0 {
		if rep.Campaigns, err = campaignReport(ctx, c, d.Campaigns, started, ended, lastItem, int64(len(obs.Items))); err != nil {
			prog.printf("campaigns: %v", err)
		}
		// What did not finish is stopped: a run leaves no campaign running on the
		// server (each would keep a runner busy).
		for _, id := range d.Campaigns {
			if err := c.StopCampaign(ctx, id); err != nil {
				prog.printf("campaigns: stop %d: %v", id, err)
			}
		}
	}

	if cfg.Check {
		prog.printf("check: reading events and tasks of run %s", runID)
		res, err := CheckServer(ctx, c, CheckTarget{
			RunID:      runID,
			Since:      sc.Created.Add(-time.Minute),
			ClaimsFrom: sc.Created.Add(-cfg.Backlog - time.Hour),
			ClaimsTo:   time.Now().Add(time.Minute),
			MaxEvents:  cfg.MaxEvents,
		}, &obs)
		rep.Check, rep.checkErr = res, err
	}
	return rep, rep.Verdict()
}

// confirmAll fetches once as each key's owner, for no task (Client.Confirm), on up to
// agents at once.
func confirmAll(ctx context.Context, c *Client, keys []string, agents int) error {
	var mu sync.Mutex
	var first error
	next := make(chan string)
	var wg sync.WaitGroup
	for range max(agents, 1) {
		wg.Go(func() {
			for k := range next {
				if err := c.Confirm(ctx, k); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, k := range keys {
		next <- k
	}
	close(next)
	wg.Wait()
	return first
}

// watchCampaigns closes finished once every campaign of ids has finished, looking
// every 250 ms until ctx is done. A failed look is tried again at the next.
func watchCampaigns(ctx context.Context, c *Client, ids []int64, finished chan<- struct{}) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		list, err := c.CampaignsOf(ctx, ids)
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(list, func(cp Campaign) bool { return cp.State != "finished" }) && len(list) == len(ids) {
			close(finished)
			return
		}
	}
}
