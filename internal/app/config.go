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

// LoadConfig builds the config from defaults, getenv and args (flags win over env).
func LoadConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	for _, s := range settings {
		if err := s.set(&c, s.def); err != nil {
			return c, fmt.Errorf("default of %s: %w", s.env, err)
		}
		if v := getenv(s.env); v != "" {
			if err := s.set(&c, v); err != nil {
				return c, fmt.Errorf("%s: %w", s.env, err)
			}
		}
	}
	fs := flag.NewFlagSet("dispatchd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, s := range settings {
		s := s
		fs.Func(s.flag, fmt.Sprintf("%s (env %s, default %q)", s.usage, s.env, s.def), func(v string) error {
			return s.set(&c, v)
		})
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.Node == "" {
		c.Node, _ = os.Hostname()
	}
	return c, c.Validate()
}

// Validate checks the settings and names the wrong one.
func (c Config) Validate() error {
	var errs []error
	if c.Addr == "" {
		errs = append(errs, errors.New("DISPATCH_ADDR: required"))
	}
	if c.MySQLDSN == "" {
		errs = append(errs, errors.New("DISPATCH_MYSQL_DSN: required"))
	}
	if c.RedisAddr == "" {
		errs = append(errs, errors.New("DISPATCH_REDIS_ADDR: required"))
	}
	if c.RedisDB < 0 || c.RedisDB > 15 {
		errs = append(errs, fmt.Errorf("DISPATCH_REDIS_DB: must be 0..15, got %d", c.RedisDB))
	}
	if c.CatchUp <= 0 {
		errs = append(errs, fmt.Errorf("DISPATCH_CATCH_UP: must be positive, got %s", c.CatchUp))
	}
	if c.MaxWait < 0 || c.MaxWait > 5*time.Minute {
		errs = append(errs, fmt.Errorf("DISPATCH_MAX_WAIT: must be 0..5m, got %s", c.MaxWait))
	}
	if c.SweepInterval <= 0 {
		errs = append(errs, fmt.Errorf("DISPATCH_SWEEP_INTERVAL: must be positive, got %s", c.SweepInterval))
	}
	if c.Shutdown <= 0 {
		errs = append(errs, fmt.Errorf("DISPATCH_SHUTDOWN_TIMEOUT: must be positive, got %s", c.Shutdown))
	}
	if c.MySQLConns < 1 {
		errs = append(errs, fmt.Errorf("DISPATCH_MYSQL_CONNS: must be >= 1, got %d", c.MySQLConns))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("DISPATCH_REQUEST_TIMEOUT: must be positive, got %s", c.RequestTimeout))
	}
	if c.AuthFailureBurst < 1 {
		errs = append(errs, fmt.Errorf("DISPATCH_AUTH_FAILURE_BURST: must be >= 1, got %d", c.AuthFailureBurst))
	}
	if !(c.AuthFailureRate > 0) {
		errs = append(errs, fmt.Errorf("DISPATCH_AUTH_FAILURE_RATE: must be positive, got %g", c.AuthFailureRate))
	}
	if c.KeysPerUID < 1 || c.KeysPerUID > 1000 {
		errs = append(errs, fmt.Errorf("DISPATCH_KEYS_PER_UID: must be 1..1000, got %d", c.KeysPerUID))
	}
	if c.KeyRecheck <= 0 {
		errs = append(errs, fmt.Errorf("DISPATCH_KEY_RECHECK: must be positive, got %s", c.KeyRecheck))
	}
	for _, t := range c.AdminTokens {
		if len(t) < 8 {
			errs = append(errs, errors.New("DISPATCH_ADMIN_TOKEN: each token must be at least 8 characters"))
			break
		}
	}
	return errors.Join(errs...)
}
