// Package dualwrite routes every reservation of a pod to its source of truth
// (SoT), which alone answers the buyer, and to its shadow, whose answer is
// compared with the SoT's and repaired when they differ. It knows nothing of
// Redis or SQL: both stores are tandem.ReservationStore values.
//
// The shadow runs concurrently with the SoT, never in the buyer's way: the
// buyer's answer returns as soon as the SoT answers, the shadow finishes on
// its own under ShadowTimeout, at most MaxInflight shadow operations run per
// pod (beyond that the shadow is skipped and recorded as shadow_dropped),
// and the shadow operations of one cart run in order, so a claim never
// overtakes the reserve it settles.
package dualwrite

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
)

// ModeSource gives a pod's persisted mode; rollout satisfies it.
type ModeSource interface {
	Mode(pod string) tandem.Mode
}

// KillSwitch reports whether a pod's kill switch is engaged; killswitch
// satisfies it. Engaged must be cheap (an atomic load): it runs per request.
type KillSwitch interface {
	Engaged(pod string) bool
}

// Recorder receives every comparison; comparator satisfies it. Record must
// not block.
type Recorder interface {
	Record(c tandem.Comparison)
}

// Router is one pod's dual-write router.
type Router struct {
	Pod   string
	Shops tandem.ShopSet
	Redis tandem.ReservationStore
	MySQL tandem.ReservationStore
	// Ledger is the pod's ledger, read by the drift audit.
	Ledger tandem.Ledger

	Modes    ModeSource
	Kill     KillSwitch
	Recorder Recorder

	// ShadowTimeout bounds every shadow operation (default 250ms); it also
	// bounds the synchronous look-up in the other store when the SoT does not
	// know a cart.
	ShadowTimeout time.Duration
	// MaxInflight caps concurrent shadow operations (default 256).
	MaxInflight int
	// DefaultTTL is the hold TTL when a request names none (default 10m); the
	// router resolves it so both stores hold for the same time.
	DefaultTTL time.Duration
	// BackfillFollow is how long, at most, a pod left in redis after a
	// Backfill keeps writing MySQL as its shadow, waiting for the switch to
	// shadow (default 10s); past it, MySQL drifts and the audit says so.
	BackfillFollow time.Duration
	// AuditSettle is how long the drift audit waits before it re-checks a
	// position that disagreed, so holds in flight are not reported (default
	// 4 x ShadowTimeout).
	AuditSettle time.Duration
	Now         func() time.Time

	once    sync.Once
	slots   chan struct{}
	wg      sync.WaitGroup
	pending atomic.Int64 // shadow jobs in flight, for Wait
	// mu guards epoch and carts: the admission of every operation.
	mu    sync.Mutex
	epoch *epoch
	// carts holds, per cart, the end of the SoT call of its latest admitted
	// operation, for the order of the SoT's operations (admit).
	carts map[cartKey]chan struct{}
	// shadowCarts holds, per cart, the completion of its latest shadow job
	// (with repair), for the order of the shadow's operations.
	shadowCarts map[cartKey]chan struct{}
	fenced      atomic.Int64 // fences that ran out of time
	// followUntil (unix ns) keeps MySQL written as the shadow of a pod in
	// redis after a Backfill; 0 when not.
	followUntil atomic.Int64
	closed      bool
	closeMux    sync.Mutex
}

type cartKey struct {
	shop  int64
	token string
}

func (r *Router) init() {
	r.once.Do(func() {
		if r.ShadowTimeout <= 0 {
			r.ShadowTimeout = 250 * time.Millisecond
		}
		if r.MaxInflight <= 0 {
			r.MaxInflight = 256
		}
		if r.DefaultTTL <= 0 {
			r.DefaultTTL = 10 * time.Minute
		}
		if r.BackfillFollow <= 0 {
			r.BackfillFollow = 10 * time.Second
		}
		if r.AuditSettle <= 0 {
			r.AuditSettle = 4 * r.ShadowTimeout
		}
		if r.Now == nil {
			r.Now = time.Now
		}
		r.slots = make(chan struct{}, r.MaxInflight)
		r.carts = make(map[cartKey]chan struct{})
		r.shadowCarts = make(map[cartKey]chan struct{})
	})
}

// Close waits for the shadow operations in flight; new ones are dropped.
// Safe to call twice.
func (r *Router) Close() error {
	r.init()
	r.closeMux.Lock()
	r.closed = true
	r.closeMux.Unlock()
	r.wg.Wait()
	return nil
}

// Mode returns the pod's effective mode: its persisted mode, with mysql
// served as shadow while the kill switch is engaged.
func (r *Router) Mode() tandem.Mode {
	m := tandem.ModeRedis
	if r.Modes != nil {
		m = r.Modes.Mode(r.Pod)
	}
	return m.Effective(r.Kill != nil && r.Kill.Engaged(r.Pod))
}

func (r *Router) store(name string) tandem.ReservationStore {
	switch name {
	case tandem.StoreRedis:
		return r.Redis
	case tandem.StoreMySQL:
		return r.MySQL
	}
	return nil
}

// route returns the SoT and the shadow (nil when the mode has none).
func (r *Router) route() (mode tandem.Mode, sot, shadow tandem.ReservationStore) {
	mode = r.Mode()
	return mode, r.store(mode.SourceOfTruth()), r.store(mode.Shadow())
}

// other returns the store that is not s.
func (r *Router) other(s tandem.ReservationStore) tandem.ReservationStore {
	if s == r.Redis {
		return r.MySQL
	}
	return r.Redis
}

func (r *Router) stamp(res *tandem.Reservation, sot string) *tandem.Reservation {
	if res != nil {
		res.Pod, res.SourceOfTruth = r.Pod, sot
	}
	return res
}

// Reserve holds the cart in the SoT and, concurrently, in the shadow.
func (r *Router) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	r.init()
	if err := req.Validate(); err != nil {
		return nil, err
	}
	req.TTL = req.TTLOr(r.DefaultTTL)
	o, err := r.admit(ctx, &cartKey{req.ShopID, req.CartToken}, true)
	if err != nil {
		return nil, err
	}
	defer o.done()
	sot, shadow := o.sot, o.shadow
	req.Lines = append([]tandem.LineRequest(nil), req.Lines...) // the shadow reads it after we return
	job := r.goShadow(ctx, o, tandem.OpReserve, false,
		func(ctx context.Context) (*tandem.Reservation, error) { return shadow.Reserve(ctx, req) },
		func(ctx context.Context, primary, sh tandem.Outcome) (tandem.Outcome, bool) {
			return r.repairReserve(ctx, shadow, req, primary, sh)
		})
	start := time.Now()
	res, err := sot.Reserve(ctx, req)
	job.primary(tandem.OutcomeOf(sot.Name(), res, err, time.Since(start)))
	return r.stamp(res, sot.Name()), err
}

// repairReserve brings the shadow to the SoT's outcome. It never keeps a
// hold the SoT refused: it discards it (Discarder), so no trace of the cart
// remains that a later flip could show the buyer. It retries a hold the SoT
// granted but the shadow could not, pinned to the SoT's groups: at the
// sold-out boundary the two stores pick their winners concurrently, and the
// shadow's units come back as the losers' holds are discarded. A hold in
// other groups than the SoT's is discarded and retaken in the SoT's groups,
// and reported as a location_mismatch only when that fails. It returns the shadow's final
// outcome and whether a contention-only difference was repaired.
func (r *Router) repairReserve(ctx context.Context, shadow tandem.ReservationStore, req tandem.ReserveRequest, primary, sh tandem.Outcome) (tandem.Outcome, bool) {
	granted := primary.Status == string(tandem.StatusReserved)
	held := sh.Status == string(tandem.StatusReserved) && !sh.Replayed
	if sh.Status == "timeout" || sh.Status == tandem.EUNAVAILABLE || sh.Status == tandem.EINTERNAL {
		// The shadow's answer was lost, not its work: it may hold the cart.
		// Find out by asking again (reserve is idempotent per token), then
		// repair as usual; the comparison still reports the timeout or error.
		if !granted {
			_ = r.discard(ctx, shadow, req.ShopID, req.CartToken)
			return sh, false
		}
		start := time.Now()
		res, err := shadow.Reserve(ctx, req)
		if tandem.ErrorCode(err) == tandem.EUNAVAILABLE || tandem.ErrorCode(err) == tandem.EINTERNAL || ctx.Err() != nil {
			return sh, false
		}
		again := tandem.OutcomeOf(shadow.Name(), res, err, time.Since(start))
		again.Replayed = false
		r.repairReserve(ctx, shadow, req, primary, again)
		return sh, false
	}
	switch {
	case held && !granted:
		if err := r.discard(ctx, shadow, req.ShopID, req.CartToken); err != nil {
			return sh, false
		}
		if primary.Status == tandem.EINSUFFICIENT {
			return tandem.Outcome{Store: sh.Store, Status: primary.Status, Latency: sh.Latency, LatencyMS: sh.LatencyMS}, true
		}
		return sh, false
	case held && !sameLines(primary.Lines, sh.Lines):
		// Shadow work of other carts is not ordered with this one (a release
		// that frees the preferred group may land just after), so another
		// group is usually contention, like a short shadow: repaired when
		// the SoT's groups can be retaken, a location_mismatch when not.
		if err := r.discard(ctx, shadow, req.ShopID, req.CartToken); err == nil {
			if o, ok := r.reservePinned(ctx, shadow, req, primary); ok {
				return o, true
			}
		}
		return sh, false
	case granted && sh.Status == tandem.EINSUFFICIENT:
		if o, ok := r.reservePinned(ctx, shadow, req, primary); ok {
			return o, true
		}
	}
	return sh, false
}

// reservePinned takes in the shadow exactly the SoT's lines, retrying while
// the shadow is short until ctx ends. It asks with the buyer's own request
// first, for the first half of its time, discarding a hold taken in other
// groups than the SoT's: the stored request (its fingerprint) must be the
// buyer's, or an identical retry after a flip to this store would be
// refused as a conflict. Only then does it pin each line to the SoT's group
// (a request of its own, with its own fingerprint: a last resort).
func (r *Router) reservePinned(ctx context.Context, shadow tandem.ReservationStore, req tandem.ReserveRequest, primary tandem.Outcome) (tandem.Outcome, bool) {
	pinned := req
	pinned.Lines = make([]tandem.LineRequest, len(primary.Lines))
	for i, l := range primary.Lines {
		pinned.Lines[i] = tandem.LineRequest{ItemID: l.ItemID, Quantity: l.Quantity, GroupIDs: []int64{l.GroupID}}
	}
	own := time.Now().Add(r.ShadowTimeout / 2)
	if dl, ok := ctx.Deadline(); ok {
		own = time.Now().Add(time.Until(dl) / 2)
	}
	for wait := 2 * time.Millisecond; ; wait = min(2*wait, 32*time.Millisecond) {
		ask := pinned
		if time.Now().Before(own) {
			ask = req
		}
		start := time.Now()
		res, err := shadow.Reserve(ctx, ask)
		if err == nil {
			o := tandem.OutcomeOf(shadow.Name(), res, nil, time.Since(start))
			if sameLines(primary.Lines, o.Lines) {
				return o, true
			}
			if r.discard(ctx, shadow, req.ShopID, req.CartToken) != nil {
				return o, false
			}
		} else if tandem.ErrorCode(err) != tandem.EINSUFFICIENT {
			return tandem.Outcome{}, false
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return tandem.Outcome{}, false
		}
	}
}

// discard forgets the shadow's copy of a cart the SoT refused, or releases
// it when the store cannot forget.
func (r *Router) discard(ctx context.Context, shadow tandem.ReservationStore, shopID int64, token string) error {
	if d, ok := shadow.(tandem.Discarder); ok {
		return d.Discard(ctx, shopID, token)
	}
	_, err := shadow.Release(ctx, shopID, token)
	return err
}

// Claim settles the cart in the SoT; the ledger is deducted once whichever
// store claims first (the ledger's claim record), and the shadow's copy is
// cleaned up. A cart the SoT does not know but the other store holds (it
// was reserved under another SoT, before a flip or kill switch) is claimed
// there.
func (r *Router) Claim(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	return r.settle(ctx, tandem.OpClaim, shopID, cartToken, tandem.ReservationStore.Claim)
}

// Release returns the cart's units in the SoT and the shadow, with the same
// fallback to the other store as Claim.
func (r *Router) Release(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	return r.settle(ctx, tandem.OpRelease, shopID, cartToken, tandem.ReservationStore.Release)
}

type settleFunc func(s tandem.ReservationStore, ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error)

func (r *Router) settle(ctx context.Context, op string, shopID int64, cartToken string, f settleFunc) (*tandem.Reservation, error) {
	r.init()
	if err := tandem.ValidateCartToken(cartToken); err != nil {
		return nil, err
	}
	// The hold's expiry is judged as of the request's arrival, whatever it
	// then waits for (the cart's earlier operation, the fence, a lock).
	ctx = tandem.WithAsOf(ctx, tandem.AsOf(ctx, r.Now))
	o, err := r.admit(ctx, &cartKey{shopID, cartToken}, true)
	if err != nil {
		return nil, err
	}
	defer o.done()
	sot, shadow := o.sot, o.shadow
	// The shadow settles after the SoT, and only if the SoT answered: the SoT
	// decides what the ledger loses (its lines, its groups), the shadow only
	// settles its copy (the ledger's claim record makes its own deduction a
	// no-op), and a request the SoT could not serve (503) changes nothing.
	// A shadow that timed out or failed is asked once more, within the
	// repair's bound: claim and release are idempotent.
	job := r.goShadow(ctx, o, op, true,
		func(ctx context.Context) (*tandem.Reservation, error) { return f(shadow, ctx, shopID, cartToken) },
		func(ctx context.Context, primary, sh tandem.Outcome) (tandem.Outcome, bool) {
			if sh.Status == "timeout" || sh.Status == tandem.EUNAVAILABLE || sh.Status == tandem.EINTERNAL {
				_, _ = f(shadow, ctx, shopID, cartToken)
			}
			return sh, false
		})
	start := time.Now()
	res, err := f(sot, ctx, shopID, cartToken)
	job.primary(tandem.OutcomeOf(sot.Name(), res, err, time.Since(start)))
	if tandem.ErrorCode(err) != tandem.ENOTFOUND {
		return r.stamp(res, sot.Name()), err
	}
	// The SoT never saw this cart, but a hold from an earlier SoT (before a
	// flip or a kill switch) may live in the other store: honour it there.
	// With a shadow, the shadow's own operation already did; without one,
	// ask the other store now, bounded by the shadow timeout.
	if shadow != nil {
		if o, ok := job.wait(ctx, r.ShadowTimeout+50*time.Millisecond); ok && honoured(op, o) {
			return r.stamp(outcomeReservation(shopID, cartToken, o), shadow.Name()), outcomeErr(o)
		}
		return r.stamp(res, sot.Name()), err
	}
	if o := r.other(sot); o != nil {
		ores, oerr := r.fallback(ctx, o, shopID, cartToken, f)
		if honoured(op, tandem.OutcomeOf(o.Name(), ores, oerr, 0)) {
			return r.stamp(ores, o.Name()), oerr
		}
	}
	return r.stamp(res, sot.Name()), err
}

// honoured reports whether the other store's answer to a cart the SoT does
// not know is a definite answer about a hold that store really granted
// (reserved under an earlier SoT, before a flip or a kill switch), so that it
// is the buyer's answer. Holds the SoT refused leave no trace in the other
// store (the router's repair discards them), so any record there is real.
func honoured(op string, o tandem.Outcome) bool {
	switch o.Status {
	case "", "dropped", "skipped", "timeout", tandem.ENOTFOUND, tandem.EUNAVAILABLE, tandem.EINTERNAL, tandem.EINVALID:
		return false
	}
	return true
}

// opGet names Get for honoured; it is not a dual-written operation.
const opGet = "get"

func (r *Router) fallback(ctx context.Context, s tandem.ReservationStore, shopID int64, cartToken string, f settleFunc) (*tandem.Reservation, error) {
	ctx, cancel := context.WithTimeout(ctx, r.ShadowTimeout)
	defer cancel()
	return f(s, ctx, shopID, cartToken)
}

// Get returns the cart as the SoT knows it, or as the other store knows it
// when the SoT never saw it.
func (r *Router) Get(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	r.init()
	if err := tandem.ValidateCartToken(cartToken); err != nil {
		return nil, err
	}
	o, err := r.admit(ctx, &cartKey{shopID, cartToken}, false)
	if err != nil {
		return nil, err
	}
	defer o.done()
	sot := o.sot
	res, err := sot.Get(ctx, shopID, cartToken)
	if tandem.ErrorCode(err) == tandem.ENOTFOUND {
		if o := r.other(sot); o != nil {
			ores, oerr := r.fallback(ctx, o, shopID, cartToken, tandem.ReservationStore.Get)
			if honoured(opGet, tandem.OutcomeOf(o.Name(), ores, oerr, 0)) {
				return r.stamp(ores, o.Name()), nil
			}
		}
	}
	return r.stamp(res, sot.Name()), err
}

// SetOnHand writes the ledger through the SoT and makes every store the mode
// maintains follow at once. A shadow that cannot follow is recorded as a
// divergence; the buyer-facing answer is the SoT's.
func (r *Router) SetOnHand(ctx context.Context, key tandem.Key, onHand int64) (*tandem.Inventory, error) {
	r.init()
	if onHand < 0 || onHand > tandem.MaxOnHand {
		return nil, tandem.Errorf(tandem.EINVALID, "on_hand must be 0..%d", tandem.MaxOnHand)
	}
	o, err := r.admit(ctx, nil, false)
	if err != nil {
		return nil, err
	}
	defer o.done()
	mode, sot, shadow := o.mode, o.sot, o.shadow
	start := time.Now()
	c, err := sot.SetOnHand(ctx, key, onHand)
	if err != nil {
		return nil, err
	}
	inv := r.inventory(mode, sot, c)
	if shadow != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ShadowTimeout)
		sstart := time.Now()
		// The SoT wrote the ledger; the shadow follows without writing it again.
		var sc *tandem.Counters
		var serr error
		if f, ok := shadow.(tandem.Follower); ok {
			sc, serr = f.FollowOnHand(sctx, key, onHand)
		} else {
			sc, serr = shadow.SetOnHand(sctx, key, onHand)
		}
		timedOut := serr != nil && sctx.Err() != nil
		cancel()
		primary := tandem.Outcome{Store: sot.Name(), Status: "ok", Latency: time.Since(start)}
		so := tandem.Outcome{Store: shadow.Name(), Status: "ok", Latency: time.Since(sstart)}
		if serr != nil {
			so = tandem.OutcomeOf(shadow.Name(), nil, serr, so.Latency)
		} else {
			inv.Stores[shadow.Name()] = tandem.StoreCounters{Available: sc.Available, Reserved: sc.Reserved}
		}
		r.record(mode, tandem.OpSetStock, key.ShopID, "", primary, so, timedOut, false)
	}
	return inv, nil
}

// Inventory returns the position as the SoT sees it, with each maintained
// store's view.
func (r *Router) Inventory(ctx context.Context, key tandem.Key) (*tandem.Inventory, error) {
	r.init()
	mode, sot, shadow := r.route()
	c, err := sot.Counters(ctx, key)
	if err != nil {
		return nil, err
	}
	inv := r.inventory(mode, sot, c)
	if shadow != nil {
		sctx, cancel := context.WithTimeout(ctx, r.ShadowTimeout)
		defer cancel()
		if sc, err := shadow.Counters(sctx, key); err == nil {
			inv.Stores[shadow.Name()] = tandem.StoreCounters{Available: sc.Available, Reserved: sc.Reserved}
		}
	}
	return inv, nil
}

func (r *Router) inventory(mode tandem.Mode, sot tandem.ReservationStore, c *tandem.Counters) *tandem.Inventory {
	return &tandem.Inventory{
		ShopID: c.ShopID, ItemID: c.ItemID, GroupID: c.GroupID,
		OnHand: c.OnHand, Reserved: c.Reserved, Available: c.Available,
		Pod: r.Pod, SourceOfTruth: sot.Name(),
		Stores: map[string]tandem.StoreCounters{sot.Name(): {Available: c.Available, Reserved: c.Reserved}},
	}
}

// shadowJob is one shadow operation in flight.
type shadowJob struct {
	primaryCh chan tandem.Outcome // the SoT's outcome, sent once
	rawCh     chan tandem.Outcome // the shadow's first answer, sent once
}

// primary hands the SoT's outcome to the shadow job (no-op without one).
func (j *shadowJob) primary(o tandem.Outcome) {
	if j != nil {
		j.primaryCh <- o
	}
}

// wait returns the shadow's first answer, if it comes within d.
func (j *shadowJob) wait(ctx context.Context, d time.Duration) (tandem.Outcome, bool) {
	if j == nil {
		return tandem.Outcome{}, false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case o := <-j.rawCh:
		return o, true
	case <-t.C:
	case <-ctx.Done():
	}
	return tandem.Outcome{}, false
}

// primaryWait bounds how long a shadow job waits for the SoT's outcome
// before it gives up comparing (the SoT call is bounded by the request).
const primaryWait = 30 * time.Second

// goShadow runs op on the admitted operation's shadow store under the
// shadow timeout and the in-flight cap; then, once the SoT's outcome is
// known, repair (if any) and the comparison, after the earlier shadow jobs
// of the same cart. The operation stays open in its epoch until the job is
// done, so that a change of SoT waits for it (admit). It returns nil when
// the mode has no shadow.
func (r *Router) goShadow(ctx context.Context, o *op, op string,
	afterPrimary bool, run func(ctx context.Context) (*tandem.Reservation, error),
	repair func(ctx context.Context, primary, sh tandem.Outcome) (tandem.Outcome, bool)) *shadowJob {
	mode, shadow, shopID, token := o.mode, o.shadow, o.ck.shop, o.ck.token
	if shadow == nil {
		return nil
	}
	job := &shadowJob{primaryCh: make(chan tandem.Outcome, 1), rawCh: make(chan tandem.Outcome, 1)}
	r.closeMux.Lock()
	admitted := !r.closed
	if admitted {
		select {
		case r.slots <- struct{}{}:
		default:
			admitted = false // over the cap
		}
	}
	r.wg.Add(1)
	r.pending.Add(1)
	r.closeMux.Unlock()
	if !admitted {
		// Dropped: no shadow work, but the comparison is still recorded once
		// the SoT answers. The goroutine only waits on a buffered channel.
		dropped := tandem.Outcome{Store: shadow.Name(), Status: "dropped"}
		job.rawCh <- dropped
		go func() {
			defer r.wg.Done()
			defer r.pending.Add(-1)
			if p, ok := waitOutcome(job.primaryCh); ok && !sotFailed(p) {
				r.record(mode, op, shopID, token, p, dropped, false, false)
			}
		}()
		return job
	}

	ck := cartKey{shopID, token}
	done := make(chan struct{})
	r.mu.Lock()
	prev := r.shadowCarts[ck]
	r.shadowCarts[ck] = done
	r.mu.Unlock()

	base := context.WithoutCancel(ctx)
	o.hold()
	go func() {
		defer r.wg.Done()
		defer r.pending.Add(-1)
		defer o.unref()
		defer func() {
			close(done)
			r.mu.Lock()
			if r.shadowCarts[ck] == done {
				delete(r.shadowCarts, ck)
			}
			r.mu.Unlock()
		}()
		var p tandem.Outcome
		havePrimary := false
		if afterPrimary {
			if p, havePrimary = waitOutcome(job.primaryCh); !havePrimary || !settles(p) {
				job.rawCh <- tandem.Outcome{Store: shadow.Name(), Status: "skipped"}
				<-r.slots
				return
			}
		}
		sctx, cancel := context.WithTimeout(base, r.ShadowTimeout)
		if prev != nil {
			select {
			case <-prev:
			case <-sctx.Done():
			}
		}
		start := time.Now()
		var res *tandem.Reservation
		var err error
		if err = sctx.Err(); err == nil {
			res, err = run(sctx)
		}
		timedOut := err != nil && (errors.Is(err, context.DeadlineExceeded) || sctx.Err() != nil)
		cancel()
		<-r.slots // the shadow store's work is done; repair is bounded below
		sh := tandem.OutcomeOf(shadow.Name(), res, err, time.Since(start))
		if timedOut {
			sh.Status = "timeout"
		}
		job.rawCh <- sh

		if !havePrimary {
			if p, havePrimary = waitOutcome(job.primaryCh); !havePrimary {
				return
			}
		}
		repaired := false
		if repair != nil {
			rctx, cancel := context.WithTimeout(base, r.ShadowTimeout)
			sh, repaired = repair(rctx, p, sh)
			cancel()
		}
		if !sotFailed(p) {
			r.record(mode, op, shopID, token, p, sh, timedOut, repaired)
		}
	}()
	return job
}

func waitOutcome(ch chan tandem.Outcome) (tandem.Outcome, bool) {
	t := time.NewTimer(primaryWait)
	defer t.Stop()
	select {
	case o := <-ch:
		return o, true
	case <-t.C:
		return tandem.Outcome{}, false
	}
}

// settles reports whether the shadow follows a claim or release the SoT
// answered p: only one the SoT settled (the shadow settles its copy), or a
// cart the SoT does not know (the shadow's copy, from an earlier SoT, is
// the buyer's answer). A cart the SoT refuses as gone or already claimed is
// left to the shadow's own state and reaper: a shadow claim of a hold the
// SoT saw expire would deduct the ledger for a sale the buyer was refused
// (the shadow's copy expires later, having landed later), and a shadow
// release of a cart the SoT sold would put sold units back on sale.
func settles(p tandem.Outcome) bool {
	switch p.Status {
	case string(tandem.StatusClaimed), string(tandem.StatusReleased), tandem.ENOTFOUND:
		return true
	}
	return false
}

// sotFailed reports whether the SoT could not answer; there is nothing to
// compare then (the buyer got a 503), though repair still ran.
func sotFailed(p tandem.Outcome) bool {
	return p.Status == tandem.EUNAVAILABLE || p.Status == tandem.EINTERNAL
}

// Wait returns when no shadow job is in flight (jobs started meanwhile
// extend it). Tests and the soak use it to reach a state at rest; unlike
// Close it may run concurrently with new requests.
func (r *Router) Wait() {
	r.init()
	for r.pending.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
}

func (r *Router) record(mode tandem.Mode, op string, shopID int64, token string, primary, shadow tandem.Outcome, timedOut, repaired bool) {
	if r.Recorder == nil {
		return
	}
	kind := ""
	if !repaired {
		kind = Classify(primary, shadow, timedOut)
	}
	r.Recorder.Record(tandem.Comparison{
		At: r.Now(), Pod: r.Pod, Op: op, ShopID: shopID, CartToken: token,
		SourceOfTruth: mode.SourceOfTruth(), Primary: primary, Shadow: shadow,
		Kind: kind, Repaired: repaired,
	})
}

// Classify returns "" when the shadow reached the primary's outcome, else
// the divergence kind.
func Classify(primary, shadow tandem.Outcome, timedOut bool) string {
	switch {
	case shadow.Status == "dropped":
		return tandem.KindShadowDropped
	case timedOut || shadow.Status == "timeout":
		return tandem.KindShadowTimeout
	case shadow.Status == tandem.EUNAVAILABLE || shadow.Status == tandem.EINTERNAL:
		return tandem.KindShadowError
	case primary.Status != shadow.Status:
		return tandem.KindOutcomeMismatch
	case !sameLines(primary.Lines, shadow.Lines):
		return tandem.KindLocationMismatch
	}
	return ""
}

func sameLines(a, b []tandem.Line) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func outcomeReservation(shopID int64, token string, o tandem.Outcome) *tandem.Reservation {
	if o.Status == "" || tandem.Status(o.Status) != tandem.StatusClaimed && tandem.Status(o.Status) != tandem.StatusReleased &&
		tandem.Status(o.Status) != tandem.StatusReserved && tandem.Status(o.Status) != tandem.StatusExpired {
		return nil
	}
	return &tandem.Reservation{CartToken: token, ShopID: shopID, Status: tandem.Status(o.Status), Lines: o.Lines, Replayed: o.Replayed}
}

func outcomeErr(o tandem.Outcome) error {
	switch tandem.Status(o.Status) {
	case tandem.StatusClaimed, tandem.StatusReleased, tandem.StatusReserved, tandem.StatusExpired:
		return nil
	}
	return &tandem.Error{Code: o.Status, Message: o.Message}
}
