package bench

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/internal/faultproxy"
	"github.com/tandemhq/tandem/internal/scratch"
)

// Redis is the Redis a bench runs on: one server, or a cluster's seed
// nodes.
type Redis struct {
	Addr    string
	Cluster []string
}

// NewRedis returns the Redis of --redis-addr, or of --redis-cluster when
// cluster (comma-separated seed nodes) is not empty.
func NewRedis(addr, cluster string) Redis {
	if cluster == "" {
		return Redis{Addr: addr}
	}
	return Redis{Cluster: strings.Split(cluster, ",")}
}

func (r Redis) String() string {
	if len(r.Cluster) > 0 {
		return "cluster " + strings.Join(r.Cluster, ",")
	}
	return r.Addr
}

func (r Redis) client() redis.UniversalClient {
	if len(r.Cluster) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.Cluster, PoolSize: 256})
	}
	return redis.NewClient(&redis.Options{Addr: r.Addr, PoolSize: 256})
}

// env is a scratch database (behind the latency proxy when asked) and a
// scratch Redis prefix, removed at the end.
type env struct {
	db    *scratch.Database
	dsn   string // of the scratch database, through the proxy
	proxy *faultproxy.Proxy
	// rttMS is the measured round trip through the proxy (0 without one),
	// directRTTMS the one straight to the server beside it.
	rttMS, directRTTMS float64
	rdb                redis.UniversalClient
	redis              Redis
	prefix             string
	cleanup            []func()
	// meter samples the servers' cost around each cell.
	meter *serverMeter
}

func newEnv(ctx context.Context, mysqlDSN string, latency time.Duration, rt Redis) (*env, error) {
	e := &env{redis: rt, meter: newServerMeter(mysqlDSN, rt)}
	e.cleanup = append(e.cleanup, e.meter.close)
	var err error
	if e.db, err = scratch.CreateDatabase(ctx, mysqlDSN, scratch.Name("tandem_bench_")); err != nil {
		return nil, fmt.Errorf("bench needs MySQL: %w", err)
	}
	e.cleanup = append(e.cleanup, func() { e.db.Drop(context.Background()) })
	cfg, err := mysql.ParseDSN(e.db.DSN)
	if err != nil {
		e.close()
		return nil, err
	}
	if latency > 0 {
		if e.proxy, err = faultproxy.Listen(cfg.Addr); err != nil {
			e.close()
			return nil, err
		}
		e.proxy.SetLatency(latency)
		e.cleanup = append(e.cleanup, func() { e.proxy.Close() })
		cfg.Addr = e.proxy.Addr()
	}
	e.dsn = cfg.FormatDSN()
	if e.proxy != nil {
		if e.directRTTMS, err = roundTripMS(ctx, e.db.DSN); err != nil {
			e.close()
			return nil, err
		}
		if e.rttMS, err = roundTripMS(ctx, e.dsn); err != nil {
			e.close()
			return nil, err
		}
	}
	e.rdb = rt.client()
	if err := e.rdb.Ping(ctx).Err(); err != nil {
		e.rdb.Close()
		e.close()
		return nil, fmt.Errorf("bench needs Redis at %s: %w", rt, err)
	}
	e.prefix = scratch.Name("tandem_bench:") + ":"
	e.cleanup = append(e.cleanup, func() {
		scratch.DeletePrefix(context.Background(), e.rdb, e.prefix)
		e.rdb.Close()
	})
	return e, nil
}

// roundTripMS is the median time of a bare query (SELECT 1) on one
// connection to dsn: the round trip a statement pays there. Through the
// latency proxy it is the direct round trip plus twice the latency asked
// for, to within tens of microseconds (the proxy sleeps on the kernel's
// high-resolution timers); the bench prints both and says when the added
// time is more than 20% off.
func roundTripMS(ctx context.Context, dsn string) (float64, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	const n = 51
	var times []float64
	for i := 0; i < n+5; i++ {
		start := time.Now()
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			return 0, fmt.Errorf("bench: round trip through the latency proxy: %w", err)
		}
		if i >= 5 { // the first ones dial and warm up
			times = append(times, float64(time.Since(start).Microseconds())/1000)
		}
	}
	slices.Sort(times)
	return times[n/2], nil
}

// database creates another scratch database beside the bench's, dropped
// with it.
func (e *env) database(ctx context.Context, suffix string) (*scratch.Database, error) {
	db, err := e.db.Sibling(ctx, suffix)
	if err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, func() { db.Drop(context.Background()) })
	return db, nil
}

func (e *env) close() {
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		e.cleanup[i]()
	}
}

// latencyHonest reports whether the round trip the proxy added (rttMS less
// directMS) is within 20% of the two one-way delays asked (latencyMS each).
func latencyHonest(rttMS, directMS, latencyMS float64) bool {
	if latencyMS <= 0 {
		return true
	}
	added := rttMS - directMS
	return math.Abs(added-2*latencyMS) <= 0.2*2*latencyMS
}
