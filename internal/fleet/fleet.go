// Package fleet records which uids poll and which agents they run, without a write per
// poll: a node keeps each uid's latest poll in memory and writes what changed to the
// database in batches. A poll costs a map update under one of many locks; the database
// sees a uid at most once per Resolution (sooner only when its agent reports something
// new), however often it polls. An agent's report itself is written by the fetch that
// carries it (dispatch.Service.Report), before the fetch takes anything; a batch carries
// the report only for a row the database does not have yet, and never replaces one.
package fleet

import (
	"context"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
)

// Writer is where batches of polls go (MySQL, internal/store).
type Writer interface {
	SaveSightings(ctx context.Context, batch []taskd.Sighting) error
}

// Config tunes the recorder.
type Config struct {
	// Resolution is how far a uid's last_seen may lag behind its last poll, beyond the
	// flush interval: a uid polling more often is written once per Resolution.
	Resolution time.Duration
	// Forget is how long a uid that stopped polling stays in memory; after it, its next
	// poll writes its agent again.
	Forget time.Duration
}

// Recorder is one node's memory of recent polls.
type Recorder struct {
	w      Writer
	clock  clock.Clock
	log    *slog.Logger
	cfg    Config
	shards [shardCount]shard
}

// shardCount spreads polls over locks: many fetches at once seldom share one.
const shardCount = 64

type shard struct {
	mu   sync.Mutex
	seen map[string]*entry
}

// entry is a uid's latest poll and what of it the database has.
type entry struct {
	at      time.Time
	agent   *taskd.AgentInfo // the latest reported, nil for none yet
	written time.Time        // the last poll time written
	dirty   bool             // at (and maybe agent) is to be written
	newAg   bool             // agent is to be written
}

// New returns a recorder writing to w.
func New(w Writer, clk clock.Clock, log *slog.Logger, cfg Config) *Recorder {
	if cfg.Resolution <= 0 {
		cfg.Resolution = 2 * time.Minute
	}
	if cfg.Forget <= 0 {
		cfg.Forget = 10 * time.Minute
	}
	r := &Recorder{w: w, clock: clk, log: log.With("component", "fleet"), cfg: cfg}
	for i := range r.shards {
		r.shards[i].seen = map[string]*entry{}
	}
	return r
}

func (r *Recorder) shard(uid string) *shard {
	h := fnv.New32a()
	h.Write([]byte(uid))
	return &r.shards[h.Sum32()%shardCount]
}

// Seen records a poll of uid at at, with the agent it reported (nil: none).
func (r *Recorder) Seen(uid string, at time.Time, agent *taskd.AgentInfo) {
	s := r.shard(uid)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.seen[uid]
	if !ok {
		e = &entry{dirty: true}
		s.seen[uid] = e
	}
	if at.After(e.at) {
		e.at = at
	}
	if agent != nil && (e.agent == nil || !e.agent.Equal(*agent)) {
		a := *agent
		e.agent, e.newAg, e.dirty = &a, true, true
	}
	if e.at.Sub(e.written) >= r.cfg.Resolution {
		e.dirty = true
	}
}

// Flush writes the polls not yet written, in one batch, and forgets the uids that
// have not polled for Forget. A batch that fails is kept for the next flush.
func (r *Recorder) Flush(ctx context.Context) error {
	var batch []taskd.Sighting
	forget := r.clock.Now().Add(-r.cfg.Forget)
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		for uid, e := range s.seen {
			if e.dirty {
				sg := taskd.Sighting{UID: uid, At: e.at}
				if e.newAg {
					sg.Agent = e.agent
				}
				batch = append(batch, sg)
				e.dirty, e.newAg, e.written = false, false, e.at
			} else if e.at.Before(forget) {
				delete(s.seen, uid)
			}
		}
		s.mu.Unlock()
	}
	if len(batch) == 0 {
		return nil
	}
	if err := r.w.SaveSightings(ctx, batch); err != nil {
		for _, sg := range batch {
			s := r.shard(sg.UID)
			s.mu.Lock()
			if e, ok := s.seen[sg.UID]; ok {
				e.dirty = true
				e.newAg = e.newAg || sg.Agent != nil
			}
			s.mu.Unlock()
		}
		return err
	}
	return nil
}

// Run flushes every interval until ctx is done, then once more (on a context of its
// own, bounded by timeout), so that a clean stop loses no poll.
func (r *Recorder) Run(ctx context.Context, interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			defer cancel()
			if err := r.Flush(last); err != nil {
				r.log.Warn("fleet: the last flush failed; polls since the one before are not recorded", "err", err)
			}
			return
		case <-t.C:
			if err := r.Flush(ctx); err != nil && ctx.Err() == nil {
				r.log.WarnContext(ctx, "fleet: flush failed; kept for the next", "err", err)
			}
		}
	}
}
