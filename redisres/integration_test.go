package redisres_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/memres"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/redisres"
)

// MustOpenRealStore opens a store on the real Redis under a fresh prefix.
func MustOpenRealStore(tb testing.TB) *env {
	tb.Helper()
	rdb, prefix := testenv.MustRedis(tb)
	return MustOpenStoreOn(tb, rdb, prefix, memres.NewLedger(), newClock())
}

func TestIntegration_Lifecycle(t *testing.T) {
	e := MustOpenRealStore(t)
	a, b := key(1, 100, 1), key(1, 100, 2)
	e.MustStock(t, a, 3)
	e.MustStock(t, b, 10)

	res := e.MustReserve(t, cartReq("buy", line(100, 2, 1, 2)))
	if res.Lines[0].GroupID != 1 {
		t.Errorf("group: got %d, want 1", res.Lines[0].GroupID)
	}
	e.MustReserve(t, cartReq("abandon", line(100, 2, 1, 2))) // group 1 has 1 left: takes group 2
	e.MustReserve(t, cartReq("forget", line(100, 1, 1)))
	e.WantCounters(t, a, 3, 3, 0)
	e.WantCounters(t, b, 10, 2, 8)
	e.WantClean(t)

	if _, err := e.Claim(ctx, 1, "buy"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Release(ctx, 1, "abandon"); err != nil {
		t.Fatal(err)
	}
	e.Clock.Add(tandem.DefaultTTL)
	if n, err := e.ExpireDue(ctx, e.Clock.Now(), 100); n != 1 || err != nil {
		t.Fatalf("expire: got %d, %v, want 1, nil", n, err)
	}
	e.WantStatus(t, 1, "buy", tandem.StatusClaimed)
	e.WantStatus(t, 1, "abandon", tandem.StatusReleased)
	e.WantStatus(t, 1, "forget", tandem.StatusExpired)
	e.WantLedger(t, a, 1)
	e.WantCounters(t, a, 1, 0, 1)
	e.WantCounters(t, b, 10, 0, 10)
	e.WantClean(t)

	got, err := e.ListCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Key != a || got[1].Key != b {
		t.Errorf("list counters: got %+v, want %s and %s", got, a, b)
	}
}

func TestIntegration_ConcurrentHotItem(t *testing.T) {
	e := MustOpenRealStore(t)
	k := key(1, 100, 1)
	e.MustStock(t, k, 100)

	var ok, insufficient, other atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 300; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := e.Reserve(ctx, cartReq(fmt.Sprintf("c-%d", i), line(100, 1, 1)))
			switch tandem.ErrorCode(err) {
			case "":
				ok.Add(1)
			case tandem.EINSUFFICIENT:
				insufficient.Add(1)
			default:
				other.Add(1)
				t.Errorf("reserve c-%d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if ok.Load() != 100 || insufficient.Load() != 200 || other.Load() != 0 {
		t.Errorf("got %d reserved, %d insufficient, %d other, want 100, 200, 0", ok.Load(), insufficient.Load(), other.Load())
	}
	e.WantCounters(t, k, 100, 100, 0)
	e.WantClean(t)
}

func TestIntegration_ScarceTwoLineCarts(t *testing.T) {
	e := MustOpenRealStore(t)
	plenty, scarce := key(1, 100, 1), key(1, 200, 1)
	e.MustStock(t, plenty, 1000)
	e.MustStock(t, scarce, 37)

	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 150; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := e.Reserve(ctx, cartReq(fmt.Sprintf("c-%d", i), line(100, 2, 1), line(200, 1, 1)))
			switch code := tandem.ErrorCode(err); code {
			case "":
				ok.Add(1)
			case tandem.EINSUFFICIENT:
				if got := tandem.ErrorDetails(err)["inventory_item_id"]; got != int64(200) {
					t.Errorf("c-%d: details.inventory_item_id: got %v, want 200", i, got)
				}
			default:
				t.Errorf("reserve c-%d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if ok.Load() != 37 {
		t.Fatalf("carts reserved: got %d, want 37", ok.Load())
	}
	e.WantCounters(t, plenty, 1000, 74, 926)
	e.WantCounters(t, scarce, 37, 37, 0)
	e.WantClean(t)

	// Release every cart at once: nothing leaks either way.
	for i := 0; i < 150; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := e.Release(ctx, 1, fmt.Sprintf("c-%d", i))
			if code := tandem.ErrorCode(err); code != "" && code != tandem.ENOTFOUND {
				t.Errorf("release c-%d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	e.WantCounters(t, plenty, 1000, 0, 1000)
	e.WantCounters(t, scarce, 37, 0, 37)
	e.WantClean(t)
}

func TestIntegration_ConcurrentReapers(t *testing.T) {
	rdb, prefix := testenv.MustRedis(t)
	ledger, clk := memres.NewLedger(), newClock()
	// Eight instances of the store share one Redis, as pods' replicas do.
	stores := make([]*env, 8)
	for i := range stores {
		stores[i] = MustOpenStoreOn(t, rdb, prefix, ledger, clk)
	}
	e := stores[0]
	keys := []tandem.Key{key(1, 100, 1), key(1, 200, 1), key(2, 100, 1)}
	for _, k := range keys {
		e.MustStock(t, k, 500)
	}
	const carts = 300
	for i := 0; i < carts; i++ {
		req := cartReq(fmt.Sprintf("c-%d", i), line(100, 1, 1), line(200, 1, 1))
		if i%3 == 0 {
			req = cartReq(fmt.Sprintf("c-%d", i), line(100, 1, 1))
			req.ShopID = 2
		}
		e.MustReserve(t, req)
	}
	clk.Add(tandem.DefaultTTL)

	var total atomic.Int64
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Add(1)
		go func(s *env) {
			defer wg.Done()
			for {
				n, err := s.ExpireDue(ctx, clk.Now(), 7)
				if err != nil {
					t.Errorf("expire: %v", err)
					return
				}
				if n == 0 {
					return
				}
				total.Add(int64(n))
			}
		}(s)
	}
	wg.Wait()
	// A reaper stops when it sees no due hold that it has not seen before;
	// one more pass proves nothing was left behind.
	if n, err := e.ExpireDue(ctx, clk.Now(), carts); n != 0 || err != nil {
		t.Errorf("final pass: got %d, %v, want 0, nil", n, err)
	}
	if total.Load() != carts {
		t.Errorf("holds expired: got %d, want %d (each exactly once)", total.Load(), carts)
	}
	for _, k := range keys {
		e.WantCounters(t, k, 500, 0, 500)
	}
	e.WantClean(t)
}

func TestIntegration_ReserveScriptRunsTwice(t *testing.T) {
	e := MustOpenRealStore(t)
	k := key(1, 100, 1)
	e.MustStock(t, k, 10)

	t.Run("SameArguments", func(t *testing.T) {
		// What go-redis does when a read times out after Redis ran the
		// script: it sends the same EVALSHA again.
		script, keys, args := redisres.ReserveScript(e.Store, cartReq("retry", line(100, 3, 1)))
		first, err := script.Run(ctx, e.RDB, keys, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		second, err := script.Run(ctx, e.RDB, keys, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		if first[0] != "ok" || second[0] != "replay" {
			t.Errorf("answers: got %q then %q, want ok then replay", first[0], second[0])
		}
		e.WantCounters(t, k, 10, 3, 7)
		e.WantClean(t)
	})

	t.Run("ConcurrentIdenticalRequests", func(t *testing.T) {
		var fresh, replayed atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := e.Reserve(ctx, cartReq("twin", line(100, 2, 1)))
				if err != nil {
					t.Errorf("reserve: %v", err)
					return
				}
				if res.Replayed {
					replayed.Add(1)
				} else {
					fresh.Add(1)
				}
			}()
		}
		wg.Wait()
		if fresh.Load() != 1 || replayed.Load() != 19 {
			t.Errorf("got %d fresh, %d replayed, want 1, 19", fresh.Load(), replayed.Load())
		}
		e.WantCounters(t, k, 10, 5, 5)
		e.WantClean(t)
	})
}

func TestIntegration_ConcurrentClaimAndRelease(t *testing.T) {
	e := MustOpenRealStore(t)
	k := key(1, 100, 1)
	e.MustStock(t, k, 50)
	for i := 0; i < 50; i++ {
		e.MustReserve(t, cartReq(fmt.Sprintf("c-%d", i), line(100, 1, 1)))
	}
	// Each cart gets a claim and a release racing. A release that lands in
	// the claim's window answers released and the claim still stands (the
	// ledger took the sale); whatever the order, the ledger deducts exactly
	// the carts that end claimed and Redis follows it.
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		token := fmt.Sprintf("c-%d", i)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := e.Claim(ctx, 1, token); err != nil && tandem.ErrorCode(err) != tandem.EGONE {
				t.Errorf("claim %s: %v", token, err)
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := e.Release(ctx, 1, token); err != nil && tandem.ErrorCode(err) != tandem.EALREADYCLAIMED {
				t.Errorf("release %s: %v", token, err)
			}
		}()
	}
	wg.Wait()
	var claimed int64
	for i := 0; i < 50; i++ {
		res, err := e.Get(ctx, 1, fmt.Sprintf("c-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		switch res.Status {
		case tandem.StatusClaimed:
			claimed++
		case tandem.StatusReleased:
		default:
			t.Errorf("status of c-%d: got %s, want claimed or released", i, res.Status)
		}
	}
	e.WantLedger(t, k, 50-claimed)
	e.WantCounters(t, k, 50-claimed, 0, 50-claimed)
	e.WantClean(t)
}
