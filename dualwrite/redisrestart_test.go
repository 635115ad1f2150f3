package dualwrite_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/conformance"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

// ownRedis is a redis-server of the test's own, without persistence, on a
// free port, so that the test can restart it (losing its data) without
// touching the shared server.
type ownRedis struct {
	port int
	dir  string
	cmd  *exec.Cmd
}

func startOwnRedis(t *testing.T) *ownRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	r := &ownRedis{port: port, dir: t.TempDir()}
	r.start(t)
	t.Cleanup(r.stop)
	return r
}

func (r *ownRedis) start(t *testing.T) {
	t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir)
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("redis-server is required (apt-get install redis-server): %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.addr()})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer", r.addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *ownRedis) stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

func (r *ownRedis) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// TestRedisRestartRebuiltInMySQLMode restarts the pod's Redis without
// persistence while MySQL is the SoT: the router finds the loss and
// rebuilds Redis from MySQL by itself; then the kill switch falls back to
// it, every hold claims once, and the stores agree at rest.
func TestRedisRestartRebuiltInMySQLMode(t *testing.T) {
	testenv.RequireIntegration(t)
	own := startOwnRedis(t)
	ctx := context.Background()
	dsn := testenv.MustCreateDatabase(t)
	clock := conformance.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	ms := mysqlres.NewStore(dsn)
	ms.Now = clock.Now
	if err := ms.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	if err := ms.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: own.addr()})
	t.Cleanup(func() { rdb.Close() })
	rs := redisres.NewStore(rdb, ms.Ledger())
	rs.Prefix = "restart:"
	rs.Now = clock.Now
	if err := rs.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	p := openRouter(t, rs, ms, clock, tandem.ModeMySQL)
	p.rdb = rdb

	const holds = 10
	k := tandem.Key{ShopID: 1, ItemID: 100, GroupID: 1}
	if _, err := p.SetOnHand(ctx, k, 30); err != nil {
		t.Fatal(err)
	}
	for h := range holds {
		if _, err := p.Reserve(ctx, cart(fmt.Sprintf("h-%d", h), 1, one(100, 1, 1))); err != nil {
			t.Fatal(err)
		}
	}
	p.mustConverge(t)

	// A restart without persistence: every key is gone.
	own.stop()
	own.start(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if rb := p.LastRedisRebuild(); rb != nil && rb.Err == "" && p.RedisStale() == "" {
			if rb.Holds < holds {
				t.Errorf("rebuild %+v: want at least %d holds written back", rb, holds)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis not rebuilt after its restart (stale: %q)", p.RedisStale())
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.mustConverge(t)
	if got := p.counters(t, p.redis, k); got.Available != 30-holds || got.Reserved != holds {
		t.Errorf("redis after the rebuild: got %+v, want %d available, %d held", got, 30-holds, holds)
	}
	p.kill.on.Store(true)
	for h := range holds {
		if _, err := p.Claim(ctx, 1, fmt.Sprintf("h-%d", h)); err != nil {
			t.Errorf("claim of h-%d under the kill switch: %v", h, err)
		}
	}
	if got := p.onHand(t, k); got != 30-holds {
		t.Errorf("ledger after %d claims: got on_hand %d, want %d", holds, got, 30-holds)
	}
	p.mustConverge(t)
}
