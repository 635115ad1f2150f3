package dualwrite

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
)

// Redis data loss. A pod's Redis that restarts without persistence, or is
// flushed, forgets every counter and hold without a word: a missing counter
// reads as zero available, so the legacy store would answer every item
// sold out and know no hold. While MySQL is the SoT (mode mysql) that
// Redis is the kill switch's fallback, so the router watches it and
// rebuilds it from MySQL by itself, online, a batch of shops at a time,
// then converges what changed meanwhile and the dirty carts. While Redis
// is the SoT (redis, shadow, or mysql under the kill switch while no
// rebuild runs) a loss is the legacy disaster: the buyers' holds were in
// Redis alone as far as the SoT goes; it is reported (log, audit, kill
// switch answer) and left to the operator's resync from MySQL.
//
// Detection is cheap: Redis keeps a whole marker (WholeMarker), written
// once its data is known whole, that goes with the data. When it is
// missing, the router compares the ledger's positions with Redis's counts:
// positions the ledger stocks that Redis does not count at all confirm
// the loss; none means Redis is whole (a fresh deployment) and the marker
// is written.

// WholeMarker is a store that keeps a marker of its data being whole,
// lost with the data (redisres satisfies it).
type WholeMarker interface {
	// Marked reports whether the marker is present.
	Marked(ctx context.Context) (bool, error)
	// Mark writes the marker.
	Mark(ctx context.Context) error
}

// RebuildObserver is told of every rebuild of a pod's Redis after a data
// loss (optional, on the router's Observer); the metrics satisfy it.
type RebuildObserver interface {
	ObserveRedisRebuild(pod string, holds, positions int, took time.Duration, err error)
}

// RedisRebuild is the last rebuild of a pod's Redis after a data loss.
type RedisRebuild struct {
	DetectedAt time.Time `json:"detected_at"`
	EndedAt    time.Time `json:"ended_at,omitzero"`
	// Lost is how many positions the ledger stocks that Redis no longer counted.
	Lost int `json:"lost_positions"`
	// Positions and Holds are what the rebuild wrote back from MySQL.
	Positions int    `json:"positions"`
	Holds     int    `json:"holds"`
	Err       string `json:"error,omitempty"`
}

// lossCheckInterval is how often the router looks for the whole marker.
const lossCheckInterval = 500 * time.Millisecond

// redisLoss is the router's watch over its Redis.
type redisLoss struct {
	wg         sync.WaitGroup
	wake       chan struct{}
	rebuilding atomic.Bool
	mu         sync.Mutex
	stale      string // why Redis is known not whole; "" when it is
	last       *RedisRebuild
}

// RedisStale says why the pod's Redis is known to have lost its data and
// is not whole yet ("" when it is not known stale): being rebuilt from
// MySQL, or lost while it was the SoT (the legacy disaster).
func (r *Router) RedisStale() string {
	r.loss.mu.Lock()
	defer r.loss.mu.Unlock()
	return r.loss.stale
}

// RedisRebuilding reports whether the pod's Redis is being rebuilt from
// MySQL after a data loss; the kill switch waits for it (Mode).
func (r *Router) RedisRebuilding() bool { return r.loss.rebuilding.Load() }

// LastRedisRebuild returns the last rebuild of the pod's Redis after a
// data loss, nil when none ran on this instance.
func (r *Router) LastRedisRebuild() *RedisRebuild {
	r.loss.mu.Lock()
	defer r.loss.mu.Unlock()
	if r.loss.last == nil {
		return nil
	}
	l := *r.loss.last
	return &l
}

// CheckRedisNow makes the watch look at the pod's Redis at once (a kill
// switch engaging gives its fallback priority).
func (r *Router) CheckRedisNow() {
	if r.loss.wake == nil {
		return
	}
	select {
	case r.loss.wake <- struct{}{}:
	default:
	}
}

func (r *Router) setStale(why string) {
	r.loss.mu.Lock()
	r.loss.stale = why
	r.loss.mu.Unlock()
}

// startLossWatch starts the watch; it ends with ctx.
func (r *Router) startLossWatch(ctx context.Context) {
	if _, ok := r.Redis.(WholeMarker); !ok || r.Ledger == nil {
		return
	}
	r.loss.wake = make(chan struct{}, 1)
	r.loss.wg.Add(1)
	go func() {
		defer r.loss.wg.Done()
		tick := time.NewTicker(lossCheckInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-r.loss.wake:
			}
			r.checkRedis(ctx)
		}
	}()
}

// persistedMode is the pod's mode before the kill switch.
func (r *Router) persistedMode() tandem.Mode {
	if r.Modes == nil {
		return tandem.ModeRedis
	}
	return r.Modes.Mode(r.Pod)
}

// checkRedis looks for the whole marker and, when it is gone, confirms the
// loss against the ledger and rebuilds or reports it.
func (r *Router) checkRedis(ctx context.Context) {
	mode := r.persistedMode()
	if mode == tandem.ModeMySQLOnly {
		return // Redis is not maintained
	}
	m := r.Redis.(WholeMarker)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	marked, err := m.Marked(cctx)
	cancel()
	if err != nil || marked {
		return // down (it is looked at again when it answers) or whole
	}
	lost, err := r.confirmedUncounted(ctx)
	if err != nil {
		return
	}
	if lost == 0 {
		if m.Mark(ctx) == nil {
			r.setStale("")
		}
		return
	}
	if mode != tandem.ModeMySQL {
		why := fmt.Sprintf("pod %s: Redis, the source of truth in mode %s, lost its data (%d stocked positions have no count): the legacy disaster; its holds are gone from the SoT; resync --from mysql restores what MySQL shadowed", r.Pod, mode, lost)
		if r.RedisStale() != why {
			r.Logger.Warnw("redis lost its data while it is the source of truth", "pod", r.Pod, "mode", string(mode), "lost_positions", lost)
			r.recordLoss(mode, why)
		}
		r.setStale(why)
		return
	}
	r.rebuildRedis(ctx, lost)
}

// confirmedUncounted returns how many positions the ledger stocks that
// Redis does not count at all, in two looks AuditSettle apart: a stock
// count of a new position writes the ledger first and Redis a moment
// later, so a position seen uncounted once is not yet a loss.
func (r *Router) confirmedUncounted(ctx context.Context) (int, error) {
	first, err := r.uncounted(ctx)
	if err != nil || len(first) == 0 {
		return 0, err
	}
	select {
	case <-time.After(r.auditSettle()):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	second, err := r.uncounted(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for k := range second {
		if first[k] {
			n++
		}
	}
	return n, nil
}

// uncounted returns the positions the ledger stocks that Redis does not
// count at all.
func (r *Router) uncounted(ctx context.Context) (map[tandem.Key]bool, error) {
	ledger, err := r.Ledger.ListOnHand(ctx)
	if err != nil {
		return nil, err
	}
	list, err := r.Redis.ListCounters(ctx)
	if err != nil {
		return nil, err
	}
	have := make(map[tandem.Key]bool, len(list))
	for _, c := range list {
		have[c.Key] = true
	}
	out := map[tandem.Key]bool{}
	for k, v := range ledger {
		if v > 0 && !have[k] {
			out[k] = true
		}
	}
	return out, nil
}

// rebuildRedis rebuilds the pod's Redis from MySQL online: the active
// MySQL holds are written back a batch of shops at a time, each batch's
// shadow work paused while it is written; a sweep then converges what
// changed meanwhile, the marker is written, and the dirty carts are due at
// once.
func (r *Router) rebuildRedis(ctx context.Context, lost int) {
	start := time.Now()
	rep := &RedisRebuild{DetectedAt: r.Now().UTC(), Lost: lost}
	why := fmt.Sprintf("pod %s: Redis lost its data (%d stocked positions had no count) and is being rebuilt from MySQL", r.Pod, lost)
	r.setStale(why)
	r.loss.rebuilding.Store(true)
	r.Logger.Warnw("redis lost its data: rebuilding it from mysql", "pod", r.Pod, "lost_positions", lost)
	err := r.rebuildRedisRun(ctx, rep)
	r.loss.rebuilding.Store(false)
	rep.EndedAt = r.Now().UTC()
	if err != nil {
		rep.Err = err.Error()
		r.Logger.Warnw("redis rebuild failed; it is tried again", "pod", r.Pod, "error", err)
	} else {
		r.setStale("")
		r.Logger.Warnw("redis rebuilt from mysql after a data loss", "pod", r.Pod,
			"positions", rep.Positions, "holds", rep.Holds, "took", time.Since(start).String())
		r.recordLoss(tandem.ModeMySQL, fmt.Sprintf("pod %s: Redis lost its data (%d stocked positions had no count); rebuilt from MySQL: %d positions, %d holds in %s",
			r.Pod, lost, rep.Positions, rep.Holds, time.Since(start).Round(time.Millisecond)))
	}
	r.loss.mu.Lock()
	r.loss.last = rep
	r.loss.mu.Unlock()
	if o, ok := r.Observer.(RebuildObserver); ok {
		o.ObserveRedisRebuild(r.Pod, rep.Holds, rep.Positions, time.Since(start), err)
	}
	r.repair.dirtyDueNow()
}

func (r *Router) rebuildRedisRun(ctx context.Context, rep *RedisRebuild) error {
	src, ok := r.MySQL.(tandem.Resyncer)
	if !ok {
		return fmt.Errorf("rebuild redis: mysql cannot list its holds")
	}
	holds, err := src.ActiveHolds(ctx)
	if err != nil {
		return fmt.Errorf("rebuild redis: list mysql holds: %w", err)
	}
	part, ok := r.Redis.(tandem.ShopRebuilder)
	if !ok {
		n, err := rebuild(ctx, r.MySQL, r.Redis)
		rep.Positions, rep.Holds = n, len(holds)
		return err
	}
	byShop := map[int64][]tandem.Reservation{}
	for _, h := range holds {
		byShop[h.ShopID] = append(byShop[h.ShopID], h)
	}
	onHand, err := r.Ledger.ListOnHand(ctx)
	if err != nil {
		return fmt.Errorf("rebuild redis: ledger: %w", err)
	}
	for k := range onHand {
		if _, ok := byShop[k.ShopID]; !ok {
			byShop[k.ShopID] = nil
		}
	}
	shops := make([]int64, 0, len(byShop))
	for sh := range byShop {
		shops = append(shops, sh)
	}
	sort.Slice(shops, func(i, j int) bool { return shops[i] < shops[j] })
	for i := 0; i < len(shops); {
		var batch []int64
		var bh []tandem.Reservation
		for i < len(shops) && (len(batch) == 0 || len(bh)+len(byShop[shops[i]]) <= DefaultBackfillBatch) {
			batch = append(batch, shops[i])
			bh = append(bh, byShop[shops[i]]...)
			i++
		}
		resume := r.pauseShops(batch)
		n, err := part.RebuildShops(ctx, batch, bh)
		resume()
		if err != nil {
			return fmt.Errorf("rebuild redis: shops %d..%d: %w", batch[0], batch[len(batch)-1], err)
		}
		rep.Positions += n
		rep.Holds += len(bh)
	}
	// What changed while the batches were written (a hold released in
	// MySQL after the list was read, one taken before its batch) is
	// converged hold by hold.
	for range 3 {
		sr, err := r.repair.sweep(ctx)
		if err != nil {
			return fmt.Errorf("rebuild redis: catch up: %w", err)
		}
		if sr.Carts == 0 || sr.Converged == 0 {
			break
		}
	}
	return r.Redis.(WholeMarker).Mark(ctx)
}

// recordLoss records the loss as a state_drift of the pod (no cart).
func (r *Router) recordLoss(mode tandem.Mode, msg string) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Record(tandem.Comparison{
		At: r.Now(), Pod: r.Pod, Op: tandem.OpAudit, SourceOfTruth: mode.SourceOfTruth(), Kind: tandem.KindStateDrift,
		Primary: tandem.Outcome{Store: mode.SourceOfTruth(), Status: tandem.OutcomeOK, Message: msg},
		Shadow:  tandem.Outcome{Store: tandem.StoreRedis, Status: "data_lost", Message: msg},
	})
}

// redisWhole writes the marker after an operator's resync rebuilt Redis.
func (r *Router) redisWhole(ctx context.Context) {
	if m, ok := r.Redis.(WholeMarker); ok && m.Mark(ctx) == nil {
		r.setStale("")
	}
}
