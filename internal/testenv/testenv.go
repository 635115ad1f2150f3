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
	"database/sql"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/internal/scratch"
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
func RandomName(prefix string) string { return scratch.Name(prefix) }

// MustCreateDatabase creates a fresh database, drops it when tb ends, and
// returns a DSN for it with parseTime set.
func MustCreateDatabase(tb testing.TB) string {
	tb.Helper()
	RequireIntegration(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	roomForPools.Do(func() { makeRoomForPools(ctx, tb) })
	db, err := scratch.CreateDatabase(ctx, RootDSN(), RandomName("tandem_test_"))
	if err != nil {
		tb.Fatalf("%v (is the server up? see docs/development.md; TANDEM_TEST_MYSQL_DSN overrides it)", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			tb.Errorf("drop test database: %v", err)
		}
	})
	return db.DSN
}

// testMaxConnections is the server's max_connections the suite needs: go
// test runs two packages at once, and a package's test opens stores whose
// pools each hold up to 32 connections (mysqlres.DefaultMaxOpenConns,
// production's default), a few pods and instances at a time. MariaDB's
// default of 151 is exhausted then ("Too many connections").
const testMaxConnections = 600

var roomForPools sync.Once

// makeRoomForPools raises the test server's max_connections to
// testMaxConnections when it is lower (SET GLOBAL: until the server
// restarts), once per test binary. A user not allowed to is told why tests
// may then fail to connect; nothing else changes.
func makeRoomForPools(ctx context.Context, tb testing.TB) {
	db, err := sql.Open("mysql", RootDSN())
	if err != nil {
		return
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.max_connections").Scan(&n); err != nil || n >= testMaxConnections {
		return
	}
	if _, err := db.ExecContext(ctx, "SET GLOBAL max_connections = ?", testMaxConnections); err != nil {
		tb.Logf("testenv: the test server's max_connections is %d and could not be raised to %d (%v): tests that open several stores at once may fail with 'Too many connections'", n, testMaxConnections, err)
	}
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
		tb.Fatalf("Redis on %s is required (start it, see docs/development.md): %v", RedisAddr(), err)
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := scratch.DeletePrefix(ctx, rdb, prefix); err != nil {
		tb.Errorf("clean Redis prefix %s: %v", prefix, err)
	}
}
