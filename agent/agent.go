package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/taskpull/taskd/agent/internal/wire"
)

// Config is an agent's settings. Settings left zero take the defaults given.
type Config struct {
	// URL is the server's base URL, e.g. https://taskd.example.com.
	URL string
	// Key is the client key. Without one, the agent reads KeyFile, or enrolls as UID
	// with EnrollSecret.
	Key string
	// UID and EnrollSecret enroll the agent (POST /v1/enroll) when it has no key, and
	// once more when its key is refused (401).
	UID          string
	EnrollSecret string
	// KeyFile, when set, keeps the enrolled key (mode 0600): read at start, written
	// after each enrollment.
	KeyFile string
	// Version is the version of the program the agent runs in (e.g. "2.3.1"; at most
	// 64 bytes), which the server shows per uid and counts dispatches by (GET
	// /v1/admin/stats/agents). Empty: none.
	Version string
	// Hostname is the machine's name as the server shows it (default os.Hostname();
	// NoHostname: none).
	Hostname string
	// Labels describe the agent to the server (site, rack, role...), where admins
	// select clients by them: at most 29, keys 1..63 of [A-Za-z0-9._/-], values of at
	// most 255 bytes. The agent adds three of its own, which a key of Labels may not
	// name (New refuses the prefix taskd.dev/): taskd.dev/sdk-version (this module's
	// version, when the binary says), taskd.dev/os and taskd.dev/arch (GOOS, GOARCH).
	// SetLabels changes them while the agent runs.
	Labels map[string]string
	// Concurrency is how many tasks run at once (default 1, at most 100). The server's
	// max_in_flight for the uid (default 1) bounds it too. A fetch asks for no more
	// tasks than there are free slots, and the agent never runs more, whatever the
	// reply holds: tasks past what was asked for are neither run nor completed (a
	// failure would use up an attempt); they stay open on the server, which hands them
	// out again (redo) on a later fetch, or expires them when their lease lapses. Such
	// a reply is logged once, at WARN.
	Concurrency int
	// Templates, when not empty, are the only templates whose tasks are fetched (at
	// most 100); when empty and the handler is a *Mux, the Mux's templates.
	Templates []int64
	// PollWait is how long a fetch long-polls when nothing is due (default 20s; the
	// server caps it, at 30s by default). Each second of a long poll counts against
	// the server's per-user poll rate.
	PollWait time.Duration
	// BusyPoll is how long the agent waits before asking again when a fetch found
	// nothing new while tasks of it run (default 5s): the server then answers at once,
	// handing the running tasks out again, instead of long-polling. The next due time
	// the server gives, a finished task, or a freed slot ends the wait sooner.
	BusyPoll time.Duration
	// CheckpointInterval is the least time between two checkpoints sent for one task
	// (default 2s). Progress reports count against the server's per-user poll rate.
	CheckpointInterval time.Duration
	// ShutdownGrace is how long running handlers may take to finish once Run's context
	// is done (default 30s); see Run.
	ShutdownGrace time.Duration
	// Once makes Run take only what is due now: its fetches do not long-poll, and Run
	// returns (nil) as soon as a fetch hands out nothing while no task of the agent
	// runs, once the results are sent. For a job run from cron, or a test.
	Once bool
	// StartupJitter is the most Run waits, at random, before its first request
	// (default 1s; negative: no wait). It also bounds the random wait before enrolling
	// again after a 401.
	StartupJitter time.Duration
	// HTTPClient sends the requests (default: a client of its own). Its Timeout, if
	// any, must leave room for PollWait.
	HTTPClient *http.Client
	// Logger receives the agent's logs (default slog.Default()).
	Logger *slog.Logger
	// Metrics receives the agent's metrics (default: metrics of its own, registered
	// nowhere).
	Metrics *Metrics
}

const (
	maxConcurrency  = 100
	maxTemplateIDs  = 100
	defaultPollWait = 20 * time.Second
	enrollTimeout   = 30 * time.Second
)

// Agent is a client agent: it fetches tasks from one server as one uid and runs them.
type Agent struct {
	cfg     Config
	base    string
	http    *http.Client
	log     *slog.Logger
	metrics *Metrics

	running sync.Mutex // one Run at a time

	enrollMu sync.Mutex // one enrollment at a time
	keyMu    sync.Mutex
	key      string
	keyGen   int  // counts keys taken up
	keyFresh bool // the key comes from an enrollment, and no request with it was accepted yet
	// desc is what the agent reports of itself on fetch; descGen counts its changes.
	descMu  sync.Mutex
	desc    wire.Agent
	descGen int
	// enrollTimeout bounds one enrollment request: a server that never answers one is
	// asked again, after a backoff, instead of hanging the agent.
	enrollTimeout time.Duration
}

// New checks cfg and returns an agent. It makes no request: Run does.
func New(cfg Config) (*Agent, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("agent: URL: want http(s)://host[:port], got %q", cfg.URL)
	}
	switch {
	case cfg.Key == "" && cfg.KeyFile == "" && (cfg.UID == "" || cfg.EnrollSecret == ""):
		return nil, errors.New("agent: Key, KeyFile, or UID and EnrollSecret: one is required")
	case (cfg.UID == "") != (cfg.EnrollSecret == ""):
		return nil, errors.New("agent: UID and EnrollSecret go together")
	case cfg.Concurrency < 0 || cfg.Concurrency > maxConcurrency:
		return nil, fmt.Errorf("agent: Concurrency: must be 1..%d, got %d", maxConcurrency, cfg.Concurrency)
	case len(cfg.Templates) > maxTemplateIDs:
		return nil, fmt.Errorf("agent: Templates: at most %d, got %d", maxTemplateIDs, len(cfg.Templates))
	case cfg.PollWait < 0, cfg.BusyPoll < 0, cfg.CheckpointInterval < 0, cfg.ShutdownGrace < 0:
		return nil, errors.New("agent: PollWait, BusyPoll, CheckpointInterval and ShutdownGrace: must not be negative")
	}
	for i, id := range cfg.Templates {
		if id < 1 {
			return nil, fmt.Errorf("agent: Templates[%d]: must be a template id (>= 1), got %d", i, id)
		}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.PollWait == 0 {
		cfg.PollWait = defaultPollWait
	}
	if cfg.BusyPoll == 0 {
		cfg.BusyPoll = 5 * time.Second
	}
	if cfg.CheckpointInterval == 0 {
		cfg.CheckpointInterval = 2 * time.Second
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 30 * time.Second
	}
	if cfg.StartupJitter == 0 {
		cfg.StartupJitter = time.Second
	}
	if cfg.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 2*cfg.Concurrency + 4
		cfg.HTTPClient = &http.Client{Transport: tr}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	desc, err := describe(cfg.Version, hostname(cfg), cfg.Labels)
	if err != nil {
		return nil, err
	}
	cfg.Templates = append([]int64(nil), cfg.Templates...)
	cfg.Labels = nil // desc holds them
	return &Agent{cfg: cfg, base: strings.TrimRight(cfg.URL, "/"), http: cfg.HTTPClient, log: cfg.Logger,
		metrics: cfg.Metrics, key: cfg.Key, desc: desc, enrollTimeout: enrollTimeout}, nil
}

// jitter is the most a random start-up (or re-enrollment) wait lasts.
func (a *Agent) jitter() time.Duration {
	return max(a.cfg.StartupJitter, 0)
}

// Run fetches tasks and runs h on them until ctx is done or an error no retry mends
// stops it (a key refused after enrolling again, an enrollment refused). It first
// waits a random moment (Config.StartupJitter), then gets a key if it has none.
//
// When ctx is done, Run stops in stages: it stops fetching; lets running handlers
// finish for Config.ShutdownGrace; cancels their contexts (cause ErrStopping) and
// waits as long again; gives back the tasks whose handlers still have not returned
// (their goroutines are left to end on their own, and their outcomes are dropped);
// sends the results not yet sent, for at most one more grace period (a result still
// unsent then is logged at ERROR with its log id: the server will hand the task out
// again); and returns nil. After an error it stops the same way and returns the error.
//
// An Agent runs one Run at a time.
func (a *Agent) Run(ctx context.Context, h Handler) error {
	if h == nil {
		return errors.New("agent: Run: nil handler")
	}
	if !a.running.TryLock() {
		return errors.New("agent: Run: already running")
	}
	defer a.running.Unlock()
	if !sleep(ctx, rand.N(a.jitter()+1)) {
		return nil
	}
	if err := a.ensureKey(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("agent: %w", err)
	}
	s := newSession(a, h)
	return s.run(ctx)
}
