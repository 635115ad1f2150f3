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

// stale is Router.RedisStale.
func (mg *migrator) stale() string {
	mg.loss.mu.Lock()
	defer mg.loss.mu.Unlock()
	return mg.loss.stale
}

// rebuilding is Router.RedisRebuilding.
func (mg *migrator) rebuilding() bool { return mg.loss.rebuilding.Load() }

// lastRebuild is Router.LastRedisRebuild.
func (mg *migrator) lastRebuild() *RedisRebuild {
	mg.loss.mu.Lock()
	defer mg.loss.mu.Unlock()
	if mg.loss.last == nil {
		return nil
	}
	l := *mg.loss.last
	return &l
}

// checkRedisNow is Router.CheckRedisNow.
func (mg *migrator) checkRedisNow() {
	if mg.loss.wake == nil {
		return
	}
	select {
	case mg.loss.wake <- struct{}{}:
	default:
	}
}

func (mg *migrator) setStale(why string) {
	mg.loss.mu.Lock()
	mg.loss.stale = why
	mg.loss.mu.Unlock()
}

// startLossWatch starts the watch; it ends with ctx.
func (mg *migrator) startLossWatch(ctx context.Context) {
	if _, ok := mg.r.Redis.(WholeMarker); !ok || mg.r.Ledger == nil {
		return
	}
	mg.loss.wake = make(chan struct{}, 1)
	mg.loss.wg.Add(1)
	go func() {
		defer mg.loss.wg.Done()
		tick := time.NewTicker(lossCheckInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-mg.loss.wake:
			}
			mg.checkRedis(ctx)
		}
	}()
}

// waitLossWatch returns once the watch started by startLossWatch has
// ended.
func (mg *migrator) waitLossWatch() { mg.loss.wg.Wait() }

// persistedMode is the pod's mode before the kill switch.
func (mg *migrator) persistedMode() tandem.Mode {
	if mg.r.Modes == nil {
		return tandem.ModeRedis
	}
	return mg.r.Modes.Mode(mg.r.Pod)
}

// checkRedis looks for the whole marker and, when it is gone, confirms the
// loss against the ledger and rebuilds or reports it.
func (mg *migrator) checkRedis(ctx context.Context) {
	mode := mg.persistedMode()
	if mode == tandem.ModeMySQLOnly {
		return // Redis is not maintained
	}
	m := mg.r.Redis.(WholeMarker)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	marked, err := m.Marked(cctx)
	cancel()
	if err != nil || marked {
		return // down (it is looked at again when it answers) or whole
	}
	lost, err := mg.confirmedUncounted(ctx)
	if err != nil {
		return
	}
	if lost == 0 {
		if m.Mark(ctx) == nil {
			mg.setStale("")
		}
		return
	}
	if mode != tandem.ModeMySQL {
		why := fmt.Sprintf("pod %s: Redis, the source of truth in mode %s, lost its data (%d stocked positions have no count): the legacy disaster; its holds are gone from the SoT; resync --from mysql restores what MySQL shadowed", mg.r.Pod, mode, lost)
		if mg.stale() != why {
			mg.r.Logger.Warnw("redis lost its data while it is the source of truth", "pod", mg.r.Pod, "mode", string(mode), "lost_positions", lost)
			mg.recordLoss(mode, why)
		}
		mg.setStale(why)
		return
	}
	mg.rebuildRedis(ctx, lost)
}

// confirmedUncounted returns how many positions the ledger stocks that
// Redis does not count at all, in two looks AuditSettle apart: a stock
// count of a new position writes the ledger first and Redis a moment
// later, so a position seen uncounted once is not yet a loss.
func (mg *migrator) confirmedUncounted(ctx context.Context) (int, error) {
	first, err := mg.uncounted(ctx)
	if err != nil || len(first) == 0 {
		return 0, err
	}
	select {
	case <-time.After(mg.auditSettle()):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	second, err := mg.uncounted(ctx)
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
func (mg *migrator) uncounted(ctx context.Context) (map[tandem.Key]bool, error) {
	ledger, err := mg.r.Ledger.ListOnHand(ctx)
	if err != nil {
		return nil, err
	}
	list, err := mg.r.Redis.ListCounters(ctx)
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
func (mg *migrator) rebuildRedis(ctx context.Context, lost int) {
	start := time.Now()
	rep := &RedisRebuild{DetectedAt: mg.r.Now().UTC(), Lost: lost}
	why := fmt.Sprintf("pod %s: Redis lost its data (%d stocked positions had no count) and is being rebuilt from MySQL", mg.r.Pod, lost)
	mg.setStale(why)
	mg.loss.rebuilding.Store(true)
	mg.r.Logger.Warnw("redis lost its data: rebuilding it from mysql", "pod", mg.r.Pod, "lost_positions", lost)
	seq, resume := mg.r.repair.holdRounds()
	err := mg.rebuildRedisRun(ctx, rep)
	if err == nil {
		settled := mg.r.repair.rebuilt(tandem.StoreMySQL, seq)
		err = mg.r.repair.tombstoneEnded(ctx, settled, mg.r.MySQL, mg.r.Redis)
	}
	resume()
	mg.loss.rebuilding.Store(false)
	rep.EndedAt = mg.r.Now().UTC()
	if err != nil {
		rep.Err = err.Error()
		mg.r.Logger.Warnw("redis rebuild failed; it is tried again", "pod", mg.r.Pod, "error", err)
	} else {
		mg.setStale("")
		mg.r.Logger.Warnw("redis rebuilt from mysql after a data loss", "pod", mg.r.Pod,
			"positions", rep.Positions, "holds", rep.Holds, "took", time.Since(start).String())
		mg.recordLoss(tandem.ModeMySQL, fmt.Sprintf("pod %s: Redis lost its data (%d stocked positions had no count); rebuilt from MySQL: %d positions, %d holds in %s",
			mg.r.Pod, lost, rep.Positions, rep.Holds, time.Since(start).Round(time.Millisecond)))
	}
	mg.loss.mu.Lock()
	mg.loss.last = rep
	mg.loss.mu.Unlock()
	if o, ok := mg.r.Observer.(RebuildObserver); ok {
		o.ObserveRedisRebuild(mg.r.Pod, rep.Holds, rep.Positions, time.Since(start), err)
	}
	mg.r.repair.dirtyDueNow()
}

func (mg *migrator) rebuildRedisRun(ctx context.Context, rep *RedisRebuild) error {
	holds, err := mg.r.MySQL.ActiveHolds(ctx)
	if err != nil {
		return fmt.Errorf("rebuild redis: list mysql holds: %w", err)
	}
	byShop := map[int64][]tandem.Reservation{}
	for _, h := range holds {
		byShop[h.ShopID] = append(byShop[h.ShopID], h)
	}
	onHand, err := mg.r.Ledger.ListOnHand(ctx)
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
		resume := mg.pauseShops(batch)
		n, err := mg.r.Redis.RebuildShops(ctx, batch, bh)
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
		sr, err := mg.r.repair.sweep(ctx)
		if err != nil {
			return fmt.Errorf("rebuild redis: catch up: %w", err)
		}
		if sr.Carts == 0 || sr.Converged == 0 {
			break
		}
	}
	return mg.r.Redis.(WholeMarker).Mark(ctx)
}

// recordLoss records the loss as a state_drift of the pod (no cart).
func (mg *migrator) recordLoss(mode tandem.Mode, msg string) {
	if mg.r.Recorder == nil {
		return
	}
	mg.r.Recorder.Record(tandem.Comparison{
		At: mg.r.Now(), Pod: mg.r.Pod, Op: tandem.OpAudit, SourceOfTruth: mode.SourceOfTruth(), Kind: tandem.KindStateDrift,
		Primary: tandem.Outcome{Store: mode.SourceOfTruth(), Status: tandem.OutcomeOK, Message: msg},
		Shadow:  tandem.Outcome{Store: tandem.StoreRedis, Status: "data_lost", Message: msg},
	})
}

// redisWhole writes the marker after an operator's resync rebuilt Redis.
func (mg *migrator) redisWhole(ctx context.Context) {
	if m, ok := mg.r.Redis.(WholeMarker); ok && m.Mark(ctx) == nil {
		mg.setStale("")
	}
}
