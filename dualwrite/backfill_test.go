package dualwrite_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/dualwrite"
)

// The backfill copies 50,000 active holds into MySQL while buyers keep
// being served through the router: no buyer error, buyers' operations go on
// during the copy (nothing pauses the pod), and once the pod is in shadow
// the stores agree hold by hold. The buyers' latency before and during the
// copy is logged (the figures to compare live in `tandem bench backfill`).
func TestBackfill_OnlineUnderLoad(t *testing.T) {
	const shops, perShop = 200, 250 // 50,000 holds
	p := mustOpenPod(t, tandem.ModeRedis)
	for shop := int64(1); shop <= shops; shop++ {
		if _, err := p.SetOnHand(ctx, tandem.Key{ShopID: shop, ItemID: 1, GroupID: 1}, 2*perShop); err != nil {
			t.Fatal(err)
		}
	}
	// The holds, written straight into Redis as a legacy pod has them.
	exp := p.clock.Now().Add(time.Hour)
	holds := make([]tandem.Reservation, 0, shops*perShop)
	for shop := int64(1); shop <= shops; shop++ {
		for c := range perShop {
			holds = append(holds, tandem.Reservation{ShopID: shop, CartToken: fmt.Sprintf("old-%d", c),
				Status: tandem.StatusReserved, ExpiresAt: exp, Lines: []tandem.Line{{ItemID: 1, Quantity: 1, GroupID: 1}}})
		}
	}
	if _, err := p.redis.Rebuild(ctx, holds); err != nil {
		t.Fatal(err)
	}

	// Buyers: a steady load (each of four buyers reserves and releases
	// every 10ms) on random shops.
	const buyers = 4
	var stop atomic.Bool
	var copying atomic.Bool
	var errs atomic.Int64
	var mu sync.Mutex
	var before, during []time.Duration
	var wg sync.WaitGroup
	for b := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				shop := int64(1 + (b*7919+n*31)%shops)
				token := fmt.Sprintf("buyer-%d-%d", b, n)
				start := time.Now()
				_, err := p.Reserve(ctx, cart(token, shop, one(1, 1, 1)))
				d := time.Since(start)
				if err == nil {
					_, err = p.Release(ctx, shop, token)
				}
				if err != nil {
					errs.Add(1)
					t.Errorf("buyer %s: %v", token, err)
				}
				time.Sleep(10 * time.Millisecond)
				mu.Lock()
				if copying.Load() {
					during = append(during, d)
				} else if during == nil {
					before = append(before, d)
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	copying.Store(true)
	start := time.Now()
	watch := make(chan struct{})
	go func() {
		last := ""
		for {
			select {
			case <-watch:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if pr := p.BackfillProgress(); pr != nil && pr.Phase != last {
				t.Logf("%s: phase %s, %d of %d copied", time.Since(start).Round(time.Millisecond), pr.Phase, pr.Copied, pr.Total)
				last = pr.Phase
			}
		}
	}()
	n, err := p.Backfill(ctx)
	took := time.Since(start)
	close(watch)
	copying.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	// Every old hold is copied, and so is a buyer's hold that is active
	// when its shop's batch is read from Redis (at most one per buyer and
	// batch, a batch being one shop or more).
	if n < len(holds) || n > len(holds)+buyers*shops {
		t.Errorf("backfill copied %d holds, want the %d old ones and at most %d of buyers", n, len(holds), buyers*shops)
	}
	p.modes.set(tandem.ModeShadow)
	time.Sleep(200 * time.Millisecond) // buyers in shadow mode too
	stop.Store(true)
	wg.Wait()
	mu.Lock()
	t.Logf("copied %d holds in %s (%.0f holds/s); buyers: %d ops before, p50/p99 %s/%s; %d during, p50/p99 %s/%s",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(),
		len(before), quantile(before, 0.5), quantile(before, 0.99), len(during), quantile(during, 0.5), quantile(during, 0.99))
	if len(during) == 0 {
		t.Errorf("no buyer operation completed during the copy: the pod paused")
	}
	mu.Unlock()
	if errs.Load() != 0 {
		t.Errorf("got %d buyer errors, want 0", errs.Load())
	}
	if pr := p.BackfillProgress(); pr == nil || pr.Phase != "done" || pr.Copied != n || pr.Total < len(holds) || pr.Total > len(holds)+buyers {
		t.Errorf("progress: got %+v, want done with the %d copied of a total of %d old holds and at most %d of buyers", pr, n, len(holds), buyers)
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if d, err := p.Converged(cctx); err != nil {
		// What the pod recorded of each cart left differing.
		for _, c := range d.Carts {
			for _, cmp := range p.rec.snapshot() {
				if cmp.ShopID == c.ShopID && cmp.CartToken == c.CartToken {
					t.Logf("cart %d/%s: %s sot %s %+v, shadow %+v, kind %q", c.ShopID, c.CartToken, cmp.Op, cmp.SourceOfTruth, cmp.Primary, cmp.Shadow, cmp.Kind)
				}
			}
		}
		t.Fatal(err)
	}
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))].Round(10 * time.Microsecond)
}

// The backfill copies a batch of shops as Redis holds them once the
// batch's shadow work is paused, not as a list read at its start: a cart
// claimed or released since (its end already followed into MySQL) is not
// put back as a hold, and a cart reserved since (already in MySQL through
// the shadow) is not dropped. MySQL is looked at once the copy is done,
// before the catch-up sweep, which would mend such carts only if it
// compares them before the pod flips (it leaves alone the carts on a
// position whose Redis count is off the ledger at that moment, as it is
// during a legacy claim).
func TestBackfill_CopiesCurrentHolds(t *testing.T) {
	p := mustOpenPod(t, tandem.ModeRedis)
	k := tandem.Key{ShopID: 14, ItemID: 1, GroupID: 1}
	if _, err := p.SetOnHand(ctx, k, 10); err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{"claimed", "released"} { // MySQL never sees them reserved
		if _, err := p.Reserve(ctx, cart(token, 14, one(1, 1, 1))); err != nil {
			t.Fatal(err)
		}
	}
	// The backfill counts Redis's holds, then waits while buyers go on.
	listed, openList := p.fr.hold("hold_counts", "")
	done := make(chan error, 1)
	go func() {
		_, err := p.Backfill(ctx)
		done <- err
	}()
	<-listed
	if _, err := p.Claim(ctx, 14, "claimed"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Release(ctx, 14, "released"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reserve(ctx, cart("new", 14, one(1, 2, 1))); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	openList()
	// The catch-up converges the three carts written during the copy.
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if pr := p.BackfillProgress(); pr.CatchUp != dualwrite.CatchUpByCarts || pr.CatchUpCarts != 3 {
		t.Errorf("catch_up %q of %d carts, want %q of the 3 carts written during the copy", pr.CatchUp, pr.CatchUpCarts, dualwrite.CatchUpByCarts)
	}
	for token, want := range map[string]tandem.Status{"claimed": tandem.StatusClaimed, "released": tandem.StatusReleased, "new": tandem.StatusReserved} {
		if got := status(t, p.mysql, 14, token); got != want {
			t.Errorf("mysql after the copy: cart %s is %q, want %s as in Redis", token, got, want)
		}
	}
	if got := p.counters(t, p.mysql, k); got.OnHand != 9 || got.Reserved != 2 {
		t.Errorf("mysql after the copy: got %+v, want on_hand 9 and the 2 units of cart new held", got)
	}
	p.modes.set(tandem.ModeShadow)
	p.mustConverge(t)
}

// TestBackfill_LeavesUncopiedShopsToTheirBatch: while a copy runs, the
// shadow work of a shop whose batch has not started is left out (its batch
// reads Redis after it); a shop being copied waits for its batch, and a
// shop copied is followed. Writing the uncopied shops' operations into
// MySQL filled every shop's unit pool in the copy's first seconds, only
// for its batch to rewrite it: the buyers' worst moment of the copy.
func TestBackfill_LeavesUncopiedShopsToTheirBatch(t *testing.T) {
	p := mustOpenPod(t, tandem.ModeRedis, func(r *dualwrite.Router) { r.BackfillBatch, r.BackfillWorkers = 1, 1 })
	for shop := int64(21); shop <= 22; shop++ {
		if _, err := p.SetOnHand(ctx, tandem.Key{ShopID: shop, ItemID: 1, GroupID: 1}, 10); err != nil {
			t.Fatal(err)
		}
		for _, token := range []string{"old", "leaving", "sold"} {
			if _, err := p.Reserve(ctx, cart(token, shop, one(1, 1, 1))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One shop per batch: shop 21's batch is held before it writes.
	entered, open := p.fm.hold("rebuild_shops", "21")
	done := make(chan error, 1)
	go func() {
		_, err := p.Backfill(ctx)
		done <- err
	}()
	<-entered
	buy := func(shop int64) {
		if _, err := p.Reserve(ctx, cart("new", shop, one(1, 2, 1))); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Release(ctx, shop, "leaving"); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Claim(ctx, shop, "sold"); err != nil {
			t.Fatal(err)
		}
	}
	// Shop 22's shadow work is left out: MySQL never sees its new cart
	// before the batch.
	buy(22)
	p.Wait()
	if res, err := p.mysql.Get(ctx, 22, "new"); tandem.ErrorCode(err) != tandem.ENOTFOUND {
		t.Errorf("mysql before shop 22's batch: cart new is %+v (%v), want never seen (its batch copies it)", res, err)
	}
	// Shop 21's waits for its batch.
	buy(21)
	open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p.Wait()
	for shop := int64(21); shop <= 22; shop++ {
		for token, want := range map[string]tandem.Status{"old": tandem.StatusReserved, "new": tandem.StatusReserved,
			"leaving": tandem.StatusReleased, "sold": tandem.StatusClaimed} {
			if got := status(t, p.mysql, shop, token); got != want {
				t.Errorf("mysql after the copy: shop %d's cart %s is %q, want %s as in Redis", shop, token, got, want)
			}
		}
		if got := p.counters(t, p.mysql, tandem.Key{ShopID: shop, ItemID: 1, GroupID: 1}); got.OnHand != 9 || got.Reserved != 3 {
			t.Errorf("mysql after the copy: shop %d has %+v, want on_hand 9 and 3 units held", shop, got)
		}
	}
	p.modes.set(tandem.ModeShadow)
	p.mustConverge(t)
}

// TestBackfill_WaitsForUnshadowedOps: an operation admitted in mode
// redis before the copy began following has no shadow job, so nothing but
// the copy brings its outcome into MySQL. The copy waits for such
// operations before it plans. A release in flight at its start, its cart
// copied as a hold and then released in Redis alone, would leave MySQL
// holding units nobody holds (a reserve likewise would leave MySQL without
// a hold the buyer was granted), and the catch-up leaves such a cart to
// its operation "in flight", which never writes MySQL.
func TestBackfill_WaitsForUnshadowedOps(t *testing.T) {
	p := mustOpenPod(t, tandem.ModeRedis)
	k := tandem.Key{ShopID: 15, ItemID: 1, GroupID: 1}
	if _, err := p.SetOnHand(ctx, k, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reserve(ctx, cart("leaving", 15, one(1, 2, 1))); err != nil {
		t.Fatal(err)
	}
	entered, open := p.fr.hold("release", "leaving")
	released := make(chan error, 1)
	go func() {
		_, err := p.Release(ctx, 15, "leaving")
		released <- err
	}()
	<-entered
	done := make(chan error, 1)
	go func() {
		_, err := p.Backfill(ctx)
		done <- err
	}()
	// The copy follows at once, and waits for the release before it
	// plans.
	for p.BackfillProgress() == nil {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if pr := p.BackfillProgress(); pr.Phase != "follow" {
		t.Errorf("the copy is in phase %q while a release admitted before it is in flight, want follow (waiting)", pr.Phase)
	}
	open()
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := status(t, p.mysql, 15, "leaving"); got == tandem.StatusReserved {
		t.Errorf("mysql after the copy holds the cart Redis released meanwhile")
	}
	if got := p.counters(t, p.mysql, k); got.Reserved != 0 {
		t.Errorf("mysql after the copy: got %+v, want nothing held", got)
	}
	p.modes.set(tandem.ModeShadow)
	p.mustConverge(t)
}

// TestBackfill_CatchUpOfAListingRace: a catch-up pass whose differing
// carts were all equal once read in their line (they differed only
// between the two listings, as buyers' carts do under load) ends the
// catch-up; another pass would list every hold of both stores again for
// nothing, and under buyers would never find a quiet moment to stop.
func TestBackfill_CatchUpOfAListingRace(t *testing.T) {
	p := mustOpenPod(t, tandem.ModeRedis)
	legacyHolds(t, p, 3, 5)
	if _, err := p.Backfill(ctx); err != nil {
		t.Fatal(err)
	}
	p.fm.mu.Lock()
	p.fm.listed = []tandem.Reservation{{ShopID: 1, CartToken: "gone", Status: tandem.StatusReserved,
		ExpiresAt: p.clock.Now().Add(time.Minute), Lines: []tandem.Line{{ItemID: 1, Quantity: 1, GroupID: 1}}}}
	p.fm.mu.Unlock()
	// A copy resumed after shop 1 catches up by a sweep.
	before := p.fm.listings.Load()
	if _, err := p.BackfillFrom(ctx, tandem.BackfillCheckpoint{Shop: 1, Copied: 5}, nil); err != nil {
		t.Fatal(err)
	}
	if n := p.fm.listings.Load() - before; n != 1 {
		t.Errorf("the catch-up listed mysql's holds %d times, want once (one pass, nothing rewritten)", n)
	}
	if got := p.BackfillProgress().CatchUp; got != dualwrite.CatchUpBySweep {
		t.Errorf("catch_up %q after a resumed copy, want %q", got, dualwrite.CatchUpBySweep)
	}
	p.fm.mu.Lock()
	p.fm.listed = nil
	p.fm.mu.Unlock()
	p.modes.set(tandem.ModeShadow)
	p.mustConverge(t)
}

// backfillWithBuyer runs p's backfill with a buyer's release of the
// legacy hold legacy-0 of shop (legacyHolds) admitted while it copies,
// which gives its catch-up work to do.
func backfillWithBuyer(t *testing.T, p *pod, shop int64) {
	t.Helper()
	planned, openPlan := p.fr.hold("hold_counts", "")
	done := make(chan error, 1)
	go func() {
		_, err := p.Backfill(ctx)
		done <- err
	}()
	<-planned
	if _, err := p.Release(ctx, shop, "legacy-0"); err != nil {
		t.Fatal(err)
	}
	openPlan()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestBackfill_QuietCopySkipsCatchUp: a fresh copy during which this
// instance admitted no write has nothing to catch up (each batch read
// Redis as it wrote it) and lists neither store again; a copy resumed
// after a checkpoint sweeps (its first shops changed while no copy ran),
// and so does a copy with a write admitted during it
// (TestBackfill_CatchUpOfAListingRace). Either way the stores are equal
// hold by hold once in shadow.
func TestBackfill_QuietCopySkipsCatchUp(t *testing.T) {
	t.Run("Fresh", func(t *testing.T) {
		p := mustOpenPod(t, tandem.ModeRedis)
		holds := legacyHolds(t, p, 4, 50)
		before := p.fm.listings.Load()
		n, err := p.Backfill(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(holds) {
			t.Errorf("copied %d holds, want %d", n, len(holds))
		}
		if got := p.fm.listings.Load() - before; got != 0 {
			t.Errorf("a quiet copy listed mysql's holds %d times, want none (no catch-up)", got)
		}
		if got := p.BackfillProgress().CatchUp; got != dualwrite.CatchUpSkipped {
			t.Errorf("catch_up %q after a quiet copy, want %q", got, dualwrite.CatchUpSkipped)
		}
		// The copy alone made the stores equal: compared at once in
		// shadow, before any sweep.
		p.modes.set(tandem.ModeShadow)
		d, err := p.Diff(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Empty() || d.Holds != len(holds) {
			t.Errorf("the stores after a quiet copy, %d holds wanted: %s", len(holds), d)
		}
		p.mustConverge(t)
	})
	t.Run("Resumed", func(t *testing.T) {
		p := mustOpenPod(t, tandem.ModeRedis)
		legacyHolds(t, p, 4, 50)
		// An interrupted run had copied shop 1, which then changed while
		// no copy ran: a hold of it that MySQL never saw.
		if _, err := p.Backfill(ctx); err != nil {
			t.Fatal(err)
		}
		late := tandem.Reservation{ShopID: 1, CartToken: "while-no-copy-ran", Status: tandem.StatusReserved,
			ExpiresAt: p.clock.Now().Add(time.Hour), Lines: []tandem.Line{{ItemID: 1, Quantity: 1, GroupID: 1}}}
		if _, err := p.redis.Place(ctx, late); err != nil {
			t.Fatal(err)
		}
		before := p.fm.listings.Load()
		if _, err := p.BackfillFrom(ctx, tandem.BackfillCheckpoint{Shop: 1, Copied: 50}, nil); err != nil {
			t.Fatal(err)
		}
		if got := p.fm.listings.Load() - before; got < 1 {
			t.Errorf("a resumed copy listed mysql's holds %d times, want a catch-up sweep", got)
		}
		if got := p.BackfillProgress().CatchUp; got != dualwrite.CatchUpBySweep {
			t.Errorf("catch_up %q after a resumed copy, want %q", got, dualwrite.CatchUpBySweep)
		}
		if got := status(t, p.mysql, 1, late.CartToken); got != tandem.StatusReserved {
			t.Errorf("mysql after the resumed copy: cart %s is %q, want reserved as in Redis", late.CartToken, got)
		}
		p.modes.set(tandem.ModeShadow)
		p.mustConverge(t)
	})
}

// legacyHolds writes, straight into p's Redis as a legacy pod has them,
// perShop holds on each of shops shops: carts of one to three lines over
// three items and two groups, of quantities 1 to 3. Every position gets
// on_hand enough for them and for buyers.
func legacyHolds(t *testing.T, p *pod, shops, perShop int) []tandem.Reservation {
	t.Helper()
	for shop := int64(1); shop <= int64(shops); shop++ {
		for item := int64(1); item <= 3; item++ {
			for group := int64(1); group <= 2; group++ {
				if _, err := p.SetOnHand(ctx, tandem.Key{ShopID: shop, ItemID: item, GroupID: group}, int64(6*perShop)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	exp := p.clock.Now().Add(time.Hour)
	var holds []tandem.Reservation
	for shop := int64(1); shop <= int64(shops); shop++ {
		for c := range perShop {
			h := tandem.Reservation{ShopID: shop, CartToken: fmt.Sprintf("legacy-%d", c), Status: tandem.StatusReserved,
				ExpiresAt: exp.Add(time.Duration(c) * time.Millisecond)}
			for l := range 1 + c%3 {
				h.Lines = append(h.Lines, tandem.Line{ItemID: int64(1 + l), Quantity: int64(1 + (c+l)%3), GroupID: int64(1 + (c/3+l)%2)})
			}
			holds = append(holds, h)
		}
	}
	if _, err := p.redis.Rebuild(ctx, holds); err != nil {
		t.Fatal(err)
	}
	return holds
}

// mysqlHolds returns MySQL's holds of the given tokens, by shop/token.
func mysqlHolds(t *testing.T, p *pod, want []tandem.Reservation) map[string]string {
	t.Helper()
	keep := map[string]bool{}
	for _, h := range want {
		keep[fmt.Sprintf("%d/%s", h.ShopID, h.CartToken)] = true
	}
	list, err := p.mysql.ActiveHolds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, h := range list {
		if k := fmt.Sprintf("%d/%s", h.ShopID, h.CartToken); keep[k] {
			out[k] = fmt.Sprintf("%v until %s", h.Lines, h.ExpiresAt.UTC().Format(time.RFC3339Nano))
		}
	}
	return out
}

// The bulk copy (batches of set-based statements, several at once) ends
// where the per-hold copy ends: a pod copied in bulk while buyers reserve,
// claim and release on the same positions, and a pod whose MySQL is filled
// by the sweep converging each cart from Redis one by one, hold the same
// legacy holds in MySQL with the same lines, groups and expiry; the bulk
// pod's stores agree hold by hold with each other and with the ledger once
// in shadow, and MySQL's invariants hold.
func TestBackfill_BulkEqualsPerHold(t *testing.T) {
	const shops, perShop = 30, 100 // 3,000 legacy holds
	bulk := mustOpenPod(t, tandem.ModeRedis)
	bulk.Router.BackfillBatch = 250 // a dozen batches, three at once
	holds := legacyHolds(t, bulk, shops, perShop)

	var stop atomic.Bool
	var errs atomic.Int64
	var wg sync.WaitGroup
	for b := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				shop := int64(1 + (b*7+n*13)%shops)
				token := fmt.Sprintf("buyer-%d-%d", b, n)
				if _, err := bulk.Reserve(ctx, cart(token, shop, one(1+int64(n%2), 1, 1, 2), one(3, 1, 2))); err != nil {
					errs.Add(1)
					t.Errorf("buyer %s: %v", token, err)
					continue
				}
				var err error
				switch n % 3 {
				case 0:
					_, err = bulk.Claim(ctx, shop, token)
				case 1:
					_, err = bulk.Release(ctx, shop, token)
				} // else the hold stays, to be copied
				if err != nil {
					errs.Add(1)
					t.Errorf("buyer %s: %v", token, err)
				}
			}
		}()
	}
	n, err := bulk.Backfill(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bulk.modes.set(tandem.ModeShadow)
	stop.Store(true)
	wg.Wait()
	if n < len(holds) {
		t.Errorf("bulk copy: got %d holds copied, want at least the %d legacy ones", n, len(holds))
	}
	bulk.Wait()
	bulk.mustConverge(t)
	if v, err := bulk.mysql.CheckInvariants(ctx); err != nil || len(v) != 0 {
		t.Errorf("mysql invariants after the bulk copy: got %v %v, want none violated", v, err)
	}

	perHold := mustOpenPod(t, tandem.ModeRedis)
	legacyHolds(t, perHold, shops, perShop)
	perHold.modes.set(tandem.ModeShadow)
	// The per-hold copy: the sweep converges each cart from Redis, one by
	// one, into a MySQL that has none.
	for pass := 0; ; pass++ {
		rep, err := perHold.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Carts == 0 {
			break
		}
		if pass == 5 {
			t.Fatalf("per-hold copy: %+v after %d passes", rep, pass)
		}
	}
	perHold.mustConverge(t)

	a, b := mysqlHolds(t, bulk, holds), mysqlHolds(t, perHold, holds)
	if len(a) != len(holds) || len(b) != len(holds) {
		t.Fatalf("legacy holds in MySQL: got %d in bulk, %d per hold, want %d each", len(a), len(b), len(holds))
	}
	for k, v := range b {
		if a[k] != v {
			t.Errorf("hold %s: bulk %s, per hold %s", k, a[k], v)
		}
	}
}

// A pod of real size: 200,000 legacy holds copied in bulk, then the stores
// agree hold by hold and with the ledger, and MySQL's invariants hold. It
// checks what the copy leaves, not how long it takes (`tandem bench
// backfill` measures that).
func TestBackfill_200kHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("200,000 holds: run without -short")
	}
	const shops, perShop = 200, 1000
	p := mustOpenPod(t, tandem.ModeRedis)
	exp := p.clock.Now().Add(time.Hour)
	holds := make([]tandem.Reservation, 0, shops*perShop)
	for shop := int64(1); shop <= shops; shop++ {
		if _, err := p.SetOnHand(ctx, tandem.Key{ShopID: shop, ItemID: 1, GroupID: 1}, perShop+10); err != nil {
			t.Fatal(err)
		}
		for c := range perShop {
			holds = append(holds, tandem.Reservation{ShopID: shop, CartToken: fmt.Sprintf("legacy-%d", c), Status: tandem.StatusReserved,
				ExpiresAt: exp, Lines: []tandem.Line{{ItemID: 1, Quantity: 1, GroupID: 1}}})
		}
	}
	start := time.Now()
	if _, err := p.redis.Rebuild(ctx, holds); err != nil {
		t.Fatal(err)
	}
	t.Logf("redis written in %s", time.Since(start))
	start = time.Now()
	n, err := p.Backfill(ctx)
	t.Logf("copied in %s", time.Since(start))
	if err != nil {
		t.Fatal(err)
	}
	if n != len(holds) {
		t.Errorf("copied %d holds, want %d", n, len(holds))
	}
	if pr := p.BackfillProgress(); pr.Phase != "done" || pr.Copied != n || pr.Total != len(holds) || pr.Batches != pr.BatchesTotal || pr.Checkpoint != shops {
		t.Errorf("progress: got %+v, want done with %d of %d copied, every batch, checkpoint at shop %d", pr, n, len(holds), shops)
	}
	p.modes.set(tandem.ModeShadow)
	start = time.Now()
	// Comparing 200,000 holds in each store takes seconds by itself (10 s
	// on a busy 2-core machine): the bound is for a hang, not a speed.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := p.Converged(cctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("compared in %s", time.Since(start))
	if v, err := p.mysql.CheckInvariants(ctx); err != nil || len(v) != 0 {
		t.Errorf("mysql invariants: got %v %v, want none violated", v, err)
	}
	if v, err := p.redis.CheckInvariants(ctx); err != nil || len(v) != 0 {
		t.Errorf("redis invariants: got %v %v, want none violated", v, err)
	}
}

// TestBackfill_ClaimedBeforeFollowIsNeverReservedAgain: a cart reserved
// and claimed in mode redis before the backfill began following reaches
// MySQL through neither the shadow nor the copy (the copy takes active
// holds); only its claim record in the shared ledger says it was sold.
// Once MySQL answers, a client's retried reserve of that token must be
// refused as Redis refuses it: granted, it would hold units for a cart
// already sold, and the stores could never converge ("redis claimed cart
// …, which mysql still holds"), the rare TestLinearizable_RouterFlips
// failure under load.
func TestBackfill_ClaimedBeforeFollowIsNeverReservedAgain(t *testing.T) {
	p := mustOpenPod(t, tandem.ModeRedis)
	k := tandem.Key{ShopID: 16, ItemID: 1, GroupID: 1}
	if _, err := p.SetOnHand(ctx, k, 10); err != nil {
		t.Fatal(err)
	}
	req := cart("sold", 16, one(1, 2, 1))
	if _, err := p.Reserve(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Claim(ctx, 16, "sold"); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	if _, err := p.Backfill(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range []tandem.Mode{tandem.ModeShadow, tandem.ModeMySQL} {
		p.modes.set(m)
		res, err := p.Reserve(ctx, req)
		if code := tandem.ErrorCode(err); code != tandem.ECONFLICT {
			t.Errorf("mode %s: a retried reserve of the claimed cart answered %+v, %v; want %s", m, res, err, tandem.ECONFLICT)
		}
		p.Wait()
	}
	if got := p.counters(t, p.mysql, k); got.OnHand != 8 || got.Reserved != 0 {
		t.Errorf("mysql: got %+v, want on_hand 8 and nothing held", got)
	}
	if ds := p.rec.mismatches(); len(ds) > 0 {
		t.Errorf("divergences: %+v", ds)
	}
	p.mustConverge(t)
}
