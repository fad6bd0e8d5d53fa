package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is every setting of dispatchd: defaults, then environment, then flags (flags
// win). Validate says which setting is wrong at start, not at the first request.
type Config struct {
	Addr          string
	MySQLDSN      string
	RedisAddr     string
	RedisDB       int
	RedisPrefix   string
	KafkaBrokers  []string
	ESURLs        []string
	CatchUp       time.Duration
	AdminTokens   []string
	EnrollSecret  string
	MaxWait       time.Duration
	SweepInterval time.Duration
	Shutdown      time.Duration
	MySQLConns    int
	Node          string
	// RequestTimeout bounds one request's MySQL and Redis work (not a long poll's wait).
	RequestTimeout time.Duration
	// AuthFailureBurst and AuthFailureRate bound failed authentications per source
	// address: a burst, then so many per second.
	AuthFailureBurst int
	AuthFailureRate  float64
	// KeysPerUID caps the live client keys of one uid: issuing one more revokes the oldest.
	KeysPerUID int
	// KeyRecheck is how long a cached client key set (or the answer that a uid has no
	// key) is trusted before it is read from MySQL again.
	KeyRecheck time.Duration

	// sources says where LoadConfig took each setting that is not its default: the env
	// name, or "flag -<name>"; see Source.
	sources map[string]string
}

// setting is one row of the configuration table: its env name, flag, default and
// meaning, and where it lands in Config.
type setting struct {
	env, flag, def, usage string
	set                   func(c *Config, v string) error
}

func str(p func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *p(c) = v; return nil }
}

func list(p func(*Config) *[]string) func(*Config, string) error {
	return func(c *Config, v string) error {
		*p(c) = nil
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				*p(c) = append(*p(c), s)
			}
		}
		return nil
	}
}

func integer(p func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("not a whole number: %q", v)
		}
		*p(c) = n
		return nil
	}
}

func number(p func(*Config) *float64) func(*Config, string) error {
	return func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("not a number: %q", v)
		}
		*p(c) = f
		return nil
	}
}

func duration(p func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("not a duration like 90s or 1h: %q", v)
		}
		*p(c) = d
		return nil
	}
}

// Settings is the configuration table, the single source for env names, flags,
// defaults and the config reference.
var settings = []setting{
	{"DISPATCH_ADDR", "addr", ":8080", "HTTP listen address", str(func(c *Config) *string { return &c.Addr })},
	{"DISPATCH_MYSQL_DSN", "mysql-dsn", "root@tcp(127.0.0.1:3306)/taskd", "MySQL/MariaDB DSN (go-sql-driver form); the database is created and migrated at start", str(func(c *Config) *string { return &c.MySQLDSN })},
	{"DISPATCH_REDIS_ADDR", "redis-addr", "127.0.0.1:6379", "Redis address", str(func(c *Config) *string { return &c.RedisAddr })},
	{"DISPATCH_REDIS_DB", "redis-db", "0", "Redis database index", integer(func(c *Config) *int { return &c.RedisDB })},
	{"DISPATCH_REDIS_PREFIX", "redis-prefix", "taskd:", "prefix of every Redis key", str(func(c *Config) *string { return &c.RedisPrefix })},
	{"DISPATCH_KAFKA_BROKERS", "kafka-brokers", "", "comma-separated Kafka brokers; empty: no Kafka, events stay in MySQL", list(func(c *Config) *[]string { return &c.KafkaBrokers })},
	{"DISPATCH_ES_URLS", "es-urls", "", "comma-separated Elasticsearch URLs; reserved for reading admin events from Elasticsearch, not used by dispatchd yet (logsink reads it)", list(func(c *Config) *[]string { return &c.ESURLs })},
	{"DISPATCH_CATCH_UP", "catch-up", "1h", "how far behind now a user's cursor may lag; a new user starts there", duration(func(c *Config) *time.Duration { return &c.CatchUp })},
	{"DISPATCH_ADMIN_TOKEN", "admin-token", "", "admin bearer token(s), comma-separated, each name=secret or a bare secret (the name is the audit actor); empty: admin API refuses everyone", list(func(c *Config) *[]string { return &c.AdminTokens })},
	{"DISPATCH_ENROLL_SECRET", "enroll-secret", "", "shared secret for POST /v1/enroll; empty: enrollment disabled", str(func(c *Config) *string { return &c.EnrollSecret })},
	{"DISPATCH_MAX_WAIT", "max-wait", "30s", "cap on a fetch's long poll (wait_ms)", duration(func(c *Config) *time.Duration { return &c.MaxWait })},
	{"DISPATCH_SWEEP_INTERVAL", "sweep-interval", "5s", "how often expired leases are swept", duration(func(c *Config) *time.Duration { return &c.SweepInterval })},
	{"DISPATCH_SHUTDOWN_TIMEOUT", "shutdown-timeout", "20s", "how long in-flight requests may take to finish on SIGTERM", duration(func(c *Config) *time.Duration { return &c.Shutdown })},
	{"DISPATCH_MYSQL_CONNS", "mysql-conns", "32", "MySQL connection pool size", integer(func(c *Config) *int { return &c.MySQLConns })},
	{"DISPATCH_NODE", "node", "", "node name carried by events; empty: the host name", str(func(c *Config) *string { return &c.Node })},
	{"DISPATCH_REQUEST_TIMEOUT", "request-timeout", "5s", "bound on one request's MySQL and Redis work (a long poll's wait is apart from it); past it the request answers 503 with Retry-After", duration(func(c *Config) *time.Duration { return &c.RequestTimeout })},
	{"DISPATCH_AUTH_FAILURE_BURST", "auth-failure-burst", "100", "failed authentications (client key, enroll secret, admin token) one source address may make at once before it gets 429", integer(func(c *Config) *int { return &c.AuthFailureBurst })},
	{"DISPATCH_AUTH_FAILURE_RATE", "auth-failure-rate", "10", "failed authentications per second one source address may make after its burst", number(func(c *Config) *float64 { return &c.AuthFailureRate })},
	{"DISPATCH_KEYS_PER_UID", "keys-per-uid", "5", "live client keys one uid may hold; issuing or enrolling one more revokes the oldest", integer(func(c *Config) *int { return &c.KeysPerUID })},
	{"DISPATCH_KEY_RECHECK", "key-recheck", "1m", "how long a cached client key set (or a uid's having none) is trusted before MySQL is asked again: the bound on a revoked key working when Redis could not be told", duration(func(c *Config) *time.Duration { return &c.KeyRecheck })},
}

// EnvSetting is a setting dispatchd reads from the environment outside this table (the
// outbox relay's, read by logsink.LoadRelayConfig); -h lists it with the others.
type EnvSetting struct {
	Env, Default, Usage string
}

// LoadConfig builds the config from defaults, getenv and args (flags win over env).
// With -h or --help it writes every setting to help (this table's, then envOnly) and
// returns flag.ErrHelp. A flag that does not parse is an error naming it; nothing else
// is written.
func LoadConfig(args []string, getenv func(string) string, help io.Writer, envOnly ...EnvSetting) (Config, error) {
	c := Config{sources: map[string]string{}}
	for _, s := range settings {
		if err := s.set(&c, s.def); err != nil {
			return c, fmt.Errorf("default of %s: %w", s.env, err)
		}
		if v := getenv(s.env); v != "" {
			if err := s.set(&c, v); err != nil {
				return c, fmt.Errorf("%s: %w", s.env, err)
			}
			c.sources[s.env] = s.env
		}
	}
	fs := flag.NewFlagSet("dispatchd", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error comes back from Parse; -h is written below
	fs.Usage = func() {}
	for _, s := range settings {
		fs.Func(s.flag, s.usage, func(v string) error {
			if err := s.set(&c, v); err != nil {
				return err
			}
			c.sources[s.env] = "flag -" + s.flag
			return nil
		})
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeUsage(help, envOnly)
			return c, err
		}
		return c, fmt.Errorf("%w (dispatchd -h lists the settings)", err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.Node == "" {
		c.Node, _ = os.Hostname()
	}
	return c, c.Validate()
}

// writeUsage lists every setting: env name, flag, default and meaning.
func writeUsage(w io.Writer, envOnly []EnvSetting) {
	fmt.Fprint(w, `Usage: dispatchd [flags]

Every setting is an environment variable; most also have a flag, and flags win over
the environment. Durations are Go durations (500ms, 30s, 1h); lists are comma-separated.
docs/CONFIG.md is the full reference.

`)
	for _, s := range settings {
		fmt.Fprintf(w, "  %s, -%s (default %q)\n      %s\n", s.env, s.flag, s.def, s.usage)
	}
	if len(envOnly) > 0 {
		fmt.Fprint(w, "\nEnvironment only (no flag):\n\n")
		for _, s := range envOnly {
			fmt.Fprintf(w, "  %s (default %q)\n      %s\n", s.Env, s.Default, s.Usage)
		}
	}
}

// Source says where the setting named env got its value: "flag -<name>", the
// environment variable's name, or "default".
func (c Config) Source(env string) string {
	if s, ok := c.sources[env]; ok {
		return s
	}
	return "default"
}

// name is how an error names the setting env: by its environment name, and by its
// flag when the value came from it.
func (c Config) name(env string) string {
	if s := c.Source(env); strings.HasPrefix(s, "flag ") {
		return env + " (" + s + ")"
	}
	return env
}

// Validate checks the settings and names the wrong one, with its value. Durations,
// sizes and counts must be positive wherever zero means nothing.
func (c Config) Validate() error {
	var errs []error
	bad := func(env, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{c.name(env)}, args...)...))
	}
	positive := func(env string, d time.Duration) {
		if d <= 0 {
			bad(env, "must be positive, got %s", d)
		}
	}
	if c.Addr == "" {
		bad("DISPATCH_ADDR", "required")
	}
	if c.MySQLDSN == "" {
		bad("DISPATCH_MYSQL_DSN", "required")
	}
	if c.RedisAddr == "" {
		bad("DISPATCH_REDIS_ADDR", "required")
	}
	if c.RedisDB < 0 || c.RedisDB > 15 {
		bad("DISPATCH_REDIS_DB", "must be 0..15, got %d", c.RedisDB)
	}
	positive("DISPATCH_CATCH_UP", c.CatchUp)
	if c.MaxWait <= 0 || c.MaxWait > 5*time.Minute {
		bad("DISPATCH_MAX_WAIT", "must be in (0, 5m], got %s", c.MaxWait)
	}
	positive("DISPATCH_SWEEP_INTERVAL", c.SweepInterval)
	positive("DISPATCH_SHUTDOWN_TIMEOUT", c.Shutdown)
	if c.MySQLConns < 1 {
		bad("DISPATCH_MYSQL_CONNS", "must be >= 1, got %d", c.MySQLConns)
	}
	positive("DISPATCH_REQUEST_TIMEOUT", c.RequestTimeout)
	if c.AuthFailureBurst < 1 {
		bad("DISPATCH_AUTH_FAILURE_BURST", "must be >= 1, got %d", c.AuthFailureBurst)
	}
	if !(c.AuthFailureRate > 0) {
		bad("DISPATCH_AUTH_FAILURE_RATE", "must be positive, got %g", c.AuthFailureRate)
	}
	if c.KeysPerUID < 1 || c.KeysPerUID > 1000 {
		bad("DISPATCH_KEYS_PER_UID", "must be 1..1000, got %d", c.KeysPerUID)
	}
	positive("DISPATCH_KEY_RECHECK", c.KeyRecheck)
	for _, t := range c.AdminTokens {
		if len(t) < 8 {
			bad("DISPATCH_ADMIN_TOKEN", "each token must be at least 8 characters") // never the token itself
			break
		}
	}
	return errors.Join(errs...)
}
