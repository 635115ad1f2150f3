package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/pprof"
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
// (the persisted mode survives, as in production) so that the comparator's
// window, hence the report's shadow latency, holds that cell's traffic
// only. With Remote it drives that running server; the report's latencies
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
}

// PrintHTTPResults prints the engine bench's table plus a shadow line per
// cell, or the JSON.
func PrintHTTPResults(w io.Writer, results []HTTPResult, asJSON bool) error {
	if asJSON {
		return printJSON(w, results)
	}
	plain := make([]Result, len(results))
	for i, r := range results {
		plain[i] = r.Result
	}
	if err := PrintResults(w, plain, false); err != nil {
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
		fmt.Fprintf(w, "shadow of %s at %s: p99 %.2f ms, drops %d, timeouts %d%s\n",
			r.Mode, load, r.ShadowP99MS, r.ShadowDrops, r.ShadowTimeouts, killed)
	}
	return nil
}

// Run measures every mode; progress receives a line per cell.
func (b *HTTP) Run(ctx context.Context, progress io.Writer) ([]HTTPResult, error) {
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
	// Fresh item ids per run and per cell: the hot item is stocked anew
	// before each cell and never sells out, and a running server's other
	// inventory is left alone.
	run := fmt.Sprintf("%x", rand.Uint32())
	itemBase := int64(1_000_000 + rand.IntN(1_000_000_000))
	var results []HTTPResult
	for cellNo, mode := range b.Modes {
		if t.restart != nil && cellNo > 0 {
			if err := t.restart(ctx); err != nil {
				return results, err
			}
		}
		load := fmt.Sprintf("C=%d", b.Concurrency)
		if b.Rate > 0 {
			load = fmt.Sprintf("rate=%.0f/s", b.Rate)
		}
		fmt.Fprintf(progress, "bench http: %s %s for %s...\n", mode, load, b.Duration)
		c := newClient(t, b.Concurrency)
		r, err := b.cell(ctx, c, progress, mode, fmt.Sprintf("%s-%d", run, cellNo), itemBase+int64(cellNo*b.Items))
		c.close()
		if err != nil {
			return results, fmt.Errorf("%s: %w", mode, err)
		}
		results = append(results, r)
	}
	return results, nil
}

type reserveLine struct {
	ItemID   int64   `json:"inventory_item_id"`
	Quantity int64   `json:"quantity"`
	GroupIDs []int64 `json:"group_ids"`
}

type reserveBody struct {
	CartToken string        `json:"cart_token"`
	ShopID    int64         `json:"shop_id"`
	Lines     []reserveLine `json:"lines"`
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

func (l *buyers) op(phase string) loadgen.Op {
	b, url := l.b, "http://"+l.c.t.checkout+"/v1/reservations"
	return func(ctx context.Context, w int, seq int64) error {
		lines := cart(b.Items, b.CartSize, int64(w)+seq*int64(b.Concurrency))
		req := reserveBody{CartToken: fmt.Sprintf("bh-%s-%s-%d-%d", l.cellID, phase, w, seq), ShopID: b.Shop,
			Lines: make([]reserveLine, len(lines))}
		for i, ln := range lines {
			req.Lines[i] = reserveLine{ItemID: l.itemBase + ln.ItemID - 1, Quantity: ln.Quantity, GroupIDs: []int64{1}}
		}
		body, err := json.Marshal(req)
		if err != nil {
			return err
		}
		status, err := l.c.post(ctx, url, body)
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

func (b *HTTP) load(ctx context.Context, d time.Duration, op loadgen.Op) loadgen.Result {
	if b.Rate > 0 {
		return loadgen.Open(ctx, b.Rate, b.Concurrency, d, op)
	}
	return loadgen.Closed(ctx, b.Concurrency, d, op)
}

// cell measures one mode: set the mode, stock fresh items, warm up, run
// the measured load, then read the shadow's latency and drops.
func (b *HTTP) cell(ctx context.Context, c *client, progress io.Writer, mode tandem.Mode, cellID string, itemBase int64) (HTTPResult, error) {
	res := HTTPResult{Result: Result{Suite: "http", Mode: string(mode), Items: b.Items, CartSize: b.CartSize,
		Concurrency: b.Concurrency, Rate: b.Rate}, Rate: b.Rate}
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
		b.load(ctx, b.Warmup, l.op("w"))
	}
	before, err := c.settledReport(ctx)
	if err != nil {
		return res, err
	}
	l.refused.Store(0)
	gather := c.t.metrics // nil for a remote server: no hold figures
	holdsBefore := gatherHoldsOf(gather)
	cpuBefore := processCPU()
	lr := b.load(ctx, b.Duration, l.op("m"))
	res.perOp(cpuBefore, processCPU(), lr.Ops)
	if err := ctx.Err(); err != nil {
		return res, err
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
