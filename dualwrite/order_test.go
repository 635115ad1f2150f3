package dualwrite_test

import (
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

// status returns the cart's status in one store, "" when it never saw it.
func status(t *testing.T, s tandem.ReservationStore, shop int64, token string) tandem.Status {
	t.Helper()
	res, err := s.Get(ctx, shop, token)
	if tandem.ErrorCode(err) == tandem.ENOTFOUND {
		return ""
	} else if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// A claim or release issued while the cart's reserve is still on its way
// to the SoT settles the hold that reserve makes: it follows the reserve
// (the cart's order), rather than finding nothing in the SoT and being
// answered from the shadow's copy while the SoT keeps the hold.
func TestRouter_SettleFollowsReserve(t *testing.T) {
	for _, tc := range []struct {
		name   string
		settle func(p *pod, shop int64, token string) (*tandem.Reservation, error)
		want   tandem.Status
	}{
		{"Claim", func(p *pod, shop int64, token string) (*tandem.Reservation, error) { return p.Claim(ctx, shop, token) }, tandem.StatusClaimed},
		{"Release", func(p *pod, shop int64, token string) (*tandem.Reservation, error) {
			return p.Release(ctx, shop, token)
		}, tandem.StatusReleased},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustOpenPod(t, tandem.ModeShadow)
			p.fr.set("reserve", 300*time.Millisecond, false) // the SoT
			k := tandem.Key{ShopID: 5, ItemID: 1, GroupID: 1}
			if _, err := p.SetOnHand(ctx, k, 3); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Add(1)
			var resErr error
			go func() {
				defer wg.Done()
				_, resErr = p.Reserve(ctx, cart("racer", 5, one(1, 1, 1)))
			}()
			time.Sleep(100 * time.Millisecond) // the reserve is in the SoT's hands
			res, err := tc.settle(p, 5, "racer")
			wg.Wait()
			if resErr != nil {
				t.Fatal(resErr)
			}
			if err != nil || res.Status != tc.want {
				t.Fatalf("got %+v, %v, want %s", res, err, tc.want)
			}
			p.Wait()
			if got := status(t, p.redis, 5, "racer"); got != tc.want {
				t.Errorf("redis (SoT) status: got %q, want %s as the buyer was told", got, tc.want)
			}
			if got := status(t, p.mysql, 5, "racer"); got != tc.want {
				t.Errorf("mysql (shadow) status: got %q, want %s as the buyer was told", got, tc.want)
			}
			p.mustConverge(t)
		})
	}
}

// When the SoT changes (a flip, the kill switch), a hold the old SoT granted
// whose shadow copy is still on its way is in the new SoT before the new SoT
// answers anyone: the last unit is not sold twice.
func TestRouter_FlipFence(t *testing.T) {
	for _, tc := range []struct {
		name string
		from tandem.Mode
		slow func(p *pod) // makes the old SoT's shadow slow
		flip func(p *pod)
	}{
		{"ShadowToMySQL", tandem.ModeShadow,
			func(p *pod) {
				p.fm.setOnly("first")
				p.fm.set("reserve", 300*time.Millisecond, true)
			},
			func(p *pod) { p.modes.set(tandem.ModeMySQL) }},
		{"KillSwitch", tandem.ModeMySQL,
			func(p *pod) {
				p.fr.setOnly("first")
				p.fr.set("reserve", 300*time.Millisecond, true)
			},
			func(p *pod) { p.kill.on.Store(true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustOpenPod(t, tandem.ModeShadow)
			k := tandem.Key{ShopID: 6, ItemID: 1, GroupID: 1}
			if _, err := p.SetOnHand(ctx, k, 1); err != nil {
				t.Fatal(err)
			}
			p.modes.set(tc.from)
			tc.slow(p)
			if _, err := p.Reserve(ctx, cart("first", 6, one(1, 1, 1))); err != nil {
				t.Fatal(err)
			}
			tc.flip(p)
			res, err := p.Reserve(ctx, cart("second", 6, one(1, 1, 1)))
			if got := tandem.ErrorCode(err); got != tandem.EINSUFFICIENT {
				t.Fatalf("reserve of the last unit again after the flip: got %+v, %q, want %s", res, got, tandem.EINSUFFICIENT)
			}
			if got, err := p.Claim(ctx, 6, "first"); err != nil || got.Status != tandem.StatusClaimed {
				t.Fatalf("claim of the first hold after the flip: got %+v, %v, want claimed", got, err)
			}
			if got := p.onHand(t, k); got != 0 {
				t.Errorf("ledger on_hand: got %d, want 0", got)
			}
			if got := p.FenceTimeouts(); got != 0 {
				t.Errorf("fence timeouts: got %d, want 0", got)
			}
			p.mustConverge(t)
		})
	}
}

// A hold granted in Redis after the backfill and before the switch to
// shadow is in MySQL too: the pod goes on to mysql without selling it twice.
func TestRouter_BackfillFollows(t *testing.T) {
	p := mustOpenPod(t, tandem.ModeRedis)
	k := tandem.Key{ShopID: 7, ItemID: 1, GroupID: 1}
	if _, err := p.SetOnHand(ctx, k, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Backfill(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reserve(ctx, cart("between", 7, one(1, 2, 1))); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	if got := p.counters(t, p.mysql, k); got.Reserved != 2 {
		t.Errorf("mysql after a reserve between backfill and shadow: got %+v, want 2 held", got)
	}
	p.modes.set(tandem.ModeShadow)
	p.mustConverge(t)
	p.modes.set(tandem.ModeMySQL)
	res, err := p.Reserve(ctx, cart("later", 7, one(1, 1, 1)))
	if got := tandem.ErrorCode(err); got != tandem.EINSUFFICIENT {
		t.Fatalf("reserve in mysql with every unit held: got %+v, %q, want %s", res, got, tandem.EINSUFFICIENT)
	}
	if got, err := p.Claim(ctx, 7, "between"); err != nil || got.Status != tandem.StatusClaimed {
		t.Fatalf("claim: got %+v, %v, want claimed", got, err)
	}
	p.mustConverge(t)
}

// A claim or release the SoT refuses (gone, already claimed) changes
// nothing in the shadow: a shadow claim of a hold the SoT saw end would
// deduct the ledger for a sale the buyer was refused, and a shadow release
// of a cart the SoT sold would put sold units back on sale.
func TestRouter_ShadowFollowsRefusal(t *testing.T) {
	t.Run("ClaimGone", func(t *testing.T) {
		p := mustOpenPod(t, tandem.ModeShadow)
		k := tandem.Key{ShopID: 8, ItemID: 1, GroupID: 1}
		if _, err := p.SetOnHand(ctx, k, 4); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Reserve(ctx, cart("ended", 8, one(1, 2, 1))); err != nil {
			t.Fatal(err)
		}
		p.Wait()
		// The SoT's hold ends first (as when the shadow's copy, landed later,
		// expires later).
		if _, err := p.redis.Release(ctx, 8, "ended"); err != nil {
			t.Fatal(err)
		}
		_, err := p.Claim(ctx, 8, "ended")
		if got := tandem.ErrorCode(err); got != tandem.EGONE {
			t.Fatalf("claim: got %q, want %s", got, tandem.EGONE)
		}
		p.Wait()
		if got := p.onHand(t, k); got != 4 {
			t.Errorf("ledger on_hand: got %d, want 4 (the buyer was told gone)", got)
		}
		if got := status(t, p.mysql, 8, "ended"); got == tandem.StatusClaimed {
			t.Errorf("mysql (shadow) status: got %s, want not claimed", got)
		}
	})
	t.Run("ReleaseAlreadyClaimed", func(t *testing.T) {
		p := mustOpenPod(t, tandem.ModeMySQL)
		k := tandem.Key{ShopID: 9, ItemID: 1, GroupID: 1}
		p.modes.set(tandem.ModeShadow)
		if _, err := p.SetOnHand(ctx, k, 4); err != nil {
			t.Fatal(err)
		}
		p.modes.set(tandem.ModeMySQL)
		if _, err := p.Reserve(ctx, cart("sold", 9, one(1, 2, 1))); err != nil {
			t.Fatal(err)
		}
		p.Wait()
		if _, err := p.mysql.Claim(ctx, 9, "sold"); err != nil { // the SoT sells it
			t.Fatal(err)
		}
		_, err := p.Release(ctx, 9, "sold")
		if got := tandem.ErrorCode(err); got != tandem.EALREADYCLAIMED {
			t.Fatalf("release: got %q, want %s", got, tandem.EALREADYCLAIMED)
		}
		p.Wait()
		if got := status(t, p.redis, 9, "sold"); got == tandem.StatusReleased {
			t.Errorf("redis (shadow) status: got %s, want not released: the units are sold", got)
		}
	})
}

// A shadow hold repaired into the SoT's groups keeps the buyer's request:
// after a flip to that store, an identical retry is a replay, not a
// conflict.
func TestRouter_RepairKeepsRequest(t *testing.T) {
	p := mustOpenPod(t, tandem.ModeShadow)
	for g := int64(1); g <= 2; g++ {
		if _, err := p.SetOnHand(ctx, tandem.Key{ShopID: 10, ItemID: 1, GroupID: g}, 1); err != nil {
			t.Fatal(err)
		}
	}
	// A's shadow copy lands late: meanwhile MySQL offers B the unit of
	// group 1 that Redis gave A.
	p.fm.setOnly("A")
	p.fm.set("reserve", 300*time.Millisecond, true)
	if _, err := p.Reserve(ctx, cart("A", 10, one(1, 1, 1))); err != nil {
		t.Fatal(err)
	}
	b := cart("B", 10, one(1, 1, 1, 2))
	res, err := p.Reserve(ctx, b)
	if err != nil || res.Lines[0].GroupID != 2 {
		t.Fatalf("reserve B: got %+v, %v, want reserved in group 2", res, err)
	}
	// A's copy is repaired by its own job, or by the worker when the
	// job's convergence timed out too (a loaded machine).
	p.mustConverge(t)
	if got := status(t, p.mysql, 10, "A"); got != tandem.StatusReserved {
		t.Fatalf("mysql (shadow) status of A: got %q, want reserved", got)
	}
	p.modes.set(tandem.ModeMySQL)
	again, err := p.Reserve(ctx, b)
	if err != nil || !again.Replayed || again.Lines[0].GroupID != 2 {
		t.Fatalf("identical retry of B after the flip: got %+v, %v, want the replay of its hold in group 2", again, err)
	}
	p.mustConverge(t)
}

// A claim that lands while the shadow is still repairing the cart's
// reserve deducts, through the shared ledger, the very unit the repair
// retries for: the shadow never holds the cart. After a flip to that store
// an identical retry of the claimed cart is still a conflict (the ledger's
// claim record), not a new reserve answered insufficient_inventory, and a
// claim retry is answered from the store that holds the claim.
func TestRouter_ClaimDuringRepair(t *testing.T) {
	p := mustOpenPod(t, tandem.ModeShadow)
	k := tandem.Key{ShopID: 11, ItemID: 1, GroupID: 1}
	if _, err := p.SetOnHand(ctx, k, 1); err != nil {
		t.Fatal(err)
	}
	// At the sold-out boundary the stores picked different winners: MySQL
	// (the shadow) gave the last unit to "loser", which Redis refused.
	if _, err := p.mysql.Reserve(ctx, cart("loser", 11, one(1, 1, 1))); err != nil {
		t.Fatal(err)
	}
	req := cart("buyer", 11, one(1, 1, 1))
	if _, err := p.Reserve(ctx, req); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	res, err := p.Claim(ctx, 11, "buyer")
	if err != nil || res.Status != tandem.StatusClaimed {
		t.Fatalf("claim: got %+v, %v, want claimed", res, err)
	}
	if err := p.mysql.Discard(ctx, 11, "loser"); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	p.modes.set(tandem.ModeMySQL)
	if _, err := p.Reserve(ctx, req); tandem.ErrorCode(err) != tandem.ECONFLICT {
		t.Errorf("identical retry of the claimed cart after the flip: got %v, want %s", err, tandem.ECONFLICT)
	}
	again, err := p.Claim(ctx, 11, "buyer")
	if err != nil || again.Status != tandem.StatusClaimed || len(again.Lines) != 1 || again.Lines[0].GroupID != 1 {
		t.Errorf("claim retry after the flip: got %+v, %v, want claimed in group 1", again, err)
	}
	if got := p.onHand(t, k); got != 0 {
		t.Errorf("ledger on_hand: got %d, want 0 (deducted once)", got)
	}
	p.mustConverge(t)
}
