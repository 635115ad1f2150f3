package dualwrite_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/dualwrite"
)

// faulty wraps a store to inject shadow faults: a delay before chosen
// operations (with late, the operation still runs after the caller gave up,
// as a Redis script or a MySQL commit already sent does), or a cut
// (unavailable) while set. It forwards every method of tandem.ShadowStore,
// so the router treats it as the real store; redisFaulty adds what only
// the Redis store has.
type faulty struct {
	inner tandem.ShadowStore

	mu     sync.Mutex
	delay  map[string]time.Duration // by operation name
	late   bool
	cut    bool
	only   string       // when set, delays apply to this cart token alone
	inLate atomic.Int64 // late operations still running
	gates  map[string]*gate
	// listed are holds ActiveHolds adds to the store's own (a cart its
	// listing saw before it ended); listings counts its calls.
	listed   []tandem.Reservation
	listings atomic.Int64
	// pacedListings counts the listings asked for paced (tandem.WithPace).
	pacedListings atomic.Int64
	// rebuilding is how many RebuildShops calls run, mostRebuilding the
	// most at once, rebuildHolds the holds of each call.
	rebuilding, mostRebuilding atomic.Int32
	rebuildHolds               []int
	// rebuildSpans are when each RebuildShops call started and ended.
	rebuildSpans [][2]time.Time
}

// gate holds one operation on one cart until opened.
type gate struct {
	entered, open chan struct{}
	once          sync.Once
}

func newFaulty(s tandem.ShadowStore) *faulty {
	return &faulty{inner: s, delay: map[string]time.Duration{}}
}

func (f *faulty) set(op string, d time.Duration, late bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay[op], f.late = d, late
}

// setOnly limits the delays to one cart token ("" for every cart).
func (f *faulty) setOnly(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.only = token
}

// hold makes the next calls of op on token wait, each until open is
// called (or its context ends); entered is closed when the first of them
// has reached the store. open lets every held call through.
func (f *faulty) hold(op, token string) (entered <-chan struct{}, open func()) {
	g := &gate{entered: make(chan struct{}), open: make(chan struct{})}
	f.mu.Lock()
	if f.gates == nil {
		f.gates = map[string]*gate{}
	}
	f.gates[op+"/"+token] = g
	f.mu.Unlock()
	return g.entered, func() {
		f.mu.Lock()
		if f.gates[op+"/"+token] == g {
			delete(f.gates, op+"/"+token)
		}
		f.mu.Unlock()
		close(g.open)
	}
}

func (f *faulty) setCut(cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = cut
}

// heal removes every fault and waits for the late operations to land.
func (f *faulty) heal() {
	f.mu.Lock()
	f.delay, f.cut, f.only = map[string]time.Duration{}, false, ""
	f.mu.Unlock()
	for f.inLate.Load() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
}

// do runs fn under the faults set for op.
func do[T any](f *faulty, ctx context.Context, op, token string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	f.mu.Lock()
	d, late, cut := f.delay[op], f.late, f.cut
	if f.only != "" && token != f.only {
		d = 0
	}
	g := f.gates[op+"/"+token]
	f.mu.Unlock()
	if cut {
		return zero, tandem.Errorf(tandem.EUNAVAILABLE, "%s is cut", f.inner.Name())
	}
	if g != nil {
		g.once.Do(func() { close(g.entered) })
		select {
		case <-g.open:
		case <-ctx.Done():
			return zero, tandem.Errorf(tandem.EUNAVAILABLE, "%s %s: %v", f.inner.Name(), op, ctx.Err())
		}
	}
	if d == 0 {
		return fn(ctx)
	}
	if late {
		type result struct {
			v   T
			err error
		}
		ch := make(chan result, 1)
		f.inLate.Add(1)
		go func() {
			defer f.inLate.Add(-1)
			time.Sleep(d)
			v, err := fn(context.WithoutCancel(ctx))
			ch <- result{v, err}
		}()
		select {
		case r := <-ch:
			return r.v, r.err
		case <-ctx.Done():
			return zero, tandem.Errorf(tandem.EUNAVAILABLE, "%s %s: %v", f.inner.Name(), op, ctx.Err())
		}
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return zero, tandem.Errorf(tandem.EUNAVAILABLE, "%s %s: %v", f.inner.Name(), op, ctx.Err())
	}
	return fn(ctx)
}

func (f *faulty) Name() string { return f.inner.Name() }

func (f *faulty) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	return do(f, ctx, "reserve", req.CartToken, func(ctx context.Context) (*tandem.Reservation, error) { return f.inner.Reserve(ctx, req) })
}

func (f *faulty) Claim(ctx context.Context, shop int64, token string) (*tandem.Reservation, error) {
	return do(f, ctx, "claim", token, func(ctx context.Context) (*tandem.Reservation, error) { return f.inner.Claim(ctx, shop, token) })
}

func (f *faulty) Release(ctx context.Context, shop int64, token string) (*tandem.Reservation, error) {
	return do(f, ctx, "release", token, func(ctx context.Context) (*tandem.Reservation, error) { return f.inner.Release(ctx, shop, token) })
}

func (f *faulty) Get(ctx context.Context, shop int64, token string) (*tandem.Reservation, error) {
	return do(f, ctx, "get", token, func(ctx context.Context) (*tandem.Reservation, error) { return f.inner.Get(ctx, shop, token) })
}

func (f *faulty) SetOnHand(ctx context.Context, k tandem.Key, v int64) (*tandem.Counters, error) {
	return do(f, ctx, "set_on_hand", "", func(ctx context.Context) (*tandem.Counters, error) { return f.inner.SetOnHand(ctx, k, v) })
}

func (f *faulty) Counters(ctx context.Context, k tandem.Key) (*tandem.Counters, error) {
	return f.inner.Counters(ctx, k)
}

func (f *faulty) ExpireDue(ctx context.Context, now time.Time, limit int) (int, error) {
	return f.inner.ExpireDue(ctx, now, limit)
}

func (f *faulty) ListCounters(ctx context.Context) ([]tandem.Counters, error) {
	return f.inner.ListCounters(ctx)
}

func (f *faulty) CheckInvariants(ctx context.Context) ([]tandem.Violation, error) {
	return f.inner.CheckInvariants(ctx)
}

func (f *faulty) Discard(ctx context.Context, shop int64, token string) error {
	_, err := do(f, ctx, "discard", token, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, f.inner.Discard(ctx, shop, token)
	})
	return err
}

func (f *faulty) End(ctx context.Context, ended tandem.Reservation) error {
	_, err := do(f, ctx, "end", ended.CartToken, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, f.inner.End(ctx, ended)
	})
	return err
}

func (f *faulty) Tombstone(ctx context.Context, ended []tandem.Reservation) (int, error) {
	return do(f, ctx, "tombstone", "", func(ctx context.Context) (int, error) {
		return f.inner.Tombstone(ctx, ended)
	})
}

func (f *faulty) SettleClaim(ctx context.Context, claimed tandem.Reservation) error {
	_, err := do(f, ctx, "settle_claim", claimed.CartToken, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, f.inner.SettleClaim(ctx, claimed)
	})
	return err
}

func (f *faulty) Place(ctx context.Context, hold tandem.Reservation) (*tandem.Reservation, error) {
	return do(f, ctx, "place", hold.CartToken, func(ctx context.Context) (*tandem.Reservation, error) {
		return f.inner.Place(ctx, hold)
	})
}

func (f *faulty) FollowOnHand(ctx context.Context, k tandem.Key, v, delta int64) (*tandem.Counters, error) {
	return do(f, ctx, "follow", "", func(ctx context.Context) (*tandem.Counters, error) {
		return f.inner.FollowOnHand(ctx, k, v, delta)
	})
}

func (f *faulty) ActiveHolds(ctx context.Context) ([]tandem.Reservation, error) {
	// Held (hold("active_holds", "")) after the read: the caller gets
	// the list as it was before whatever runs meanwhile.
	f.listings.Add(1)
	if tandem.Paced(ctx) {
		f.pacedListings.Add(1)
	}
	list, err := f.inner.ActiveHolds(ctx)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	list = append(list, f.listed...)
	f.mu.Unlock()
	return do(f, ctx, "active_holds", "", func(context.Context) ([]tandem.Reservation, error) { return list, nil })
}

func (f *faulty) Rebuild(ctx context.Context, holds []tandem.Reservation) (int, error) {
	return f.inner.Rebuild(ctx, holds)
}

// redisFaulty adds what only the Redis store has.
type redisFaulty struct{ *faulty }

var (
	_ tandem.ShadowStore = (*faulty)(nil)
	_ interface {
		tandem.ShadowStore
		tandem.ShopLister
		tandem.HoldCounter
		dualwrite.WholeMarker
	} = redisFaulty{}
)

func (f redisFaulty) ShopHolds(ctx context.Context, shops []int64) ([]tandem.Reservation, error) {
	return f.inner.(tandem.ShopLister).ShopHolds(ctx, shops)
}

func (f redisFaulty) ShopHoldCounts(ctx context.Context) (map[int64]int, error) {
	// Held (hold("hold_counts", "")) after the read, as ActiveHolds.
	counts, err := f.inner.(tandem.HoldCounter).ShopHoldCounts(ctx)
	if err != nil {
		return nil, err
	}
	return do(f.faulty, ctx, "hold_counts", "", func(context.Context) (map[int64]int, error) { return counts, nil })
}

func (f *faulty) Recount(ctx context.Context, k tandem.Key) (*tandem.Counters, error) {
	return f.inner.Recount(ctx, k)
}

func (f *faulty) Repair(ctx context.Context, k tandem.Key) (*tandem.Records, error) {
	return f.inner.Repair(ctx, k)
}

func (f *faulty) Records(ctx context.Context, k tandem.Key) (*tandem.Records, error) {
	return f.inner.Records(ctx, k)
}

func (f *faulty) RebuildShops(ctx context.Context, shops []int64, holds []tandem.Reservation) (int, error) {
	n := f.rebuilding.Add(1)
	defer f.rebuilding.Add(-1)
	for {
		most := f.mostRebuilding.Load()
		if n <= most || f.mostRebuilding.CompareAndSwap(most, n) {
			break
		}
	}
	f.mu.Lock()
	f.rebuildHolds = append(f.rebuildHolds, len(holds))
	f.mu.Unlock()
	// Held (hold("rebuild_shops", first shop)) before it writes.
	start := time.Now()
	defer func() {
		f.mu.Lock()
		f.rebuildSpans = append(f.rebuildSpans, [2]time.Time{start, time.Now()})
		f.mu.Unlock()
	}()
	return do(f, ctx, "rebuild_shops", strconv.FormatInt(shops[0], 10), func(ctx context.Context) (int, error) {
		return f.inner.RebuildShops(ctx, shops, holds)
	})
}

func (f redisFaulty) Marked(ctx context.Context) (bool, error) {
	return f.inner.(dualwrite.WholeMarker).Marked(ctx)
}

func (f redisFaulty) Mark(ctx context.Context) error {
	return f.inner.(dualwrite.WholeMarker).Mark(ctx)
}
