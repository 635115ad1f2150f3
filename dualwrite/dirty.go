package dualwrite

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tandemhq/tandem"
)

// Dirty carts. A cart whose shadow work failed, timed out, was dropped or
// could not be converged at once is marked dirty: kept in memory, written
// to the pod's durable DirtyLog (so a restart of the instance resumes it),
// and converged by a background worker with backoff until the stores agree
// on it. Nothing is given up silently.

// dirtyEntry is one dirty cart as the worker tracks it.
type dirtyEntry struct {
	cart     tandem.DirtyCart
	attempts int
	next     time.Time // real time of the next attempt
	gen      uint64    // bumped by every mark; an attempt clears only its own
	seq      uint64    // the set's mark count at this entry's latest mark (rebuilt)
	stored   bool      // the current mark is in the DirtyLog
	cause    string
	// refused is set when the cart was marked for a reserve the authority
	// refused (markRefused), and only suspect marks of that authority came
	// after (markDirtyWith): the authority's silence about the cart is then
	// an answer, and its copy elsewhere is discarded without first asking
	// whether the authority lost its data (knows), as the shadow job's own
	// convergence would have. A restart forgets it: the check then runs.
	refused bool
	// deferred is a contention comparison waiting for the cart to converge.
	deferred *tandem.Comparison
	// drift is a difference a sweep found and could not converge (markDrift):
	// recorded once an attempt repairs the cart, dropped when one finds it
	// equal (it differed only between the listings).
	drift *tandem.Comparison
}

// deferredGiveUp is after how many failed attempts a deferred comparison
// is recorded as the divergence it was.
const deferredGiveUp = 5

// dirtySet is the router's dirty carts.
type dirtySet struct {
	mu      sync.Mutex
	m       map[cartKey]*dirtyEntry
	cleared []tandem.DirtyCart // converged, still to clear in the DirtyLog
	wake    chan struct{}
	seq     uint64 // marks made so far
}

func newDirtySet() dirtySet {
	return dirtySet{m: make(map[cartKey]*dirtyEntry), wake: make(chan struct{}, 1)}
}

// retryDelay is the wait before the first convergence of a dirty cart: a
// shadow operation that timed out may still land, and the convergence must
// see it. Later attempts back off to maxRetryDelay.
func (rp *repairer) retryDelay(attempts int) time.Duration {
	d := 2 * rp.r.ShadowTimeout
	for i := 0; i < attempts && d < maxRetryDelay; i++ {
		d *= 2
	}
	return min(d, maxRetryDelay)
}

const (
	maxRetryDelay = 5 * time.Second
	// convergeBatch bounds the carts one worker round converges; a full
	// round is followed by another at once.
	convergeBatch = 1024
	// convergeParallel is how many carts the worker converges at once.
	convergeParallel = 16
)

// loadDirty loads the pod's dirty carts from the DirtyLog, before the
// worker starts.
func (rp *repairer) loadDirty() {
	if rp.r.Dirty == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	carts, err := rp.r.Dirty.DirtyCarts(ctx, 1_000_000)
	cancel()
	if err != nil {
		// The log is in a store that may be down; the sweep finds what
		// it would have told.
		rp.r.Logger.Warnw("could not load the dirty carts; the sweep will find them", "pod", rp.r.Pod, "error", err)
	}
	rp.dirty.mu.Lock()
	for _, c := range carts {
		ck := cartKey{c.ShopID, c.CartToken}
		if rp.dirty.m[ck] == nil {
			rp.dirty.m[ck] = &dirtyEntry{cart: c, stored: true, cause: "restart", next: time.Now()}
		}
	}
	rp.dirty.mu.Unlock()
}

// markDirty marks a cart dirty with the store whose state the other must
// reach. Safe from any goroutine; never blocks on a store.
func (rp *repairer) markDirty(ck cartKey, authority, cause string, suspect bool) {
	rp.markDirtyWith(ck, authority, cause, suspect, nil)
}

// markDirtyWith is markDirty with a comparison to record once the cart
// has converged (see reconcile).
func (rp *repairer) markDirtyWith(ck cartKey, authority, cause string, suspect bool, later *tandem.Comparison) {
	now := time.Now()
	d := &rp.dirty
	d.mu.Lock()
	e := d.m[ck]
	if e == nil {
		e = &dirtyEntry{cart: tandem.DirtyCart{ShopID: ck.shop, CartToken: ck.token, Since: rp.r.Now().UTC()}}
		d.m[ck] = e
	}
	// A suspect copy stays suspect until converged, unless the cart's
	// authority changes (tandem.DirtyCart.Suspect); a refusal stays known
	// through later suspect marks of the same authority (the copy found
	// suspect again), not through any other mark.
	same := e.cart.Authority == authority
	if !same && e.cart.Authority != "" {
		// The hold is now the other store's to decide.
		rp.r.grants.unpark(sotIndex(e.cart.Authority), ck)
	}
	e.refused = e.refused && same && suspect
	e.cart.Suspect = suspect || e.cart.Suspect && same
	e.cart.Authority = authority
	e.cart.MarkedAt = rp.r.Now().UTC()
	e.gen++
	d.seq++
	e.seq = d.seq
	e.stored = false
	e.cause = cause
	e.next = now.Add(rp.retryDelay(0))
	var flush *tandem.Comparison
	if later != nil {
		flush, e.deferred = e.deferred, later
	}
	d.mu.Unlock()
	if flush != nil {
		rp.recordDeferred(flush, false) // superseded by a newer difference
	}
	rp.wakeWorker()
}

// markDrift marks a cart dirty, suspect, for a difference the sweep found
// (drift, its state_drift) but failed to converge: the drift is recorded
// when the worker repairs the cart, as the sweep would have. Left to the
// worker unrecorded, a difference no failure explained went unreported
// whenever the sweep's attempt timed out.
func (rp *repairer) markDrift(ck cartKey, authority, cause string, drift tandem.Comparison) {
	rp.markDirty(ck, authority, cause, true)
	rp.dirty.mu.Lock()
	if e := rp.dirty.m[ck]; e != nil {
		e.drift = &drift
	}
	rp.dirty.mu.Unlock()
}

// markRefused notes that the cart's latest mark, with authority, is of a
// reserve the authority refused (see dirtyEntry.refused).
func (rp *repairer) markRefused(ck cartKey, authority string) {
	rp.dirty.mu.Lock()
	defer rp.dirty.mu.Unlock()
	if e := rp.dirty.m[ck]; e != nil && e.cart.Authority == authority {
		e.refused = true
	}
}

// endGrant ends the grant of a reserve of ck admitted under sot in the
// router's book (grants.go): it is parked when sot granted the hold and
// the cart is dirty with sot as its authority (its copy did not land),
// else forgotten. The look at the dirty set and the park are one step
// under the dirty set's lock, so a convergence settling the cart meanwhile
// cannot leave a grant parked for ever.
func (rp *repairer) endGrant(ck cartKey, sot string, granted bool) {
	rp.dirty.mu.Lock()
	defer rp.dirty.mu.Unlock()
	e := rp.dirty.m[ck]
	park := granted && e != nil && e.cart.Authority == sot
	rp.r.grants.end(sotIndex(sot), ck, park)
}

// recordDeferred records a deferred comparison: a match when the cart
// converged, else the divergence it was.
func (rp *repairer) recordDeferred(c *tandem.Comparison, converged bool) {
	if rp.r.Recorder == nil {
		return
	}
	if converged {
		c.Kind, c.Repaired, c.Contention = "", true, true
	}
	rp.r.Recorder.Record(*c)
}

func (rp *repairer) wakeWorker() {
	select {
	case rp.dirty.wake <- struct{}{}:
	default:
	}
}

// flushDirty writes new marks to the DirtyLog and removes converged ones.
func (rp *repairer) flushDirty(ctx context.Context) {
	if rp.r.Dirty == nil {
		return
	}
	d := &rp.dirty
	d.mu.Lock()
	var marks []tandem.DirtyCart
	gens := map[cartKey]uint64{}
	for ck, e := range d.m {
		if !e.stored {
			marks = append(marks, e.cart)
			gens[ck] = e.gen
		}
	}
	cleared := d.cleared
	d.cleared = nil
	d.mu.Unlock()
	if len(marks) == 0 && len(cleared) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, rp.r.ShadowTimeout)
	defer cancel()
	if err := rp.r.Dirty.ClearDirty(ctx, cleared); err != nil {
		d.mu.Lock()
		d.cleared = append(d.cleared, cleared...)
		d.mu.Unlock()
	}
	if len(marks) == 0 || rp.r.Dirty.MarkDirty(ctx, marks) != nil {
		return
	}
	d.mu.Lock()
	for ck, g := range gens {
		if e := d.m[ck]; e != nil && e.gen == g {
			e.stored = true
		}
	}
	d.mu.Unlock()
}

// convergeDue converges the dirty carts whose time has come, at most
// convergeBatch, and says how many it tried.
func (rp *repairer) convergeDue(ctx context.Context) int {
	rp.rounds.Lock()
	defer rp.rounds.Unlock()
	if rp.r.migrate.rebuilding() {
		return 0 // into a Redis being rebuilt: dirtyDueNow after it
	}
	now := time.Now()
	type due struct {
		ck  cartKey
		e   dirtyEntry
		gen uint64
	}
	var list []due
	rp.dirty.mu.Lock()
	for ck, e := range rp.dirty.m {
		if !e.next.After(now) {
			list = append(list, due{ck, *e, e.gen})
		}
	}
	rp.dirty.mu.Unlock()
	if len(list) == 0 {
		return 0
	}
	sort.Slice(list, func(i, j int) bool { return list[i].e.next.Before(list[j].e.next) })
	if len(list) > convergeBatch {
		list = list[:convergeBatch]
	}
	sem := make(chan struct{}, convergeParallel)
	var wg sync.WaitGroup
	attempted := 0
	for _, it := range list {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		// A convergence is shadow work: it runs in one of the router's
		// MaxInflight slots, beside the shadow jobs. With none free the
		// round ends; the rest stay due for the next one.
		if !rp.r.takeSlot() {
			<-sem
			break
		}
		attempted++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer rp.r.freeSlot()
			res, err := rp.convergeDirty(ctx, it.ck, it.e.cart.Authority, it.gen)
			rp.settleDirty(it.ck, it.gen, res, err)
		}()
	}
	wg.Wait()
	return attempted
}

// convergeDirty converges one dirty cart in the cart's line, from the store
// that answered the buyer to the other, unless its mark gen was settled or
// replaced while it waited in line (a request's catch-up converged it, and
// the new SoT may have changed it since: converging it again from the old
// authority would undo that).
func (rp *repairer) convergeDirty(ctx context.Context, ck cartKey, authority string, gen uint64) (ConvergeResult, error) {
	mode := rp.r.routeMode()
	if mode.Shadow() == "" {
		return ConvergeDropped, nil
	}
	from := rp.r.store(authority)
	if from == nil {
		from = rp.r.store(mode.SourceOfTruth())
	}
	prev, line := rp.r.enqueue(ck)
	defer rp.r.dequeue(ck, line)
	if prev != nil {
		select {
		case <-prev:
		case <-ctx.Done():
			return ConvergeFailed, ctx.Err()
		}
	}
	rp.dirty.mu.Lock()
	e := rp.dirty.m[ck]
	current := e != nil && e.gen == gen
	refused := current && e.refused && e.cart.Authority == from.Name()
	rp.dirty.mu.Unlock()
	if !current {
		return ConvergeEqual, nil
	}
	return rp.convergeCart(ctx, ck, from, rp.r.other(from), refused)
}

// settleDirty records the end of one attempt on a dirty cart: converged
// (unless marked again meanwhile), or retried with backoff.
func (rp *repairer) settleDirty(ck cartKey, gen uint64, res ConvergeResult, err error) {
	d := &rp.dirty
	d.mu.Lock()
	e := d.m[ck]
	if e == nil {
		d.mu.Unlock()
		return
	}
	var since time.Duration
	var deferred, drift *tandem.Comparison
	converged := false
	if err == nil && e.gen == gen {
		delete(d.m, ck)
		rp.r.grants.unpark(sotIndex(e.cart.Authority), ck)
		if e.stored || rp.r.Dirty != nil {
			d.cleared = append(d.cleared, e.cart)
		}
		since = rp.r.Now().Sub(e.cart.Since)
		deferred, converged = e.deferred, true
		if res == ConvergeRepaired {
			drift = e.drift
		}
	} else if err != nil {
		e.attempts++
		e.next = time.Now().Add(rp.retryDelay(e.attempts))
		e.cause = tandem.ErrorMessage(err)
		if e.attempts >= deferredGiveUp || res == ConvergeConflict {
			deferred, e.deferred = e.deferred, nil
		}
	}
	attempts := e.attempts
	d.mu.Unlock()
	if deferred != nil {
		rp.recordDeferred(deferred, converged)
	}
	if drift != nil && rp.r.Recorder != nil {
		rp.r.Recorder.Record(*drift)
	}
	if err == nil && res == ConvergeEqual && since == 0 {
		return
	}
	rp.observe(res, err, since)
	if err != nil && attempts > 0 && attempts%10 == 0 {
		rp.r.Logger.Warnw("a dirty cart still does not converge", "pod", rp.r.Pod,
			"shop_id", ck.shop, "cart_token", ck.token, "attempts", attempts, "error", err)
	}
}

// suspect reports whether the other store's copy of a cart the SoT does not
// know may be one the SoT refused: the cart is dirty with the SoT as its
// authority, here or (through the shared DirtyLog) on another instance, so
// its copy waits to be discarded and must not answer the buyer. A copy from
// an earlier SoT is not suspect: the store that granted it is its authority.
// Nor is the copy of a cart marked only because a call failed or was
// dropped (the mark is not Suspect): the SoT granted that hold, and when
// the SoT no longer knows it (a Redis failover lost the master's last
// writes), the copy is the buyer's hold.
func (rp *repairer) suspect(ctx context.Context, ck cartKey, sot string) bool {
	rp.dirty.mu.Lock()
	e := rp.dirty.m[ck]
	mine := e != nil && e.cart.Authority == sot && e.cart.Suspect
	rp.dirty.mu.Unlock()
	if mine || e != nil || rp.r.Dirty == nil {
		return mine
	}
	var c *tandem.DirtyCart
	err := rp.r.call(ctx, func(ctx context.Context) (err error) {
		c, err = rp.r.Dirty.LookupDirty(ctx, ck.shop, ck.token)
		return err
	})
	// A log that cannot be read leaves the copy suspect: the buyer is told
	// not_found rather than sold a unit the SoT may have refused.
	return err != nil || c != nil && c.Authority == sot && c.Suspect
}

// copyStale converges the cart from the other store into sot when it is
// dirty with the other store as its authority, in the cart's line.
func (rp *repairer) copyStale(ctx context.Context, ck cartKey, sot, other tandem.ShadowStore) error {
	rp.dirty.mu.Lock()
	e := rp.dirty.m[ck]
	stale := e != nil && e.cart.Authority != sot.Name()
	var gen uint64
	if stale {
		gen = e.gen
	}
	rp.dirty.mu.Unlock()
	if !stale {
		return nil
	}
	prev, line := rp.r.enqueue(ck)
	if prev != nil {
		<-prev
	}
	res, err := rp.convergeCart(context.WithoutCancel(ctx), ck, other, sot, false)
	// Settled before the line moves on: a worker's attempt on the same mark,
	// next in line, then sees it settled and leaves the cart to this SoT.
	rp.settleDirty(ck, gen, res, err)
	rp.r.dequeue(ck, line)
	return err
}

// unreserved explains a claim or release the shadow answered "never
// reserved" for a cart the SoT settled: by the reserve of the cart whose
// shadow work is still unfinished (the cart is dirty, and why), or as a
// cause of its own.
func (rp *repairer) unreserved(ck cartKey, msg string) string {
	rp.dirty.mu.Lock()
	e := rp.dirty.m[ck]
	var cause string
	var since time.Time
	if e != nil {
		cause, since = e.cause, e.cart.Since
	}
	rp.dirty.mu.Unlock()
	if e == nil {
		return msg + "; no earlier difference of this cart explains it: the shadow lost or never got its hold"
	}
	return fmt.Sprintf("%s; follows this cart's earlier difference (%s, since %s), still being converged",
		msg, cause, since.Format(time.RFC3339Nano))
}

// dirtyDueNow makes every dirty cart due at once with its backoff reset:
// the attempts made into an empty Redis say nothing.
func (rp *repairer) dirtyDueNow() {
	now := time.Now()
	rp.dirty.mu.Lock()
	for _, e := range rp.dirty.m {
		e.attempts, e.next = 0, now
	}
	rp.dirty.mu.Unlock()
	select {
	case rp.dirty.wake <- struct{}{}:
	default:
	}
}

func (rp *repairer) isDirty(ck cartKey) bool {
	rp.dirty.mu.Lock()
	defer rp.dirty.mu.Unlock()
	return rp.dirty.m[ck] != nil
}

// dirtySample describes a few dirty carts and why they are dirty.
func (rp *repairer) dirtySample() string {
	rp.dirty.mu.Lock()
	defer rp.dirty.mu.Unlock()
	out := ""
	for ck, e := range rp.dirty.m {
		if len(out) > 300 {
			break
		}
		out += fmt.Sprintf("%d/%s from %s after %d attempts: %s; ", ck.shop, ck.token, e.cart.Authority, e.attempts, e.cause)
	}
	return out
}

// holdRounds stops the worker's rounds, and the start of a sweep, until
// the returned func is called, once the round in flight has ended, and
// returns the count of marks made so far: a rebuild of one store from the
// other runs between the two, and rebuilt then settles the marks it made
// moot. (The sweep ran in the worker's loop until it moved beside it; a
// rebuild kept it from starting then, and still does.)
func (rp *repairer) holdRounds() (seq uint64, resume func()) {
	rp.roundsHeld.Add(1)
	rp.rounds.Lock()
	rp.dirty.mu.Lock()
	seq = rp.dirty.seq
	rp.dirty.mu.Unlock()
	return seq, func() {
		rp.rounds.Unlock()
		rp.roundsHeld.Add(-1)
	}
}

// rebuilt settles the dirty carts whose authority is from and whose latest
// mark is no later than seq: the other store was rebuilt from from's state
// read after those marks, so it holds what from holds for them. Converging
// them again would apply what the rebuild already counted (a claim
// settled in Redis twice: its counts come from the ledger, which already
// lost the claimed units).
//
// It returns the carts it settled: the rebuild wrote counts and holds
// only, so the ones from had ended still need their tombstones
// (tombstoneEnded).
func (rp *repairer) rebuilt(from string, seq uint64) []cartKey {
	d := &rp.dirty
	var deferred []*tandem.Comparison
	var settled []cartKey
	d.mu.Lock()
	for ck, e := range d.m {
		if e.cart.Authority != from || e.seq > seq {
			continue
		}
		delete(d.m, ck)
		settled = append(settled, ck)
		rp.r.grants.unpark(sotIndex(from), ck)
		if rp.r.Dirty != nil {
			d.cleared = append(d.cleared, e.cart)
		}
		if e.deferred != nil {
			deferred = append(deferred, e.deferred)
		}
	}
	d.mu.Unlock()
	for _, c := range deferred {
		rp.recordDeferred(c, true)
	}
	return settled
}

// tombstoneEnded records in to, which was just rebuilt from from's
// state, the carts of settled that from has ended (claimed, released or
// expired) and to never knew: the rebuild counted them (their units are
// sold or back in stock), but without a tombstone to would answer a
// repeated claim "never reserved", and reserve the token again, once it
// is the source of truth. A cart to knows is left to its state.
func (rp *repairer) tombstoneEnded(ctx context.Context, settled []cartKey, from, to tandem.ShadowStore) error {
	var ended []tandem.Reservation
	for _, ck := range settled {
		c, err := rp.read(ctx, from, ck)
		if err != nil {
			return fmt.Errorf("read cart %d/%s from %s for its tombstone in %s: %w", ck.shop, ck.token, from.Name(), to.Name(), err)
		}
		if c != nil && c.Status != tandem.StatusReserved && len(c.Lines) > 0 {
			ended = append(ended, *c)
		}
	}
	for part := range slices.Chunk(ended, 256) {
		n, err := to.Tombstone(ctx, part)
		if err != nil {
			return fmt.Errorf("record %d carts %s ended in %s: %w", len(part), from.Name(), to.Name(), err)
		}
		if n > 0 {
			rp.r.Logger.Warnw("recorded carts ended that the rebuilt store did not know", "pod", rp.r.Pod, "store", to.Name(), "recorded", n)
		}
	}
	return nil
}
