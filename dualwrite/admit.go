package dualwrite

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
)

// Admission orders the router's operations in two ways, both needed for the
// buyer to see one inventory while a store answers and the other follows
// concurrently:
//
//   - Per cart: an operation on a cart calls the SoT only once the SoT call
//     of the cart's previous operation is done (and its shadow job runs
//     after the previous shadow job, see goShadow). Otherwise a claim or
//     release racing the cart's reserve finds nothing in the SoT (the
//     reserve has not landed), is answered from the other store's copy
//     (earlierSoTAnswers), and leaves the SoT holding a cart the buyer was
//     told is claimed or released. Checkout operates on one cart from one
//     buyer, a payment apart: the wait is almost always nil.
//
//   - Per SoT (the fence): operations are admitted in epochs of one SoT.
//     When the effective SoT changes (a mode flip, the kill switch), a new
//     operation waits until every operation admitted under the previous SoT
//     is done, so that the new SoT holds every hold the old one granted
//     before it answers anyone (else a second buyer gets the unit), and a
//     cart settled under the old SoT is settled in the new one. The cost:
//     requests arriving at a flip wait for the requests in flight at it,
//     at most the fence bound (fenceWait); a fence that runs out lets the
//     request through (availability first) and is counted (FenceTimeouts).
//
//   - Per cart across a change of SoT: the fence is for every cart at
//     once, and may run out. Each cart also counts its operations not
//     finished yet (SoT call, shadow job, convergence) per SoT they were
//     admitted under, so an operation knows at admission, from the cart's
//     own state, whether the cart still has work of another SoT in flight
//     (it is in flux; a fence that ran out is the only way to get there).
//     Such an operation waits for that work (catchUp) before its SoT
//     answers for the cart, and the cart is then converged from the old
//     SoT if its copy did not land; an ordinary cart pays nothing.
//
// Both orders are per router, that is per `tandem serve` instance: two
// instances apply a flip up to a second apart, and for that second each
// answers from its own SoT. No order between instances exists to make that
// window linearizable; rollout keeps it short and the audit catches drift.

// epoch is a span of operations admitted under one SoT.
type epoch struct {
	sot    string
	active int
	// closing is set when an operation waits for the epoch to drain: no
	// more are admitted into it, so the wait ends.
	closing bool
	// drained is closed (and replaced) each time active falls to zero.
	drained chan struct{}
}

// cartOrder is a cart's admitted operations (guarded by Router.mu); the
// router keeps one while the cart has an operation not finished.
type cartOrder struct {
	// last is closed when the SoT call of the cart's latest registered
	// operation is done; nil once it is.
	last chan struct{}
	// open counts, per SoT (sotIndex), the cart's registered operations
	// admitted under it and not finished (SoT call, shadow job and its
	// convergence); idle[i], when made, is closed as open[i] falls to zero.
	open [2]int
	idle [2]chan struct{}
}

// sotIndex numbers a SoT for cartOrder.
func sotIndex(sot string) int {
	if sot == tandem.StoreMySQL {
		return 1
	}
	return 0
}

// op is one admitted operation, done when its SoT call and its shadow job
// (with repair) have both finished.
type op struct {
	r    *Router
	ep   *epoch
	ck   cartKey
	link chan struct{} // closed when the SoT call is done; nil when the op is not in the cart's order
	refs atomic.Int32
	// order is the cart's order the op counts in (nil for reads and stock
	// counts); prevSoTDone, when not nil, is closed once the cart's
	// operations admitted under another SoT, in flight at this one's
	// admission, have all finished.
	order       *cartOrder
	prevSoTDone <-chan struct{}

	mode   tandem.Mode
	sot    tandem.ShadowStore
	shadow tandem.ShadowStore
	// granting is set for a reserve with a grant registered (grants.go);
	// granted once its SoT answered reserved. A claim sets both once its
	// SoT sold the cart (Router.sold).
	granting, granted bool
	// unshadowed is set for a cart operation admitted without a shadow
	// (counted in Router.unshadowed).
	unshadowed bool
}

// fenceWait bounds each wait of an admission: for the previous SoT's
// operations and for the cart's previous operation. A shadow job runs its
// store call after the SoT's answer, then its convergence (a read of each
// store and a change, each under ShadowTimeout).
func (r *Router) fenceWait() time.Duration { return FenceWait(r.ShadowTimeout) }

// The fence's bound is FenceShadowTimeouts x shadow.timeout + FenceSlack
// (the alert TandemFenceTimeouts quotes it; a test holds the two equal).
const (
	FenceShadowTimeouts = 4
	FenceSlack          = 500 * time.Millisecond
)

// FenceWait is the fence's bound for a shadow timeout.
func FenceWait(shadowTimeout time.Duration) time.Duration {
	return FenceShadowTimeouts*shadowTimeout + FenceSlack
}

// FenceTimeouts returns how many waits of an admission ran out of time and
// let a request through before the operations it should follow were done.
func (r *Router) FenceTimeouts() int64 { return r.fenced.Load() }

// PrevSoTWaits returns how many operations found their cart with work of
// another SoT still in flight (a fence had run out) and waited for it
// before their SoT answered (catchUp).
func (r *Router) PrevSoTWaits() int64 { return r.prevSoTWaits.Load() }

// admit admits an operation under the effective mode, after the previous
// SoT's operations are done (if the SoT changed) and, when ck is set, after
// the cart's previous operation; with register it becomes the cart's latest
// operation (reads follow the order without joining it). It returns
// EUNAVAILABLE when ctx ends first. The caller must call done once.
func (r *Router) admit(ctx context.Context, ck *cartKey, register bool) (*op, error) {
	return r.admitWith(ctx, ck, register, nil)
}

// admitReserve admits a reserve of the cart on the positions keys: with
// a shadow, its grant is registered in the same step as its admission
// under the SoT (grants.go), so that no reserve admitted under the next
// SoT can miss it.
func (r *Router) admitReserve(ctx context.Context, ck *cartKey, keys []tandem.Key) (*op, error) {
	return r.admitWith(ctx, ck, true, keys)
}

func (r *Router) admitWith(ctx context.Context, ck *cartKey, register bool, keys []tandem.Key) (*op, error) {
	wait := r.fenceWait()
	fence := fenceTimer{deadline: time.Now().Add(wait)}
	defer fence.stop()
	expired := false
	r.mu.Lock()
	for {
		mode := r.routeMode()
		sot := mode.SourceOfTruth()
		ep := r.epoch
		if ep != nil && (ep.sot != sot || ep.closing) && ep.active > 0 && !expired {
			ep.closing = true
			drained := ep.drained
			r.mu.Unlock()
			select {
			case <-drained:
			case <-fence.C():
				expired = true
				r.fenced.Add(1)
			case <-ctx.Done():
				return nil, tandem.Errorf(tandem.EUNAVAILABLE, "pod %s is switching its source of truth to %s: %v", r.Pod, sot, ctx.Err())
			}
			r.mu.Lock()
			continue
		}
		if ep == nil || ep.sot != sot || ep.active == 0 || ep.closing {
			ep = &epoch{sot: sot, drained: make(chan struct{})}
			r.epoch = ep
		}
		ep.active++
		o := &op{r: r, ep: ep, mode: mode, sot: r.store(mode.SourceOfTruth()), shadow: r.store(mode.Shadow())}
		o.refs.Store(1)
		if o.shadow != nil && (ck == nil || register) && r.migrate.copying() {
			r.migrate.wrote(ck) // a write the copy's catch-up must look at
		}
		if keys != nil && ck != nil && o.shadow != nil {
			o.granting = true
			r.grants.begin(sotIndex(sot), *ck, keys)
		}
		var prev chan struct{}
		if ck != nil {
			o.ck = *ck
			c := r.carts[*ck]
			if c != nil {
				prev = c.last
			}
			if register && o.shadow == nil {
				o.unshadowed = true
				r.unshadowed++
			}
			if register {
				if c == nil {
					c = &cartOrder{}
					r.carts[*ck] = c
				}
				o.link = make(chan struct{})
				c.last = o.link
				i := sotIndex(sot)
				c.open[i]++
				o.order = c
				if c.open[1-i] > 0 {
					if c.idle[1-i] == nil {
						c.idle[1-i] = make(chan struct{})
					}
					o.prevSoTDone = c.idle[1-i]
				}
			}
		}
		r.mu.Unlock()
		if prev == nil {
			return o, nil
		}
		return r.follow(ctx, o, prev, expired, &fence, wait)
	}
}

// follow returns o once the cart's previous operation, prev, is done, or
// at once when the admission's bound has run out (counted). It returns
// EUNAVAILABLE when ctx ends first, keeping o's place in the cart's order
// until prev is done, so the next operation still follows it.
func (r *Router) follow(ctx context.Context, o *op, prev chan struct{}, expired bool, fence *fenceTimer, wait time.Duration) (*op, error) {
	if !expired {
		select {
		case <-prev:
			return o, nil
		case <-fence.C():
			r.fenced.Add(1)
			return o, nil
		case <-ctx.Done():
		}
	} else {
		select {
		case <-prev:
			return o, nil
		default:
			r.fenced.Add(1)
			return o, nil
		}
	}
	go func() {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-prev:
		case <-t.C:
		}
		o.done()
	}()
	return nil, tandem.Errorf(tandem.EUNAVAILABLE, "cart %s is busy with an earlier request: %v", o.ck.token, ctx.Err())
}

// fenceTimer is an admission's bound, from its arrival; its timer is made
// only when the admission has to wait, which is rare.
type fenceTimer struct {
	deadline time.Time
	timer    *time.Timer
}

// C returns the channel that fires at the deadline.
func (f *fenceTimer) C() <-chan time.Time {
	if f.timer == nil {
		f.timer = time.NewTimer(time.Until(f.deadline))
	}
	return f.timer.C
}

func (f *fenceTimer) stop() {
	if f.timer != nil {
		f.timer.Stop()
	}
}

// hold keeps the operation open for a shadow job, which calls unref.
func (o *op) hold() { o.refs.Add(1) }

// done ends the SoT's part of the operation: the cart's next operation may
// call the SoT.
func (o *op) done() {
	r := o.r
	r.mu.Lock()
	if o.link != nil {
		close(o.link)
		if c := o.order; c.last == o.link {
			c.last = nil
			r.dropOrder(o.ck, c)
		}
		o.link = nil
	}
	r.mu.Unlock()
	o.unref()
}

// unref ends one part of the operation; the last one ends it in its epoch
// and in its cart's order.
func (o *op) unref() {
	if o.refs.Add(-1) > 0 {
		return
	}
	r := o.r
	if o.granting {
		r.repair.endGrant(o.ck, o.sot.Name(), o.granted)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	o.ep.active--
	if o.ep.active == 0 {
		close(o.ep.drained)
		o.ep.drained = make(chan struct{})
	}
	if o.unshadowed {
		r.unshadowed--
		if r.unshadowed == 0 {
			close(r.unshadowedIdle)
			r.unshadowedIdle = make(chan struct{})
		}
	}
	if c := o.order; c != nil {
		i := sotIndex(o.ep.sot)
		c.open[i]--
		if c.open[i] == 0 && c.idle[i] != nil {
			close(c.idle[i])
			c.idle[i] = nil
		}
		r.dropOrder(o.ck, c)
	}
}

// awaitUnshadowed returns once every cart operation admitted without a
// shadow has finished, or with ctx's error. A backfill calls it once it
// follows (new operations then have a shadow): what an operation admitted
// before did to Redis alone must be there when the copy reads Redis, since
// nothing else brings it into MySQL. The sweep leaves a cart with an
// operation in flight to that operation's shadow job, and these have none.
func (r *Router) awaitUnshadowed(ctx context.Context) error {
	for {
		r.mu.Lock()
		n, idle := r.unshadowed, r.unshadowedIdle
		r.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return tandem.Errorf(tandem.EUNAVAILABLE, "backfill of pod %s: waiting for the operations admitted before it: %v", r.Pod, ctx.Err())
		}
	}
}

// dropOrder forgets the cart's order once nothing of it is open (r.mu
// held).
func (r *Router) dropOrder(ck cartKey, c *cartOrder) {
	if c.last == nil && c.open == [2]int{} && r.carts[ck] == c {
		delete(r.carts, ck)
	}
}

// routeMode is the mode the router routes by: the effective mode, except
// that a pod still in redis during a Backfill and right after it already
// writes MySQL as its shadow, so that MySQL misses no hold between the copy
// and the switch to shadow. The first other mode seen, a failed backfill,
// or BackfillFollow after its end, ends it.
func (r *Router) routeMode() tandem.Mode {
	m := r.Mode()
	if r.migrate.following(m) {
		return tandem.ModeShadow
	}
	return m
}

// catchUp makes the SoT the operation was admitted under hold what the
// cart's previous SoT left (before a flip or a kill switch), before it
// answers for the cart. Two things can leave it behind, both known from
// the cart's own state, so an ordinary cart pays no read:
//
//   - the cart has operations of the previous SoT in flight (o.prevSoTDone:
//     the fence at the flip ran out): their shadow jobs are what copies their
//     outcome into this SoT, so the operation waits for them, at most
//     fenceWait, and is answered 503 when they do not finish by then (the
//     SoT's view of the cart may be wrong; nothing has changed);
//   - the cart is dirty here with another authority than this SoT (its
//     copy failed, timed out or was dropped; the work above may have just
//     marked it): it is converged from the other store, in the cart's line,
//     so that this SoT holds the hold the old one granted, shows the cart
//     ended (tombstone) or claimed as the old one does, and never answers
//     from a copy the old one refused. A cart that cannot be caught up
//     stays dirty and its request is answered 503.
func (r *Router) catchUp(ctx context.Context, o *op) error {
	if o.ck.token == "" || o.shadow == nil {
		return nil
	}
	if o.prevSoTDone != nil {
		if err := r.waitPrevSoT(ctx, o); err != nil {
			return err
		}
	}
	if err := r.repair.copyStale(ctx, o.ck, o.sot, o.shadow); err != nil {
		return fmt.Errorf("%w: %w", tandem.Errorf(tandem.EUNAVAILABLE,
			"cart %s is still being copied to %s after a change of source of truth; retry", o.ck.token, o.sot.Name()), err)
	}
	return nil
}

// waitPrevSoT waits, at most fenceWait, until the cart's operations admitted
// under another SoT than o's have finished (their SoT calls, shadow jobs
// and convergence). It returns EUNAVAILABLE when they have not.
func (r *Router) waitPrevSoT(ctx context.Context, o *op) error {
	select {
	case <-o.prevSoTDone:
		return nil
	default:
	}
	r.prevSoTWaits.Add(1)
	t := time.NewTimer(r.fenceWait())
	defer t.Stop()
	select {
	case <-o.prevSoTDone:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	return tandem.Errorf(tandem.EUNAVAILABLE,
		"cart %s is still being settled under the previous source of truth after a change to %s; retry", o.ck.token, o.sot.Name())
}

// settled returns the carts of carts that have no operation under way on
// this instance: the ones the sweep converges. A cart whose reserve the SoT answered a
// moment ago differs until its shadow operation lands, and that operation
// reconciles it: converging it here too only doubles the work (and on a
// busy pod, the sweep would converge dozens of such carts at every turn,
// then list every hold again). A cart in flight on another instance is
// still converged here.
func (r *Router) settled(carts []CartDiff) []CartDiff {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []CartDiff
	for _, c := range carts {
		if r.carts[cartKey{c.ShopID, c.CartToken}] == nil { // kept while an operation is not finished
			out = append(out, c)
		}
	}
	return out
}
