package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/dualwrite"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
	"github.com/tandemhq/tandem/throttle"
)

// Backfill is `tandem bench backfill`: the online backfill that a pod
// entering shadow runs. Holds active holds are written into a scratch
// Redis as a legacy pod has them, buyers reserve and release through the
// router at Rate, and the copy into a scratch MySQL runs meanwhile; the
// stores must converge afterwards.
type Backfill struct {
	Holds int
	// Shops the holds are spread over (one position each).
	Shops int
	// Rate is buyer operations per second (a reserve then its release).
	Rate int
	// Warmup is the buyers' measurement before the copy.
	Warmup   time.Duration
	MySQLDSN string
	Redis    Redis
	// NoThrottle runs the copy without the pod's throttle (the default
	// throttle otherwise, as `tandem serve` runs it).
	NoThrottle bool
	// MaxBuyerP99, when set, replaces the throttle's default limit on the
	// buyers' p99 (throttle.max_buyer_p99).
	MaxBuyerP99 time.Duration
	// BatchHolds and Workers, when set, replace the copy's defaults
	// (backfill.batch_holds, backfill.workers).
	BatchHolds, Workers int
	// Audit, after the copy, audits the pod in shadow while buyers run
	// (AuditResult).
	Audit bool
}

// BackfillResult is one run of the backfill bench.
type BackfillResult struct {
	Suite        string  `json:"suite"`
	Holds        int     `json:"holds"`
	Shops        int     `json:"shops"`
	CopySeconds  float64 `json:"copy_seconds"`
	HoldsPerSec  float64 `json:"holds_per_sec"`
	ListSeconds  float64 `json:"list_seconds"`
	WriteSeconds float64 `json:"write_seconds"`
	CatchUpSecs  float64 `json:"catch_up_seconds"`
	// CatchUp is the copy's catch-up: swept, or skipped (no write was
	// admitted during the copy).
	CatchUp     string  `json:"catch_up"`
	BuyerRate   int     `json:"buyer_rate"`
	BeforeOps   int     `json:"before_ops"`
	BeforeP50MS float64 `json:"before_p50_ms"`
	BeforeP99MS float64 `json:"before_p99_ms"`
	DuringOps   int     `json:"during_ops"`
	DuringP50MS float64 `json:"during_p50_ms"`
	DuringP99MS float64 `json:"during_p99_ms"`
	// WriteP99MS and CatchUpP99MS split DuringP99MS by the copy's phase:
	// its batches, then its catch-up.
	WriteP99MS   float64 `json:"write_p99_ms"`
	CatchUpP99MS float64 `json:"catch_up_p99_ms"`
	BuyerErrors  int64   `json:"buyer_errors"`
	Converged    bool    `json:"converged"`
	// Throttle says whether the pod's default throttle ran;
	// ThrottledSeconds is how long the copy (its batches and its
	// catch-up's pages) waited for it, by reason.
	Throttle         bool               `json:"throttle"`
	ThrottledSeconds map[string]float64 `json:"throttled_seconds,omitempty"`
	// ConnHoldMeanMS and ConnHoldP99MS are each MySQL flow's connection
	// hold during the copy, by conn_tag (rebuild: one batch; audit: one
	// page of the catch-up's listing).
	ConnHoldMeanMS map[string]float64 `json:"conn_hold_mean_ms,omitempty"`
	ConnHoldP99MS  map[string]float64 `json:"conn_hold_p99_ms,omitempty"`
	// Audit is the audit of the pod after the copy, with --audit.
	Audit *AuditResult `json:"audit,omitempty"`
	// ConvergeError says why the stores did not converge.
	ConvergeError string `json:"-"`
	// Run describes the run, in the JSON only.
	Run *RunInfo `json:"run,omitempty"`
}

// PrintBackfill prints the run, or its JSON.
func PrintBackfill(w io.Writer, run *RunInfo, res BackfillResult, asJSON bool) error {
	if asJSON {
		res.Run = run
		return json.NewEncoder(w).Encode(res)
	}
	fmt.Fprintf(w, "backfill of %d holds over %d shops: %.2fs, %.0f holds/s (list %.2fs, write %.2fs, catch-up %.2fs, %s)\n",
		res.Holds, res.Shops, res.CopySeconds, res.HoldsPerSec, res.ListSeconds, res.WriteSeconds, res.CatchUpSecs, res.CatchUp)
	if res.BuyerRate == 0 {
		fmt.Fprintln(w, "no buyers (a quiet pod)")
	} else {
		fmt.Fprintf(w, "buyers at %d/s: before p50 %.2f ms p99 %.2f ms (%d ops); during p50 %.2f ms p99 %.2f ms (%d ops; write p99 %.2f ms, catch-up p99 %.2f ms); p99 ratio %.2fx; %d errors\n",
			res.BuyerRate, res.BeforeP50MS, res.BeforeP99MS, res.BeforeOps, res.DuringP50MS, res.DuringP99MS, res.DuringOps,
			res.WriteP99MS, res.CatchUpP99MS, res.DuringP99MS/max(res.BeforeP99MS, 1e-9), res.BuyerErrors)
	}
	if res.Throttle {
		fmt.Fprintf(w, "throttle: default; the copy waited %s\n", reasonsText(res.ThrottledSeconds))
	} else {
		fmt.Fprintln(w, "throttle: none")
	}
	if len(res.ConnHoldMeanMS) > 0 {
		fmt.Fprintf(w, "connection hold per batch or page during the copy: %s\n", holdText(res.ConnHoldMeanMS, res.ConnHoldP99MS))
	}
	if a := res.Audit; a != nil {
		printAudit(w, *a)
	}
	if !res.Converged {
		fmt.Fprintf(w, "stores did not converge: %s\n", res.ConvergeError)
	} else {
		fmt.Fprintln(w, "stores converged hold by hold after the copy")
	}
	return nil
}

// backfillStores are the scratch stores and the router of a backfill run.
type backfillStores struct {
	env    *env
	reg    *prometheus.Registry
	th     *throttle.Throttle
	my     *mysqlres.Store
	rs     *redisres.Store
	modes  *fixedMode
	router *dualwrite.Router
	closed []func()
}

func (s *backfillStores) close() {
	for i := len(s.closed) - 1; i >= 0; i-- {
		s.closed[i]()
	}
}

func openBackfillStores(ctx context.Context, mysqlDSN string, rt Redis, throttled bool, maxBuyerP99 time.Duration) (*backfillStores, error) {
	e, err := newEnv(ctx, mysqlDSN, 0, rt)
	if err != nil {
		return nil, err
	}
	s := &backfillStores{env: e, closed: []func(){e.close}, reg: prometheus.NewRegistry()}
	s.my = mysqlres.NewStore(e.dsn)
	s.my.Registerer = s.reg
	if throttled {
		if s.th, err = throttle.New("bench", throttle.Config{MaxBuyerP99: maxBuyerP99}, s.reg); err != nil {
			s.close()
			return nil, err
		}
		s.th.ThreadsRunning = s.my.ThreadsRunning
		s.my.Admissions = s.th
	}
	if err := s.my.Open(ctx); err != nil {
		s.close()
		return nil, err
	}
	s.closed = append(s.closed, func() { s.my.Close() })
	if err := s.my.Migrate(ctx); err != nil {
		s.close()
		return nil, err
	}
	s.rs = redisres.NewStore(e.rdb, s.my.Ledger())
	s.rs.Prefix = e.prefix
	if err := s.rs.Open(ctx); err != nil {
		s.close()
		return nil, err
	}
	s.closed = append(s.closed, func() { s.rs.Close() })
	s.modes = &fixedMode{}
	s.modes.set(tandem.ModeRedis)
	shopSet, _ := tandem.ParseShopSet([]string{"1-1000000000"})
	s.router = dualwrite.NewRouter("bench", shopSet, s.rs, s.my)
	s.router.Ledger, s.router.Modes, s.router.Dirty = s.my.Ledger(), s.modes, s.my
	if s.th != nil {
		s.router.Throttle, s.router.Buyers = s.th, s.th
	}
	if err := s.router.Open(); err != nil {
		s.close()
		return nil, err
	}
	s.closed = append(s.closed, func() { s.router.Close() })
	return s, nil
}

// legacyHolds writes the holds into Redis as a legacy pod has them.
func (b *Backfill) legacyHolds(ctx context.Context, s *backfillStores, progress io.Writer) error {
	fmt.Fprintf(progress, "bench backfill: writing %d holds over %d shops into Redis\n", b.Holds, b.Shops)
	return writeLegacyHolds(ctx, s.rs, b.Holds, b.Shops, func(ctx context.Context, k tandem.Key, v int64) error {
		_, err := s.router.SetOnHand(ctx, k, v)
		return err
	})
}

// writeLegacyHolds writes holds one-unit holds over shops shops (item 1,
// group 1 of each) into rs as a legacy pod has them, each position's
// on_hand set first through setOnHand with room for buyers.
func writeLegacyHolds(ctx context.Context, rs *redisres.Store, holds, shops int, setOnHand func(context.Context, tandem.Key, int64) error) error {
	perShop := (holds + shops - 1) / shops
	exp := time.Now().Add(time.Hour)
	hs := make([]tandem.Reservation, 0, holds)
	for shop := int64(1); shop <= int64(shops); shop++ {
		if err := setOnHand(ctx, tandem.Key{ShopID: shop, ItemID: 1, GroupID: 1}, int64(2*perShop+100)); err != nil {
			return err
		}
		for c := 0; c < perShop && len(hs) < holds; c++ {
			hs = append(hs, tandem.Reservation{ShopID: shop, CartToken: fmt.Sprintf("legacy-%d", c),
				Status: tandem.StatusReserved, ExpiresAt: exp, Lines: []tandem.Line{{ItemID: 1, Quantity: 1, GroupID: 1}}})
		}
	}
	_, err := rs.Rebuild(ctx, hs)
	return err
}

// Phases of the buyers' latencies.
const (
	phaseAfter   = 2
	phaseCatchUp = 3
)

// backfillBuyers reserve and release at a steady rate; their latencies are
// kept per phase (0 before the copy, 1 during, 2 after, 3 during the
// copy's catch-up: part of "during" too).
type backfillBuyers struct {
	// prefix starts every cart token of this run of buyers: a token of an
	// earlier run, released, cannot be reserved again.
	prefix string
	phase  atomic.Int32
	errs   atomic.Int64
	mu     sync.Mutex
	lat    [4][]time.Duration
	stop   chan struct{}
	wg     sync.WaitGroup
}

func (l *backfillBuyers) run(ctx context.Context, r *dualwrite.Router, rate, shops int) {
	l.stop = make(chan struct{})
	if rate == 0 {
		return // a quiet pod
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				shop := int64(1 + (n*7919)%shops)
				token := fmt.Sprintf("%sbuyer-%d", l.prefix, n)
				ph := l.phase.Load()
				start := time.Now()
				_, err := r.Reserve(ctx, tandem.ReserveRequest{CartToken: token, ShopID: shop,
					Lines: []tandem.LineRequest{{ItemID: 1, Quantity: 1, GroupIDs: []int64{1}}}})
				d := time.Since(start)
				if err == nil {
					_, err = r.Release(ctx, shop, token)
				}
				if err != nil {
					l.errs.Add(1)
				}
				l.mu.Lock()
				l.lat[ph] = append(l.lat[ph], d)
				l.mu.Unlock()
			}()
		}
	}()
}

func (l *backfillBuyers) halt() {
	l.phase.Store(phaseAfter)
	close(l.stop)
	l.wg.Wait()
}

// Run writes the legacy holds, starts the buyers, runs the backfill and
// waits for the stores to converge.
func (b *Backfill) Run(ctx context.Context, progress io.Writer) (BackfillResult, error) {
	res := BackfillResult{Suite: "backfill", Shops: b.Shops, BuyerRate: b.Rate, Throttle: !b.NoThrottle}
	s, err := openBackfillStores(ctx, b.MySQLDSN, b.Redis, !b.NoThrottle, b.MaxBuyerP99)
	if err != nil {
		return res, err
	}
	defer s.close()
	s.router.BackfillBatch, s.router.BackfillWorkers = b.BatchHolds, b.Workers
	if err := b.legacyHolds(ctx, s, progress); err != nil {
		return res, err
	}
	l := &backfillBuyers{}
	l.run(ctx, s.router, b.Rate, b.Shops)
	if b.Rate > 0 {
		time.Sleep(b.Warmup)
	}
	l.phase.Store(1)
	holdsBefore := gatherHolds(s.reg)
	start := time.Now()
	marks := watchPhases(s.router, start, l)
	n, err := s.router.Backfill(ctx)
	took := time.Since(start)
	copyHolds := gatherHolds(s.reg).since(holdsBefore)
	marks.stop()
	l.halt()
	if err != nil {
		return res, err
	}
	s.modes.set(tandem.ModeShadow)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	_, cerr := s.router.Converged(cctx)
	cancel()

	res.Holds, res.CopySeconds, res.HoldsPerSec = n, took.Seconds(), float64(n)/took.Seconds()
	res.BuyerErrors, res.Converged = l.errs.Load(), cerr == nil
	if cerr != nil {
		res.ConvergeError = cerr.Error()
	}
	copyAt, _ := marks.at("copy")
	res.ListSeconds = copyAt.Seconds()
	if at, ok := marks.at("catch_up"); ok {
		res.WriteSeconds, res.CatchUpSecs = (at - copyAt).Seconds(), (took - at).Seconds()
	} else {
		res.WriteSeconds = (took - copyAt).Seconds() // no catch-up (dualwrite.CatchUpSkipped)
	}
	if pr := s.router.BackfillProgress(); pr != nil {
		res.CatchUp = pr.CatchUp
	}
	l.latencies(&res)
	res.ThrottledSeconds = throttledByReason(s.reg, tandem.JobBackfill)
	res.ConnHoldMeanMS, res.ConnHoldP99MS = copyHolds.meansMS(), copyHolds.quantilesMS(0.99)
	if b.Audit && res.Converged {
		a, err := b.audit(ctx, s)
		if err != nil {
			return res, err
		}
		res.Audit = &a
	}
	return res, nil
}

// phaseMarks records when a backfill entered each of its phases.
type phaseMarks struct {
	mu     sync.Mutex
	marks  map[string]time.Duration
	done   chan struct{}
	exited chan struct{}
}

// watchPhases polls r's backfill progress from start until stop, and moves
// the buyers' latencies to the catch-up phase when it begins.
func watchPhases(r *dualwrite.Router, start time.Time, l *backfillBuyers) *phaseMarks {
	m := &phaseMarks{marks: map[string]time.Duration{}, done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(m.exited)
		for {
			select {
			case <-m.done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if pr := r.BackfillProgress(); pr != nil {
				m.mu.Lock()
				if _, ok := m.marks[pr.Phase]; !ok {
					m.marks[pr.Phase] = time.Since(start)
					if pr.Phase == "catch_up" {
						l.phase.Store(phaseCatchUp)
					}
				}
				m.mu.Unlock()
			}
		}
	}()
	return m
}

// stop ends the watch.
func (m *phaseMarks) stop() {
	close(m.done)
	<-m.exited
}

// at returns when the backfill entered phase, and whether it did.
func (m *phaseMarks) at(phase string) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.marks[phase]
	return d, ok
}

// latencies fills in res the buyers' figures before and during the copy.
func (l *backfillBuyers) latencies(res *BackfillResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	during := append(slices.Clone(l.lat[1]), l.lat[phaseCatchUp]...)
	res.BeforeOps, res.DuringOps = len(l.lat[0]), len(during)
	res.BeforeP50MS, res.BeforeP99MS = ms(quantileOf(l.lat[0], 0.5)), ms(quantileOf(l.lat[0], 0.99))
	res.DuringP50MS, res.DuringP99MS = ms(quantileOf(during, 0.5)), ms(quantileOf(during, 0.99))
	res.WriteP99MS, res.CatchUpP99MS = ms(quantileOf(l.lat[1], 0.99)), ms(quantileOf(l.lat[phaseCatchUp], 0.99))
}

func quantileOf(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// fixedMode is a ModeSource for the benches' own routers.
type fixedMode struct{ m atomic.Value }

func (f *fixedMode) set(m tandem.Mode) { f.m.Store(m) }

// Mode implements dualwrite.ModeSource.
func (f *fixedMode) Mode(string) tandem.Mode { return f.m.Load().(tandem.Mode) }
