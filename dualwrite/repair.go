package dualwrite

import (
	"context"
	"runtime/pprof"
	"time"

	"github.com/tandemhq/tandem"
)

// The convergence worker: its loop over the dirty carts and the periodic
// sweep, and the stats of both.

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

// DirtyCarts returns how many carts wait to be converged.
func (r *Router) DirtyCarts() int {
	r.dirty.mu.Lock()
	defer r.dirty.mu.Unlock()
	return len(r.dirty.m)
}

// ConvergeStats returns the state of the router's convergence.
func (r *Router) ConvergeStats() ConvergeStats {
	st := ConvergeStats{Results: map[ConvergeResult]int64{}}
	r.dirty.mu.Lock()
	st.Dirty = len(r.dirty.m)
	for _, e := range r.dirty.m {
		if st.Oldest.IsZero() || e.cart.Since.Before(st.Oldest) {
			st.Oldest = e.cart.Since
		}
	}
	r.dirty.mu.Unlock()
	r.statsMu.Lock()
	for k, v := range r.results {
		st.Results[k] = v
	}
	if r.lastSweep != nil {
		sw := *r.lastSweep
		st.LastSweep = &sw
	}
	r.statsMu.Unlock()
	return st
}

// observe counts one convergence. An equal cart that was not dirty is not
// counted: it is the common case of a matching shadow.
func (r *Router) observe(res ConvergeResult, err error, since time.Duration) {
	if err != nil && res != ConvergeConflict {
		res = ConvergeFailed
	}
	r.statsMu.Lock()
	r.results[res]++
	r.statsMu.Unlock()
	if r.Observer != nil {
		r.Observer.ObserveConvergence(r.Pod, res, since)
	}
}

// work is the convergence worker.
func (r *Router) work(ctx context.Context) {
	defer close(r.workerDone)
	pprof.SetGoroutineLabels(workLabels[workDirty])
	tick := time.NewTicker(r.ShadowTimeout / 2)
	defer tick.Stop()
	nextSweep := time.Now().Add(r.SweepInterval)
	// Each round of convergence asks the pod's throttle first.
	rounds := tandem.WithThrottle(ctx, r.Throttle, tandem.JobConverge)
	for {
		select {
		case <-ctx.Done():
			r.flushDirty(context.Background())
			return
		case <-tick.C:
		case <-r.dirty.wake:
		case <-r.sweepCh:
			nextSweep = time.Now()
		}
		r.flushDirty(ctx)
		for tandem.WaitThrottle(rounds) == nil && r.convergeDue(ctx) == convergeBatch && ctx.Err() == nil {
			r.flushDirty(ctx)
		}
		if !time.Now().Before(nextSweep) && !r.copying.Load() && !r.loss.rebuilding.Load() {
			pprof.SetGoroutineLabels(workLabels[workSweep])
			sctx := tandem.WithThrottle(tandem.WithPace(ctx, r.SweepDuty), r.Throttle, tandem.JobSweep)
			if _, err := r.Sweep(sctx); err != nil && ctx.Err() == nil {
				r.Logger.Warnw("sweep failed", "pod", r.Pod, "error", err)
			}
			pprof.SetGoroutineLabels(workLabels[workDirty])
			nextSweep = time.Now().Add(r.SweepInterval)
		}
	}
}

// sweepSoon asks the worker for a sweep at its next round.
func (r *Router) sweepSoon() {
	select {
	case r.sweepCh <- struct{}{}:
	default:
	}
}

// Convergence returns the router's convergence state for reports.
func (r *Router) Convergence() tandem.Convergence {
	st := r.ConvergeStats()
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
