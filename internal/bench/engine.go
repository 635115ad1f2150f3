package bench

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/loadgen"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

// Engine is `tandem bench engine`: reserve throughput and latency of each
// store at each concurrency, closed loop, on a scratch database and key
// prefix. Every cell stocks fresh shops and checks the store's invariants
// at its end: a broken invariant fails the run.
type Engine struct {
	// Stores are measured in order: redis, mysql (unit rows), naive
	// (single-row baseline).
	Stores []string
	// Items the load is spread over; CartSize units per cart, as lines of
	// distinct items.
	Items    int
	CartSize int
	// Concurrency is the sweep of concurrent workers.
	Concurrency []int
	// Duration of each cell.
	Duration time.Duration
	// MySQLLatency is added one way by an in-process TCP proxy in front of
	// MySQL.
	MySQLLatency time.Duration
	// MySQLDSN is a user that may create databases; Redis the server or
	// cluster.
	MySQLDSN string
	Redis    Redis
	// Shops the carts are spread over.
	Shops int
	// PoolCap is the mysql engine's unit rows per position; MaxConns the
	// connection pool of mysql and naive, at most the concurrency.
	PoolCap  int
	MaxConns int
	// MaxInflight is the mysql engine's admission (mysqlres.Store's
	// MaxInflight), at most its pool; 0 is the engine's default.
	MaxInflight int
}

// cart returns the lines of a bench cart: cartSize units over
// min(cartSize, items) distinct items, starting at a rotating item.
func cart(items, cartSize int, seq int64) []tandem.LineRequest {
	n := min(cartSize, items)
	lines := make([]tandem.LineRequest, n)
	for i := range lines {
		q := int64(cartSize / n)
		if i < cartSize%n {
			q++
		}
		lines[i] = tandem.LineRequest{ItemID: int64(1 + (int(seq)+i)%items), Quantity: q, GroupIDs: []int64{1}}
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].ItemID < lines[j].ItemID })
	return lines
}

const benchStock = tandem.MaxOnHand

// Run measures every store at every concurrency; progress receives a line
// per cell.
func (b *Engine) Run(ctx context.Context, progress io.Writer) ([]Result, error) {
	e, err := newEnv(ctx, b.MySQLDSN, b.MySQLLatency, b.Redis)
	if err != nil {
		return nil, err
	}
	defer e.close()
	if e.rttMS > 0 {
		lat := float64(b.MySQLLatency.Microseconds()) / 1000
		verdict := "within 20% of the asked 2 x " + b.MySQLLatency.String()
		if !latencyHonest(e.rttMS, e.directRTTMS, lat) {
			verdict = "MORE THAN 20% OFF the asked 2 x " + b.MySQLLatency.String() + ": the latency figures are not the asked ones"
		}
		fmt.Fprintf(progress, "bench: round trip (median SELECT 1) %.3f ms through the latency proxy, %.3f ms direct: the proxy adds %.3f ms, %s\n",
			e.rttMS, e.directRTTMS, e.rttMS-e.directRTTMS, verdict)
	}
	var results []Result
	for _, name := range b.Stores {
		for cellNo, c := range b.Concurrency {
			fmt.Fprintf(progress, "bench: %s C=%d for %s...\n", name, c, b.Duration)
			r, err := b.cell(ctx, e, name, cellNo, c)
			if err != nil {
				return results, fmt.Errorf("%s at C=%d: %w", name, c, err)
			}
			results = append(results, r)
		}
	}
	return results, nil
}

// engineCell is one store opened for a cell: how to reserve and how to
// check its invariants afterwards; reg gathers the mysql engine's metrics.
type engineCell struct {
	reserve func(ctx context.Context, req tandem.ReserveRequest) error
	check   func(ctx context.Context) error
	reg     *prometheus.Registry
	close   func()
}

// inflight is the mysql engine's admission at concurrency c: MaxInflight,
// or the engine's default (its pool less the replenisher's connection).
func (b *Engine) inflight(c int) int {
	if b.MaxInflight > 0 {
		return min(b.MaxInflight, min(c, b.MaxConns)+1)
	}
	return min(c, b.MaxConns)
}

// open opens and stocks store name for a cell of concurrency c on the
// shops shop(i), i < b.Shops.
func (b *Engine) open(ctx context.Context, e *env, name string, c int, shop func(int) int64) (*engineCell, error) {
	if name == "naive" {
		nv, err := openNaive(ctx, e.dsn, min(c, b.MaxConns))
		if err != nil {
			return nil, err
		}
		for sh := range b.Shops {
			for i := 1; i <= b.Items; i++ {
				if err := nv.stock(ctx, tandem.Key{ShopID: shop(sh), ItemID: int64(i), GroupID: 1}, benchStock); err != nil {
					nv.Close()
					return nil, err
				}
			}
		}
		return &engineCell{reserve: nv.reserve, check: nv.check, close: func() { nv.Close() }}, nil
	}
	ms := mysqlres.NewStore(e.dsn)
	ms.PoolCap = b.PoolCap
	// The replenisher needs a connection of its own beside the reserves.
	ms.MaxOpenConns = min(c, b.MaxConns) + 1
	ms.MaxInflight = b.inflight(c)
	cell := &engineCell{reg: prometheus.NewRegistry()}
	ms.Registerer = cell.reg
	if err := ms.Open(ctx); err != nil {
		return nil, err
	}
	closers := []func(){func() { ms.Close() }}
	cell.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if err := ms.Migrate(ctx); err != nil {
		cell.close()
		return nil, err
	}
	var store tandem.ReservationStore = ms
	if name == "redis" {
		rs := redisres.NewStore(e.rdb, ms.Ledger())
		rs.Prefix = e.prefix
		if err := rs.Open(ctx); err != nil {
			cell.close()
			return nil, err
		}
		closers = append(closers, func() { rs.Close() })
		store, cell.reg = rs, nil
	}
	for sh := range b.Shops {
		for i := 1; i <= b.Items; i++ {
			if _, err := store.SetOnHand(ctx, tandem.Key{ShopID: shop(sh), ItemID: int64(i), GroupID: 1}, benchStock); err != nil {
				cell.close()
				return nil, err
			}
		}
	}
	cell.reserve = func(ctx context.Context, req tandem.ReserveRequest) error {
		_, err := store.Reserve(ctx, req)
		return err
	}
	cell.check = func(ctx context.Context) error {
		vs, err := store.CheckInvariants(ctx)
		if err != nil {
			return err
		}
		if len(vs) > 0 {
			return fmt.Errorf("INVARIANT BROKEN after the cell: %d violations, first: %s %s", len(vs), vs[0].Key, vs[0].Message)
		}
		return nil
	}
	return cell, nil
}

// cell measures one store at one concurrency on fresh shop ids, then checks
// the store's invariants.
func (b *Engine) cell(ctx context.Context, e *env, name string, cellNo, c int) (Result, error) {
	// Each cell stocks fresh shops: shop(i) for i < b.Shops.
	shop := func(i int) int64 {
		if b.Shops == 1 {
			return int64(1000 + cellNo)
		}
		return int64(100000*(cellNo+1) + i)
	}
	res := Result{Suite: "engine", Store: name, Items: b.Items, CartSize: b.CartSize, Concurrency: c,
		MySQLLatencyMS: float64(b.MySQLLatency.Microseconds()) / 1000, MySQLRoundTripMS: e.rttMS, MySQLDirectRoundTripMS: e.directRTTMS, MaxConns: min(c, b.MaxConns)}
	if name == "mysql" {
		res.MaxInflight = b.inflight(c)
	}
	st, err := b.open(ctx, e, name, c, shop)
	if err != nil {
		return res, err
	}
	defer st.close()
	var refused atomic.Int64
	var firstErr atomic.Pointer[string]
	var holdsBefore holds
	if st.reg != nil {
		holdsBefore = gatherHolds(st.reg)
	}
	serversBefore := e.meter.sample(ctx)
	cpuBefore := processCPU()
	lr := loadgen.Closed(ctx, c, b.Duration, func(ctx context.Context, w int, seq int64) error {
		req := tandem.ReserveRequest{
			CartToken: fmt.Sprintf("b%d-%d-%d", cellNo, w, seq), ShopID: shop(int((int64(w) + seq*int64(c)) % int64(b.Shops))),
			Lines: cart(b.Items, b.CartSize, int64(w)+seq*int64(c)),
		}
		err := st.reserve(ctx, req)
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
	res.perOp(cpuBefore, processCPU(), lr.Ops)
	serversAfter := e.meter.sample(context.WithoutCancel(ctx))
	if msg := firstErr.Load(); msg != nil {
		res.FirstError = *msg
	}
	res.OpsPerSec = lr.OpsPerSec
	res.P50MS, res.P99MS, res.P999MS = ms(lr.P50), ms(lr.P99), ms(lr.P999)
	res.Errors, res.Refused = lr.Errors, refused.Load()
	res.costPerOp(e.meter, serversBefore, serversAfter, lr.Ops, hostCores())
	if st.reg != nil {
		measured := gatherHolds(st.reg).since(holdsBefore)
		res.ConnHoldMS, res.ConnHoldP99MS = measured.meansMS(), measured.quantilesMS(0.99)
		res.SlowPath = int64(counterSum(st.reg, "tandem_mysql_reserve_slow_total"))
		res.Retries = int64(counterSum(st.reg, "tandem_mysql_tx_retries_total"))
	}
	if err := st.check(context.WithoutCancel(ctx)); err != nil {
		return res, err
	}
	return res, nil
}
