package dualwrite

import (
	"context"
	"fmt"
	"slices"

	"github.com/tandemhq/tandem"
)

// Explained contention. At the sold-out boundary the two stores pick their
// winners concurrently, so a reserve may be granted by one and refused by
// the other, or granted in other groups: contention, which convergence
// resolves and which is no fault of either store. A store whose records
// drifted (a legacy counter set by hand, a pool that lost rows) answers
// the same way, and must not pass for contention. So a reserve whose two
// answers differ so is contention only when the difference is explained:
// each store's records of the positions involved agree with themselves
// (tandem.Records.Consistent: read in one atomic step, so true under any
// concurrency unless the store drifted). Otherwise the comparison is a
// divergence, each drifted position is recorded as a state_drift at once,
// and the store that drifted is repaired before the cart converges.

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

// requestKeys returns the positions a reserve may draw from: every group
// of every line, at most explainKeys.
func requestKeys(req tandem.ReserveRequest) []tandem.Key {
	return appendRequestKeys(nil, req)
}

// appendRequestKeys appends requestKeys(req) to dst, each position once in
// the buyer's order: a cart has a few positions, and a linear search of
// those found so far (at most explainKeys) is cheaper than a set.
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

// positionView is one position as the ledger and both stores count it.
type positionView struct {
	key          tandem.Key
	ledger       int64
	redis, mysql tandem.Records
}

// selfCause says why a store's records of the position do not agree with
// themselves ("" when they do). Each store reads them in one atomic step,
// so they agree under any concurrency unless the store drifted; whether
// they agree with the ledger is for the sweep to judge at rest (a legacy
// claim's second step, a stock count, may be on its way).
func selfCause(store string, c tandem.Records) string {
	switch {
	case c.Sellable != c.Available && store == tandem.StoreMySQL:
		return fmt.Sprintf("mysql's pool and unpooled units hold %d sellable, on_hand less holds is %d", c.Sellable, c.Available)
	case c.Sellable != c.Available:
		return fmt.Sprintf("redis's counter says %d available, its on_hand less holds is %d", c.Available, c.Sellable)
	case c.Available < 0:
		return fmt.Sprintf("%s counts available %d, below zero", store, c.Available)
	}
	return ""
}

// judge finds what is wrong at the position, each store against itself:
// the store that drifted and why ("" when none).
func (v positionView) judge() (store, cause string) {
	if why := selfCause(tandem.StoreRedis, v.redis); why != "" {
		return tandem.StoreRedis, why
	}
	if why := selfCause(tandem.StoreMySQL, v.mysql); why != "" {
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

// explain judges a reserve whose two answers differed as contention would
// make them differ, before the cart converges: it reads each position of
// the request in the ledger and in both stores' own records, and returns
// the verdict. A store whose records disagree with themselves drifted: it
// is repaired at once from its own on_hand and holds (tandem.Recounter
// Repair, one atomic step, safe under traffic), so that the cart's
// convergence finds its true count. Whether the counts agree with the
// ledger, and the holds between the stores, is the sweep's to judge at
// rest. A position that cannot be read leaves the comparison as
// contention, and the sweep and the audit look at the pod soon.
func (r *Router) explain(ctx context.Context, j *shadowJob) verdict {
	if r.Ledger == nil {
		return verdict{contention: true}
	}
	views, err := r.viewPositions(ctx, requestKeys(j.call.req))
	if err != nil {
		r.repair.sweepSoon()
		return verdict{contention: true}
	}
	var v verdict
	for _, pv := range views {
		store, cause := pv.judge()
		if cause == "" {
			continue
		}
		d := pv.drift(cause)
		d.Fixed = r.repairPosition(ctx, store, pv.key)
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
			rc, err := r.Redis.Records(ctx, k)
			if err != nil {
				return err
			}
			mc, err := r.MySQL.Records(ctx, k)
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

// repairPosition repairs the store's records of k from themselves and
// says what it did.
func (r *Router) repairPosition(ctx context.Context, store string, k tandem.Key) string {
	s := r.store(store)
	var c *tandem.Records
	err := r.call(ctx, func(ctx context.Context) (err error) {
		c, err = s.Repair(ctx, k)
		return err
	})
	if err != nil {
		r.repair.sweepSoon()
		return fmt.Sprintf("%s repair failed (%s): the sweep retries", store, tandem.ErrorMessage(err))
	}
	return fmt.Sprintf("%s repaired from its own on_hand and holds: available %d, held %d", store, c.Available, c.Reserved)
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
