package dualwrite

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tandemhq/tandem"
)

// Explained contention. At the sold-out boundary the two stores pick their
// winners concurrently, so a reserve may be granted by one and refused by
// the other, or granted in other groups: contention, which convergence
// resolves and which is no fault of either store. A store whose counts
// drifted (a legacy counter set by hand, a pool that lost rows) answers
// the same way, and must not pass for contention. So a reserve whose two
// answers differ so is contention only when the difference is explained:
// each store's records of the positions involved agree with themselves
// (tandem.Counters.Consistent, atomic in each store) and, once the carts
// in flight on those positions have settled, with the ledger. Otherwise
// the comparison is a divergence, each drifted position is recorded as a
// state_drift at once, and the store that drifted is recounted from the
// ledger before the cart converges.

// explainKeys bounds the positions a reserve's explanation reads: the
// groups of its lines, in the buyer's order, up to this many.
const explainKeys = 64

// verdict is how a comparison whose answers differed was judged.
type verdict struct {
	// contention: the difference was the sold-out boundary's, explained.
	contention bool
	// drift: the positions found drifted (the comparison is a divergence).
	drift []tandem.Drift
}

// busyPositions counts, per position, the shadow jobs of this instance in
// flight on it: a reserve's from its admission, a claim's or release's
// from its SoT's answer, each until its job, convergence included, is done.
type busyPositions struct {
	mu sync.Mutex
	m  map[tandem.Key]int
}

func (b *busyPositions) add(keys []tandem.Key, n int) {
	if len(keys) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = make(map[tandem.Key]int)
	}
	for _, k := range keys {
		if b.m[k] += n; b.m[k] <= 0 {
			delete(b.m, k)
		}
	}
}

func (b *busyPositions) any(keys []tandem.Key) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		if b.m[k] > 0 {
			return true
		}
	}
	return false
}

// requestKeys returns the positions a reserve may draw from: every group
// of every line, at most explainKeys.
func requestKeys(req tandem.ReserveRequest) []tandem.Key {
	return appendRequestKeys(nil, req)
}

// appendRequestKeys appends requestKeys(req) to dst, each position once in
// the buyer's order. It runs on every reserve of a shadow mode (occupy), so
// it allocates nothing when dst has room: a cart has a few positions, and
// a linear search of those found so far (at most explainKeys) is cheaper
// than a set.
func appendRequestKeys(dst []tandem.Key, req tandem.ReserveRequest) []tandem.Key {
	start := len(dst)
	for _, l := range req.Lines {
		for _, g := range l.GroupIDs {
			if len(dst)-start >= explainKeys {
				return dst
			}
			k := tandem.Key{ShopID: req.ShopID, ItemID: l.ItemID, GroupID: g}
			if !slices.Contains(dst[start:], k) {
				dst = append(dst, k)
			}
		}
	}
	return dst
}

// lineKeys returns the positions of held lines.
func lineKeys(shop int64, lines []tandem.Line) []tandem.Key {
	keys := make([]tandem.Key, 0, len(lines))
	for _, l := range lines {
		keys = append(keys, l.Key(shop))
	}
	return keys
}

// occupy marks the job's positions busy until release.
func (j *shadowJob) occupy(keys []tandem.Key) {
	j.keys = keys
	j.r.busy.add(keys, 1)
}

// release ends occupy; safe to call twice.
func (j *shadowJob) release() {
	if j.keys != nil {
		j.r.busy.add(j.keys, -1)
		j.keys = nil
	}
}

// waitQuiet waits, at most d, until no other shadow job of this instance
// is in flight on keys, and reports whether that happened.
func (r *Router) waitQuiet(ctx context.Context, keys []tandem.Key, d time.Duration) bool {
	end := time.Now().Add(d)
	for r.busy.any(keys) {
		if !time.Now().Before(end) {
			return false
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// positionView is one position as the ledger and both stores count it.
type positionView struct {
	key          tandem.Key
	ledger       int64
	redis, mysql tandem.Records
}

// selfCause says why a store's records of the position do not agree with
// themselves or with the ledger ("" when they do). Both checks hold under
// any concurrency but a legacy claim's window (the ledger deducted, Redis
// not yet), which only a quiet position rules out.
func selfCause(store string, c tandem.Records, ledger int64, quiet bool) string {
	switch {
	case c.Available < 0:
		return fmt.Sprintf("%s counts available %d, below zero", store, c.Available)
	case c.Sellable != c.Available && store == tandem.StoreMySQL:
		return fmt.Sprintf("mysql's pool and unpooled units hold %d sellable, on_hand less holds is %d", c.Sellable, c.Available)
	case c.Sellable != c.Available:
		return fmt.Sprintf("redis's counter says %d available, its on_hand less holds is %d", c.Available, c.Sellable)
	case quiet && c.OnHand != ledger:
		return fmt.Sprintf("%s counts on_hand %d, the ledger %d", store, c.OnHand, ledger)
	}
	return ""
}

// judge finds what is wrong at the position, each store against itself
// and the ledger: the store that drifted and why ("" when none).
func (v positionView) judge(quiet bool) (store, cause string) {
	if why := selfCause(tandem.StoreRedis, v.redis, v.ledger, quiet); why != "" {
		return tandem.StoreRedis, why
	}
	if why := selfCause(tandem.StoreMySQL, v.mysql, v.ledger, quiet); why != "" {
		return tandem.StoreMySQL, why
	}
	return "", ""
}

// drift is the view as a drift record.
func (v positionView) drift(cause string) tandem.Drift {
	d := tandem.Drift{ShopID: v.key.ShopID, ItemID: v.key.ItemID, GroupID: v.key.GroupID, LedgerOnHand: v.ledger, Cause: cause}
	ra, rh, rs := v.redis.Available, v.redis.Reserved, v.redis.Sellable
	ma, mh, msl := v.mysql.Available, v.mysql.Reserved, v.mysql.Sellable
	d.RedisAvailable, d.RedisHeld, d.RedisSellable = &ra, &rh, &rs
	d.MySQLAvailable, d.MySQLHeld, d.MySQLSellable = &ma, &mh, &msl
	return d
}

// explain judges a reserve whose answers p (SoT) and sh (shadow) differed
// as contention would make them differ, before the cart converges: it
// waits (at most ShadowTimeout) for the other shadow jobs of this instance
// on the request's positions, reads each position in the ledger and both
// stores, and returns the verdict. A store whose records disagree with
// themselves or (once quiet) with the ledger drifted: it is recounted from
// the ledger at once when quiet, so that the cart's convergence finds its
// true count, else by the sweep at rest. Holds that differ between the
// stores are the sweep's to find, hold by hold. A position that cannot be
// read leaves the comparison as contention, and the sweep and the audit
// look at the pod soon.
func (r *Router) explain(ctx context.Context, j *shadowJob) verdict {
	if r.Ledger == nil {
		return verdict{contention: true}
	}
	keys := requestKeys(j.call.req)
	j.release() // this job is not one the others wait for
	// Quiet: no shadow job in flight on the positions, and no cart whose
	// convergence is pending (a Redis claim's second step may be among
	// them: a recount then would count its units twice).
	quiet := r.waitQuiet(ctx, keys, r.ShadowTimeout) && r.DirtyCarts() == 0
	views, err := r.viewPositions(ctx, keys)
	if err != nil {
		r.sweepSoon()
		return verdict{contention: true}
	}
	var v verdict
	for _, pv := range views {
		store, cause := pv.judge(quiet)
		if cause == "" {
			continue
		}
		d := pv.drift(cause)
		if quiet {
			d.Fixed = r.recountPosition(ctx, store, pv.key)
		} else {
			d.Fixed = store + " is recounted by the sweep, at rest"
			r.sweepSoon()
		}
		v.drift = append(v.drift, d)
	}
	v.contention = len(v.drift) == 0
	return v
}

// viewPositions reads keys in the ledger and both stores, each position
// under ShadowTimeout.
func (r *Router) viewPositions(ctx context.Context, keys []tandem.Key) ([]positionView, error) {
	views := make([]positionView, 0, len(keys))
	for _, k := range keys {
		v := positionView{key: k}
		err := r.call(ctx, func(ctx context.Context) error {
			rc, err := records(ctx, r.Redis, k)
			if err != nil {
				return err
			}
			mc, err := records(ctx, r.MySQL, k)
			if err != nil {
				return err
			}
			v.ledger, err = r.Ledger.OnHand(ctx, k)
			v.redis, v.mysql = *rc, *mc
			return err
		})
		if err != nil {
			return nil, err
		}
		views = append(views, v)
	}
	return views, nil
}

// records reads k in s's own records; a store that keeps none counts from
// the ledger, so its counters are its records.
func records(ctx context.Context, s tandem.ReservationStore, k tandem.Key) (*tandem.Records, error) {
	if rc, ok := s.(tandem.Recounter); ok {
		return rc.Records(ctx, k)
	}
	c, err := s.Counters(ctx, k)
	if err != nil {
		return nil, err
	}
	return &tandem.Records{Counters: *c, Sellable: c.Available}, nil
}

// recountPosition sets the store's count of k again from the ledger, in
// the position's stripe (no stock count in between), and says what it
// did.
func (r *Router) recountPosition(ctx context.Context, store string, k tandem.Key) string {
	rc, ok := r.store(store).(tandem.Recounter)
	if !ok {
		return ""
	}
	pl := r.positionLock(k)
	pl.Lock()
	defer pl.Unlock()
	var c *tandem.Counters
	err := r.call(ctx, func(ctx context.Context) (err error) {
		c, err = rc.Recount(ctx, k)
		return err
	})
	if err != nil {
		r.sweepSoon()
		return fmt.Sprintf("%s recount failed (%s): the sweep retries", store, tandem.ErrorMessage(err))
	}
	return fmt.Sprintf("%s recounted from the ledger: available %d, held %d", store, c.Available, c.Reserved)
}

// recordPositionDrift records each drifted position a comparison of op
// found as a state_drift of its own.
func (r *Router) recordPositionDrift(op tandem.Op, drift []tandem.Drift) {
	if r.Recorder == nil {
		return
	}
	for _, d := range drift {
		redis, mysql := tandem.DriftOutcomes(d)
		r.Recorder.Record(tandem.Comparison{
			At: r.Now(), Pod: r.Pod, Op: op, ShopID: d.ShopID, SourceOfTruth: "ledger",
			Kind: tandem.KindStateDrift, Primary: redis, Shadow: mysql, Drift: []tandem.Drift{d},
		})
	}
}
