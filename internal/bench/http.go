package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/adminclient"
	"github.com/tandemhq/tandem/internal/loadgen"
)

// HTTP is `tandem bench http`: the engine bench's reserve load sent
// through `tandem serve` over HTTP, one cell per mode.
//
// Without Remote it runs its own server in-process (Start) on scratch
// databases and a scratch Redis prefix, and restarts it before every cell
// on fresh, empty stores (each cell then steps from redis mode to its own,
// backfill included), so that the comparator's window, hence the report's
// shadow latency, holds that cell's traffic only, and no cell measures
// what the cells before it left in the stores. With Remote it drives that running server; the report's latencies
// then cover the server's whole gate window, and the pod is left in the
// last mode measured. Each cell stocks fresh items of Shop (ids drawn at
// random above 1,000,000) to tandem.MaxOnHand.
type HTTP struct {
	// Remote, when set, is the running server to drive; else Start runs
	// one in-process.
	Remote *Remote
	Start  StartFunc
	// Modes are measured in order.
	Modes []tandem.Mode
	// Concurrency is the closed loop's buyers, or the open loop's most
	// requests in flight (arrivals beyond it count as errors).
	Concurrency int
	// Rate, when positive, is the open loop's offered reserves per second.
	Rate float64
	// RateOfMySQL, when positive, first measures mysql mode's closed-loop
	// capacity at Concurrency, then runs Modes open loop at this fraction
	// of it (at most max(256, 8 x Concurrency) requests in flight); Rate
	// is then unused.
	RateOfMySQL float64
	// CompareEngine also measures the raw redis engine at Concurrency, and
	// gives each closed-loop redis cell the p50 that HTTP adds to it.
	CompareEngine bool
	// Repeat measures Modes this many rounds (at least 1), interleaved:
	// every mode once, then every mode again. Each cell is reported with
	// its round; the report judges the median of a mode's rounds.
	Repeat int
	// Duration is each cell's measured load, after Warmup unmeasured.
	Duration time.Duration
	Warmup   time.Duration
	Items    int
	CartSize int
	Shop     int64
	// Pod is the pod whose mode is set per cell (default: the one that
	// lists Shop).
	Pod string
	// MySQLDSN and Redis are the servers of the in-process server's
	// scratch stores.
	MySQLDSN string
	Redis    Redis
	// CPUProfile, when set, is the file of a CPU profile of the cells.
	CPUProfile string
}

// HTTPResult is a Result whose fields that the http suite always reports
// are never left out of the JSON, zero or not.
type HTTPResult struct {
	Result
	Rate           float64 `json:"rate"`
	ShadowP99MS    float64 `json:"shadow_p99_ms"`
	ShadowDrops    int64   `json:"shadow_drops"`
	ShadowTimeouts int64   `json:"shadow_timeouts"`
	// KillSwitch is true when the pod's kill switch was engaged at the end
	// of the cell (the automatic abort trips it when the divergence rate
	// crosses its threshold): the cell was then served by Redis in part.
	KillSwitch bool `json:"kill_switch"`
	// RateOfMySQL and MySQLCapacity, on the open-loop cells of
	// --rate-of-mysql, say at which fraction of which mysql-mode capacity
	// (ops/s, the run's first cell) the cell's rate was offered.
	RateOfMySQL   float64 `json:"rate_of_mysql,omitempty"`
	MySQLCapacity float64 `json:"mysql_capacity_ops_per_sec,omitempty"`
	// EngineP50MS (--compare-engine, closed-loop redis cells) is the raw
	// redis engine's p50 at the same concurrency, measured in the same
	// run; AddedP50MS the p50 the service adds over it.
	EngineP50MS float64 `json:"engine_p50_ms,omitempty"`
	AddedP50MS  float64 `json:"added_p50_ms,omitempty"`
	// Round is the cell's round of a run with --repeat (1, 2, ...); 0 in a
	// run of one round.
	Round int `json:"round,omitempty"`
}

// PrintHTTPResults prints the engine bench's table plus a shadow line per
// cell, or the JSON.
func PrintHTTPResults(w io.Writer, run *RunInfo, results []HTTPResult, asJSON bool) error {
	if asJSON {
		return printJSON(w, run, results)
	}
	plain := make([]Result, len(results))
	for i, r := range results {
		plain[i] = r.Result
	}
	if err := PrintResults(w, run, plain, false); err != nil {
		return err
	}
	for _, r := range results {
		load := fmt.Sprintf("C=%d", r.Concurrency)
		if r.Rate > 0 {
			load = fmt.Sprintf("rate=%.0f/s", r.Rate)
		}
		killed := ""
		if r.KillSwitch {
			killed = " (KILL SWITCH ENGAGED: served by Redis in part)"
		}
		if r.Suite != "http" {
			continue
		}
		fmt.Fprintf(w, "shadow of %s at %s: p99 %.2f ms, drops %d, timeouts %d%s\n",
			r.Mode, load, r.ShadowP99MS, r.ShadowDrops, r.ShadowTimeouts, killed)
		if r.RateOfMySQL > 0 {
			fmt.Fprintf(w, "  offered %.2f x mysql mode's capacity (%.0f ops/s)\n", r.RateOfMySQL, r.MySQLCapacity)
		}
		if r.EngineP50MS > 0 {
			fmt.Fprintf(w, "  redis mode through HTTP at C=%d: p50 %.2f ms, raw engine %.2f ms: added p50 %.2f ms\n",
				r.Concurrency, r.P50MS, r.EngineP50MS, r.AddedP50MS)
		}
	}
	return nil
}

// cellLoad is the load of one cell: closed loop of concurrency buyers,
// or open loop at rate with at most concurrency requests in flight.
type cellLoad struct {
	mode        tandem.Mode
	concurrency int
	rate        float64
}

func (l cellLoad) String() string {
	if l.rate > 0 {
		return fmt.Sprintf("rate=%.0f/s", l.rate)
	}
	return fmt.Sprintf("C=%d", l.concurrency)
}

// openInflight is the most requests in flight of the open-loop cells of
// RateOfMySQL: room for queueing far beyond the closed loop's buyers.
func (b *HTTP) openInflight() int { return max(256, 8*b.Concurrency) }

// Run measures every mode (after mysql mode's capacity with RateOfMySQL),
// then the raw redis engine with CompareEngine; progress receives a line
// per cell.
func (b *HTTP) Run(ctx context.Context, progress io.Writer) ([]HTTPResult, error) {
	if b.CPUProfile != "" {
		f, err := os.Create(b.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	results, err := b.runCells(ctx, progress)
	if err != nil || !b.CompareEngine {
		return results, err
	}
	e := Engine{Stores: []string{"redis"}, Items: b.Items, CartSize: b.CartSize, Concurrency: []int{b.Concurrency},
		Duration: b.Duration, MySQLDSN: b.MySQLDSN, Redis: b.Redis, Shops: 1, PoolCap: 1000, MaxConns: b.Concurrency}
	raw, err := e.Run(ctx, progress)
	if err != nil {
		return results, fmt.Errorf("raw redis engine: %w", err)
	}
	for i := range results {
		if r := &results[i]; r.Mode == string(tandem.ModeRedis) && r.Rate == 0 {
			r.EngineP50MS = raw[0].P50MS
			r.AddedP50MS = r.P50MS - raw[0].P50MS
		}
	}
	for _, r := range raw {
		results = append(results, HTTPResult{Result: r})
	}
	return results, nil
}

// runCells measures the modes on the target, restarting an in-process
// server before each cell.
func (b *HTTP) runCells(ctx context.Context, progress io.Writer) ([]HTTPResult, error) {
	var t *target
	var err error
	if b.Remote != nil {
		t, err = remoteTarget(b.Remote, b.Pod, b.Shop)
	} else {
		t, err = localTarget(ctx, b.Start, b.MySQLDSN, b.Redis, b.Shop, progress)
	}
	if err != nil {
		return nil, err
	}
	defer t.close()
	// Fresh item ids per run and per cell: the hot item is stocked anew
	// before each cell and never sells out, and a running server's other
	// inventory is left alone.
	run := fmt.Sprintf("%x", rand.Uint32())
	itemBase := int64(1_000_000 + rand.IntN(1_000_000_000))
	var results []HTTPResult
	measure := func(l cellLoad) (HTTPResult, error) {
		cellNo := len(results)
		if t.restart != nil && cellNo > 0 {
			if err := t.restart(ctx); err != nil {
				return HTTPResult{}, err
			}
		}
		fmt.Fprintf(progress, "bench http: %s %s for %s...\n", l.mode, l, b.Duration)
		c := newClient(t, l.concurrency)
		defer c.close()
		r, err := b.cell(ctx, c, progress, l, fmt.Sprintf("%s-%d", run, cellNo), itemBase+int64(cellNo*b.Items))
		if err != nil {
			return r, fmt.Errorf("%s: %w", l.mode, err)
		}
		results = append(results, r)
		return r, nil
	}
	open := cellLoad{concurrency: b.Concurrency, rate: b.Rate}
	if b.RateOfMySQL > 0 {
		capacity, err := measure(cellLoad{mode: tandem.ModeMySQL, concurrency: b.Concurrency})
		if err != nil {
			return results, err
		}
		open = cellLoad{concurrency: b.openInflight(), rate: b.RateOfMySQL * capacity.OpsPerSec}
		fmt.Fprintf(progress, "bench http: mysql mode's capacity %.0f ops/s at C=%d; the modes run open loop at %.2f of it\n",
			capacity.OpsPerSec, b.Concurrency, b.RateOfMySQL)
		if open.rate <= 0 {
			return results, errors.New("mysql mode served nothing: no capacity to take a fraction of")
		}
	}
	for round := 1; round <= max(b.Repeat, 1); round++ {
		for _, mode := range b.Modes {
			l := open
			l.mode = mode
			r, err := measure(l)
			if err != nil {
				return results, err
			}
			if b.RateOfMySQL > 0 {
				r.RateOfMySQL, r.MySQLCapacity = b.RateOfMySQL, results[0].OpsPerSec
			}
			if b.Repeat > 1 {
				r.Round = round
			}
			results[len(results)-1] = r
		}
	}
	return results, nil
}

// buyers is the reserve load of one cell: each operation posts one cart,
// an insufficient_inventory answer counts as refused, anything else but a
// 201 as an error (the first one kept).
type buyers struct {
	b        *HTTP
	c        *client
	cellID   string
	itemBase int64
	refused  atomic.Int64
	once     sync.Once
	failure  error
}

func (l *buyers) op(phase string, concurrency int) loadgen.Op {
	b, url := l.b, "http://"+l.c.t.checkout+"/v1/reservations"
	// Each buyer builds its bodies in a buffer of its own: the client's
	// work per request is part of the cell's CPU per op, so it does no
	// more than a real client must.
	var bufs sync.Map // worker -> *[]byte
	return func(ctx context.Context, w int, seq int64) error {
		v, _ := bufs.Load(w)
		bp, _ := v.(*[]byte)
		if bp == nil {
			bp = new([]byte)
			bufs.Store(w, bp)
		}
		*bp = l.appendBody((*bp)[:0], phase, w, seq, cart(b.Items, b.CartSize, int64(w)+seq*int64(concurrency)))
		status, err := l.c.post(ctx, url, *bp)
		var ae *adminclient.Error
		switch {
		case err == nil && status == http.StatusCreated:
			return nil
		case errors.As(err, &ae) && ae.Code == tandem.EINSUFFICIENT:
			l.refused.Add(1)
			return nil
		case err == nil:
			err = fmt.Errorf("status %d, want 201", status)
		}
		if ctx.Err() == nil {
			l.once.Do(func() { l.failure = err })
		}
		return err
	}
}

// appendBody appends the JSON of a reserve of lines (item ids relative to
// the cell's itemBase) by buyer w's operation seq of phase: the bytes
// json.Marshal gives for reserveBody, without reflection.
func (l *buyers) appendBody(b []byte, phase string, w int, seq int64, lines []tandem.LineRequest) []byte {
	b = append(b, `{"cart_token":"bh-`...)
	b = append(b, l.cellID...)
	b = append(b, '-')
	b = append(b, phase...)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(w), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `","shop_id":`...)
	b = strconv.AppendInt(b, l.b.Shop, 10)
	b = append(b, `,"lines":[`...)
	for i, ln := range lines {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"inventory_item_id":`...)
		b = strconv.AppendInt(b, l.itemBase+ln.ItemID-1, 10)
		b = append(b, `,"quantity":`...)
		b = strconv.AppendInt(b, ln.Quantity, 10)
		b = append(b, `,"group_ids":[1]}`...)
	}
	return append(b, "]}"...)
}

func (l cellLoad) run(ctx context.Context, d time.Duration, op loadgen.Op) loadgen.Result {
	if l.rate > 0 {
		return loadgen.Open(ctx, l.rate, l.concurrency, d, op)
	}
	return loadgen.Closed(ctx, l.concurrency, d, op)
}

// cell measures one mode: set the mode, stock fresh items, warm up, run
// the measured load, then read the shadow's latency and drops.
func (b *HTTP) cell(ctx context.Context, c *client, progress io.Writer, load cellLoad, cellID string, itemBase int64) (HTTPResult, error) {
	mode := load.mode
	res := HTTPResult{Result: Result{Suite: "http", Mode: string(mode), Items: b.Items, CartSize: b.CartSize,
		Concurrency: load.concurrency, Rate: load.rate}, Rate: load.rate}
	if err := c.setMode(ctx, mode); err != nil {
		return res, err
	}
	items := make([]int64, b.Items)
	for i := range items {
		items[i] = itemBase + int64(i)
	}
	if err := c.stock(ctx, b.Shop, items, mode); err != nil {
		return res, err
	}
	l := &buyers{b: b, c: c, cellID: cellID, itemBase: itemBase}
	if b.Warmup > 0 {
		load.run(ctx, b.Warmup, l.op("w", load.concurrency))
	}
	before, err := c.settledReport(ctx)
	if err != nil {
		return res, err
	}
	l.refused.Store(0)
	gather := c.t.metrics // nil for a remote server: no hold figures
	holdsBefore := gatherHoldsOf(gather)
	var serversBefore serverSample
	if c.t.meter != nil {
		serversBefore = c.t.meter.sample(ctx)
	}
	cpuBefore := processCPU()
	lr := load.run(ctx, b.Duration, l.op("m", load.concurrency))
	res.perOp(cpuBefore, processCPU(), lr.Ops)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.OpsPerSec = lr.OpsPerSec
	if c.t.meter != nil {
		res.costPerOp(c.t.meter, serversBefore, c.t.meter.sample(ctx), lr.Ops, hostCores())
	}
	after, err := c.settledReport(ctx)
	if err != nil {
		return res, err
	}
	// The shadow's holds of the cell's operations are in once settled.
	measured := gatherHoldsOf(gather).since(holdsBefore)
	res.ConnHoldMS, res.ConnHoldP99MS = measured.meansMS(), measured.quantilesMS(0.99)
	res.OpsPerSec = lr.OpsPerSec
	res.P50MS, res.P99MS, res.P999MS = ms(lr.P50), ms(lr.P99), ms(lr.P999)
	res.Errors, res.Refused = lr.Errors, l.refused.Load()
	if shadow := mode.Shadow(); shadow != "" {
		res.ShadowP99MS = after.LatencyMS[shadow].P99
	}
	res.ShadowDrops = max(0, after.Divergences[tandem.KindShadowDropped]-before.Divergences[tandem.KindShadowDropped])
	res.ShadowTimeouts = max(0, after.Divergences[tandem.KindShadowTimeout]-before.Divergences[tandem.KindShadowTimeout])
	res.Result.ShadowP99MS, res.Result.ShadowDrops = res.ShadowP99MS, res.ShadowDrops
	var pod tandem.PodStatus
	if err := c.call(ctx, http.MethodGet, "/admin/pods/"+c.t.pod, nil, &pod); err != nil {
		return res, err
	}
	if res.KillSwitch = pod.KillSwitch; res.KillSwitch && mode.SourceOfTruth() == tandem.StoreMySQL {
		fmt.Fprintf(progress, "bench http: %s: WARNING the pod's kill switch is engaged (automatic abort?): the cell was served by Redis in part\n", mode)
	}
	if l.failure != nil {
		fmt.Fprintf(progress, "bench http: %s: %d errors, first: %v\n", mode, res.Errors, l.failure)
	}
	return res, nil
}
