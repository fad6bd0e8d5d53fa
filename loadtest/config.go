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
)

// Size is the scenario's and the run's size: what a preset sets.
type Size struct {
	Users     int
	Groups    int
	Templates int
	Once      int // once tasks
	Rotate    int // rotate tasks
	Agents    int
	Duration  time.Duration
}

// Presets are the named sizes. Users per group stay near 200 from small to large so
// each user's heap is about the same size and a scale curve compares like with like.
var Presets = map[string]Size{
	"small":  {Users: 200, Groups: 4, Templates: 3, Once: 40, Rotate: 8, Agents: 10, Duration: 10 * time.Second},
	"medium": {Users: 10_000, Groups: 50, Templates: 5, Once: 500, Rotate: 50, Agents: 100, Duration: 30 * time.Second},
	"large":  {Users: 100_000, Groups: 500, Templates: 10, Once: 5_000, Rotate: 500, Agents: 100, Duration: 60 * time.Second},
}

// Config is every setting of a load-test run.
type Config struct {
	URL        string // the server's base URL
	AdminToken string

	Preset   string
	Size     Size
	Workload Workload
	// Backlog is how far in the past due tasks start. It must stay within the server's
	// catch-up window (default 1h), or the oldest occurrences are never offered.
	Backlog time.Duration
	Seed    uint64
	RunID   string // empty: a random one

	Cycles   int64         // stop after this many agent cycles in total (0: no limit)
	Rate     float64       // fetches per second in total (0: closed loop, as fast as answered)
	Think    time.Duration // how long an agent works on a task before completing it
	FailRate float64       // share of completions reported as failure
	Warmup   bool          // poll every user once before the timed run
	Timeout  time.Duration // per request

	SetupConcurrency int
	Progress         time.Duration // interval of the live line; 0: none
	JSON             bool

	Check     bool  // check the invariants after the run
	CheckOnly bool  // only check the tasks of RunID (a previous run), no setup or agents
	MaxEvents int64 // bound on the events the checker reads
}

// DefaultConfig is the small preset with the defaults of every other setting.
func DefaultConfig() Config {
	return Config{
		URL:              "http://127.0.0.1:8080",
		AdminToken:       "dev-admin-token",
		Preset:           "small",
		Size:             Presets["small"],
		Workload:         WorkloadMixed,
		Backlog:          50 * time.Minute,
		Seed:             1,
		Think:            0,
		FailRate:         0.05,
		Warmup:           true,
		Timeout:          10 * time.Second,
		SetupConcurrency: 32,
		Progress:         time.Second,
		Check:            true,
		MaxEvents:        20_000_000,
	}
}

// ParseConfig builds the config: defaults, then the preset named by -preset, then env
// (LOADTEST_URL, LOADTEST_ADMIN_TOKEN, falling back to DISPATCH_ADMIN_TOKEN), then
// the flags that were given (flags win over the preset and env). With -h or --help it
// writes every setting to help and returns flag.ErrHelp; nothing else is written.
func ParseConfig(args []string, getenv func(string) string, help io.Writer) (Config, error) {
	c := DefaultConfig()
	var f Config // flag targets; copied over c for the flags that were set
	var workload string
	fs, envOf := newFlagSet(c, &f, &workload)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeUsage(help, fs, envOf)
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })

	if set["preset"] {
		p, ok := Presets[f.Preset]
		if !ok {
			return c, fmt.Errorf("-preset: unknown %q (small, medium or large)", f.Preset)
		}
		c.Preset, c.Size = f.Preset, p
	}
	if v := getenv("LOADTEST_URL"); v != "" {
		c.URL = v
	}
	if v := getenv("LOADTEST_ADMIN_TOKEN"); v != "" {
		c.AdminToken = v
	} else if v := getenv("DISPATCH_ADMIN_TOKEN"); v != "" {
		c.AdminToken = firstToken(v)
	}
	apply := map[string]func(){
		"url":               func() { c.URL = f.URL },
		"admin-token":       func() { c.AdminToken = f.AdminToken },
		"workload":          func() { c.Workload = Workload(workload) },
		"users":             func() { c.Size.Users = f.Size.Users },
		"groups":            func() { c.Size.Groups = f.Size.Groups },
		"templates":         func() { c.Size.Templates = f.Size.Templates },
		"once":              func() { c.Size.Once = f.Size.Once },
		"rotate":            func() { c.Size.Rotate = f.Size.Rotate },
		"agents":            func() { c.Size.Agents = f.Size.Agents },
		"duration":          func() { c.Size.Duration = f.Size.Duration },
		"cycles":            func() { c.Cycles = f.Cycles },
		"rate":              func() { c.Rate = f.Rate },
		"think":             func() { c.Think = f.Think },
		"fail-rate":         func() { c.FailRate = f.FailRate },
		"warmup":            func() { c.Warmup = f.Warmup },
		"timeout":           func() { c.Timeout = f.Timeout },
		"backlog":           func() { c.Backlog = f.Backlog },
		"seed":              func() { c.Seed = f.Seed },
		"run-id":            func() { c.RunID = f.RunID },
		"setup-concurrency": func() { c.SetupConcurrency = f.SetupConcurrency },
		"progress":          func() { c.Progress = f.Progress },
		"json":              func() { c.JSON = f.JSON },
		"check":             func() { c.Check = f.Check },
		"check-only":        func() { c.CheckOnly = f.CheckOnly },
		"max-events":        func() { c.MaxEvents = f.MaxEvents },
	}
	for name := range set {
		if fn := apply[name]; fn != nil {
			fn()
		}
	}
	return c, c.Validate()
}

// sizeFlags are the flags whose default is the preset's, and how to read it.
var sizeFlags = map[string]func(Size) string{
	"users":     func(s Size) string { return strconv.Itoa(s.Users) },
	"groups":    func(s Size) string { return strconv.Itoa(s.Groups) },
	"templates": func(s Size) string { return strconv.Itoa(s.Templates) },
	"once":      func(s Size) string { return strconv.Itoa(s.Once) },
	"rotate":    func(s Size) string { return strconv.Itoa(s.Rotate) },
	"agents":    func(s Size) string { return strconv.Itoa(s.Agents) },
	"duration":  func(s Size) string { return s.Duration.String() },
}

// newFlagSet defines the flags on f (and workload), with c's values as defaults, and
// says which environment variables stand in for a flag (envOf, by flag name). The flag
// set writes nothing: ParseConfig returns its errors and writes -h itself.
func newFlagSet(c Config, f *Config, workload *string) (*flag.FlagSet, map[string]string) {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&f.URL, "url", c.URL, "server base URL")
	fs.StringVar(&f.AdminToken, "admin-token", c.AdminToken, "admin bearer token")
	fs.StringVar(&f.Preset, "preset", c.Preset, "size preset: small, medium or large (the size flags override it)")
	fs.StringVar(workload, "workload", string(c.Workload), "mixed, empty (only future tasks: warm empty polls) or cycles (a backlog of due work)")
	fs.IntVar(&f.Size.Users, "users", 0, "users, each with its own client key")
	fs.IntVar(&f.Size.Groups, "groups", 0, "groups")
	fs.IntVar(&f.Size.Templates, "templates", 0, "parameter templates")
	fs.IntVar(&f.Size.Once, "once", 0, "once tasks")
	fs.IntVar(&f.Size.Rotate, "rotate", 0, "rotate tasks")
	fs.IntVar(&f.Size.Agents, "agents", 0, "concurrent agents")
	fs.DurationVar(&f.Size.Duration, "duration", 0, "length of the timed run")
	fs.Int64Var(&f.Cycles, "cycles", 0, "stop after this many agent cycles (a fetch, and its complete) in total; 0: no limit")
	fs.Float64Var(&f.Rate, "rate", 0, "fixed fetch rate per second over all agents (open model); 0: closed loop")
	fs.DurationVar(&f.Think, "think", c.Think, "time an agent works on a task before completing it")
	fs.Float64Var(&f.FailRate, "fail-rate", c.FailRate, "share of completions reported as failure (0..1)")
	fs.BoolVar(&f.Warmup, "warmup", c.Warmup, "poll every user once before the timed run (reported apart)")
	fs.DurationVar(&f.Timeout, "timeout", c.Timeout, "per-request timeout")
	fs.DurationVar(&f.Backlog, "backlog", c.Backlog, "how far in the past due tasks start (keep it inside the server's catch-up)")
	fs.Uint64Var(&f.Seed, "seed", c.Seed, "scenario random seed")
	fs.StringVar(&f.RunID, "run-id", "", "run id carried by every user, group and template (empty: random); with -check-only, the run to check")
	fs.IntVar(&f.SetupConcurrency, "setup-concurrency", c.SetupConcurrency, "concurrent admin requests during setup")
	fs.DurationVar(&f.Progress, "progress", c.Progress, "interval of the live progress line on stderr; 0: none")
	fs.BoolVar(&f.JSON, "json", false, "print the report as JSON")
	fs.BoolVar(&f.Check, "check", c.Check, "check the invariants through the admin API after the run")
	fs.BoolVar(&f.CheckOnly, "check-only", false, "only check the invariants of the run named by -run-id")
	fs.Int64Var(&f.MaxEvents, "max-events", c.MaxEvents, "most events the checker reads")
	return fs, map[string]string{"url": "LOADTEST_URL", "admin-token": "LOADTEST_ADMIN_TOKEN, else DISPATCH_ADMIN_TOKEN's first token"}
}

// writeUsage lists every flag with its environment variable (if any), its default and
// its meaning.
func writeUsage(w io.Writer, fs *flag.FlagSet, envOf map[string]string) {
	fmt.Fprint(w, `Usage: loadtest [flags]

Drives a running dispatchd as many agents would, then checks the invariants. Flags win
over the environment and over the preset. Exit status 1: the run failed (FAIL).

`)
	var names []string
	for name := range Presets {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return Presets[names[i]].Users < Presets[names[j]].Users })
	fs.VisitAll(func(f *flag.Flag) {
		def := fmt.Sprintf("default %q", f.DefValue)
		if get, ok := sizeFlags[f.Name]; ok {
			var per []string
			for _, n := range names {
				per = append(per, n+" "+get(Presets[n]))
			}
			def = "default: the preset's: " + strings.Join(per, ", ")
		}
		if env := envOf[f.Name]; env != "" {
			fmt.Fprintf(w, "  -%s, %s (%s)\n      %s\n", f.Name, env, def, f.Usage)
		} else {
			fmt.Fprintf(w, "  -%s (%s)\n      %s\n", f.Name, def, f.Usage)
		}
	})
}

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
// sizes and counts must be positive wherever zero means nothing.
func (c Config) Validate() error {
	var errs []error
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("-url: want http://host:port, got %q", c.URL))
	}
	if c.AdminToken == "" {
		errs = append(errs, errors.New("-admin-token: required"))
	}
	// The client and the checker use these in -check-only runs too.
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("-timeout: must be positive, got %s", c.Timeout))
	}
	if c.MaxEvents < 1 {
		errs = append(errs, fmt.Errorf("-max-events: must be >= 1, got %d", c.MaxEvents))
	}
	if c.SetupConcurrency < 1 || c.SetupConcurrency > 1024 {
		errs = append(errs, fmt.Errorf("-setup-concurrency: must be 1..1024, got %d", c.SetupConcurrency))
	}
	if c.RunID != "" && !validRunID(c.RunID) {
		errs = append(errs, fmt.Errorf("-run-id: 1..40 of [A-Za-z0-9], got %q", c.RunID))
	}
	if c.CheckOnly {
		if c.RunID == "" {
			errs = append(errs, errors.New("-check-only: needs -run-id"))
		}
		return errors.Join(errs...)
	}
	switch c.Workload {
	case WorkloadMixed, WorkloadEmpty, WorkloadCycles:
	default:
		errs = append(errs, fmt.Errorf("-workload: unknown %q (mixed, empty or cycles)", c.Workload))
	}
	s := c.Size
	if s.Users < 1 || s.Users > 10_000_000 {
		errs = append(errs, fmt.Errorf("-users: must be 1..10000000, got %d", s.Users))
	}
	if s.Groups < 1 || s.Groups > s.Users {
		errs = append(errs, fmt.Errorf("-groups: must be 1..users (%d), got %d", s.Users, s.Groups))
	}
	if s.Templates < 1 || s.Templates > 1000 {
		errs = append(errs, fmt.Errorf("-templates: must be 1..1000, got %d", s.Templates))
	}
	switch {
	case s.Once < 0:
		errs = append(errs, fmt.Errorf("-once: must be >= 0, got %d", s.Once))
	case s.Rotate < 0:
		errs = append(errs, fmt.Errorf("-rotate: must be >= 0, got %d", s.Rotate))
	case s.Once+s.Rotate < 1 || s.Once+s.Rotate > 1_000_000:
		errs = append(errs, fmt.Errorf("-once, -rotate: need 1..1000000 tasks together, got %d and %d", s.Once, s.Rotate))
	}
	if s.Agents < 1 || s.Agents > s.Users {
		errs = append(errs, fmt.Errorf("-agents: must be 1..users (%d), got %d", s.Users, s.Agents))
	}
	if s.Duration <= 0 || s.Duration > 24*time.Hour {
		errs = append(errs, fmt.Errorf("-duration: must be in (0, 24h], got %s", s.Duration))
	}
	if c.Cycles < 0 {
		errs = append(errs, fmt.Errorf("-cycles: must be >= 0 (0: no limit), got %d", c.Cycles))
	}
	if c.Rate < 0 {
		errs = append(errs, fmt.Errorf("-rate: must be >= 0 (0: closed loop), got %v", c.Rate))
	}
	if c.Think < 0 {
		errs = append(errs, fmt.Errorf("-think: must be >= 0, got %s", c.Think))
	}
	if c.FailRate < 0 || c.FailRate > 1 {
		errs = append(errs, fmt.Errorf("-fail-rate: must be 0..1, got %v", c.FailRate))
	}
	if c.Backlog < time.Minute || c.Backlog > 7*24*time.Hour {
		errs = append(errs, fmt.Errorf("-backlog: must be 1m..168h, got %s", c.Backlog))
	}
	if c.Progress < 0 {
		errs = append(errs, fmt.Errorf("-progress: must be >= 0 (0: none), got %s", c.Progress))
	}
	return errors.Join(errs...)
}

func validRunID(s string) bool {
	if len(s) < 1 || len(s) > 40 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// String is the size in one line, for the report.
func (s Size) String() string {
	return strconv.Itoa(s.Users) + " users, " + strconv.Itoa(s.Groups) + " groups, " +
		strconv.Itoa(s.Templates) + " templates, " + strconv.Itoa(s.Once) + " once + " +
		strconv.Itoa(s.Rotate) + " rotate tasks, " + strconv.Itoa(s.Agents) + " agents"
}
