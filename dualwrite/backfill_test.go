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
	if _, err := p.Converged(cctx); err != nil {
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
	// The catch-up sweep's list waits too: the copy is done by then.
	swept, openSweep := p.fr.hold("active_holds", "")
	openList()
	<-swept
	for token, want := range map[string]tandem.Status{"claimed": tandem.StatusClaimed, "released": tandem.StatusReleased, "new": tandem.StatusReserved} {
		if got := status(t, p.mysql, 14, token); got != want {
			t.Errorf("mysql after the copy: cart %s is %q, want %s as in Redis", token, got, want)
		}
	}
	if got := p.counters(t, p.mysql, k); got.OnHand != 9 || got.Reserved != 2 {
		t.Errorf("mysql after the copy: got %+v, want on_hand 9 and the 2 units of cart new held", got)
	}
	openSweep()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p.modes.set(tandem.ModeShadow)
	p.mustConverge(t)
}
