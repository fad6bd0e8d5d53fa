package loadtest

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/config"
)

// Workload says what the scenario's tasks make the agents do.
type Workload string

const (
	// WorkloadMixed: past and future once tasks, rotations every 1, 5 and 15 minutes,
	// limited and unlimited quotas in both modes, retries and leases on some tasks.
	WorkloadMixed Workload = "mixed"
	// WorkloadEmpty: every task is due in the future, so after the warm-up every poll
	// is a warm empty poll.
	WorkloadEmpty Workload = "empty"
	// WorkloadCycles: a backlog of due occurrences (rotations every minute since the
	// backlog start, once tasks in the past), so most polls dispatch and complete.
	WorkloadCycles Workload = "cycles"
	// WorkloadCampaign: one count campaign per group (its members are the executor),
	// started after the warm-up, besides only future tasks: the agents' polls that get
	// work get campaign items, handed out at the rate asked.
	WorkloadCampaign Workload = "campaign"
	// WorkloadRollout: the cycles workload's tasks, each group task released through a
	// rollout (counts or percentages, then the whole quota; an auto gate, a short
	// bake), so that claims meet phase caps and gates move; the check proves no cap was
	// exceeded and no gate passed on too few finished dispatches.
	WorkloadRollout Workload = "rollout"
	// WorkloadDDI: the users are hawkBit DDI controllers (SWUpdate's suricatta and the
	// like) polling the DDI endpoint for deployments: tasks of DDI templates, due as
	// in cycles (once tasks in the past, rotations every minute since the backlog
	// start, each group's first unlimited), limited quotas in both modes besides; a
	// controller that finds a deployment reads it, sends a proceeding feedback, then
	// closes it (a -fail-rate share as failures).
	WorkloadDDI Workload = "ddi"
)

// maxCampaignRate is the most rate_per_second a campaign may ask (the server's limit).
const maxCampaignRate = 100_000

// Size is the scenario's and the run's size: what a preset sets.
type Size struct {
	Users     int
	Groups    int
	Templates int
	Once      int // once tasks
	Rotate    int // rotate tasks
	Agents    int
	Duration  time.Duration
	// Items and ItemRate are the campaign workload's: items over all its campaigns, and
	// the rate asked of them together (items per second).
	Items    int
	ItemRate float64
}

// Presets are the named sizes. Users per group stay near 200 from small to large so
// each user's heap is about the same size and a scale curve compares like with like.
var Presets = map[string]Size{
	"small": {Users: 200, Groups: 4, Templates: 3, Once: 40, Rotate: 8, Agents: 10, Duration: 10 * time.Second,
		Items: 20_000, ItemRate: 2_000},
	"medium": {Users: 10_000, Groups: 50, Templates: 5, Once: 500, Rotate: 50, Agents: 100, Duration: 30 * time.Second,
		Items: 250_000, ItemRate: 10_000},
	"large": {Users: 100_000, Groups: 500, Templates: 10, Once: 5_000, Rotate: 500, Agents: 100, Duration: 60 * time.Second,
		Items: 1_000_000, ItemRate: 20_000},
}

// Config is every setting of a load-test run.
type Config struct {
	URL        string // the server's base URL
	AdminToken string

	Preset   string
	Size     Size
	Workload Workload
	// DDITenant is the tenant of the server's DDI paths (-workload ddi).
	DDITenant string
	// Backlog is how far in the past due tasks start. It must stay within the server's
	// catch-up window (default 1h), or the oldest occurrences are never offered.
	Backlog time.Duration
	Seed    uint64
	RunID   string // empty: a random one

	Cycles   int64         // stop after this many agent cycles in total (0: no limit)
	Rate     float64       // fetches per second in total (0: closed loop, as fast as answered)
	Think    time.Duration // how long an agent works on a task before completing it
	FailRate float64       // share of completions reported as failure
	// Combine carries each complete on the agent's next fetch as the same user (POST
	// /v1/fetch with "complete"): one request per cycle.
	Combine bool
	// Batch makes each fetch a batch fetch of up to Batch tasks ("max"), each user's
	// max_in_flight set to Batch at setup; 0: single fetches.
	Batch int
	// SDK runs the timed run's agents on the Go SDK (package agent): one agent per
	// user, each carrying its results in its next fetch, as a program built on the SDK
	// would run.
	SDK     bool
	Warmup  bool          // poll every user once before the timed run
	Timeout time.Duration // per request

	SetupConcurrency int
	Progress         time.Duration // interval of the live line; 0: none
	JSON             bool

	Check     bool  // check the invariants after the run
	CheckOnly bool  // only check the tasks of RunID (a previous run), no setup or agents
	MaxEvents int64 // bound on the events the checker reads

	// sources says where ParseConfig took each setting that is not its default.
	sources config.Sources
}

// DefaultConfig is the small preset with the defaults of every other setting.
func DefaultConfig() Config {
	var c Config
	if err := c.table(new(string)).SetDefaults(); err != nil {
		panic("loadtest: " + err.Error())
	}
	return c
}

// table binds the load test's configuration table to c. DISPATCH_ADMIN_TOKEN lands in
// dispatchToken: ParseConfig takes its first token when LOADTEST_ADMIN_TOKEN is unset.
// The preset row sets the whole Size, so it comes before the size rows, which refine it.
func (c *Config) table(dispatchToken *string) config.Table {
	runOnly := func() bool { return c.CheckOnly } // settings a -check-only run does not use
	return config.Table{
		{Env: "LOADTEST_URL", Flag: "url", Default: "http://127.0.0.1:8080", Usage: "server base URL; several, comma-separated, spread the agents over those servers (nodes sharing one MySQL and Redis): setup and the check use the first",
			Value: config.String(&c.URL, validURL)},
		{Env: "DISPATCH_ADMIN_TOKEN", Usage: "dispatchd's admin token list: with LOADTEST_ADMIN_TOKEN unset, its first token is the admin token",
			Value: config.String(dispatchToken)},
		{Env: "LOADTEST_ADMIN_TOKEN", Flag: "admin-token", Default: "dev-admin-token", Usage: "admin bearer token",
			Value: config.String(&c.AdminToken, config.Required)},
		{Flag: "preset", Default: "small", Usage: "size preset: small, medium or large (the size flags override it)",
			Value: config.Func(c.setPreset, func() string { return c.Preset })},
		{Flag: "workload", Default: string(WorkloadMixed), Usage: "mixed, empty (only future tasks: warm empty polls), cycles (a backlog of due work), campaign (campaign items, one campaign per group, besides future tasks), rollout (the cycles tasks released through rollouts) or ddi (the users are hawkBit DDI controllers taking deployments: base poll, deploymentBase, feedback proceeding then closed)",
			Value: config.String(&c.Workload, config.OneOf(WorkloadMixed, WorkloadEmpty, WorkloadCycles, WorkloadCampaign, WorkloadRollout, WorkloadDDI)), Skip: runOnly},
		{Flag: "ddi-tenant", Default: "DEFAULT", Usage: "-workload ddi: the tenant of the server's DDI paths (its DISPATCH_DDI_TENANT)",
			Value: config.String(&c.DDITenant, config.Required, validTenant), Skip: runOnly},
		{Flag: "users", DefaultNote: presetNote(func(s Size) int { return s.Users }), Usage: "users, each with its own client key",
			Value: config.Int(&c.Size.Users, config.Between(1, 10_000_000)), Skip: runOnly},
		{Flag: "groups", DefaultNote: presetNote(func(s Size) int { return s.Groups }), Usage: "groups",
			Value: config.Int(&c.Size.Groups, config.Positive), Skip: runOnly},
		{Flag: "templates", DefaultNote: presetNote(func(s Size) int { return s.Templates }), Usage: "parameter templates",
			Value: config.Int(&c.Size.Templates, config.Between(1, 1000)), Skip: runOnly},
		{Flag: "once", DefaultNote: presetNote(func(s Size) int { return s.Once }), Usage: "once tasks",
			Value: config.Int(&c.Size.Once, config.NotNegative), Skip: runOnly},
		{Flag: "rotate", DefaultNote: presetNote(func(s Size) int { return s.Rotate }), Usage: "rotate tasks",
			Value: config.Int(&c.Size.Rotate, config.NotNegative), Skip: runOnly},
		{Flag: "agents", DefaultNote: presetNote(func(s Size) int { return s.Agents }), Usage: "concurrent agents",
			Value: config.Int(&c.Size.Agents, config.Positive), Skip: runOnly},
		{Flag: "duration", DefaultNote: presetNote(func(s Size) time.Duration { return s.Duration }), Usage: "length of the timed run (a campaign run ends sooner once every campaign finished)",
			Value: config.Duration(&c.Size.Duration, config.Positive, config.AtMost(24*time.Hour)), Skip: runOnly},
		{Flag: "items", DefaultNote: presetNote(func(s Size) int { return s.Items }), Usage: "-workload campaign: items over all the campaigns (split evenly over them, one campaign per group)",
			Value: config.Int(&c.Size.Items, config.Between(0, 1_000_000_000)), Skip: runOnly},
		{Flag: "item-rate", DefaultNote: presetNote(func(s Size) float64 { return s.ItemRate }), Usage: "-workload campaign: items per second asked of the campaigns together (each campaign's rate_per_second is its share)",
			Value: config.Float(&c.Size.ItemRate, config.NotNegative), Skip: runOnly},
		{Flag: "cycles", Default: "0", Usage: "stop after this many agent cycles (a fetch, and its complete) in total; 0: no limit",
			Value: config.Int64(&c.Cycles, config.NotNegative), Skip: runOnly},
		{Flag: "rate", Default: "0", Usage: "fixed fetch rate per second over all agents (open model); 0: closed loop",
			Value: config.Float(&c.Rate, config.NotNegative), Skip: runOnly},
		{Flag: "think", Default: "0s", Usage: "time an agent works on a task before completing it",
			Value: config.Duration(&c.Think, config.NotNegative), Skip: runOnly},
		{Flag: "combine", Default: "false", Usage: "carry each complete on the next fetch as the same user: one request per cycle",
			Value: config.Bool(&c.Combine), Skip: runOnly},
		{Flag: "batch", Default: "0", Usage: "fetch up to this many tasks at once (fetch with max; each user's max_in_flight is set to it at setup) and complete them together; 0: single fetches",
			Value: config.Int(&c.Batch, config.Between(0, 100)), Skip: runOnly},
		{Flag: "sdk", Default: "false", Usage: "run the timed run's agents on the Go SDK (package agent): one agent per user, each carrying its results in its next fetch; compare with -combine",
			Value: config.Bool(&c.SDK), Skip: runOnly},
		{Flag: "fail-rate", Default: "0.05", Usage: "share of completions reported as failure (0..1)",
			Value: config.Float(&c.FailRate, config.Between(0.0, 1.0)), Skip: runOnly},
		{Flag: "warmup", Default: "true", Usage: "poll every user once before the timed run (reported apart)",
			Value: config.Bool(&c.Warmup)},
		{Flag: "timeout", Default: "10s", Usage: "per-request timeout",
			Value: config.Duration(&c.Timeout, config.Positive)},
		{Flag: "backlog", Default: "50m", Usage: "how far in the past due tasks start (keep it inside the server's catch-up)",
			Value: config.Duration(&c.Backlog, config.Between(time.Minute, 7*24*time.Hour)), Skip: runOnly},
		{Flag: "seed", Default: "1", Usage: "scenario random seed",
			Value: config.Uint64(&c.Seed)},
		{Flag: "run-id", Usage: "run id carried by every user, group and template (empty: random); with -check-only, the run to check",
			Value: config.String(&c.RunID, validRunID)},
		{Flag: "setup-concurrency", Default: "32", Usage: "concurrent admin requests during setup",
			Value: config.Int(&c.SetupConcurrency, config.Between(1, 1024))},
		{Flag: "progress", Default: "1s", Usage: "interval of the live progress line on stderr; 0: none",
			Value: config.Duration(&c.Progress, config.NotNegative), Skip: runOnly},
		{Flag: "json", Default: "false", Usage: "print the report as JSON",
			Value: config.Bool(&c.JSON)},
		{Flag: "check", Default: "true", Usage: "check the invariants through the admin API after the run",
			Value: config.Bool(&c.Check)},
		{Flag: "check-only", Default: "false", Usage: "only check the invariants of the run named by -run-id",
			Value: config.Bool(&c.CheckOnly)},
		{Flag: "max-events", Default: "20000000", Usage: "most events the checker reads",
			Value: config.Int64(&c.MaxEvents, config.Positive)},
	}
}

// setPreset applies the preset named name: its name and its whole Size.
func (c *Config) setPreset(name string) error {
	p, ok := Presets[name]
	if !ok {
		return fmt.Errorf("unknown %q (small, medium or large)", name)
	}
	c.Preset, c.Size = name, p
	return nil
}

// presetNote is the default of a size setting: each preset's value, smallest first.
func presetNote[T int | float64 | time.Duration](get func(Size) T) string {
	names := make([]string, 0, len(Presets))
	for name := range Presets {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return Presets[names[i]].Users < Presets[names[j]].Users })
	per := make([]string, len(names))
	for i, n := range names {
		v := any(get(Presets[n]))
		if d, ok := v.(time.Duration); ok {
			v = config.FormatDuration(d)
		}
		per[i] = fmt.Sprint(n, " ", v)
	}
	return "the preset's: " + strings.Join(per, ", ")
}

// usageIntro heads loadtest -h.
const usageIntro = `Usage: loadtest [flags]

Drives a running dispatchd as many agents would, then checks the invariants. Flags win
over the environment and over the preset. Exit status 1: the run failed (FAIL).

`

// ParseConfig builds the config: defaults, then the preset named by -preset, then env
// (LOADTEST_URL, LOADTEST_ADMIN_TOKEN, falling back to DISPATCH_ADMIN_TOKEN), then
// the flags that were given (flags win over the preset and env). With -h or --help it
// writes every setting to help and returns flag.ErrHelp; nothing else is written.
func ParseConfig(args []string, getenv func(string) string, help io.Writer) (Config, error) {
	var c Config
	var dispatchToken string
	t := c.table(&dispatchToken)
	src, err := t.Load(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		t.WriteUsage(help, usageIntro)
	}
	if err != nil {
		return c, err
	}
	if src.Of("LOADTEST_ADMIN_TOKEN") == "default" && dispatchToken != "" {
		c.AdminToken = firstToken(dispatchToken)
		src["LOADTEST_ADMIN_TOKEN"] = "DISPATCH_ADMIN_TOKEN"
	}
	c.sources = src
	return c, c.Validate()
}

// Settings is the load test's configuration table (bound to a Config of its own).
func Settings() config.Table { return new(Config).table(new(string)) }

// firstToken takes the secret of the first entry of a DISPATCH_ADMIN_TOKEN list
// (entries are "name=secret" or a bare secret).
func firstToken(v string) string {
	first := strings.TrimSpace(strings.Split(v, ",")[0])
	if _, secret, ok := strings.Cut(first, "="); ok {
		return secret
	}
	return first
}

// Validate checks the settings and names the wrong one, with its value. Durations,
// sizes and counts must be positive wherever zero means nothing. A -check-only run
// checks only the settings it uses.
func (c Config) Validate() error {
	src := c.sources
	errs := []error{c.table(new(string)).Validate(src)}
	if c.CheckOnly {
		if c.RunID == "" {
			errs = append(errs, src.Errorf("-check-only", "needs -run-id"))
		}
		return errors.Join(errs...)
	}
	s := c.Size
	if s.Groups > s.Users {
		errs = append(errs, src.Errorf("-groups", "must be at most -users (%d), got %d", s.Users, s.Groups))
	}
	if s.Agents > s.Users {
		errs = append(errs, src.Errorf("-agents", "must be at most -users (%d), got %d", s.Users, s.Agents))
	}
	if (c.Workload == WorkloadCycles || c.Workload == WorkloadRollout) && s.Rotate < s.Groups {
		// Rotate task n targets group n mod groups: with fewer, some groups have no
		// work and their users' polls come back empty, which measures misses, not
		// dispatch.
		errs = append(errs, src.Errorf("-rotate", "-workload cycles and rollout need a rotate task per group so that every poll finds work: at least -groups (%d), got %d", s.Groups, s.Rotate))
	}
	if c.Workload == WorkloadCampaign {
		if s.Items < s.Groups {
			errs = append(errs, src.Errorf("-items", "-workload campaign runs a campaign per group: at least -groups (%d) items, got %d", s.Groups, s.Items))
		}
		if r := s.ItemRate / float64(s.Groups); r < 0.001 || r > maxCampaignRate {
			errs = append(errs, src.Errorf("-item-rate", "each of the %d campaigns' share must be 0.001..%d items per second, got %g in all",
				s.Groups, maxCampaignRate, s.ItemRate))
		}
	}
	if c.SDK && (c.Batch > 0 || c.Combine || c.Rate > 0 || c.Cycles > 0 || c.Workload == WorkloadCampaign || c.Workload == WorkloadDDI) {
		errs = append(errs, errors.New("-sdk: the SDK's agents run a closed loop of single fetches that carry their results: it does not go with -batch, -combine, -rate, -cycles, -workload campaign or -workload ddi"))
	}
	if c.Workload == WorkloadDDI && (c.Batch > 0 || c.Combine) {
		// A DDI controller holds one action at a time and reports on it by feedback.
		errs = append(errs, src.Errorf("-workload", "ddi: a controller takes one deployment at a time and closes it by feedback: it does not go with -batch or -combine"))
	}
	if c.Batch > 0 && c.Combine {
		errs = append(errs, src.Errorf("-batch", "does not go with -combine (a batch's completes are sent on their own), got %d", c.Batch))
	}
	if n := s.Once + s.Rotate; s.Once >= 0 && s.Rotate >= 0 && (n < 1 || n > 1_000_000) {
		errs = append(errs, fmt.Errorf("-once, -rotate: need 1..1000000 tasks together, got %d and %d", s.Once, s.Rotate))
	}
	return errors.Join(errs...)
}

// validURL refuses what is not http(s)://host[:port][/path].
func validURL(v string) error {
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("want http://host:port (or several, comma-separated), got %q", s)
		}
	}
	return nil
}

// validTenant refuses what the server refuses as its DDI tenant.
func validTenant(s string) error {
	if !taskd.ValidID(s) {
		return fmt.Errorf("1..64 of A-Z a-z 0-9 _ -, as the server's DISPATCH_DDI_TENANT, got %q", s)
	}
	return nil
}

// validRunID refuses a run id that is not 1..40 of [A-Za-z0-9]; empty is a random one.
func validRunID(s string) error {
	if s == "" {
		return nil
	}
	ok := len(s) <= 40
	for _, r := range s {
		ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}
	if !ok {
		return fmt.Errorf("1..40 of [A-Za-z0-9], got %q", s)
	}
	return nil
}

// String is the size in one line, for the report.
func (s Size) String() string {
	return strconv.Itoa(s.Users) + " users, " + strconv.Itoa(s.Groups) + " groups, " +
		strconv.Itoa(s.Templates) + " templates, " + strconv.Itoa(s.Once) + " once + " +
		strconv.Itoa(s.Rotate) + " rotate tasks, " + strconv.Itoa(s.Agents) + " agents"
}

// campaignString is the campaign workload's part of the size, for the report.
func (s Size) campaignString() string {
	return strconv.Itoa(s.Items) + " campaign items at " + strconv.FormatFloat(s.ItemRate, 'f', -1, 64) + "/s over " +
		strconv.Itoa(s.Groups) + " campaigns"
}
