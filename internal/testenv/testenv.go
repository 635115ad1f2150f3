// Package testenv gives tests their own MySQL database and Redis key space
// on the real servers (127.0.0.1:3306 and :6379 unless TANDEM_TEST_MYSQL_DSN
// and TANDEM_TEST_REDIS_ADDR say otherwise), and cleans them up.
//
// Integration tests call RequireIntegration first: under `go test -short`
// they are skipped with a message saying how to run them; `make test` and
// CI never pass -short, and a missing server then fails the test.
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
)

// RequireIntegration skips tb under -short with how to run it.
func RequireIntegration(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs real MariaDB/MySQL and Redis; run `make test` (or go test without -short) with both servers up")
	}
}

// RootDSN returns the DSN of a user that may create databases, with no
// database selected.
func RootDSN() string {
	if dsn := os.Getenv("TANDEM_TEST_MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// RedisAddr returns the address of the test Redis.
func RedisAddr() string {
	if a := os.Getenv("TANDEM_TEST_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// RandomName returns prefix followed by 12 random hex digits.
func RandomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// MustCreateDatabase creates a fresh database, drops it when tb ends, and
// returns a DSN for it with parseTime set.
func MustCreateDatabase(tb testing.TB) string {
	tb.Helper()
	RequireIntegration(tb)
	cfg, err := mysql.ParseDSN(RootDSN())
	if err != nil {
		tb.Fatalf("parse TANDEM_TEST_MYSQL_DSN: %v", err)
	}
	cfg.DBName = ""
	root, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := RandomName("tandem_test_")
	if _, err := root.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		root.Close()
		tb.Fatalf("MariaDB/MySQL on %s is required (start it, see README): %v", cfg.Addr, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := root.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			tb.Errorf("drop test database %s: %v", name, err)
		}
		root.Close()
	})
	cfg.DBName = name
	cfg.ParseTime = true
	return cfg.FormatDSN()
}

// MustRedis returns a client of the real Redis and a fresh key prefix
// ("tt:<random>:"); every key under the prefix is deleted when tb ends.
func MustRedis(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	RequireIntegration(tb)
	rdb := redis.NewClient(&redis.Options{Addr: RedisAddr()})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		tb.Fatalf("Redis on %s is required (start it, see README): %v", RedisAddr(), err)
	}
	prefix := RandomName("tt:") + ":"
	tb.Cleanup(func() {
		DeletePrefix(tb, rdb, prefix)
		rdb.Close()
	})
	return rdb, prefix
}

// DeletePrefix deletes every key that starts with prefix.
func DeletePrefix(tb testing.TB, rdb *redis.Client, prefix string) {
	tb.Helper()
	if !strings.HasSuffix(prefix, ":") {
		tb.Fatalf("refusing to delete keys under prefix %q (want a trailing colon)", prefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 500 {
			rdb.Unlink(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		rdb.Unlink(ctx, keys...)
	}
	if err := iter.Err(); err != nil {
		tb.Errorf("clean Redis prefix %s: %v", prefix, err)
	}
}
