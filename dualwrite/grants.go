package dualwrite

import (
	"context"
	"sync"
	"time"

	"github.com/tandemhq/tandem"
)

// Grants in transit. After a change of SoT the new SoT must not sell units
// the old one granted (invariant 1), yet a hold reaches the other store only
// through its shadow job, and a job that failed, timed out or was dropped
// leaves it to the convergence worker's backoff. The fence at the flip
// waits for the jobs in flight, not for that backoff, and may run out.
//
// So the router keeps, per SoT, the holds that SoT may have granted and the
// other store may not hold yet: from the reserve's admission until its
// shadow job has copied it, and, when the cart was marked dirty instead,
// until the cart converged (parked). It keeps the same way the sales a
// MySQL SoT made that a Redis shadow may not have settled yet (sold): Redis
// holds those units only as the cart's hold, which its reaper returns to
// sale at the hold's expiry, and a flip then sold them again (TestSoak,
// under load). A reserve admitted under the other SoT
// whose positions such a hold covers first copies the parked holds into its
// SoT (in their carts' line, as catchUp does for its own cart) and waits for
// the reserves still in flight, at most fenceWait; when they cannot be
// copied or do not finish by then it answers 503: nothing is sold twice.
// Without a flip the check is one map look-up per position of the cart.
//
// What is kept lives in this process: after a restart the dirty carts come
// back from the DirtyLog without their positions, and a flip within their
// backoff is not guarded (see DirtyLog).

// grantKey is a cart's hold as granted by one SoT (sotIndex).
type grantKey struct {
	ck  cartKey
	sot int
}

// grant is a hold in transit to the other store.
type grant struct {
	keys []tandem.Key
	// inflight counts the cart's reserves admitted under the SoT and not
	// finished, and its claims the SoT sold (sold); parked is set while the
	// cart is dirty with the SoT as its authority after one of them was
	// granted or sold.
	inflight int
	parked   bool
}

// grantBook is the router's grants in transit.
type grantBook struct {
	mu sync.Mutex
	m  map[grantKey]*grant
	// at counts, per SoT and position, the grants covering it.
	at [2]map[tandem.Key]int
	// changed, when made, is closed as a grant ends.
	changed chan struct{}
}

// begin registers a reserve of ck on keys admitted under sot.
func (b *grantBook) begin(sot int, ck cartKey, keys []tandem.Key) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[grantKey]*grant{}
		b.at = [2]map[tandem.Key]int{{}, {}}
	}
	gk := grantKey{ck, sot}
	g := b.m[gk]
	if g == nil {
		g = &grant{}
		b.m[gk] = g
	}
	for _, k := range keys {
		if !containsKey(g.keys, k) {
			g.keys = append(g.keys, k)
			b.at[sot][k]++
		}
	}
	g.inflight++
}

// end ends a reserve begin registered; park keeps its grant until unpark.
func (b *grantBook) end(sot int, ck cartKey, park bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	gk := grantKey{ck, sot}
	g := b.m[gk]
	if g == nil {
		return
	}
	g.inflight--
	g.parked = g.parked || park
	b.drop(gk, g)
}

// unpark ends the parked grant of ck by sot, if any: the cart converged,
// or its authority is now the other store.
func (b *grantBook) unpark(sot int, ck cartKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	gk := grantKey{ck, sot}
	if g := b.m[gk]; g != nil && g.parked {
		g.parked = false
		b.drop(gk, g)
	}
}

// drop forgets g once nothing keeps it (b.mu held).
func (b *grantBook) drop(gk grantKey, g *grant) {
	if g.inflight > 0 || g.parked {
		return
	}
	delete(b.m, gk)
	for _, k := range g.keys {
		if b.at[gk.sot][k]--; b.at[gk.sot][k] <= 0 {
			delete(b.at[gk.sot], k)
		}
	}
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}

// covering returns the carts other than self with a grant by sot on one of
// keys, parked or in flight, and a channel closed when a grant ends.
func (b *grantBook) covering(sot int, keys []tandem.Key, self cartKey) (parked, inflight []cartKey, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	hit := false
	for _, k := range keys {
		if b.at[sot][k] > 0 {
			hit = true
			break
		}
	}
	if !hit {
		return nil, nil, nil
	}
	for gk, g := range b.m {
		if gk.sot != sot || gk.ck == self || !overlaps(g.keys, keys) {
			continue
		}
		if g.parked {
			parked = append(parked, gk.ck)
		} else {
			inflight = append(inflight, gk.ck)
		}
	}
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	return parked, inflight, b.changed
}

func containsKey(keys []tandem.Key, k tandem.Key) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

func overlaps(a, b []tandem.Key) bool {
	for _, k := range a {
		if containsKey(b, k) {
			return true
		}
	}
	return false
}

// sold registers the sale of o's cart, which o's SoT has just answered
// claimed, until its shadow job has settled it (op.unref ends it, parked
// when the cart was marked dirty). Only a Redis shadow needs it: MySQL
// counts from the ledger, which the claim deducted.
func (r *Router) sold(o *op, res *tandem.Reservation) {
	if o.shadow == nil || o.shadow.Name() != tandem.StoreRedis || res == nil || res.Status != tandem.StatusClaimed {
		return
	}
	keys := make([]tandem.Key, 0, len(res.Lines))
	for _, l := range res.Lines {
		keys = append(keys, l.Key(o.ck.shop))
	}
	r.grants.begin(sotIndex(o.sot.Name()), o.ck, keys)
	o.granting, o.granted = true, true
}

// reserveKeys returns every position a reserve may take units from.
func reserveKeys(req tandem.ReserveRequest) []tandem.Key {
	keys := make([]tandem.Key, 0, len(req.Lines))
	for _, l := range req.Lines {
		for _, g := range l.GroupIDs {
			keys = append(keys, tandem.Key{ShopID: req.ShopID, ItemID: l.ItemID, GroupID: g})
		}
	}
	return keys
}

// awaitGrants returns once no hold granted by the other SoT on keys can
// be missing from o's SoT: parked holds are copied into it (in their
// carts' line), reserves in flight are waited for, at most fenceWait. It
// returns EUNAVAILABLE when they cannot be copied or do not finish by then.
func (r *Router) awaitGrants(ctx context.Context, o *op, keys []tandem.Key) error {
	if o.shadow == nil {
		return nil
	}
	other := 1 - sotIndex(o.sot.Name())
	deadline := time.Now().Add(r.fenceWait())
	var copied map[cartKey]bool
	for {
		parked, inflight, changed := r.grants.covering(other, keys, o.ck)
		if len(parked) == 0 && len(inflight) == 0 {
			return nil // none, or only this cart's own (its catch-up copies it)
		}
		if !time.Now().Before(deadline) {
			return tandem.Errorf(tandem.EUNAVAILABLE,
				"shop %d: holds %s granted before the change of source of truth are still being copied to %s; retry",
				o.ck.shop, o.shadow.Name(), o.sot.Name())
		}
		fresh := false
		for _, ck := range parked {
			if copied[ck] {
				// Copied once by this call and parked again: a newer mark of
				// the cart, which its own line settles; wait for it below
				// rather than copy in a loop.
				continue
			}
			if err := r.repair.copyStale(ctx, ck, o.sot, o.shadow); err != nil {
				return tandem.Errorf(tandem.EUNAVAILABLE,
					"shop %d: a hold %s granted before the change of source of truth is not in %s yet (%v); retry",
					ck.shop, o.shadow.Name(), o.sot.Name(), tandem.ErrorMessage(err))
			}
			if copied == nil {
				copied = map[cartKey]bool{}
			}
			copied[ck], fresh = true, true
		}
		if fresh {
			continue // copied: look again
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-changed:
			t.Stop()
		case <-t.C:
			return tandem.Errorf(tandem.EUNAVAILABLE,
				"shop %d: holds %s granted before the change of source of truth are still being copied to %s; retry",
				o.ck.shop, o.shadow.Name(), o.sot.Name())
		case <-ctx.Done():
			t.Stop()
			return tandem.Errorf(tandem.EUNAVAILABLE, "shop %d: waiting for holds of %s: %v", o.ck.shop, o.shadow.Name(), ctx.Err())
		}
	}
}
