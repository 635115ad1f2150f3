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

// BackfillProgress is the state of a backfill, for the pod's transition.
type BackfillProgress struct {
	// Phase is "follow" (starting), "copy", "catch_up" or "done".
	Phase     string    `json:"phase"`
	Copied    int       `json:"copied"`
	Total     int       `json:"total"`
	StartedAt time.Time `json:"started_at"`
	// Err is why the last backfill failed, if it did.
	Err string `json:"error,omitempty"`
}

// backfillHolds is about how many holds one batch of shops copies, and
// backfillWorkers how many batches are copied at once.
const (
	backfillHolds   = 2000
	backfillWorkers = 2
)

// BackfillProgress returns the running or last backfill, nil when none ran.
func (r *Router) BackfillProgress() *BackfillProgress {
	r.statsMu.Lock()
	defer r.statsMu.Unlock()
	if r.backfill == nil {
		return nil
	}
	p := *r.backfill
	return &p
}

func (r *Router) setBackfill(f func(p *BackfillProgress)) {
	r.statsMu.Lock()
	defer r.statsMu.Unlock()
	f(r.backfill)
}

// Backfill copies the pod's active Redis holds into MySQL online, so that
// MySQL can shadow Redis from the first request. Rollout runs it before a
// pod enters shadow; ctx cancels it. From its start until the pod is seen
// in shadow (at most BackfillFollow after its end, or at once when it
// fails) this instance writes MySQL as the pod's shadow. It returns how
// many holds it copied.
func (r *Router) Backfill(ctx context.Context) (int, error) {
	r.backfillMu.Lock()
	defer r.backfillMu.Unlock()
	r.statsMu.Lock()
	r.backfill = &BackfillProgress{Phase: "follow", StartedAt: r.Now().UTC()}
	r.statsMu.Unlock()
	n, err := r.backfillRun(ctx)
	if err != nil {
		r.followUntil.Store(0)
		r.setBackfill(func(p *BackfillProgress) { p.Err = err.Error() })
		return n, err
	}
	if r.Mode() == tandem.ModeRedis {
		r.followUntil.Store(r.Now().Add(r.BackfillFollow).UnixNano())
	}
	r.setBackfill(func(p *BackfillProgress) { p.Phase = "done" })
	return n, nil
}

func (r *Router) backfillRun(ctx context.Context) (int, error) {
	src, ok1 := r.Redis.(tandem.Resyncer)
	dst, ok2 := r.MySQL.(tandem.Resyncer)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("backfill: stores cannot be listed and rebuilt")
	}
	// Follow first: every operation admitted from now on writes MySQL too.
	// Those admitted before may still land in Redis alone; the catch-up
	// sweep below finds them.
	r.followUntil.Store(math.MaxInt64)
	r.copying.Store(true)
	defer r.copying.Store(false)
	holds, err := src.ActiveHolds(ctx)
	if err != nil {
		return 0, fmt.Errorf("backfill: list redis holds: %w", err)
	}
	r.setBackfill(func(p *BackfillProgress) { p.Phase, p.Total = "copy", len(holds) })
	byShop := map[int64][]tandem.Reservation{}
	for _, h := range holds {
		byShop[h.ShopID] = append(byShop[h.ShopID], h)
	}
	// Every shop the ledger or Redis knows is rebuilt, so that a MySQL left
	// from an earlier shadow period keeps no stale hold.
	if r.Ledger != nil {
		onHand, err := r.Ledger.ListOnHand(ctx)
		if err != nil {
			return 0, fmt.Errorf("backfill: ledger: %w", err)
		}
		for k := range onHand {
			if _, ok := byShop[k.ShopID]; !ok {
				byShop[k.ShopID] = nil
			}
		}
	}
	shops := make([]int64, 0, len(byShop))
	for sh := range byShop {
		shops = append(shops, sh)
	}
	sort.Slice(shops, func(i, j int) bool { return shops[i] < shops[j] })

	part, ok := r.MySQL.(tandem.ShopRebuilder)
	if !ok {
		n, err := dst.Rebuild(ctx, holds)
		r.setBackfill(func(p *BackfillProgress) { p.Copied = len(holds) })
		return n, err
	}
	lister, _ := r.Redis.(tandem.ShopLister)
	copied, err := r.copyShops(ctx, part, lister, shops, byShop)
	if err != nil {
		return copied, err
	}
	// Catch up: what changed in Redis during the copy (operations admitted
	// before following began, releases and claims racing a batch) is
	// converged hold by hold.
	r.setBackfill(func(p *BackfillProgress) { p.Phase = "catch_up" })
	for pass := 0; pass < 3; pass++ {
		rep, err := r.Sweep(ctx)
		if err != nil {
			return copied, fmt.Errorf("backfill: catch up: %w", err)
		}
		if rep.Carts == 0 || rep.Converged == 0 {
			break // what still differs is in flight: the shadow path has it
		}
	}
	return copied, nil
}

// copyShops copies the holds of shops, in batches of about backfillHolds
// holds (as byShop counts them) copied on backfillWorkers connections at
// once (disjoint shops: disjoint rows), and says how many it copied. With
// lister, each batch copies its shops' holds as Redis lists them once the
// batch's shadow work is paused; else byShop's.
func (r *Router) copyShops(ctx context.Context, part tandem.ShopRebuilder, lister tandem.ShopLister, shops []int64, byShop map[int64][]tandem.Reservation) (int, error) {
	type batch struct {
		shops []int64
		holds []tandem.Reservation
	}
	var batches []batch
	for i := 0; i < len(shops); {
		var b batch
		for i < len(shops) && (len(b.shops) == 0 || len(b.holds)+len(byShop[shops[i]]) <= backfillHolds) {
			b.shops = append(b.shops, shops[i])
			b.holds = append(b.holds, byShop[shops[i]]...)
			i++
		}
		batches = append(batches, b)
	}
	var copied atomic.Int64
	var firstErr error
	var errOnce sync.Once
	work := make(chan batch)
	var wg sync.WaitGroup
	for range backfillWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				// The batch's shadow work waits while its shops are
				// rewritten: the copy then sees a quiet pool (buyers are
				// served by Redis all along).
				resume := r.pauseShops(b.shops)
				holds, err := b.holds, error(nil)
				if lister != nil {
					holds, err = lister.ShopHolds(ctx, b.shops)
				}
				if err == nil {
					_, err = part.RebuildShops(ctx, b.shops, holds)
				}
				resume()
				if err != nil {
					errOnce.Do(func() {
						firstErr = fmt.Errorf("backfill: copy shops %d..%d: %w", b.shops[0], b.shops[len(b.shops)-1], err)
					})
					continue
				}
				n := int(copied.Add(int64(len(holds))))
				r.setBackfill(func(p *BackfillProgress) { p.Copied = n })
			}
		}()
	}
	for _, b := range batches {
		if ctx.Err() != nil {
			break
		}
		work <- b
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return int(copied.Load()), tandem.Errorf(tandem.EUNAVAILABLE, "backfill of pod %s cancelled", r.Pod)
	}
	return int(copied.Load()), firstErr
}

// pauseShops makes the shadow work of shops wait (waitShop) until the
// returned func is called.
func (r *Router) pauseShops(shops []int64) (resume func()) {
	done := make(chan struct{})
	r.pausing.Add(1)
	r.mu.Lock()
	if r.paused == nil {
		r.paused = map[int64]chan struct{}{}
	}
	for _, sh := range shops {
		r.paused[sh] = done
	}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		for _, sh := range shops {
			if r.paused[sh] == done {
				delete(r.paused, sh)
			}
		}
		r.mu.Unlock()
		close(done)
		r.pausing.Add(-1)
	}
}

// waitShop returns when the shop's shadow work may run.
func (r *Router) waitShop(ctx context.Context, shop int64) {
	for r.pausing.Load() > 0 {
		r.mu.Lock()
		ch := r.paused[shop]
		r.mu.Unlock()
		if ch == nil {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}
