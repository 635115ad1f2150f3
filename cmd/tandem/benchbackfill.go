package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/dualwrite"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

const (
	benchBackfillSynopsis = "tandem bench backfill [FLAGS]"
	benchBackfillSummary  = `Measures the online backfill that a pod entering shadow runs: --holds active
holds are written into a scratch Redis as a legacy pod has them, buyers
reserve and release through the router at --rate, and the copy into a
scratch MySQL runs meanwhile. Prints holds/s, the phases' durations and the
buyers' p50/p99 before and during the copy, then checks that the stores
converge.`
)

// backfillResult is one run of the backfill bench.
type backfillResult struct {
	Suite        string  `json:"suite"`
	Holds        int     `json:"holds"`
	Shops        int     `json:"shops"`
	CopySeconds  float64 `json:"copy_seconds"`
	HoldsPerSec  float64 `json:"holds_per_sec"`
	ListSeconds  float64 `json:"list_seconds"`
	WriteSeconds float64 `json:"write_seconds"`
	CatchUpSecs  float64 `json:"catch_up_seconds"`
	BuyerRate    int     `json:"buyer_rate"`
	BeforeOps    int     `json:"before_ops"`
	BeforeP50MS  float64 `json:"before_p50_ms"`
	BeforeP99MS  float64 `json:"before_p99_ms"`
	DuringOps    int     `json:"during_ops"`
	DuringP50MS  float64 `json:"during_p50_ms"`
	DuringP99MS  float64 `json:"during_p99_ms"`
	BuyerErrors  int64   `json:"buyer_errors"`
	Converged    bool    `json:"converged"`
}

func runBenchBackfill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tandem bench backfill")
	holds := fs.Int("holds", 50000, "active holds to copy")
	shops := fs.Int("shops", 200, "shops the holds are spread over (one position each)")
	rate := fs.Int("rate", 400, "buyer operations per second (a reserve then its release) during the run")
	warmup := fs.Duration("warmup", 2*time.Second, "buyers' measurement before the copy")
	dsn := fs.String("mysql-dsn", "root@tcp(127.0.0.1:3306)/", "MySQL server (a scratch database is created and dropped)")
	raddr := fs.String("redis-addr", "127.0.0.1:6379", "Redis server (a scratch key prefix is used and deleted)")
	js := fs.Bool("json", false, "print JSON")
	if err := parseArgs(fs, args, benchBackfillSynopsis, benchBackfillSummary, stdout); err != nil {
		return err
	}
	if *holds < 1 || *shops < 1 || *rate < 1 || *warmup <= 0 {
		fmt.Fprintln(stderr, "--holds, --shops, --rate and --warmup must be positive")
		return errUsage
	}
	env, err := newBenchEnv(ctx, &engineBench{mysqlDSN: *dsn, redis: newBenchRedis(*raddr, "")})
	if err != nil {
		return err
	}
	defer env.close()
	my := mysqlres.NewStore(env.dsn)
	if err := my.Open(ctx); err != nil {
		return err
	}
	defer my.Close()
	if err := my.Migrate(ctx); err != nil {
		return err
	}
	rs := redisres.NewStore(env.rdb, my.Ledger())
	rs.Prefix = env.prefix
	if err := rs.Open(ctx); err != nil {
		return err
	}
	defer rs.Close()
	modes := &fixedMode{}
	modes.set(tandem.ModeRedis)
	shopSet, _ := tandem.ParseShopSet([]string{"1-1000000000"})
	r := dualwrite.NewRouter("bench", shopSet, rs, my)
	r.Ledger = my.Ledger()
	r.Modes = modes
	r.Dirty = my
	if err := r.Open(); err != nil {
		return err
	}
	defer r.Close()

	perShop := (*holds + *shops - 1) / *shops
	fmt.Fprintf(stderr, "bench backfill: writing %d holds over %d shops into Redis\n", *holds, *shops)
	exp := time.Now().Add(time.Hour)
	var hs []tandem.Reservation
	for shop := int64(1); shop <= int64(*shops); shop++ {
		if _, err := r.SetOnHand(ctx, tandem.Key{ShopID: shop, ItemID: 1, GroupID: 1}, int64(2*perShop+100)); err != nil {
			return err
		}
		for c := 0; c < perShop && len(hs) < *holds; c++ {
			hs = append(hs, tandem.Reservation{ShopID: shop, CartToken: fmt.Sprintf("legacy-%d", c),
				Status: tandem.StatusReserved, ExpiresAt: exp, Lines: []tandem.Line{{ItemID: 1, Quantity: 1, GroupID: 1}}})
		}
	}
	if _, err := rs.Rebuild(ctx, hs); err != nil {
		return err
	}

	// Buyers at a steady rate, measured before and during the copy.
	var phase atomic.Int32 // 0 before, 1 during, 2 after
	var errs atomic.Int64
	var mu sync.Mutex
	lat := [3][]time.Duration{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	defer tick.Stop()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				shop := int64(1 + (n*7919)%*shops)
				token := fmt.Sprintf("buyer-%d", n)
				ph := phase.Load()
				start := time.Now()
				_, err := r.Reserve(ctx, tandem.ReserveRequest{CartToken: token, ShopID: shop,
					Lines: []tandem.LineRequest{{ItemID: 1, Quantity: 1, GroupIDs: []int64{1}}}})
				d := time.Since(start)
				if err == nil {
					_, err = r.Release(ctx, shop, token)
				}
				if err != nil {
					errs.Add(1)
				}
				mu.Lock()
				lat[ph] = append(lat[ph], d)
				mu.Unlock()
			}()
		}
	}()
	time.Sleep(*warmup)
	phase.Store(1)
	start := time.Now()
	marks := map[string]time.Duration{}
	watch := make(chan struct{})
	go func() {
		for {
			select {
			case <-watch:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if pr := r.BackfillProgress(); pr != nil {
				if _, ok := marks[pr.Phase]; !ok {
					mu.Lock()
					marks[pr.Phase] = time.Since(start)
					mu.Unlock()
				}
			}
		}
	}()
	n, err := r.Backfill(ctx)
	took := time.Since(start)
	close(watch)
	phase.Store(2)
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	modes.set(tandem.ModeShadow)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	_, cerr := r.Converged(cctx)
	cancel()

	mu.Lock()
	defer mu.Unlock()
	res := backfillResult{Suite: "backfill", Holds: n, Shops: *shops, CopySeconds: took.Seconds(),
		HoldsPerSec: float64(n) / took.Seconds(), BuyerRate: *rate, BuyerErrors: errs.Load(), Converged: cerr == nil,
		BeforeOps: len(lat[0]), DuringOps: len(lat[1])}
	res.ListSeconds = marks["copy"].Seconds()
	res.WriteSeconds = (marks["catch_up"] - marks["copy"]).Seconds()
	res.CatchUpSecs = (took - marks["catch_up"]).Seconds()
	res.BeforeP50MS, res.BeforeP99MS = ms(quantileOf(lat[0], 0.5)), ms(quantileOf(lat[0], 0.99))
	res.DuringP50MS, res.DuringP99MS = ms(quantileOf(lat[1], 0.5)), ms(quantileOf(lat[1], 0.99))
	if *js {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "backfill of %d holds over %d shops: %.2fs, %.0f holds/s (list %.2fs, write %.2fs, catch-up %.2fs)\n",
		res.Holds, res.Shops, res.CopySeconds, res.HoldsPerSec, res.ListSeconds, res.WriteSeconds, res.CatchUpSecs)
	fmt.Fprintf(stdout, "buyers at %d/s: before p50 %.2f ms p99 %.2f ms (%d ops); during p50 %.2f ms p99 %.2f ms (%d ops); p99 ratio %.2fx; %d errors\n",
		*rate, res.BeforeP50MS, res.BeforeP99MS, res.BeforeOps, res.DuringP50MS, res.DuringP99MS, res.DuringOps,
		res.DuringP99MS/max(res.BeforeP99MS, 1e-9), res.BuyerErrors)
	if cerr != nil {
		fmt.Fprintf(stdout, "stores did not converge: %v\n", cerr)
	} else {
		fmt.Fprintln(stdout, "stores converged hold by hold after the copy")
	}
	return nil
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
