package dualwrite

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
)

// Online backfill. A pod entering shadow needs MySQL to hold what Redis
// holds, or every comparison would be wrong for holds MySQL never saw. The
// copy runs while buyers are served: the router first writes MySQL as the
// shadow of every new operation (following), then copies the active Redis
// holds a batch of shops at a time (each batch one short transaction on
// that batch's ledger rows alone), then sweeps the two stores hold by hold
// and converges what changed during the copy. Nothing pauses the pod's
// requests.
//
// A batch's holds are read from Redis once the batch's shadow work is
// paused, just before they are written (when Redis can list some shops):
// the shadow work that reached MySQL before the pause is then in what is
// copied, and what comes after waits for the copy. A list read at the
// start would be stale by the time its batch is written: it would put back
// a hold the buyer released or claimed since (its end already followed into
// MySQL) and drop one taken since (already copied by the shadow), leaving
// the catch-up sweep to find them before the pod flips.

// Bulk copy. The copy is cut into batches of about BackfillBatch holds
// from the shops' hold counts (one pipelined count per shop, no hold read
// up front), each batch one short MySQL transaction of set-based
// statements (the ledger rows of its shops locked by range, its holds in a
// multi-row upsert and a multi-row insert of lines), BackfillWorkers
// batches at once on disjoint shops. The batches commit in any order; the
// checkpoint is the last shop below which every batch has committed, saved
// as it moves, so that a copy interrupted (its instance killed) starts
// again after it: the shops it had copied are left as they are, and what
// changed on them meanwhile is the catch-up's, as for every other change
// made during the copy.

// BackfillProgress is the state of a backfill, for the pod's transition.
type BackfillProgress struct {
	// Phase is "follow" (starting), "copy", "catch_up" or "done".
	Phase     string    `json:"phase"`
	Copied    int       `json:"copied"`
	Total     int       `json:"total"`
	StartedAt time.Time `json:"started_at"`
	// HoldsPerSec is the copy's rate since its first batch (of this run),
	// ETASeconds the rest of it at that rate.
	HoldsPerSec float64 `json:"holds_per_sec"`
	ETASeconds  float64 `json:"eta_seconds"`
	// Checkpoint is the last shop below which every batch has committed
	// (0: none yet); Resumed the holds an interrupted run had committed
	// when this one started after its checkpoint.
	Checkpoint int64 `json:"checkpoint,omitempty"`
	Resumed    int   `json:"resumed,omitempty"`
	// Batches is how many batches the copy has committed, of BatchesTotal.
	Batches      int `json:"batches"`
	BatchesTotal int `json:"batches_total"`
	// CatchUp is how the copy's catch-up runs (catchUp): CatchUpByCarts
	// (the CatchUpCarts carts written here during the copy, converged one
	// by one), CatchUpBySweep (both stores swept hold by hold) or
	// CatchUpSkipped (no write during the copy); "" until it starts.
	CatchUp      string `json:"catch_up,omitempty"`
	CatchUpCarts int    `json:"catch_up_carts,omitempty"`
	// YieldingToBuyers is true when the copy runs gently because the pod
	// serves buyers (gentle).
	YieldingToBuyers bool `json:"yielding_to_buyers,omitempty"`
	// Err is why the last backfill failed, if it did.
	Err string `json:"error,omitempty"`

	copyStart time.Time
}

// The values of BackfillProgress.CatchUp.
const (
	CatchUpByCarts = "carts"
	CatchUpBySweep = "swept"
	CatchUpSkipped = "skipped"
)

// rate fills HoldsPerSec and ETASeconds at now.
func (p *BackfillProgress) rate(now time.Time) {
	if p.copyStart.IsZero() {
		return
	}
	secs := now.Sub(p.copyStart).Seconds()
	if n := p.Copied - p.Resumed; n > 0 && secs > 0 {
		p.HoldsPerSec = float64(n) / secs
		p.ETASeconds = float64(max(p.Total-p.Copied, 0)) / p.HoldsPerSec
	}
}

// Defaults of Router.BackfillBatch and BackfillWorkers: a batch of a few
// thousand holds is two INSERTs and a commit, short enough for the pause of
// its shops' shadow work to go unnoticed; three at once keep MySQL busy
// while the next batches are read from Redis.
const (
	DefaultBackfillBatch   = 5000
	DefaultBackfillWorkers = 3
)

// A copy on a pod serving buyers (tandem.BuyerTraffic, asked when the
// copy starts) runs gently: one batch at a time of at most
// GentleBackfillBatch holds, each followed by a rest that keeps the copy
// busy GentleBackfillDuty of the time, and its catch-up's listings paced
// at GentleCatchUpDuty. The buyers' latency tail during a copy is made of
// the copy's bursts, however the throttle spaces them: three batches of
// 5,000 holds at once keep the machine's cores and the pod's MySQL busy
// for half a second, and an unpaced listing of every hold keeps Redis busy
// between the buyers' commands. Nor can the throttle's window (seconds of
// buyers' latencies) slow a copy that ends in two: batches back to back
// put the buyers' p99 at 4-6.6x its level before the copy, a quarter of
// the time at 2.6-3.2x, 15% of it at 2.2-2.6x (BENCHMARKS.md). A quiet
// pod copies at full speed.
const (
	GentleBackfillBatch = 1000
	GentleBackfillDuty  = 0.15
	GentleCatchUpDuty   = 0.5
)

// gentle reports whether a copy starting now should run gently.
func (mg *migrator) gentle() bool {
	bt, ok := mg.r.Throttle.(tandem.BuyerTraffic)
	return ok && bt.BuyersActive()
}

func (mg *migrator) backfillBatch() int {
	if mg.r.BackfillBatch > 0 {
		return mg.r.BackfillBatch
	}
	return DefaultBackfillBatch
}

func (mg *migrator) backfillWorkers() int {
	if mg.r.BackfillWorkers > 0 {
		return mg.r.BackfillWorkers
	}
	return DefaultBackfillWorkers
}

// progress is Router.BackfillProgress.
func (mg *migrator) progress() *BackfillProgress {
	mg.progressMu.Lock()
	defer mg.progressMu.Unlock()
	if mg.backfill == nil {
		return nil
	}
	p := *mg.backfill
	if p.Phase == "copy" {
		p.rate(mg.r.Now())
	}
	return &p
}

func (mg *migrator) setBackfill(f func(p *BackfillProgress)) {
	mg.progressMu.Lock()
	defer mg.progressMu.Unlock()
	f(mg.backfill)
}

// backfillFrom is Router.BackfillFrom.
func (mg *migrator) backfillFrom(ctx context.Context, from tandem.BackfillCheckpoint, save func(context.Context, tandem.BackfillCheckpoint) error) (int, error) {
	mg.backfillMu.Lock()
	defer mg.backfillMu.Unlock()
	ctx = tandem.WithThrottle(ctx, mg.r.Throttle, tandem.JobBackfill)
	mg.progressMu.Lock()
	mg.backfill = &BackfillProgress{Phase: "follow", StartedAt: mg.r.Now().UTC(), Checkpoint: from.Shop,
		Resumed: from.Copied, Copied: from.Copied}
	mg.progressMu.Unlock()
	n, err := mg.backfillRun(ctx, from, save)
	if err != nil {
		mg.followUntil.Store(0)
		mg.setBackfill(func(p *BackfillProgress) { p.Err = err.Error() })
		return n, err
	}
	if mg.r.Mode() == tandem.ModeRedis {
		mg.followUntil.Store(mg.r.Now().Add(mg.r.BackfillFollow).UnixNano())
	}
	now := mg.r.Now()
	mg.setBackfill(func(p *BackfillProgress) { p.rate(now); p.Phase, p.ETASeconds = "done", 0 })
	return n, nil
}

func (mg *migrator) backfillRun(ctx context.Context, from tandem.BackfillCheckpoint, save func(context.Context, tandem.BackfillCheckpoint) error) (int, error) {
	// Follow first: every operation admitted from now on writes MySQL too.
	// Those admitted before may still land in Redis alone, with no shadow
	// job to bring them into MySQL: the copy reads Redis once they have
	// (the catch-up sweep leaves a cart in flight to its operation's
	// shadow job, and they have none). Copying first, so that every
	// operation that follows is recorded for the catch-up (wrote).
	mg.startTouching()
	mg.inCopy.Store(true)
	defer func() {
		mg.inCopy.Store(false)
		mg.touchedCarts() // a copy that failed forgets its record
	}()
	mg.followUntil.Store(math.MaxInt64)
	if !mg.r.shadowIdle() {
		mg.wrote(nil) // shadow work under way, of carts not recorded: sweep
	}
	if err := mg.r.awaitUnshadowed(ctx); err != nil {
		return 0, err
	}
	counts, byShop, err := mg.backfillPlan(ctx)
	if err != nil {
		return 0, err
	}
	var shops []int64
	total := from.Copied
	for sh, n := range counts {
		if sh > from.Shop {
			shops = append(shops, sh)
			total += n
		}
	}
	sort.Slice(shops, func(i, j int) bool { return shops[i] < shops[j] })
	lister, _ := mg.r.Redis.(tandem.ShopLister)
	if lister != nil {
		// Each batch reads its shops from Redis when it pauses them: until
		// then their shadow work is left out (skipsShadow).
		defer mg.awaitCopy(shops)()
	}
	gentle := mg.gentle()
	mg.setBackfill(func(p *BackfillProgress) { p.YieldingToBuyers = gentle })
	copied, err := mg.copyShops(ctx, lister, shops, counts, byShop, from, total, save, gentle)
	if err != nil {
		return copied, err
	}
	if gentle {
		ctx = tandem.WithPace(ctx, GentleCatchUpDuty)
	}
	return copied, mg.catchUp(ctx, from)
}

// catchUp converges what changed in Redis during the copy: releases and
// claims racing a batch, shadow work dropped or failed (the worker has
// those), and on a resumed copy every change its first shops saw while no
// copy ran. What this instance changed is the carts of the operations it
// admitted during the copy (touchedCarts): each is converged from Redis in
// its line, after its own operations; a resumed copy, or one whose writes
// were not all recorded, sweeps both stores hold by hold. A fresh copy
// during which no write was admitted here has nothing to catch up: each
// batch read Redis as it wrote it. The writes of other instances (Redis
// alone until they see the pod in shadow, during the copy as after it)
// are the periodic sweep's, which runs while MySQL is followed. Listing
// every hold of both stores was a third of a quiet copy of 200,000 holds,
// and under buyers the longest burst of their latency.
func (mg *migrator) catchUp(ctx context.Context, from tandem.BackfillCheckpoint) error {
	carts, recorded := mg.touchedCarts()
	if from == (tandem.BackfillCheckpoint{}) && recorded {
		if len(carts) == 0 {
			mg.setBackfill(func(p *BackfillProgress) { p.CatchUp = CatchUpSkipped })
			return nil
		}
		mg.setBackfill(func(p *BackfillProgress) { p.Phase, p.CatchUp, p.CatchUpCarts = "catch_up", CatchUpByCarts, len(carts) })
		if err := mg.r.repair.convergeTouched(ctx, carts); err != nil {
			return fmt.Errorf("backfill: catch up: %w", err)
		}
		return nil
	}
	mg.setBackfill(func(p *BackfillProgress) { p.Phase, p.CatchUp = "catch_up", CatchUpBySweep })
	for pass := 0; pass < 3; pass++ {
		rep, err := mg.r.repair.sweep(ctx)
		if err != nil {
			return fmt.Errorf("backfill: catch up: %w", err)
		}
		if rep.Carts == 0 || rep.rewrote == 0 {
			// What still differs is in flight (the shadow path has it),
			// or differed only between the listings.
			break
		}
	}
	return nil
}

// backfillPlan returns how many holds each shop to copy has: every shop the
// ledger or Redis knows, so that a MySQL left from an earlier shadow period
// keeps no stale hold. Redis counts them when it can (byShop is then nil);
// else they are listed, and byShop has them.
func (mg *migrator) backfillPlan(ctx context.Context) (map[int64]int, map[int64][]tandem.Reservation, error) {
	counts := map[int64]int{}
	var byShop map[int64][]tandem.Reservation
	if hc, ok := mg.r.Redis.(tandem.HoldCounter); ok {
		c, err := hc.ShopHoldCounts(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("backfill: count redis holds: %w", err)
		}
		counts = c
	} else {
		holds, err := mg.r.Redis.ActiveHolds(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("backfill: list redis holds: %w", err)
		}
		byShop = map[int64][]tandem.Reservation{}
		for _, h := range holds {
			byShop[h.ShopID] = append(byShop[h.ShopID], h)
			counts[h.ShopID]++
		}
	}
	if mg.r.Ledger != nil {
		onHand, err := mg.r.Ledger.ListOnHand(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("backfill: ledger: %w", err)
		}
		for k := range onHand {
			if _, ok := counts[k.ShopID]; !ok {
				counts[k.ShopID] = 0
			}
		}
	}
	return counts, byShop, nil
}

// backfillBatch is a run of shops copied in one transaction.
type backfillBatch struct {
	shops []int64
	holds int // as counted when the copy was planned
}

// cutBatches cuts shops (in order) into batches of about size holds; a
// shop with more is a batch of its own.
func cutBatches(shops []int64, counts map[int64]int, size int) []backfillBatch {
	var batches []backfillBatch
	for i := 0; i < len(shops); {
		var b backfillBatch
		for i < len(shops) && (len(b.shops) == 0 || b.holds+counts[shops[i]] <= size) {
			b.shops = append(b.shops, shops[i])
			b.holds += counts[shops[i]]
			i++
		}
		batches = append(batches, b)
	}
	return batches
}

// checkpoints tracks the batches committed, in any order, and the last
// shop below which all are.
type checkpoints struct {
	mu      sync.Mutex
	batches []backfillBatch
	done    []int // holds copied per batch, -1 while not committed
	next    int   // first batch not committed
	at      tandem.BackfillCheckpoint
	// savedShop is the last checkpoint given to save.
	savedShop int64
}

// commit records batch i's n holds and returns the checkpoint, and
// whether it moved.
func (c *checkpoints) commit(i, n int) (tandem.BackfillCheckpoint, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done[i] = n
	moved := false
	for c.next < len(c.batches) && c.done[c.next] >= 0 {
		b := c.batches[c.next]
		c.at.Shop, c.at.Copied = b.shops[len(b.shops)-1], c.at.Copied+c.done[c.next]
		c.next++
		moved = true
	}
	return c.at, moved
}

// copyShops copies the holds of shops in batches (cutBatches) on
// BackfillWorkers connections at once (disjoint shops: disjoint rows), or
// gently (see GentleBackfillBatch), and says how many it copied,
// from.Copied included. With lister, each batch copies its shops' holds as
// Redis lists them once the batch's shadow work is paused; else byShop's.
// Every checkpoint reached goes to save.
func (mg *migrator) copyShops(ctx context.Context, lister tandem.ShopLister, shops []int64, counts map[int64]int,
	byShop map[int64][]tandem.Reservation, from tandem.BackfillCheckpoint, total int, save func(context.Context, tandem.BackfillCheckpoint) error,
	gentle bool) (int, error) {
	size, workers := mg.backfillBatch(), mg.backfillWorkers()
	if gentle {
		size, workers = min(size, GentleBackfillBatch), 1
	}
	batches := cutBatches(shops, counts, size)
	c := &copyRun{mg: mg, lister: lister, byShop: byShop, save: save, gentle: gentle, batches: batches,
		ck: &checkpoints{batches: batches, done: make([]int, len(batches)), at: from}}
	for i := range c.ck.done {
		c.ck.done[i] = -1
	}
	now := mg.r.Now()
	mg.setBackfill(func(p *BackfillProgress) {
		p.Phase, p.Total, p.BatchesTotal, p.copyStart = "copy", total, len(batches), now
	})
	c.copied.Store(int64(from.Copied))
	work := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range work {
				c.copy(ctx, i)
			}
		})
	}
	for i := range batches {
		// Each batch asks the pod's throttle first; a critical load
		// stops the copy (its checkpoint stays for the next run).
		if err := tandem.WaitThrottle(ctx); err != nil && ctx.Err() == nil {
			c.fail(fmt.Errorf("backfill stopped: %w", err))
		}
		if ctx.Err() != nil || c.stopped.Load() {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return int(c.copied.Load()), tandem.Errorf(tandem.EUNAVAILABLE, "backfill of pod %s cancelled", mg.r.Pod)
	}
	return int(c.copied.Load()), c.firstErr
}

// copyRun is one copy of copyShops, shared by its workers.
type copyRun struct {
	mg      *migrator
	lister  tandem.ShopLister
	byShop  map[int64][]tandem.Reservation
	save    func(context.Context, tandem.BackfillCheckpoint) error
	gentle  bool
	batches []backfillBatch
	ck      *checkpoints
	copied  atomic.Int64
	saveMu  sync.Mutex
	// firstErr is the first failure (set once); stopped is set with it.
	errOnce  sync.Once
	firstErr error
	stopped  atomic.Bool
}

// fail stops the copy with err, unless it failed already.
func (c *copyRun) fail(err error) {
	c.errOnce.Do(func() { c.firstErr = err })
	c.stopped.Store(true)
}

// copy copies batch i, records its progress and saves the checkpoint it
// reaches; a gentle copy then rests.
func (c *copyRun) copy(ctx context.Context, i int) {
	mg, b := c.mg, c.batches[i]
	batchStart := time.Now()
	n, err := mg.copyBatch(ctx, c.lister, b, c.byShop)
	if err != nil {
		c.fail(fmt.Errorf("backfill: copy shops %d..%d: %w", b.shops[0], b.shops[len(b.shops)-1], err))
		return
	}
	copied := int(c.copied.Add(int64(n)))
	at, moved := c.ck.commit(i, n)
	mg.setBackfill(func(p *BackfillProgress) {
		p.Copied, p.Batches = copied, p.Batches+1
		if moved {
			p.Checkpoint = at.Shop
		}
	})
	if moved && c.save != nil {
		c.saveMu.Lock()
		if at.Shop >= c.ck.saved() {
			if err := c.save(ctx, at); err != nil {
				mg.r.Logger.Warnw("could not save the backfill's checkpoint; the copy goes on", "pod", mg.r.Pod, "shop", at.Shop, "error", err)
			} else {
				c.ck.setSaved(at.Shop)
			}
		}
		c.saveMu.Unlock()
	}
	if c.gentle {
		// Rest after each batch (GentleBackfillDuty), then ask the
		// throttle; a critical load stops the copy.
		if err := tandem.Pace(tandem.WithPace(ctx, GentleBackfillDuty), batchStart); err != nil && ctx.Err() == nil {
			c.fail(fmt.Errorf("backfill stopped: %w", err))
		}
	}
}

// copyBatch copies one batch and returns how many holds it wrote. The
// batch's shadow work waits while its shops are rewritten: the copy then
// sees a quiet pool (buyers are served by Redis all along).
func (mg *migrator) copyBatch(ctx context.Context, lister tandem.ShopLister, b backfillBatch, byShop map[int64][]tandem.Reservation) (int, error) {
	resume := mg.pauseShops(b.shops)
	defer resume()
	var holds []tandem.Reservation
	if lister != nil {
		var err error
		if holds, err = lister.ShopHolds(ctx, b.shops); err != nil {
			return 0, err
		}
	} else {
		for _, sh := range b.shops {
			holds = append(holds, byShop[sh]...)
		}
	}
	if _, err := mg.r.MySQL.RebuildShops(ctx, b.shops, holds); err != nil {
		return 0, err
	}
	return len(holds), nil
}

func (c *checkpoints) saved() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.savedShop
}

func (c *checkpoints) setSaved(shop int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.savedShop = shop
}
