// Package testenv gives tests their own MySQL database and their own Redis key prefix
// on the real servers, and removes both when the test ends. Nothing a test did not
// create is ever flushed or dropped.
//
// TASKD_TEST_MYSQL_DSN (default root@tcp(127.0.0.1:3306)/) and TASKD_TEST_REDIS_ADDR
// (default 127.0.0.1:6379) point it elsewhere; TASKD_TEST_REDIS_CLUSTER (the seeds of a
// Redis Cluster, comma-separated; see rediscluster) runs the tests on a cluster instead.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
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
		if err := whileBusy(func() error {
			_, err := db.Exec("DROP DATABASE IF EXISTS `" + cfg.DBName + "`")
			return err
		}); err != nil {
			t.Errorf("drop test database: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := whileBusy(func() error {
		s, err := store.Open(ctx, dsn, store.OpenOptions{CreateDatabase: true, Migrate: true, MaxConns: 2})
		if err == nil {
			s.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("test database: %v", err)
	}
	return dsn
}

// whileBusy runs f again, for up to a minute, while MySQL answers that it has too many
// connections: the packages of the suite run in parallel on one server, and a test that
// waits for a connection to free is not a failure.
func whileBusy(f func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil || !strings.Contains(err.Error(), "Error 1040") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Store opens a Store on a fresh database (see MySQLDSN), closed when t ends. Its pool
// is small: parallel tests and packages share one server and its max_connections.
func Store(t testing.TB) *store.Store {
	t.Helper()
	dsn := MySQLDSN(t)
	var s *store.Store
	err := whileBusy(func() (err error) {
		s, err = store.Open(context.Background(), dsn, store.OpenOptions{MaxConns: 12})
		return err
	})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// RedisCluster is the seed list of the Redis Cluster the tests run on, or "" for the
// standalone Redis.
func RedisCluster() string { return os.Getenv("TASKD_TEST_REDIS_CLUSTER") }

// RedisClient is a client of the test Redis: the standalone one, or the cluster
// TASKD_TEST_REDIS_CLUSTER names. Every script it runs is checked to take keys of one
// hash slot only (t fails otherwise), on the standalone Redis too.
func RedisClient(t testing.TB) redis.UniversalClient {
	t.Helper()
	var rdb redis.UniversalClient
	if seeds := RedisCluster(); seeds != "" {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(seeds, ","), PoolSize: 32})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: StandaloneRedisAddr(), PoolSize: 128})
	}
	rdb.AddHook(oneSlotHook{t})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis: %v", err)
	}
	return rdb
}

// Redis returns a client (RedisClient) and a key prefix of t's own. Every key under the
// prefix is deleted when t ends; nothing else is touched.
func Redis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	rdb := RedisClient(t)
	prefix := "taskdtest:" + Suffix() + ":"
	t.Cleanup(func() {
		DeletePrefix(t, rdb, prefix)
		rdb.Close()
	})
	return rdb, prefix
}

// DeletePrefix deletes every key under prefix (on every primary of a cluster): the
// test's own stand-in for FLUSHDB.
func DeletePrefix(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	del := func(ctx context.Context, node redis.UniversalClient) error {
		iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		flush := func() {
			// One DEL per key: on a cluster the keys of one DEL must share a slot.
			node.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.Del(ctx, k)
				}
				return nil
			})
			keys = keys[:0]
		}
		for iter.Next(ctx) {
			if keys = append(keys, iter.Val()); len(keys) == 500 {
				flush()
			}
		}
		flush()
		return iter.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return del(ctx, node) })
	} else {
		err = del(ctx, rdb)
	}
	if err != nil {
		t.Errorf("delete %s*: %v", prefix, err)
	}
}

// oneSlotHook fails the test when a script is given keys of more than one hash slot,
// which Redis Cluster refuses (CROSSSLOT): every script must work on a cluster.
type oneSlotHook struct{ t testing.TB }

func (oneSlotHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h oneSlotHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.check(cmd)
		return next(ctx, cmd)
	}
}

func (h oneSlotHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.check(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h oneSlotHook) check(cmd redis.Cmder) {
	switch cmd.Name() {
	case "eval", "evalsha", "eval_ro", "evalsha_ro":
	default:
		return
	}
	args := cmd.Args()
	n, _ := args[2].(int)
	if len(args) < 3+n {
		return
	}
	for _, k := range args[4 : 3+n] {
		if KeySlot(k.(string)) != KeySlot(args[3].(string)) {
			h.t.Errorf("a script takes keys of two hash slots (CROSSSLOT on a cluster): %v", args[3:3+n])
			return
		}
	}
}

// KeySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash tag (the
// part between the first { and the next }, when not empty) or of the whole key, mod
// 16384.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}

// StandaloneRedisAddr is the standalone test Redis's address, whether or not the tests
// run on a cluster (TASKD_TEST_REDIS_ADDR, default 127.0.0.1:6379).
func StandaloneRedisAddr() string { return env("TASKD_TEST_REDIS_ADDR", "127.0.0.1:6379") }

// RedisEnv is the dispatchd settings (KEY=value) that reach the test Redis: the
// standalone one, or the cluster TASKD_TEST_REDIS_CLUSTER names.
func RedisEnv() []string {
	if seeds := RedisCluster(); seeds != "" {
		return []string{"DISPATCH_REDIS_MODE=cluster", "DISPATCH_REDIS_ADDR=" + seeds}
	}
	return []string{"DISPATCH_REDIS_ADDR=" + StandaloneRedisAddr()}
}
