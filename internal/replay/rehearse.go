package replay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/capture"
	"github.com/tandemhq/tandem/internal/scratch"
	"github.com/tandemhq/tandem/mysqlres"
)

// ErrNotScratch is a database given to replay that carries no scratch
// marker: a replay wipes the database it runs on, so it refuses one that
// may hold anything else.
var ErrNotScratch = errors.New("the database carries no scratch marker")

// DefaultServerDSN is the server on which a replay creates its scratch
// database when it is given none.
const DefaultServerDSN = "root@tcp(127.0.0.1:3306)/"

// Rehearsal replays a capture on the MySQL engine (mysqlres) with
// production settings, on a scratch database.
type Rehearsal struct {
	File *capture.File
	// MySQLDSN is the database to replay on; it must carry the scratch
	// marker (scratch.MarkerTable) and is wiped first. Empty: a scratch
	// database is created on ServerDSN and dropped after (unless Keep).
	MySQLDSN  string
	ServerDSN string
	Keep      bool
	// PoolCap, MaxOpenConns and MaxInflight are the engine's settings;
	// zero takes the engine's defaults, the production ones.
	PoolCap, MaxOpenConns, MaxInflight int
	// P99Max, when set, is the p99 every op must stay under for the
	// replay to hold.
	P99Max time.Duration
	// Progress receives the set-up's lines and a progress bar (optional).
	Progress io.Writer
}

// Run replays the capture once at speed.
func (h *Rehearsal) Run(ctx context.Context, speed float64) (*Result, error) {
	if speed <= 0 || math.IsInf(speed, 0) || math.IsNaN(speed) {
		return nil, fmt.Errorf("speed must be above 0, got %v", speed)
	}
	dsn, cleanup, err := h.database(ctx)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	clock := NewClock(h.File.Header.StartedAt, speed)
	reg := prometheus.NewRegistry()
	store := mysqlres.NewStore(dsn)
	if h.PoolCap > 0 {
		store.PoolCap = h.PoolCap
	}
	if h.MaxOpenConns > 0 {
		store.MaxOpenConns = h.MaxOpenConns
	}
	store.MaxInflight = h.MaxInflight
	store.Now = clock.Now
	store.Registerer = reg
	if err := store.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("migrate the scratch database: %w", err)
	}
	if err := store.Open(ctx); err != nil {
		return nil, fmt.Errorf("open the engine: %w", err)
	}
	defer store.Close()
	if err := h.load(ctx, store); err != nil {
		return nil, err
	}
	rctx, stopReaper := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { reap(rctx, store, clock) })
	run := Play(ctx, store, h.File.Ops, speed, clock, h.Progress)
	stopReaper()
	wg.Wait()
	res := run.Summarise()
	res.Capture, res.Pod = h.File.Header.ID, h.File.Header.Pod
	engineFigures(res, reg)
	vs, err := store.CheckInvariants(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("check the engine's invariants: %w", err)
	}
	if vs != nil {
		res.Violations = vs
	}
	res.judge(h.P99Max)
	return res, nil
}

// FindMax replays at speed, then at twice the speed, and so on (at most
// steps replays) until one does not hold; it returns every result and the
// largest speed that held (0 when none did).
func (h *Rehearsal) FindMax(ctx context.Context, speed float64, steps int) ([]*Result, float64, error) {
	var out []*Result
	best := 0.0
	for i := 0; i < steps && ctx.Err() == nil; i++ {
		if h.Progress != nil {
			fmt.Fprintf(h.Progress, "find-max: speed %gx\n", speed)
		}
		res, err := h.Run(ctx, speed)
		if err != nil {
			return out, best, err
		}
		out = append(out, res)
		if !res.Held {
			break
		}
		best = speed
		speed *= 2
	}
	return out, best, nil
}

// database returns the DSN of the database to replay on, marked and empty,
// and what to do when done.
func (h *Rehearsal) database(ctx context.Context) (string, func(), error) {
	if h.MySQLDSN != "" {
		cfg, err := mysql.ParseDSN(h.MySQLDSN)
		if err != nil {
			return "", nil, fmt.Errorf("--mysql: %w", err)
		}
		if cfg.DBName == "" {
			return "", nil, fmt.Errorf("--mysql names no database")
		}
		cfg.ParseTime = true
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return "", nil, err
		}
		defer db.Close()
		ok, err := scratch.Marked(ctx, db)
		if err != nil {
			return "", nil, fmt.Errorf("database %s: %w", cfg.DBName, err)
		}
		if !ok {
			return "", nil, fmt.Errorf("%w: database %s has no table %s; a replay wipes the database it runs on, so it runs only on a scratch one (leave --mysql out and it makes one)",
				ErrNotScratch, cfg.DBName, scratch.MarkerTable)
		}
		if err := scratch.Wipe(ctx, db); err != nil {
			return "", nil, err
		}
		return cfg.FormatDSN(), func() {}, nil
	}
	server := h.ServerDSN
	if server == "" {
		server = DefaultServerDSN
	}
	d, err := scratch.CreateDatabase(ctx, server, scratch.Name("tandem_replay_"))
	if err != nil {
		return "", nil, err
	}
	db, err := sql.Open("mysql", d.DSN)
	if err == nil {
		err = scratch.Mark(ctx, db, "created by tandem replay")
		db.Close()
	}
	if err != nil {
		d.Drop(context.WithoutCancel(ctx))
		return "", nil, err
	}
	if h.Progress != nil {
		fmt.Fprintf(h.Progress, "replay: scratch database %s on %s\n", d.Name, d.Addr)
	}
	return d.DSN, func() {
		if h.Keep {
			return
		}
		d.Drop(context.WithoutCancel(ctx))
	}, nil
}

// load sets the capture's start positions and holds in the engine.
func (h *Rehearsal) load(ctx context.Context, store *mysqlres.Store) error {
	hd := h.File.Header
	for _, p := range hd.Positions {
		if _, err := store.SetOnHand(ctx, p.Key, p.OnHand); err != nil {
			return fmt.Errorf("load position %+v: %w", p.Key, err)
		}
	}
	placed := 0
	for _, hold := range hd.Holds {
		if !hold.ExpiresAt.After(hd.StartedAt) {
			continue
		}
		_, err := store.Place(ctx, tandem.Reservation{CartToken: hold.CartToken, ShopID: hold.ShopID,
			Status: tandem.StatusReserved, ExpiresAt: hold.ExpiresAt, Lines: hold.Lines})
		if err != nil {
			return fmt.Errorf("load hold %s: %w", hold.CartToken, err)
		}
		placed++
	}
	if h.Progress != nil {
		fmt.Fprintf(h.Progress, "replay: loaded %d positions and %d holds of %s at %s\n", len(hd.Positions), placed, hd.Pod,
			hd.StartedAt.Format(time.RFC3339))
	}
	return nil
}

// reap returns expired holds to stock as the server's reaper does, on the
// replay's clock.
func reap(ctx context.Context, store tandem.ReservationStore, clock *Clock) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for {
				n, err := store.ExpireDue(ctx, clock.Now(), 500)
				if err != nil || n < 500 {
					break
				}
			}
		}
	}
}

// Names of the engine's metrics the report reads.
const (
	connHoldMetric = "tandem_mysql_conn_hold_seconds"
	retriesMetric  = "tandem_mysql_tx_retries_total"
	slowMetric     = "tandem_mysql_reserve_slow_total"
)

// engineFigures reads the engine's connection holds, retries and
// slow-path count from its registry.
func engineFigures(res *Result, g prometheus.Gatherer) {
	mfs, err := g.Gather()
	if err != nil {
		return
	}
	res.ConnHoldMS, res.Retries = map[string]Hold{}, map[string]float64{}
	var slow float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			tag := ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "conn_tag" {
					tag = lp.GetValue()
				}
			}
			switch mf.GetName() {
			case connHoldMetric:
				hg := m.GetHistogram()
				if hg.GetSampleCount() > 0 {
					res.ConnHoldMS[tag] = Hold{Count: hg.GetSampleCount(), MeanMS: hg.GetSampleSum() / float64(hg.GetSampleCount()) * 1000,
						P99MS: histQuantile(hg, .99) * 1000}
				}
			case retriesMetric:
				if v := m.GetCounter().GetValue(); v > 0 {
					res.Retries[tag] = v
				}
			case slowMetric:
				slow += m.GetCounter().GetValue()
			}
		}
	}
	for _, s := range res.PerOp {
		if s.Op == tandem.OpReserve && s.Count > 0 {
			res.SlowPathShare = slow / float64(s.Count)
		}
	}
}

// histQuantile estimates a quantile of a Prometheus histogram as
// histogram_quantile does: linear within its bucket.
func histQuantile(h *dto.Histogram, q float64) float64 {
	bs := h.GetBucket()
	rank := q * float64(h.GetSampleCount())
	i := sort.Search(len(bs), func(i int) bool { return float64(bs[i].GetCumulativeCount()) >= rank })
	if i == len(bs) {
		if len(bs) == 0 {
			return 0
		}
		return bs[len(bs)-1].GetUpperBound()
	}
	lower, below := 0.0, uint64(0)
	if i > 0 {
		lower, below = bs[i-1].GetUpperBound(), bs[i-1].GetCumulativeCount()
	}
	in := float64(bs[i].GetCumulativeCount() - below)
	if in == 0 {
		return bs[i].GetUpperBound()
	}
	return lower + (bs[i].GetUpperBound()-lower)*(rank-float64(below))/in
}
