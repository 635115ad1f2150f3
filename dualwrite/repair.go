package dualwrite

import (
	"context"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
)

// repairer is a pod's repair of its shadow, behind the request path: the
// dirty carts and the worker that converges them with backoff (dirty.go),
// the convergence of a cart (converge.go), the periodic sweep (sweep.go),
// and their stats. One per Router, which points at it.
//
// The request path hands it what it cannot finish (markDirty, markRefused,
// convergeCart, observe, sweepSoon), asks it about a cart (suspect,
// unreserved, copyStale for a catch-up, endGrant), and starts and stops its
// worker. It uses of the Router the configuration, the stores, the cart's
// line (enqueue) and the shadow slots (takeSlot), so that its work never
// races a cart's own shadow work nor exceeds MaxInflight.
type repairer struct {
	r *Router

	dirty   dirtySet
	sweepCh chan struct{}
	sweepMu sync.Mutex // one sweep at a time
	// sweepsDone counts the sweeps ended, failed or not (Converged waits
	// for the next one).
	sweepsDone atomic.Uint64
	// rounds is held by each of the worker's rounds of convergence, and by
	// a rebuild of a store (holdRounds), so that none runs during the other.
	rounds sync.Mutex
	// roundsHeld counts the holds of rounds (holdRounds): no sweep starts
	// while a store is rebuilt from the other.
	roundsHeld atomic.Int32
	// statsMu guards results, lastSweep and the sweeps' failures (their
	// count and the last one's error), which a "did not converge" error
	// shows.
	statsMu      sync.Mutex
	results      map[ConvergeResult]int64
	lastSweep    *SweepReport
	sweepsFailed int
	sweepErr     error
	// done is closed when the worker and the sweeps have stopped (set by
	// start).
	done chan struct{}
}

func newRepairer(r *Router) *repairer {
	return &repairer{
		r:       r,
		dirty:   newDirtySet(),
		sweepCh: make(chan struct{}, 1),
		results: make(map[ConvergeResult]int64),
	}
}

// DirtyCarts returns how many carts wait to be converged.
func (r *Router) DirtyCarts() int { return r.repair.dirtyCarts() }

// ConvergeStats returns the state of the router's convergence.
func (r *Router) ConvergeStats() ConvergeStats { return r.repair.stats() }

// Convergence returns the router's convergence state for reports.
func (r *Router) Convergence() tandem.Convergence { return r.repair.convergence() }

// Sweep compares the stores and converges what differs: each cart from the
// SoT (in the cart's line, so never across its own shadow work), then each
// position of the shadow that still disagrees with the ledger, when no
// shadow work is in flight on this instance.
func (r *Router) Sweep(ctx context.Context) (*SweepReport, error) { return r.repair.sweep(ctx) }

// Diff compares the stores the pod's mode maintains: every active hold of
// the SoT must be in the shadow with the same lines and groups and no
// other hold may be (invariant 5), and every position must agree with the
// ledger in each store and between the stores. It reads a snapshot of
// each store one after the other: with traffic, holds in flight show.
func (r *Router) Diff(ctx context.Context) (*Diff, error) { return r.repair.diff(ctx, r.Mode()) }

// Converged waits until the pod's stores agree hold by hold and with the
// ledger, and no cart is dirty, or until ctx ends; it returns the last
// differences seen (never nil). It compares the stores only while no cart
// is dirty. Tests and the soak use it once traffic has stopped.
func (r *Router) Converged(ctx context.Context) (*Diff, error) { return r.repair.converged(ctx) }

// ConvergeObserver is told of every convergence of a cart; the metrics
// satisfy it. sinceDivergence is zero unless the cart was dirty.
type ConvergeObserver interface {
	ObserveConvergence(pod string, result ConvergeResult, sinceDivergence time.Duration)
}

// ConvergeStats is the state of a router's convergence, for reports.
type ConvergeStats struct {
	// Dirty is how many carts wait to be converged.
	Dirty int `json:"dirty_carts"`
	// Oldest is when the oldest dirty cart was marked (zero when none).
	Oldest time.Time `json:"oldest_dirty_since,omitzero"`
	// Results counts convergences by result since start.
	Results map[ConvergeResult]int64 `json:"results"`
	// LastSweep is the last anti-entropy sweep (nil before the first).
	LastSweep *SweepReport `json:"last_sweep,omitempty"`
}

// dirtyCarts is Router.DirtyCarts.
func (rp *repairer) dirtyCarts() int {
	rp.dirty.mu.Lock()
	defer rp.dirty.mu.Unlock()
	return len(rp.dirty.m)
}

// stats is Router.ConvergeStats.
func (rp *repairer) stats() ConvergeStats {
	st := ConvergeStats{Results: map[ConvergeResult]int64{}}
	rp.dirty.mu.Lock()
	st.Dirty = len(rp.dirty.m)
	for _, e := range rp.dirty.m {
		if st.Oldest.IsZero() || e.cart.Since.Before(st.Oldest) {
			st.Oldest = e.cart.Since
		}
	}
	rp.dirty.mu.Unlock()
	rp.statsMu.Lock()
	for k, v := range rp.results {
		st.Results[k] = v
	}
	if rp.lastSweep != nil {
		sw := *rp.lastSweep
		st.LastSweep = &sw
	}
	rp.statsMu.Unlock()
	return st
}

// observe counts one convergence. An equal cart that was not dirty is not
// counted: it is the common case of a matching shadow.
func (rp *repairer) observe(res ConvergeResult, err error, since time.Duration) {
	if err != nil && res != ConvergeConflict {
		res = ConvergeFailed
	}
	rp.statsMu.Lock()
	rp.results[res]++
	rp.statsMu.Unlock()
	if rp.r.Observer != nil {
		rp.r.Observer.ObserveConvergence(rp.r.Pod, res, since)
	}
}

// start starts the worker and the periodic sweep; they stop with ctx, and
// done is closed then.
func (rp *repairer) start(ctx context.Context) {
	rp.done = make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { rp.work(ctx) })
	wg.Go(func() { rp.sweeps(ctx) })
	go func() {
		wg.Wait()
		close(rp.done)
	}()
}

// work is the convergence worker.
func (rp *repairer) work(ctx context.Context) {
	pprof.SetGoroutineLabels(workLabels[workDirty])
	tick := time.NewTicker(rp.r.ShadowTimeout / 2)
	defer tick.Stop()
	// Each round of convergence asks the pod's throttle first.
	rounds := tandem.WithThrottle(ctx, rp.r.Throttle, tandem.JobConverge)
	for {
		select {
		case <-ctx.Done():
			rp.flushDirty(context.Background())
			return
		case <-tick.C:
		case <-rp.dirty.wake:
		}
		rp.flushDirty(ctx)
		for tandem.WaitThrottle(rounds) == nil && rp.convergeDue(ctx) == convergeBatch && ctx.Err() == nil {
			rp.flushDirty(ctx)
		}
	}
}

// sweeps runs the periodic sweep every SweepInterval (at once when asked,
// sweepSoon), but not while a copy, a rebuild or a resync runs. It runs beside the
// worker, not in its rounds: a paced sweep of a pod's holds takes tens of
// seconds under load, and the dirty carts it skips (they are the worker's)
// waited all that time (TestBackfill_OnlineUnderLoad's rare failure).
func (rp *repairer) sweeps(ctx context.Context) {
	pprof.SetGoroutineLabels(workLabels[workSweep])
	tick := time.NewTicker(rp.r.ShadowTimeout / 2)
	defer tick.Stop()
	next := time.Now().Add(rp.r.SweepInterval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-rp.sweepCh:
			next = time.Now()
		}
		if time.Now().Before(next) || rp.r.migrate.copying() || rp.r.migrate.rebuilding() || rp.roundsHeld.Load() > 0 {
			continue
		}
		sctx := tandem.WithThrottle(tandem.WithPace(ctx, rp.r.SweepDuty), rp.r.Throttle, tandem.JobSweep)
		if _, err := rp.sweep(sctx); err != nil && ctx.Err() == nil {
			rp.r.Logger.Warnw("sweep failed", "pod", rp.r.Pod, "error", err)
			rp.statsMu.Lock()
			rp.sweepsFailed, rp.sweepErr = rp.sweepsFailed+1, err
			rp.statsMu.Unlock()
		}
		next = time.Now().Add(rp.r.SweepInterval)
	}
}

// sweepSoon asks the worker for a sweep at its next round.
func (rp *repairer) sweepSoon() {
	select {
	case rp.sweepCh <- struct{}{}:
	default:
	}
}

// convergence is Router.Convergence.
func (rp *repairer) convergence() tandem.Convergence {
	st := rp.stats()
	c := tandem.Convergence{DirtyCarts: st.Dirty, Results: map[string]int64{}}
	if !st.Oldest.IsZero() {
		c.OldestDirtySince = &st.Oldest
	}
	for k, v := range st.Results {
		c.Results[string(k)] = v
	}
	if st.LastSweep != nil {
		at := st.LastSweep.At
		c.LastSweepAt, c.LastSweepLeft = &at, st.LastSweep.Left
	}
	return c
}
