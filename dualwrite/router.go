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
	// AuditSettle is how long the drift audit waits before it re-checks a
	// position that disagreed, so holds in flight are not reported (default
	// 4 x ShadowTimeout).
	AuditSettle time.Duration
	Now         func() time.Time

	once     sync.Once
	slots    chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	carts    map[cartKey]chan struct{} // last shadow op per cart, for ordering
	closed   bool
	closeMux sync.Mutex
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
		if r.AuditSettle <= 0 {
			r.AuditSettle = 4 * r.ShadowTimeout
		}
		if r.Now == nil {
			r.Now = time.Now
		}
		r.slots = make(chan struct{}, r.MaxInflight)
		r.carts = make(map[cartKey]chan struct{})
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
	mode, sot, shadow := r.route()
	req.Lines = append([]tandem.LineRequest(nil), req.Lines...) // the shadow reads it after we return
	shadowDone := r.goShadow(ctx, shadow, req.ShopID, req.CartToken, func(ctx context.Context) (*tandem.Reservation, error) {
		return shadow.Reserve(ctx, req)
	})
	start := time.Now()
	res, err := sot.Reserve(ctx, req)
	primary := tandem.OutcomeOf(sot.Name(), res, err, time.Since(start))
	r.compare(mode, tandem.OpReserve, req.ShopID, req.CartToken, primary, shadowDone, func(ctx context.Context, sh tandem.Outcome) {
		// Repair: the shadow never keeps a hold that the SoT refused, nor one
		// in other groups than the SoT's.
		if sh.Status == string(tandem.StatusReserved) &&
			(primary.Status != string(tandem.StatusReserved) || !sameLines(primary.Lines, sh.Lines)) {
			_, _ = shadow.Release(ctx, req.ShopID, req.CartToken)
		}
	})
	return r.stamp(res, sot.Name()), err
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
	mode, sot, shadow := r.route()
	shadowDone := r.goShadow(ctx, shadow, shopID, cartToken, func(ctx context.Context) (*tandem.Reservation, error) {
		return f(shadow, ctx, shopID, cartToken)
	})
	start := time.Now()
	res, err := f(sot, ctx, shopID, cartToken)
	primary := tandem.OutcomeOf(sot.Name(), res, err, time.Since(start))
	answeredBy := sot
	if tandem.ErrorCode(err) == tandem.ENOTFOUND && shadow == nil {
		// No shadow this mode, but a hold from an earlier SoT may live in the
		// other store: honour it (no lost reservation across flips).
		if o := r.other(sot); o != nil {
			if ores, oerr := r.fallback(ctx, o, shopID, cartToken, f); oerr == nil || tandem.ErrorCode(oerr) != tandem.ENOTFOUND && tandem.ErrorCode(oerr) != tandem.EUNAVAILABLE {
				res, err, answeredBy = ores, oerr, o
			}
		}
	}
	var fromShadow chan fallbackResult
	if tandem.ErrorCode(err) == tandem.ENOTFOUND && shadow != nil {
		// The shadow's own operation settles the cart there; wait for it
		// (bounded by the shadow timeout) and answer with it.
		fromShadow = make(chan fallbackResult, 1)
	}
	r.compare(mode, op, shopID, cartToken, primary, shadowDone, func(_ context.Context, sh tandem.Outcome) {
		if fromShadow != nil {
			fromShadow <- fallbackResult{sh}
		}
	})
	if fromShadow != nil {
		select {
		case fr := <-fromShadow:
			if fr.o.Status != tandem.ENOTFOUND && fr.o.Status != tandem.EUNAVAILABLE && fr.o.Status != tandem.EINTERNAL && fr.o.Status != "" {
				res, err, answeredBy = outcomeReservation(shopID, cartToken, fr.o), outcomeErr(fr.o), shadow
			}
		case <-time.After(r.ShadowTimeout + 50*time.Millisecond):
		case <-ctx.Done():
		}
	}
	return r.stamp(res, answeredBy.Name()), err
}

type fallbackResult struct{ o tandem.Outcome }

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
	_, sot, _ := r.route()
	res, err := sot.Get(ctx, shopID, cartToken)
	if tandem.ErrorCode(err) == tandem.ENOTFOUND {
		if o := r.other(sot); o != nil {
			if ores, oerr := r.fallback(ctx, o, shopID, cartToken, tandem.ReservationStore.Get); oerr == nil {
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
	mode, sot, shadow := r.route()
	start := time.Now()
	c, err := sot.SetOnHand(ctx, key, onHand)
	if err != nil {
		return nil, err
	}
	inv := r.inventory(mode, sot, c)
	if shadow != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ShadowTimeout)
		sstart := time.Now()
		sc, serr := shadow.SetOnHand(sctx, key, onHand)
		cancel()
		primary := tandem.Outcome{Store: sot.Name(), Status: "ok", Latency: time.Since(start)}
		so := tandem.Outcome{Store: shadow.Name(), Status: "ok", Latency: time.Since(sstart)}
		if serr != nil {
			so = tandem.OutcomeOf(shadow.Name(), nil, serr, so.Latency)
		} else {
			inv.Stores[shadow.Name()] = tandem.StoreCounters{Available: sc.Available, Reserved: sc.Reserved}
		}
		r.record(mode, tandem.OpSetStock, key.ShopID, "", primary, so, sctx.Err() != nil)
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

// shadowResult is the shadow's answer, delivered once.
type shadowResult struct {
	o        tandem.Outcome
	timedOut bool
	dropped  bool
}

// goShadow starts op on the shadow store, after any earlier shadow op of the
// same cart, under the shadow timeout and the in-flight cap. It returns nil
// when there is no shadow; otherwise a channel that yields one result.
func (r *Router) goShadow(ctx context.Context, shadow tandem.ReservationStore, shopID int64, token string,
	op func(ctx context.Context) (*tandem.Reservation, error)) <-chan shadowResult {
	if shadow == nil {
		return nil
	}
	out := make(chan shadowResult, 1)
	r.closeMux.Lock()
	closed := r.closed
	if !closed {
		select {
		case r.slots <- struct{}{}:
		default:
			closed = true // over the cap: dropped
		}
	}
	if closed {
		r.closeMux.Unlock()
		out <- shadowResult{o: tandem.Outcome{Store: shadow.Name(), Status: "dropped"}, dropped: true}
		return out
	}
	r.wg.Add(1)
	r.closeMux.Unlock()

	ck := cartKey{shopID, token}
	done := make(chan struct{})
	r.mu.Lock()
	prev := r.carts[ck]
	r.carts[ck] = done
	r.mu.Unlock()

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ShadowTimeout)
	go func() {
		defer r.wg.Done()
		defer func() { <-r.slots }()
		defer cancel()
		defer func() {
			close(done)
			r.mu.Lock()
			if r.carts[ck] == done {
				delete(r.carts, ck)
			}
			r.mu.Unlock()
		}()
		if prev != nil {
			select {
			case <-prev:
			case <-sctx.Done():
			}
		}
		start := time.Now()
		var res *tandem.Reservation
		var err error
		if sctx.Err() == nil {
			res, err = op(sctx)
		} else {
			err = sctx.Err()
		}
		timedOut := errors.Is(err, context.DeadlineExceeded) || sctx.Err() != nil && err != nil
		out <- shadowResult{o: tandem.OutcomeOf(shadow.Name(), res, err, time.Since(start)), timedOut: timedOut}
	}()
	return out
}

// compare waits (in the background) for the shadow's answer, classifies it
// against the primary's, runs repair with the shadow's outcome, and records
// the comparison. With no shadow it does nothing.
func (r *Router) compare(mode tandem.Mode, op string, shopID int64, token string, primary tandem.Outcome,
	shadowDone <-chan shadowResult, repair func(ctx context.Context, sh tandem.Outcome)) {
	if shadowDone == nil {
		return
	}
	if primary.Status == tandem.EUNAVAILABLE || primary.Status == tandem.EINTERNAL {
		// The SoT could not answer: nothing to compare, but a shadow hold must
		// not outlive the refusal.
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			sr := <-shadowDone
			r.runRepair(repair, sr.o)
		}()
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		sr := <-shadowDone
		if !sr.dropped {
			r.runRepair(repair, sr.o)
		} else if repair != nil {
			repair(context.Background(), sr.o)
		}
		r.record(mode, op, shopID, token, primary, sr.o, sr.timedOut)
	}()
}

func (r *Router) runRepair(repair func(ctx context.Context, sh tandem.Outcome), sh tandem.Outcome) {
	if repair == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.ShadowTimeout)
	defer cancel()
	repair(ctx, sh)
}

func (r *Router) record(mode tandem.Mode, op string, shopID int64, token string, primary, shadow tandem.Outcome, timedOut bool) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Record(tandem.Comparison{
		At: r.Now(), Pod: r.Pod, Op: op, ShopID: shopID, CartToken: token,
		SourceOfTruth: mode.SourceOfTruth(), Primary: primary, Shadow: shadow,
		Kind: Classify(primary, shadow, timedOut),
	})
}

// Classify returns "" when the shadow reached the primary's outcome, else
// the divergence kind.
func Classify(primary, shadow tandem.Outcome, timedOut bool) string {
	switch {
	case shadow.Status == "dropped":
		return tandem.KindShadowDropped
	case timedOut:
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
	return &tandem.Reservation{CartToken: token, ShopID: shopID, Status: tandem.Status(o.Status), Lines: o.Lines}
}

func outcomeErr(o tandem.Outcome) error {
	switch tandem.Status(o.Status) {
	case tandem.StatusClaimed, tandem.StatusReleased, tandem.StatusReserved, tandem.StatusExpired:
		return nil
	}
	return &tandem.Error{Code: o.Status, Message: o.Message}
}
