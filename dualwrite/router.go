// Package dualwrite routes every reservation of a pod to its source of truth
// (SoT), which alone answers the buyer, and to its shadow, whose answer is
// compared with the SoT's and repaired when they differ. It knows nothing of
// Redis or SQL: both stores are tandem.ShadowStore values.
//
// The shadow never stands in the buyer's way: the buyer's answer returns as
// soon as the SoT answers, the shadow runs after it on its own under
// ShadowTimeout, at most MaxInflight shadow operations run per
// pod (beyond that the shadow is skipped and recorded as shadow_dropped),
// and the shadow operations of one cart run in order, so a claim never
// overtakes the reserve it settles.
//
// The work is split by job: Router is the request path (admission, the
// SoT call, the hand-off to the shadow); its repairer converges what the
// shadow missed (the dirty carts, their worker, the sweep); its migrator
// moves holds between the stores in bulk (backfill, audit, resync, the
// rebuild of a Redis that lost its data).
package dualwrite

import (
	"context"
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

// Defaults of the router's exported configuration fields.
const (
	DefaultShadowTimeout  = 250 * time.Millisecond
	DefaultMaxInflight    = 256
	DefaultBackfillFollow = 10 * time.Second
	DefaultSweepInterval  = 5 * time.Second
	DefaultSweepDuty      = 0.25
)

// Router is one pod's dual-write router. Build it with NewRouter, set the
// exported fields, then Open it; Close stops it.
type Router struct {
	Pod   string
	Shops tandem.ShopSet
	Redis tandem.ShadowStore
	MySQL tandem.ShadowStore
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
	// BackfillBatch is about how many holds one batch of the backfill
	// copies in one transaction (default DefaultBackfillBatch), and
	// BackfillWorkers how many batches run at once (default
	// DefaultBackfillWorkers).
	BackfillBatch   int
	BackfillWorkers int
	// AuditSettle is how long the drift audit waits before it re-checks a
	// position that disagreed, so holds in flight are not reported (default
	// 4 x ShadowTimeout).
	AuditSettle time.Duration
	// SweepInterval is how often the anti-entropy sweep compares the two
	// stores hold by hold and converges what differs (default 5s).
	SweepInterval time.Duration
	// SweepDuty paces the periodic sweep: its listings of every hold and
	// its convergence of what differs run in pages, each followed by a
	// rest, so that they keep the stores and this process busy at most
	// this fraction of the time (tandem.WithPace), 0 < SweepDuty <= 1
	// (default 0.25; 1 sweeps at full speed). The next sweep starts
	// SweepInterval after one ends.
	SweepDuty float64
	// Dirty keeps the pod's dirty carts across restarts (optional: without
	// it they live in memory, and the sweep finds them after a restart).
	Dirty tandem.DirtyLog
	// Observer is told of every convergence (optional).
	Observer ConvergeObserver
	// Tap is told of every operation the SoT answered (optional: a capture).
	Tap Tap
	// Throttle is the pod's throttle (optional): the backfill's batches,
	// the sweep's and the audit's pages, resyncs and the convergence
	// worker's rounds ask it first (tandem.WithThrottle). Buyer flows never.
	Throttle tandem.Throttle
	// Buyers is told the latency of every buyer reserve from the source of
	// truth (optional): the throttle's measure of the buyers' health.
	Buyers BuyerObserver
	// Logger receives warnings (default: none).
	Logger Logger
	Now    func() time.Time

	inflight atomic.Int64 // shadow jobs and background convergences holding one of MaxInflight slots
	wg       sync.WaitGroup
	pending  atomic.Int64 // shadow jobs in flight, for Wait
	// mu guards epoch and carts: the admission of every operation.
	mu    sync.Mutex
	epoch *epoch
	// carts holds, per cart with an operation not finished, the end of the
	// SoT call of its latest admitted operation (the order of the SoT's
	// operations) and its operations open per SoT (admit).
	carts map[cartKey]*cartOrder
	// unshadowed counts the cart operations admitted without a shadow
	// (mode redis) and not finished; unshadowedIdle is closed (and
	// replaced) each time it falls to zero. A backfill waits for them
	// (awaitUnshadowed).
	unshadowed     int
	unshadowedIdle chan struct{}
	// grants are the holds each SoT granted that the other store may not
	// hold yet (grants.go).
	grants grantBook
	// positions serialises, per stripe of positions, a stock count with
	// the sweep's recount: a recount reads the ledger and then sets Redis,
	// and a stock count landing between the two would be overwritten.
	positions [64]sync.Mutex
	// linesMu guards shadowCarts, apart from mu: every shadow job takes it
	// twice, and admission need not wait for that.
	linesMu sync.Mutex
	// shadowCarts holds, per cart, the completion of its latest shadow job
	// (with repair), for the order of the shadow's operations.
	shadowCarts  map[cartKey]chan struct{}
	fenced       atomic.Int64 // fences that ran out of time
	prevSoTWaits atomic.Int64 // operations that waited for their cart's work of another SoT
	closed       atomic.Bool
	closeMux     sync.Mutex
	// stop ends the background work Open started (nil before it and after
	// Close); guarded by closeMux.
	stop context.CancelFunc

	// repair keeps the shadow equal to the SoT behind the request path: the
	// dirty carts, their worker, the sweep (repair.go).
	repair *repairer
	// migrate moves holds between the stores in bulk: backfill, audit,
	// resync, the rebuild of a Redis that lost its data (migrate.go).
	migrate *migrator
}

// BuyerObserver records buyers' reserve latencies; throttle's Throttle
// satisfies it. ObserveBuyer must not block.
type BuyerObserver interface {
	ObserveBuyer(d time.Duration)
}

// Logger receives the router's warnings; *zap.SugaredLogger satisfies it.
type Logger interface {
	Warnw(msg string, keysAndValues ...any)
}

type nopLogger struct{}

func (nopLogger) Warnw(string, ...any) {}

type cartKey struct {
	shop  int64
	token string
}

// NewRouter returns the router of pod over its two stores, ready to route,
// with the default configuration: no mode source (redis), no kill switch,
// recorder, ledger or dirty log, the wall clock and no logger. Set the
// exported fields before Open and before the first request.
func NewRouter(pod string, shops tandem.ShopSet, redis, mysql tandem.ShadowStore) *Router {
	r := &Router{
		Pod: pod, Shops: shops, Redis: redis, MySQL: mysql,
		ShadowTimeout:  DefaultShadowTimeout,
		MaxInflight:    DefaultMaxInflight,
		DefaultTTL:     tandem.DefaultTTL,
		BackfillFollow: DefaultBackfillFollow,
		SweepInterval:  DefaultSweepInterval,
		SweepDuty:      DefaultSweepDuty,
		Now:            time.Now,
		Logger:         nopLogger{},
		carts:          make(map[cartKey]*cartOrder),
		unshadowedIdle: make(chan struct{}),
		shadowCarts:    make(map[cartKey]chan struct{}),
	}
	r.repair = newRepairer(r)
	r.migrate = newMigrator(r)
	return r
}

// defaults puts back the default of every configuration field set to zero.
func (r *Router) defaults() {
	if r.ShadowTimeout <= 0 {
		r.ShadowTimeout = DefaultShadowTimeout
	}
	if r.MaxInflight <= 0 {
		r.MaxInflight = DefaultMaxInflight
	}
	if r.DefaultTTL <= 0 {
		r.DefaultTTL = tandem.DefaultTTL
	}
	if r.BackfillFollow <= 0 {
		r.BackfillFollow = DefaultBackfillFollow
	}
	if r.SweepInterval <= 0 {
		r.SweepInterval = DefaultSweepInterval
	}
	if r.SweepDuty <= 0 || r.SweepDuty > 1 {
		r.SweepDuty = DefaultSweepDuty
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Logger == nil {
		r.Logger = nopLogger{}
	}
}

// Open starts the router's background convergence: it loads the pod's
// dirty carts from the DirtyLog, converges dirty carts with backoff, and
// sweeps the stores for carts and positions that differ every
// SweepInterval. Close stops it.
func (r *Router) Open() error {
	r.defaults()
	r.repair.loadDirty()
	ctx, cancel := context.WithCancel(context.Background())
	r.closeMux.Lock()
	defer r.closeMux.Unlock()
	if r.closed.Load() || r.stop != nil {
		cancel()
		return nil
	}
	r.stop = cancel
	r.repair.start(ctx)
	r.migrate.startLossWatch(ctx)
	return nil
}

// Close waits for the shadow operations in flight (new ones are dropped),
// then stops the convergence worker, which writes the dirty carts left to
// the DirtyLog. Safe to call twice.
func (r *Router) Close() error {
	r.closeMux.Lock()
	r.closed.Store(true)
	stop, done := r.stop, r.repair.done
	r.stop = nil
	r.closeMux.Unlock()
	r.wg.Wait()
	if stop != nil {
		stop()
		<-done
		r.migrate.waitLossWatch()
	}
	return nil
}

// Mode returns the pod's effective mode: its persisted mode, with mysql
// served as shadow while the kill switch is engaged, once the pod's Redis
// is whole: while it is being rebuilt after a data loss, MySQL keeps
// answering (the rebuild takes a few seconds and comes first).
func (r *Router) Mode() tandem.Mode {
	m := tandem.ModeRedis
	if r.Modes != nil {
		m = r.Modes.Mode(r.Pod)
	}
	return m.Effective(r.Kill != nil && r.Kill.Engaged(r.Pod) && !r.migrate.rebuilding())
}

func (r *Router) store(name string) tandem.ShadowStore {
	switch name {
	case tandem.StoreRedis:
		return r.Redis
	case tandem.StoreMySQL:
		return r.MySQL
	}
	return nil
}

// route returns the SoT and the shadow (nil when the mode has none).
func (r *Router) route() (mode tandem.Mode, sot, shadow tandem.ShadowStore) {
	mode = r.Mode()
	return mode, r.store(mode.SourceOfTruth()), r.store(mode.Shadow())
}

// other returns the store that is not s.
func (r *Router) other(s tandem.ShadowStore) tandem.ShadowStore {
	if s == r.Redis {
		return r.MySQL
	}
	return r.Redis
}

// call runs one store call under ShadowTimeout.
func (r *Router) call(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, r.ShadowTimeout)
	defer cancel()
	return f(ctx)
}

// answeredBy sets on res the pod and the store whose answer it is (its
// source_of_truth field: the SoT's, or the other store's when that store
// held the cart from an earlier SoT).
func (r *Router) answeredBy(res *tandem.Reservation, store string) *tandem.Reservation {
	if res != nil {
		res.Pod, res.SourceOfTruth = r.Pod, store
	}
	return res
}

// Reserve holds the cart in the SoT and, concurrently, in the shadow.
func (r *Router) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	req.TTL = req.TTLOr(r.DefaultTTL)
	keys := reserveKeys(req)
	o, err := r.admitReserve(ctx, &cartKey{req.ShopID, req.CartToken}, keys)
	if err != nil {
		return nil, err
	}
	defer o.done()
	if err := r.catchUp(ctx, o); err != nil {
		return nil, err
	}
	if err := r.awaitGrants(ctx, o, keys); err != nil {
		return nil, err
	}
	sot := o.sot
	job := r.goShadow(ctx, o, tandem.OpReserve, shadowCall{req: req})
	defer job.lost()
	start := time.Now()
	res, err := sot.Reserve(ctx, req)
	took := time.Since(start)
	o.granted = err == nil && res != nil && res.Status == tandem.StatusReserved
	job.primary(tandem.OutcomeOf(sot.Name(), res, err, took))
	if r.Buyers != nil {
		r.Buyers.ObserveBuyer(took)
	}
	r.tapReserve(req, start, res, err)
	return r.answeredBy(res, sot.Name()), err
}

// Claim settles the cart in the SoT; the ledger is deducted once whichever
// store claims first (the ledger's claim record), and the shadow's copy is
// cleaned up. A cart the SoT does not know but the other store holds (it
// was reserved under another SoT, before a flip or kill switch) is claimed
// there.
func (r *Router) Claim(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	return r.settle(ctx, tandem.OpClaim, shopID, cartToken, tandem.ShadowStore.Claim)
}

// Release returns the cart's units in the SoT and the shadow, with the same
// fallback to the other store as Claim.
func (r *Router) Release(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	return r.settle(ctx, tandem.OpRelease, shopID, cartToken, tandem.ShadowStore.Release)
}

type settleFunc func(s tandem.ShadowStore, ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error)

func (r *Router) settle(ctx context.Context, op tandem.Op, shopID int64, cartToken string, f settleFunc) (*tandem.Reservation, error) {
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
	if err := r.catchUp(ctx, o); err != nil {
		return nil, err
	}
	sot, shadow := o.sot, o.shadow
	// The shadow settles after the SoT, and only if the SoT answered: the SoT
	// decides what the ledger loses (its lines, its groups), the shadow only
	// settles its copy (the ledger's claim record makes its own deduction a
	// no-op), and a request the SoT could not serve (503) changes nothing.
	// A shadow that ends elsewhere is converged to the SoT's state.
	job := r.goShadow(ctx, o, op, shadowCall{shop: shopID, token: cartToken, settle: f})
	defer job.lost()
	start := time.Now()
	res, err := f(sot, ctx, shopID, cartToken)
	if op == tandem.OpClaim && err == nil {
		r.sold(o, res) // before the job starts: its end ends the sale's grant
	}
	job.primary(tandem.OutcomeOf(sot.Name(), res, err, time.Since(start)))
	r.tapSettle(op, shopID, cartToken, start, res, err)
	if tandem.ErrorCode(err) != tandem.ENOTFOUND {
		return r.answeredBy(res, sot.Name()), err
	}
	// The SoT never saw this cart, but a hold from an earlier SoT (before a
	// flip or a kill switch) may live in the other store: honour it there.
	// With a shadow, the shadow's own operation already did; without one,
	// ask the other store now, bounded by the shadow timeout.
	if shadow != nil {
		if a, ok := job.wait(ctx, r.ShadowTimeout+50*time.Millisecond); ok && earlierSoTAnswers(op, a.outcome) {
			return r.answeredBy(a.res, shadow.Name()), a.err
		}
		return r.answeredBy(res, sot.Name()), err
	}
	if o := r.other(sot); o != nil && !r.repair.suspect(ctx, cartKey{shopID, cartToken}, sot.Name()) {
		ores, oerr := r.fallback(ctx, o, shopID, cartToken, f)
		if earlierSoTAnswers(op, tandem.OutcomeOf(o.Name(), ores, oerr, 0)) {
			return r.answeredBy(ores, o.Name()), oerr
		}
	}
	return r.answeredBy(res, sot.Name()), err
}

// earlierSoTAnswers reports whether the other store's answer to a cart the
// SoT does not know is a definite answer about a hold that store really
// granted (reserved under an earlier SoT, before a flip or a kill switch),
// so that it is the buyer's answer. A copy of a hold the SoT refused is
// discarded by convergence, and until then the cart is dirty with the SoT
// as its authority, which suspect checks before the other store is asked.
func earlierSoTAnswers(op tandem.Op, o tandem.Outcome) bool {
	if o.Failed() {
		return false
	}
	switch o.Status {
	case tandem.ENOTFOUND, tandem.EINVALID:
		return false
	}
	return true
}

// opGet names Get for earlierSoTAnswers; it is not a dual-written operation.
const opGet tandem.Op = "get"

func (r *Router) fallback(ctx context.Context, s tandem.ShadowStore, shopID int64, cartToken string, f settleFunc) (*tandem.Reservation, error) {
	ctx, cancel := context.WithTimeout(ctx, r.ShadowTimeout)
	defer cancel()
	return f(s, ctx, shopID, cartToken)
}

// Get returns the cart as the SoT knows it, or as the other store knows it
// when the SoT never saw it.
func (r *Router) Get(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
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
		if o := r.other(sot); o != nil && !r.repair.suspect(ctx, cartKey{shopID, cartToken}, sot.Name()) {
			ores, oerr := r.fallback(ctx, o, shopID, cartToken, tandem.ShadowStore.Get)
			if earlierSoTAnswers(opGet, tandem.OutcomeOf(o.Name(), ores, oerr, 0)) {
				return r.answeredBy(ores, o.Name()), nil
			}
		}
	}
	return r.answeredBy(res, sot.Name()), err
}

// SetOnHand writes the ledger through the SoT and makes every store the mode
// maintains follow at once. A shadow that cannot follow is recorded as a
// divergence; the buyer-facing answer is the SoT's.
func (r *Router) SetOnHand(ctx context.Context, key tandem.Key, onHand int64) (*tandem.Inventory, error) {
	if onHand < 0 || onHand > tandem.MaxOnHand {
		return nil, tandem.Errorf(tandem.EINVALID, "on_hand must be 0..%d", tandem.MaxOnHand)
	}
	o, err := r.admit(ctx, nil, false)
	if err != nil {
		return nil, err
	}
	defer o.done()
	pl := r.positionLock(key)
	pl.Lock()
	defer pl.Unlock()
	mode, sot, shadow := o.mode, o.sot, o.shadow
	start := time.Now()
	c, err := sot.SetOnHand(ctx, key, onHand)
	r.tapStock(key, onHand, start, err)
	if err != nil {
		return nil, err
	}
	inv := r.inventory(mode, sot, c)
	if shadow != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ShadowTimeout)
		sstart := time.Now()
		// The SoT wrote the ledger; the shadow follows without writing it again.
		sc, serr := shadow.FollowOnHand(sctx, key, onHand, onHand-c.Before)
		timedOut := serr != nil && sctx.Err() != nil
		cancel()
		primary := tandem.Outcome{Store: sot.Name(), Status: tandem.OutcomeOK, Latency: time.Since(start)}
		so := tandem.Outcome{Store: shadow.Name(), Status: tandem.OutcomeOK, Latency: time.Since(sstart)}
		if serr != nil {
			so = tandem.OutcomeOf(shadow.Name(), nil, serr, so.Latency)
			if tandem.ErrorCode(serr) != tandem.ECONFLICT {
				// The count may or may not have reached the shadow: the
				// sweep recounts the position from the ledger at rest.
				r.repair.sweepSoon()
			}
		} else {
			inv.Stores[shadow.Name()] = tandem.StoreCounters{Available: sc.Available, Reserved: sc.Reserved}
		}
		r.record(mode, tandem.OpSetOnHand, key.ShopID, "", primary, so, timedOut, verdict{})
	}
	return inv, nil
}

// Inventory returns the position as the SoT sees it, with each maintained
// store's view.
func (r *Router) Inventory(ctx context.Context, key tandem.Key) (*tandem.Inventory, error) {
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

func (r *Router) inventory(mode tandem.Mode, sot tandem.ShadowStore, c *tandem.Counters) *tandem.Inventory {
	return &tandem.Inventory{
		ShopID: c.ShopID, ItemID: c.ItemID, GroupID: c.GroupID,
		OnHand: c.OnHand, Reserved: c.Reserved, Available: c.Available,
		Pod: r.Pod, SourceOfTruth: sot.Name(),
		Stores: map[string]tandem.StoreCounters{sot.Name(): {Available: c.Available, Reserved: c.Reserved}},
	}
}

// Wait returns when no shadow job is in flight (jobs started meanwhile
// extend it). Tests and the soak use it to reach a state at rest; unlike
// Close it may run concurrently with new requests.
func (r *Router) Wait() {
	for !r.shadowIdle() {
		time.Sleep(time.Millisecond)
	}
}

// shadowIdle reports whether no shadow job is in flight.
func (r *Router) shadowIdle() bool { return r.pending.Load() == 0 }

// positionLock returns the lock of key's stripe (see Router.positions).
func (r *Router) positionLock(k tandem.Key) *sync.Mutex {
	h := uint64(k.ShopID)*0x9E3779B97F4A7C15 ^ uint64(k.ItemID)*0xBF58476D1CE4E5B9 ^ uint64(k.GroupID)*0x94D049BB133111EB
	return &r.positions[(h>>32)%uint64(len(r.positions))]
}
