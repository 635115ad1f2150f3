package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/faultproxy"
	"github.com/tandemhq/tandem/internal/loadgen"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

// BenchResult is one cell of a benchmark, in the JSON form scripts read.
type BenchResult struct {
	Suite          string             `json:"suite"`
	Store          string             `json:"store,omitempty"`
	Mode           string             `json:"mode,omitempty"`
	Items          int                `json:"items"`
	CartSize       int                `json:"cart_size"`
	Concurrency    int                `json:"concurrency"`
	Rate           float64            `json:"rate,omitempty"`
	MySQLLatencyMS float64            `json:"mysql_latency_ms"`
	MaxConns       int                `json:"mysql_max_conns,omitempty"`
	OpsPerSec      float64            `json:"ops_per_sec"`
	P50MS          float64            `json:"p50_ms"`
	P99MS          float64            `json:"p99_ms"`
	P999MS         float64            `json:"p999_ms"`
	Errors         int64              `json:"errors"`
	Refused        int64              `json:"refused"`
	ConnHoldMS     map[string]float64 `json:"conn_hold_mean_ms,omitempty"`
	// SlowPath counts the MySQL reserves that left the SKIP LOCKED fast path
	// for the ledger-locked slow path; Retries the transactions rerun after
	// a deadlock or lock-wait timeout.
	SlowPath int64 `json:"slow_path,omitempty"`
	Retries  int64 `json:"tx_retries,omitempty"`
	// FirstError is the text of the first failed operation of the cell.
	FirstError  string  `json:"first_error,omitempty"`
	ShadowP99MS float64 `json:"shadow_p99_ms,omitempty"`
	ShadowDrops int64   `json:"shadow_drops,omitempty"`
}

type engineBench struct {
	stores       []string
	items        int
	cartSize     int
	concurrency  []int
	duration     time.Duration
	mysqlLatency time.Duration
	mysqlDSN     string
	redis        benchRedis
	shops        int
	poolCap      int
	maxConns     int
	json         bool
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("want a comma-separated list of integers >= 1, got %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func runBenchEngine(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tandem bench engine")
	stores := fs.String("stores", "redis,mysql,naive", "engines to measure: redis, mysql (unit rows), naive (single-row baseline)")
	items := fs.Int("items", 1, "items the load is spread over (1: one hot item)")
	cartSize := fs.Int("cart-size", 1, "units per cart, as lines of distinct items (at most --items lines)")
	conc := fs.String("concurrency", "1,8,32,128", "concurrency sweep")
	dur := fs.Duration("duration", 8*time.Second, "duration of each cell")
	lat := fs.Duration("mysql-latency", 0, "one-way latency added by an in-process TCP proxy in front of MySQL (emulates a datacenter hop)")
	dsn := fs.String("mysql-dsn", "root@tcp(127.0.0.1:3306)/", "MySQL server (a scratch database is created and dropped)")
	raddr := fs.String("redis-addr", "127.0.0.1:6379", "Redis server (a scratch key prefix is used and deleted)")
	rcluster := fs.String("redis-cluster", "", "a Redis Cluster's seed nodes (host:port,...) instead of --redis-addr")
	shops := fs.Int("shops", 1, "shops the carts are spread over (on a Redis Cluster, each shop is a hash slot)")
	poolCap := fs.Int("pool-cap", 1000, "unit rows per position in the MySQL engine")
	maxConns := fs.Int("mysql-max-conns", 64, "connection pool of the mysql engine and of the naive baseline, at most the concurrency (the server's max_connections is shared)")
	js := fs.Bool("json", false, "print JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (client, driver and latency proxy) to this `FILE`")
	if err := parseArgs(fs, args, benchEngineSynopsis, benchEngineSummary, stdout); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	b := engineBench{items: *items, cartSize: *cartSize, duration: *dur, mysqlLatency: *lat,
		mysqlDSN: *dsn, redis: newBenchRedis(*raddr, *rcluster), shops: *shops, poolCap: *poolCap, maxConns: *maxConns, json: *js}
	var err error
	if b.concurrency, err = parseInts(*conc); err != nil {
		fmt.Fprintln(stderr, "--concurrency:", err)
		return errUsage
	}
	for _, s := range strings.Split(*stores, ",") {
		switch s = strings.TrimSpace(s); s {
		case "redis", "mysql", "naive":
			b.stores = append(b.stores, s)
		default:
			fmt.Fprintf(stderr, "--stores: unknown store %q (want redis, mysql, naive)\n", s)
			return errUsage
		}
	}
	if b.items < 1 || b.cartSize < 1 || b.duration <= 0 || b.mysqlLatency < 0 || b.maxConns < 1 || b.shops < 1 {
		fmt.Fprintln(stderr, "--items, --cart-size, --duration, --shops and --mysql-max-conns must be positive")
		return errUsage
	}
	results, err := b.run(ctx, stderr)
	if err != nil {
		return err
	}
	return printResults(stdout, results, b.json)
}

var errUsage = errors.New("usage")

func printResults(w io.Writer, results []BenchResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"results": results})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "suite\tstore/mode\titems\tcart\tconc\tlat_ms\tops/s\tp50_ms\tp99_ms\tp99.9_ms\terrors\trefused\t")
	for _, r := range results {
		name := r.Store
		if name == "" {
			name = r.Mode
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f\t%.0f\t%.2f\t%.2f\t%.2f\t%d\t%d\t\n", r.Suite, name, r.Items, r.CartSize,
			r.Concurrency, r.MySQLLatencyMS, r.OpsPerSec, r.P50MS, r.P99MS, r.P999MS, r.Errors, r.Refused)
	}
	for _, r := range results {
		if r.FirstError != "" {
			fmt.Fprintf(tw, "first error of %s at C=%d: %s\n", r.Store+r.Mode, r.Concurrency, r.FirstError)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if len(r.ConnHoldMS) == 0 {
			continue
		}
		tags := make([]string, 0, len(r.ConnHoldMS))
		for t := range r.ConnHoldMS {
			tags = append(tags, t)
		}
		sort.Strings(tags)
		parts := make([]string, len(tags))
		for i, t := range tags {
			parts[i] = fmt.Sprintf("%s=%.2fms", t, r.ConnHoldMS[t])
		}
		fmt.Fprintf(w, "mysql conn hold (mean) at C=%d: %s; slow path %d, retries %d\n", r.Concurrency, strings.Join(parts, " "), r.SlowPath, r.Retries)
	}
	return nil
}

// benchEnv is a scratch database (behind the latency proxy when asked) and a
// scratch Redis prefix, removed at the end.
type benchEnv struct {
	rootDB  *sql.DB
	dbName  string
	dsn     string // of the scratch database, through the proxy
	proxy   *faultproxy.Proxy
	rdb     redis.UniversalClient
	redis   benchRedis
	prefix  string
	cleanup []func()
}

func newBenchEnv(ctx context.Context, b *engineBench) (*benchEnv, error) {
	cfg, err := mysql.ParseDSN(b.mysqlDSN)
	if err != nil {
		return nil, fmt.Errorf("--mysql-dsn: %w", err)
	}
	env := &benchEnv{}
	cfg.DBName = ""
	if env.rootDB, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		return nil, err
	}
	env.dbName = fmt.Sprintf("tandem_bench_%d", time.Now().UnixNano())
	if _, err := env.rootDB.ExecContext(ctx, "CREATE DATABASE "+env.dbName); err != nil {
		env.rootDB.Close()
		return nil, fmt.Errorf("bench needs MySQL at %s: %w", cfg.Addr, err)
	}
	env.cleanup = append(env.cleanup, func() {
		env.rootDB.Exec("DROP DATABASE IF EXISTS " + env.dbName)
		env.rootDB.Close()
	})
	if b.mysqlLatency > 0 {
		if env.proxy, err = faultproxy.Listen(cfg.Addr); err != nil {
			env.close()
			return nil, err
		}
		env.proxy.SetLatency(b.mysqlLatency)
		env.cleanup = append(env.cleanup, func() { env.proxy.Close() })
		cfg.Addr = env.proxy.Addr()
	}
	cfg.DBName = env.dbName
	cfg.ParseTime = true
	env.dsn = cfg.FormatDSN()
	env.redis = b.redis
	env.rdb = b.redis.client()
	if err := env.rdb.Ping(ctx).Err(); err != nil {
		env.rdb.Close()
		env.close()
		return nil, fmt.Errorf("bench needs Redis at %s: %w", b.redis, err)
	}
	env.prefix = fmt.Sprintf("tandem_bench:%d:", time.Now().UnixNano())
	env.cleanup = append(env.cleanup, func() {
		deleteRedisPrefix(context.Background(), env.rdb, env.prefix)
		env.rdb.Close()
	})
	return env, nil
}

// benchRedis is the Redis a bench runs on: one server, or a cluster's
// seed nodes.
type benchRedis struct {
	addr    string
	cluster []string
}

func newBenchRedis(addr, cluster string) benchRedis {
	if cluster == "" {
		return benchRedis{addr: addr}
	}
	return benchRedis{cluster: strings.Split(cluster, ",")}
}

func (r benchRedis) String() string { return redisTarget(r.addr, r.cluster, len(r.cluster) > 0) }

func (r benchRedis) client() redis.UniversalClient {
	if len(r.cluster) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.cluster, PoolSize: 256})
	}
	return redis.NewClient(&redis.Options{Addr: r.addr, PoolSize: 256})
}

// deleteRedisPrefix deletes the bench's keys, on every master of a cluster.
func deleteRedisPrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) {
	del := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Unlink(ctx, iter.Val())
		}
		return iter.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, del)
		return
	}
	if c, ok := rdb.(*redis.Client); ok {
		_ = del(ctx, c)
	}
}

func (e *benchEnv) close() {
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		e.cleanup[i]()
	}
}

// cart returns the lines of a bench cart: cartSize units over
// min(cartSize, items) distinct items, starting at a rotating item.
func (b *engineBench) cart(seq int64) []tandem.LineRequest {
	n := min(b.cartSize, b.items)
	lines := make([]tandem.LineRequest, n)
	for i := range lines {
		q := int64(b.cartSize / n)
		if i < b.cartSize%n {
			q++
		}
		lines[i] = tandem.LineRequest{ItemID: int64(1 + (int(seq)+i)%b.items), Quantity: q, GroupIDs: []int64{1}}
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].ItemID < lines[j].ItemID })
	return lines
}

const benchStock = tandem.MaxOnHand

func (b *engineBench) run(ctx context.Context, progress io.Writer) ([]BenchResult, error) {
	env, err := newBenchEnv(ctx, b)
	if err != nil {
		return nil, err
	}
	defer env.close()
	var results []BenchResult
	for _, name := range b.stores {
		for cellNo, c := range b.concurrency {
			fmt.Fprintf(progress, "bench: %s C=%d for %s...\n", name, c, b.duration)
			r, err := b.cell(ctx, env, name, cellNo, c)
			if err != nil {
				return results, fmt.Errorf("%s at C=%d: %w", name, c, err)
			}
			results = append(results, r)
		}
	}
	return results, nil
}

// cell measures one store at one concurrency on fresh shop ids, then checks
// the store's invariants.
func (b *engineBench) cell(ctx context.Context, env *benchEnv, name string, cellNo, c int) (BenchResult, error) {
	// Each cell stocks fresh shops: shop(i) for i < b.shops.
	shop := func(i int) int64 {
		if b.shops == 1 {
			return int64(1000 + cellNo)
		}
		return int64(100000*(cellNo+1) + i)
	}
	res := BenchResult{Suite: "engine", Store: name, Items: b.items, CartSize: b.cartSize, Concurrency: c,
		MySQLLatencyMS: float64(b.mysqlLatency.Microseconds()) / 1000, MaxConns: min(c, b.maxConns)}
	var reserve func(ctx context.Context, req tandem.ReserveRequest) error
	var check func(ctx context.Context) error
	var reg *prometheus.Registry
	switch name {
	case "naive":
		nv, err := openNaive(ctx, env.dsn, min(c, b.maxConns))
		if err != nil {
			return res, err
		}
		defer nv.Close()
		for sh := range b.shops {
			for i := 1; i <= b.items; i++ {
				if err := nv.stock(ctx, tandem.Key{ShopID: shop(sh), ItemID: int64(i), GroupID: 1}, benchStock); err != nil {
					return res, err
				}
			}
		}
		reserve, check = nv.reserve, nv.check
	default:
		ms := mysqlres.NewStore(env.dsn)
		ms.PoolCap = b.poolCap
		// The replenisher needs a connection of its own beside the reserves.
		ms.MaxOpenConns = min(c, b.maxConns) + 1
		reg = prometheus.NewRegistry()
		ms.Registerer = reg
		if err := ms.Open(ctx); err != nil {
			return res, err
		}
		defer ms.Close()
		if err := ms.Migrate(ctx); err != nil {
			return res, err
		}
		var store tandem.ReservationStore = ms
		if name == "redis" {
			rs := redisres.NewStore(env.rdb, ms.Ledger())
			rs.Prefix = env.prefix
			if err := rs.Open(ctx); err != nil {
				return res, err
			}
			defer rs.Close()
			store, reg = rs, nil
		}
		for sh := range b.shops {
			for i := 1; i <= b.items; i++ {
				if _, err := store.SetOnHand(ctx, tandem.Key{ShopID: shop(sh), ItemID: int64(i), GroupID: 1}, benchStock); err != nil {
					return res, err
				}
			}
		}
		reserve = func(ctx context.Context, req tandem.ReserveRequest) error {
			_, err := store.Reserve(ctx, req)
			return err
		}
		check = func(ctx context.Context) error {
			vs, err := store.CheckInvariants(ctx)
			if err != nil {
				return err
			}
			if len(vs) > 0 {
				return fmt.Errorf("INVARIANT BROKEN after the cell: %d violations, first: %s %s", len(vs), vs[0].Key, vs[0].Message)
			}
			return nil
		}
	}
	var refused atomic.Int64
	var firstErr atomic.Pointer[string]
	lr := loadgen.Closed(ctx, c, b.duration, func(ctx context.Context, w int, seq int64) error {
		req := tandem.ReserveRequest{
			CartToken: fmt.Sprintf("b%d-%d-%d", cellNo, w, seq), ShopID: shop(int((int64(w) + seq*int64(c)) % int64(b.shops))),
			Lines: b.cart(int64(w) + seq*int64(c)),
		}
		err := reserve(ctx, req)
		if tandem.ErrorCode(err) == tandem.EINSUFFICIENT {
			refused.Add(1)
			return nil
		}
		if err != nil && ctx.Err() == nil {
			msg := err.Error()
			firstErr.CompareAndSwap(nil, &msg)
		}
		return err
	})
	if msg := firstErr.Load(); msg != nil {
		res.FirstError = *msg
	}
	res.OpsPerSec = lr.OpsPerSec
	res.P50MS, res.P99MS, res.P999MS = ms(lr.P50), ms(lr.P99), ms(lr.P999)
	res.Errors, res.Refused = lr.Errors, refused.Load()
	if reg != nil {
		res.ConnHoldMS = connHoldMeans(reg)
		res.SlowPath = int64(counterSum(reg, "tandem_mysql_reserve_slow_total"))
		res.Retries = int64(counterSum(reg, "tandem_mysql_tx_retries_total"))
	}
	if err := check(context.WithoutCancel(ctx)); err != nil {
		return res, err
	}
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// connHoldMeans reads the engine's connection-hold histogram per conn_tag.
func connHoldMeans(g prometheus.Gatherer) map[string]float64 {
	mfs, err := g.Gather()
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "tandem_mysql_conn_hold_seconds" || mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h.GetSampleCount() == 0 {
				continue
			}
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "conn_tag" {
					out[lp.GetValue()] = h.GetSampleSum() / float64(h.GetSampleCount()) * 1000
				}
			}
		}
	}
	return out
}

// counterSum adds up every series of the counter name.
func counterSum(g prometheus.Gatherer, name string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// naive is the single-row baseline: one counter row per position, reserve
// = UPDATE ... WHERE available >= n plus the reservation insert in one
// transaction, at the server's default isolation. Every buyer of a hot item
// queues on that one row lock, held across the transaction's round trips.
type naive struct{ db *sql.DB }

const (
	naiveLedgerDDL = `CREATE TABLE IF NOT EXISTS naive_ledger (
  shop_id BIGINT NOT NULL, inventory_item_id BIGINT NOT NULL, inventory_group_id BIGINT NOT NULL,
  available BIGINT NOT NULL, PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id)) ENGINE=InnoDB`
	naiveReservationsDDL = `CREATE TABLE IF NOT EXISTS naive_reservations (
  shop_id BIGINT NOT NULL, cart_token VARCHAR(128) NOT NULL, inventory_item_id BIGINT NOT NULL,
  inventory_group_id BIGINT NOT NULL, quantity BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (shop_id, cart_token, inventory_item_id)) ENGINE=InnoDB`
	naiveStock   = `/* conn_tag='naive' */ REPLACE INTO naive_ledger (shop_id, inventory_item_id, inventory_group_id, available) VALUES (?, ?, ?, ?)`
	naiveTake    = `/* conn_tag='naive' */ UPDATE naive_ledger SET available = available - ? WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? AND available >= ?`
	naiveHold    = `/* conn_tag='naive' */ INSERT INTO naive_reservations (shop_id, cart_token, inventory_item_id, inventory_group_id, quantity, expires_at) VALUES (?, ?, ?, ?, ?, ?)`
	naiveBalance = `/* conn_tag='naive' */ SELECT l.shop_id, l.inventory_item_id, l.available, COALESCE(SUM(r.quantity), 0)
  FROM naive_ledger l LEFT JOIN naive_reservations r ON r.shop_id = l.shop_id AND r.inventory_item_id = l.inventory_item_id AND r.inventory_group_id = l.inventory_group_id
  GROUP BY l.shop_id, l.inventory_item_id, l.available`
)

func openNaive(ctx context.Context, dsn string, conns int) (*naive, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	for _, ddl := range []string{naiveLedgerDDL, naiveReservationsDDL} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			db.Close()
			return nil, err
		}
	}
	return &naive{db: db}, nil
}

func (n *naive) Close() error { return n.db.Close() }

func (n *naive) stock(ctx context.Context, k tandem.Key, v int64) error {
	_, err := n.db.ExecContext(ctx, naiveStock, k.ShopID, k.ItemID, k.GroupID, v)
	return err
}

func (n *naive) reserve(ctx context.Context, req tandem.ReserveRequest) error {
	tx, err := n.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	exp := time.Now().Add(10 * time.Minute)
	for _, l := range req.Lines {
		r, err := tx.ExecContext(ctx, naiveTake, l.Quantity, req.ShopID, l.ItemID, l.GroupIDs[0], l.Quantity)
		if err != nil {
			return err
		}
		if nrows, _ := r.RowsAffected(); nrows == 0 {
			return tandem.Errorf(tandem.EINSUFFICIENT, "item %d sold out", l.ItemID)
		}
		if _, err := tx.ExecContext(ctx, naiveHold, req.ShopID, req.CartToken, l.ItemID, l.GroupIDs[0], l.Quantity, exp); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// check verifies available + held = the stock set at the start.
func (n *naive) check(ctx context.Context) error {
	rows, err := n.db.QueryContext(ctx, naiveBalance)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var shop, item, avail, held int64
		if err := rows.Scan(&shop, &item, &avail, &held); err != nil {
			return err
		}
		if avail+held != benchStock || avail < 0 {
			return fmt.Errorf("INVARIANT BROKEN in naive baseline: shop %d item %d available %d + held %d != %d", shop, item, avail, held, benchStock)
		}
	}
	return rows.Err()
}
