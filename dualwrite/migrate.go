package dualwrite

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
)

// migrator moves a pod's holds between its stores in bulk, beside the
// request path: the backfill of MySQL before the pod enters shadow
// (backfill.go), the audit and the operator's resync of Redis (audit.go),
// and the rebuild of a Redis that lost its data (redisloss.go). One per
// Router, which points at it.
//
// The request path asks it whether MySQL is still followed after a
// backfill (following), whether Redis is being rebuilt (rebuilding), and
// waits for the shops it rewrites (waitShop), as the repairer's convergence
// does. It uses the repairer's sweep to catch up with what changed during
// a copy, and its comparison of positions for the audit.
type migrator struct {
	r *Router

	backfillMu sync.Mutex // one backfill at a time
	// inCopy is set while a backfill copies: the periodic sweep waits for
	// the copy's own catch-up (it would converge every hold not copied yet).
	inCopy atomic.Bool
	// touchMu guards touched: while a copy runs, the carts of the
	// operations admitted with a shadow, which its catch-up converges one
	// by one; nil once only a sweep of every hold can catch up (a stock
	// count, shadow work in flight when the copy began, more than
	// maxTouchedCarts carts).
	touchMu sync.Mutex
	touched map[cartKey]struct{}
	// followUntil (unix ns) keeps MySQL written as the shadow of a pod in
	// redis after a Backfill; 0 when not.
	followUntil atomic.Int64
	// progressMu guards backfill, the running or last backfill.
	progressMu sync.Mutex
	backfill   *BackfillProgress
	// pauseMu guards paused: per shop a copy is rewriting, the channel
	// closed when it is done. pausing counts the pauses in force, so that
	// shadow work outside a copy never takes pauseMu.
	pauseMu sync.Mutex
	paused  map[int64]chan struct{}
	pausing atomic.Int64
	// uncopied (under pauseMu) holds the shops a copy will rewrite and
	// has not paused yet: their shadow work, when Redis is the SoT, is skipped
	// (skipsShadow). awaiting counts them, so that shadow work outside a
	// copy never takes pauseMu.
	uncopied map[int64]bool
	awaiting atomic.Int64
	// loss watches the pod's Redis for a data loss (redisloss.go).
	loss redisLoss
}

func newMigrator(r *Router) *migrator { return &migrator{r: r} }

// Backfill copies the pod's active Redis holds into MySQL online, so that
// MySQL can shadow Redis from the first request. Rollout runs it before a
// pod enters shadow; ctx cancels it. From its start until the pod is seen
// in shadow (at most BackfillFollow after its end, or at once when it
// fails) this instance writes MySQL as the pod's shadow. It returns how
// many holds it copied.
func (r *Router) Backfill(ctx context.Context) (int, error) {
	return r.migrate.backfillFrom(ctx, tandem.BackfillCheckpoint{}, nil)
}

// BackfillFrom is Backfill resumed after from (a checkpoint that save was
// given by an earlier run, interrupted): the shops up to from.Shop are not
// copied again. save, when set, is given every checkpoint as the copy
// commits batches, in order; a save that fails is logged and the copy goes
// on (the next checkpoint is saved in its place). It returns how many holds
// it copied, from.Copied included.
func (r *Router) BackfillFrom(ctx context.Context, from tandem.BackfillCheckpoint, save func(context.Context, tandem.BackfillCheckpoint) error) (int, error) {
	return r.migrate.backfillFrom(ctx, from, save)
}

// BackfillProgress returns the running or last backfill, nil when none ran.
func (r *Router) BackfillProgress() *BackfillProgress { return r.migrate.progress() }

// Audit compares, per position, the ledger's on_hand with what each store
// the mode maintains can sell: Redis must hold available + held = on_hand,
// MySQL its conservation invariant, and the two stores must offer the same
// available quantity. A position that disagrees is looked at again after
// AuditSettle, so holds in flight (a shadow write not yet landed) do not
// show as drift; one that still disagrees is converged by a sweep (its
// carts from the SoT, then its shadow count from the ledger), and the
// audit reports what it found, what it fixed and what is left.
func (r *Router) Audit(ctx context.Context) (*tandem.Audit, error) { return r.migrate.audit(ctx) }

// Resync rebuilds the pod's Redis counters and holds from the ledger and the
// active MySQL holds.
func (r *Router) Resync(ctx context.Context) (int, error) { return r.migrate.resync(ctx) }

// RedisStale says why the pod's Redis is known to have lost its data and
// is not whole yet ("" when it is not known stale): being rebuilt from
// MySQL, or lost while it was the SoT (the legacy disaster).
func (r *Router) RedisStale() string { return r.migrate.stale() }

// RedisRebuilding reports whether the pod's Redis is being rebuilt from
// MySQL after a data loss; the kill switch waits for it (Mode).
func (r *Router) RedisRebuilding() bool { return r.migrate.rebuilding() }

// LastRedisRebuild returns the last rebuild of the pod's Redis after a
// data loss, nil when none ran on this instance.
func (r *Router) LastRedisRebuild() *RedisRebuild { return r.migrate.lastRebuild() }

// CheckRedisNow makes the watch look at the pod's Redis at once (a kill
// switch engaging gives its fallback priority).
func (r *Router) CheckRedisNow() { r.migrate.checkRedisNow() }

// following reports whether a pod in mode m still writes MySQL as its
// shadow after a Backfill (Router.routeMode); any mode but redis ends it.
func (mg *migrator) following(m tandem.Mode) bool {
	if m != tandem.ModeRedis {
		mg.followUntil.Store(0)
		return false
	}
	until := mg.followUntil.Load()
	return until != 0 && mg.r.Now().UnixNano() < until
}

// copying reports whether a backfill is copying.
func (mg *migrator) copying() bool { return mg.inCopy.Load() }

// maxTouchedCarts bounds the carts a copy remembers for its catch-up;
// past it the catch-up sweeps the stores whole.
const maxTouchedCarts = 50_000

// wrote records a write admitted with a shadow during a copy: a cart
// operation's cart (ck), or a stock count or anything else only a sweep
// catches up (ck nil).
func (mg *migrator) wrote(ck *cartKey) {
	mg.touchMu.Lock()
	defer mg.touchMu.Unlock()
	switch {
	case mg.touched == nil:
	case ck == nil || len(mg.touched) >= maxTouchedCarts:
		mg.touched = nil // the catch-up sweeps
	default:
		mg.touched[*ck] = struct{}{}
	}
}

// startTouching starts a copy's record of writes, empty.
func (mg *migrator) startTouching() {
	mg.touchMu.Lock()
	mg.touched = map[cartKey]struct{}{}
	mg.touchMu.Unlock()
}

// touchedCarts ends the copy's record and returns the carts written
// during it; whole is false when only a sweep catches up (a stock count,
// or more than maxTouchedCarts carts).
func (mg *migrator) touchedCarts() (carts []cartKey, whole bool) {
	mg.touchMu.Lock()
	defer mg.touchMu.Unlock()
	if mg.touched == nil {
		return nil, false
	}
	carts = make([]cartKey, 0, len(mg.touched))
	for ck := range mg.touched {
		carts = append(carts, ck)
	}
	mg.touched = nil
	return carts, true
}

// What the backfill and the rebuild of a Redis share: the pause of the
// shadow work of the shops they rewrite.

// pauseShops makes the shadow work of shops wait (waitShop) until the
// returned func is called.
func (mg *migrator) pauseShops(shops []int64) (resume func()) {
	done := make(chan struct{})
	mg.pausing.Add(1)
	mg.pauseMu.Lock()
	if mg.paused == nil {
		mg.paused = map[int64]chan struct{}{}
	}
	for _, sh := range shops {
		mg.paused[sh] = done
		if mg.uncopied[sh] {
			delete(mg.uncopied, sh)
			mg.awaiting.Add(-1)
		}
	}
	mg.pauseMu.Unlock()
	return func() {
		mg.pauseMu.Lock()
		for _, sh := range shops {
			if mg.paused[sh] == done {
				delete(mg.paused, sh)
			}
		}
		mg.pauseMu.Unlock()
		close(done)
		mg.pausing.Add(-1)
	}
}

// awaitCopy marks shops as waiting for their batch of a copy (see
// skipsShadow) until the returned func is called or the batch pauses them.
func (mg *migrator) awaitCopy(shops []int64) (done func()) {
	mg.pauseMu.Lock()
	mg.uncopied = make(map[int64]bool, len(shops))
	for _, sh := range shops {
		mg.uncopied[sh] = true
	}
	mg.awaiting.Store(int64(len(mg.uncopied)))
	mg.pauseMu.Unlock()
	return func() {
		mg.pauseMu.Lock()
		mg.uncopied = nil
		mg.awaiting.Store(0)
		mg.pauseMu.Unlock()
	}
}

// skipsShadow reports whether a shadow job of shop, run once its SoT
// answered, can be left out because a copy will rewrite the shop after
// it: the batch pauses the shop's shadow work, then reads Redis, which
// has the job's operation by then. Writing it into MySQL first was the
// copy's largest cost to buyers: from the first moment of following,
// every shop's first shadow reserve filled its whole unit pool, only for
// its batch to rewrite it.
func (mg *migrator) skipsShadow(shop int64) bool {
	if mg.awaiting.Load() == 0 {
		return false
	}
	mg.pauseMu.Lock()
	defer mg.pauseMu.Unlock()
	return mg.uncopied[shop]
}

// waitShop returns when the shop's shadow work may run.
func (mg *migrator) waitShop(ctx context.Context, shop int64) {
	for mg.pausing.Load() > 0 {
		mg.pauseMu.Lock()
		ch := mg.paused[shop]
		mg.pauseMu.Unlock()
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

// auditSettle is AuditSettle, 4 x ShadowTimeout when unset.
func (mg *migrator) auditSettle() time.Duration {
	if mg.r.AuditSettle > 0 {
		return mg.r.AuditSettle
	}
	return 4 * mg.r.ShadowTimeout
}
