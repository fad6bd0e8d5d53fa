package store_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

func TestMigrationsApply(t *testing.T) {
	t.Parallel()
	s := testenv.Store(t)
	var n int
	if err := s.DB().QueryRowContext(context.Background(),
		"SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	// twenty-seven tables of ours (result_sequence the newest) plus golang-migrate's
	// schema_migrations
	if n != 28 {
		t.Fatalf("tables after migrate: %d, want 28", n)
	}
}

// Arguments are interpolated by the driver; a charset where that is unsafe is refused
// with a message naming it, before any connection.
func TestOpenRefusesUnsafeCharset(t *testing.T) {
	t.Parallel()
	_, err := store.Open(context.Background(), "root@tcp(127.0.0.1:3306)/x?charset=gbk", store.OpenOptions{})
	if err == nil || !strings.Contains(err.Error(), "charset gbk") {
		t.Fatalf("open with charset=gbk: %v", err)
	}
}

// Opening a store migrates the database and closing it leaves no connection behind:
// golang-migrate holds a connection of its own until it is closed.
func TestOpenAndCloseLeaveNoConnection(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t) // opened, migrated and closed
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(context.Background(), dsn, store.OpenOptions{Migrate: true, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	root := cfg.Clone()
	root.DBName = ""
	db, err := sql.Open("mysql", root.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.processlist WHERE db = ?", cfg.DBName).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 || time.Now().After(deadline) {
			break
		}
	}
	if n != 0 {
		t.Fatalf("%d connections to %s left open after two opens and closes", n, cfg.DBName)
	}
}
