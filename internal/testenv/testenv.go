// Package testenv gives tests their own MySQL database and their own Redis key prefix
// on the real servers, and removes both when the test ends. Nothing a test did not
// create is ever flushed or dropped.
//
// TASKD_TEST_MYSQL_DSN (default root@tcp(127.0.0.1:3306)/) and TASKD_TEST_REDIS_ADDR
// (default 127.0.0.1:6379) point it elsewhere.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/internal/store"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Suffix is a short random name part that keeps parallel tests apart.
func Suffix() string {
	b := make([]byte, 5)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// MySQLDSN creates a fresh database for t, migrated to the latest schema, and returns
// its DSN. The database is dropped when t ends.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(env("TASKD_TEST_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/"))
	if err != nil {
		t.Fatalf("TASKD_TEST_MYSQL_DSN: %v", err)
	}
	cfg.DBName = "taskd_test_" + Suffix()
	dsn := cfg.FormatDSN()
	t.Cleanup(func() {
		admin := cfg.Clone()
		admin.DBName = ""
		db, err := sql.Open("mysql", admin.FormatDSN())
		if err != nil {
			t.Errorf("drop test database: %v", err)
			return
		}
		defer db.Close()
		if _, err := db.Exec("DROP DATABASE IF EXISTS `" + cfg.DBName + "`"); err != nil {
			t.Errorf("drop test database: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.Open(ctx, dsn, store.OpenOptions{CreateDatabase: true, Migrate: true, MaxConns: 2})
	if err != nil {
		t.Fatalf("test database: %v", err)
	}
	s.Close()
	return dsn
}

// Store opens a Store on a fresh database (see MySQLDSN), closed when t ends. Its pool
// is small: parallel tests and packages share one server and its max_connections.
func Store(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), MySQLDSN(t), store.OpenOptions{MaxConns: 12})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Redis returns a client and a key prefix of t's own. Every key under the prefix is
// deleted when t ends; nothing else is touched.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: env("TASKD_TEST_REDIS_ADDR", "127.0.0.1:6379"), PoolSize: 128})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis: %v", err)
	}
	prefix := "taskdtest:" + Suffix() + ":"
	t.Cleanup(func() {
		DeletePrefix(t, rdb, prefix)
		rdb.Close()
	})
	return rdb, prefix
}

// DeletePrefix deletes every key under prefix: the test's own stand-in for FLUSHDB.
func DeletePrefix(t testing.TB, rdb *redis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 500 {
			rdb.Del(ctx, keys...)
			keys = keys[:0]
		}
	}
	if err := iter.Err(); err != nil {
		t.Errorf("scan %s: %v", prefix, err)
	}
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
}
