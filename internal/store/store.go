// Package store is the MySQL data-access layer: every SQL statement of the server lives
// here, with placeholders only. MySQL (or MariaDB) is the system of record for tasks,
// templates, memberships, client keys, quota claims, dispatches, cursors and the outbox.
package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/taskpull/taskd"
	schema "github.com/taskpull/taskd/sql"
)

// Store is the MySQL-backed system of record.
type Store struct {
	// judge checks successes against result schemas (SetResultJudge); nil: none.
	judge func(schema, detail json.RawMessage) string
	// judging bounds the judgements running at once (SetResultJudge).
	judging   chan struct{}
	db        *sql.DB
	events    EventsConfig
	claims    *batcher[claimIn, claimOut]       // nil: each claim its own transaction
	completes *batcher[completeIn, completeOut] // nil: each complete its own transaction
	observe   BatchObserver
	contended ContentionObserver
	maxTries  int // of a transaction that meets concurrent ones (see inTx)
	// interleave, set by white-box tests only, is called at named points between a
	// transaction's read and its write, to force two transactions to meet there.
	interleave func(ctx context.Context, point string)
}

// ContentionObserver is told of every transaction that met a concurrent one and was
// rolled back by the database: why ("deadlock", "lock_wait" or "write_conflict") and
// whether it was run again (false: the request's deadline left no room, and the
// caller gets 503).
type ContentionObserver func(reason string, retried bool)

// ObserveContention sets the observer of lock conflicts; call before serving.
func (s *Store) ObserveContention(o ContentionObserver) { s.contended = o }

// between is a point between a transaction's read and its write (see interleave).
func (s *Store) between(ctx context.Context, point string) {
	if s.interleave != nil {
		s.interleave(ctx, point)
	}
}

// BatchObserver is told of every group-commit batch: its kind ("claim" or "complete"),
// its size, and the error that made it fall back to running its requests one by one
// (nil when it committed).
type BatchObserver func(kind string, size int, err error)

// Queued reports how many claims and completes wait for a group-commit lane.
func (s *Store) Queued() (claims, completes int) {
	if s.claims == nil {
		return 0, 0
	}
	return s.claims.queued(), s.completes.queued()
}

// ObserveBatches sets the observer of group-commit batches; call before serving.
func (s *Store) ObserveBatches(o BatchObserver) { s.observe = o }

func (s *Store) observed(kind string, size int, err error) {
	if s.observe != nil {
		s.observe(kind, size, err)
	}
}

// DB returns the underlying pool (for health checks and tests).
func (s *Store) DB() *sql.DB { return s.db }

// Close stops the group commit (running batches finish) and closes the pool.
func (s *Store) Close() error {
	if s.claims != nil {
		s.claims.close()
		s.completes.close()
	}
	return s.db.Close()
}

// OpenOptions tune Open.
type OpenOptions struct {
	// CreateDatabase creates the DSN's database if it does not exist.
	CreateDatabase bool
	// Migrate applies the embedded migrations.
	Migrate  bool
	MaxConns int
	// Batch is the most claims (and, apart, completes) that share one transaction and
	// its commit (group commit); 1 runs each in its own. Default 64.
	Batch int
	// Lanes is how many batches of each kind run at once. Default 1: a claim batch
	// and a complete batch then run beside each other, and the requests that arrive
	// while one commits make the next one larger; fewer and larger batches cost less
	// CPU per request (on two cores, 100 agents: about 25 % less of MariaDB's per cycle
	// and 20 % more cycles than with 2). At most half the pool.
	Lanes int
}

// Open connects to the DSN's database, optionally creating it and applying the
// migrations, and returns a pool whose sessions run at READ COMMITTED (which keeps
// InnoDB's gap locks, and the deadlocks they breed between concurrent claims, away).
func Open(ctx context.Context, dsn string, opt OpenOptions) (*Store, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql dsn: %w", err)
	}
	if cfg.DBName == "" {
		return nil, errors.New("mysql dsn: no database name (e.g. root@tcp(127.0.0.1:3306)/taskd)")
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	// Writes read "rows affected" to tell a change from none (a redo of a dispatch no
	// longer open, a revoked key): that count must be of changed rows, whatever the
	// operator's DSN says.
	cfg.ClientFoundRows = false
	// Arguments are interpolated into the statement text by the driver instead of a
	// server-side prepare, execute and close per statement: three round trips become
	// one. That is safe in every charset but those whose multibyte characters can end
	// in a backslash byte, which the DSN may not name.
	if err := safeCharset(dsn); err != nil {
		return nil, err
	}
	cfg.InterpolateParams = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"

	if opt.CreateDatabase {
		if err := createDatabase(ctx, cfg); err != nil {
			return nil, err
		}
	}
	isolationVar, err := isolationVariable(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if opt.Migrate {
		if err := migrateUp(cfg); err != nil {
			return nil, err
		}
	}
	cfg.Params[isolationVar] = "'READ-COMMITTED'"
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(connector)
	if opt.MaxConns <= 0 {
		opt.MaxConns = 32
	}
	db.SetMaxOpenConns(opt.MaxConns)
	db.SetMaxIdleConns(opt.MaxConns)
	db.SetConnMaxLifetime(time.Hour)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql ping: %w", err)
	}
	s := &Store{db: db, maxTries: retryMaxTries}
	if opt.Batch <= 0 {
		opt.Batch = 64
	}
	if opt.Lanes <= 0 {
		opt.Lanes = 1
	}
	if opt.Batch > 1 {
		lanes := max(1, min(opt.Lanes, opt.MaxConns/2))
		s.claims = startBatcher(lanes, opt.Batch, s.runClaims)
		s.completes = startBatcher(lanes, opt.Batch, s.runCompletes)
	}
	return s, nil
}

func createDatabase(ctx context.Context, cfg *mysql.Config) error {
	c := cfg.Clone()
	name := c.DBName
	c.DBName = ""
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	defer db.Close()
	q := "CREATE DATABASE IF NOT EXISTS `" + strings.ReplaceAll(name, "`", "``") + "` CHARACTER SET utf8mb4"
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// isolationVariable names the session variable for the isolation level: MariaDB
// before 11.1 knows only tx_isolation, MySQL 8 only transaction_isolation.
func isolationVariable(ctx context.Context, cfg *mysql.Config) (string, error) {
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return "", fmt.Errorf("mysql: %w", err)
	}
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return "", fmt.Errorf("mysql: %w", err)
	}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		return "tx_isolation", nil
	}
	return "transaction_isolation", nil
}

// migrateUp applies the embedded migrations with golang-migrate, which holds a MySQL
// advisory lock so that several processes starting at once migrate one at a time.
func migrateUp(cfg *mysql.Config) error {
	c := cfg.Clone()
	c.MultiStatements = true
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer db.Close()
	src, err := iofs.New(schema.Migrations, "migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	drv, err := migratemysql.WithInstance(db, &migratemysql.Config{})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, c.DBName, drv)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer m.Close() // the driver holds a connection of its own until then
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// contention names why a transaction failed only because it met a concurrent one and
// may simply be run again ("" when it failed for another reason).
func contention(err error) string {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1213:
			return "deadlock"
		case 1205:
			return "lock_wait"
		}
	}
	if errors.Is(err, errConflict) {
		return "write_conflict"
	}
	return ""
}

// isDuplicate reports a unique-key violation.
func isDuplicate(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// isOpenTwice reports whether err is a dispatch insert that hit uq_open_occurrence: the
// user holds that occurrence open already (in another slot).
func isOpenTwice(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062 && strings.Contains(me.Message, "uq_open_occurrence")
}

// busyOutcome is what a dispatch insert that hit a unique key comes to: Holding when
// the user holds the occurrence open already, UserBusy when the slot is taken.
func busyOutcome(err error) taskd.ClaimOutcome {
	if isOpenTwice(err) {
		return taskd.Holding
	}
	return taskd.UserBusy
}

// inTxOnce runs fn in a transaction, once.
func (s *Store) inTxOnce(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Transactions that meet a concurrent one (a deadlock, a lock wait timeout, a write
// conflict a claim found) are run again by inTx after a pause drawn at random from zero
// to a bound that doubles with every try (full jitter: transactions that collided do
// not come back together), up to retryMaxTries tries and for as long as the caller's
// deadline leaves room for the pause. Only then does the caller see the error, which
// the API answers with 503 and Retry-After.
const (
	retryFirstBound = 2 * time.Millisecond
	retryMaxBound   = 250 * time.Millisecond
	retryMaxTries   = 12
)

// retryPause is the pause before try n+1 (n >= 1): uniform in [0, bound], the bound
// doubling from retryFirstBound up to retryMaxBound.
func retryPause(n int) time.Duration {
	bound := retryMaxBound
	if n < 8 && retryFirstBound<<(n-1) < retryMaxBound {
		bound = retryFirstBound << (n - 1)
	}
	return rand.N(bound + 1)
}

// inTx runs fn in a transaction, again after a jittered pause while it fails only
// because of a concurrent transaction (see retryPause).
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	for try := 1; ; try++ {
		err := s.inTxOnce(ctx, fn)
		reason := contention(err)
		if reason == "" {
			return err
		}
		pause := retryPause(try)
		deadline, bounded := ctx.Deadline()
		retry := try < s.maxTries && ctx.Err() == nil && (!bounded || time.Until(deadline) > pause)
		if s.contended != nil {
			s.contended(reason, retry)
		}
		if !retry {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// safeCharset refuses a DSN whose charset parameter names a charset in which escaping
// interpolated arguments is unsafe (a multibyte character may end in 0x5c).
func safeCharset(dsn string) error {
	_, query, ok := strings.Cut(dsn, "?")
	if !ok {
		return nil
	}
	params, err := url.ParseQuery(query)
	if err != nil {
		return nil // the driver reports a malformed DSN itself
	}
	for _, cs := range strings.Split(params.Get("charset"), ",") {
		switch strings.ToLower(strings.TrimSpace(cs)) {
		case "big5", "gbk", "gb2312", "gb18030", "sjis", "cp932", "eucjpms":
			return fmt.Errorf("mysql dsn: charset %s is not supported (use utf8mb4, the default)", cs)
		}
	}
	return nil
}
