package dualwrite_test

import (
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/dualwrite"
)

// flipCase is a change of SoT: the mode a pod starts in, the store that
// answers there (the old SoT) and its shadow (the new SoT), and the flip.
type flipCase struct {
	name     string
	from     tandem.Mode
	old, new func(p *pod) *faulty
	flip     func(p *pod)
}

var flipCases = []flipCase{
	{"ShadowToMySQL", tandem.ModeShadow,
		func(p *pod) *faulty { return p.fr.faulty }, func(p *pod) *faulty { return p.fm },
		func(p *pod) { p.modes.set(tandem.ModeMySQL) }},
	{"KillSwitch", tandem.ModeMySQL,
		func(p *pod) *faulty { return p.fm }, func(p *pod) *faulty { return p.fr.faulty },
		func(p *pod) { p.kill.on.Store(true) }},
}

// openFlipPod opens a pod in c.from with on_hand units of k.
func openFlipPod(t *testing.T, c flipCase, k tandem.Key, onHand int64) *pod {
	t.Helper()
	p := mustOpenPod(t, tandem.ModeShadow)
	if _, err := p.SetOnHand(ctx, k, onHand); err != nil {
		t.Fatal(err)
	}
	p.modes.set(c.from)
	return p
}

type answer struct {
	res *tandem.Reservation
	err error
}

// When the fence at a flip runs out while an operation of the old SoT on a
// cart is still in flight, the cart's next operation does not go through
// with it: it waits for that operation, whose shadow job copies the hold
// into the new SoT, before the new SoT answers for the cart. A token the
// old SoT holds is not reserved again by the new SoT with another request:
// the answer is a conflict, as from one store. Stock is plentiful, so the
// new SoT would grant the request if it did not hold the token.
func TestRouter_FenceRunsOutOnCartInFlight(t *testing.T) {
	for _, c := range flipCases {
		t.Run(c.name, func(t *testing.T) {
			k := tandem.Key{ShopID: 12, ItemID: 1, GroupID: 1}
			p := openFlipPod(t, c, k, 5)
			// The old SoT takes the first reserve and keeps it past the
			// fence's bound (4 x shadow.timeout + 500ms).
			entered, open := c.old(p).hold("reserve", "held")
			first := make(chan answer, 1)
			go func() {
				res, err := p.Reserve(ctx, cart("held", 12, one(1, 1, 1)))
				first <- answer{res, err}
			}()
			<-entered
			c.flip(p)
			second := make(chan answer, 1)
			go func() {
				res, err := p.Reserve(ctx, cart("held", 12, one(1, 2, 1)))
				second <- answer{res, err}
			}()
			waitFor(t, "the fence at the flip running out", func() bool { return p.FenceTimeouts() > 0 })
			open()
			if a := <-first; a.err != nil || a.res.Status != tandem.StatusReserved {
				t.Fatalf("reserve under the old SoT: got %+v, %v, want reserved", a.res, a.err)
			}
			if a := <-second; tandem.ErrorCode(a.err) != tandem.ECONFLICT {
				t.Fatalf("reserve of the held token with another request once the fence ran out: got %+v, %v, want %s",
					a.res, a.err, tandem.ECONFLICT)
			}
			if p.PrevSoTWaits() == 0 {
				t.Errorf("previous-SoT waits: got 0, want the second reserve to have waited for the cart's work of the old SoT")
			}
			// The hold the old SoT granted is the one the new SoT sells.
			res, err := p.Claim(ctx, 12, "held")
			if err != nil || res.Status != tandem.StatusClaimed || len(res.Lines) != 1 || res.Lines[0].Quantity != 1 {
				t.Fatalf("claim after the flip: got %+v, %v, want claimed, 1 unit", res, err)
			}
			if got := p.onHand(t, k); got != 4 {
				t.Errorf("ledger on_hand: got %d, want 4", got)
			}
			p.mustConverge(t)
		})
	}
}

// A cart that lived and ended under the old SoT while the new SoT never
// saw it (its shadow copies failed, the store being cut, or were dropped,
// the in-flight cap being reached) stays ended for the new SoT: after the
// flip a reserve of its token is a conflict there, never a new hold.
// Either the cart was converged before the flip (the convergence leaves
// the ended cart in the new SoT, a tombstone where it never held it), or
// it is still dirty at the flip and is caught up before the new SoT
// answers for it (503 while the new SoT cannot be written).
func TestRouter_EndedTokenStaysEnded(t *testing.T) {
	ends := []struct {
		name string
		do   func(p *pod, token string) (*tandem.Reservation, error)
	}{
		{"Released", func(p *pod, token string) (*tandem.Reservation, error) { return p.Release(ctx, 13, token) }},
		{"Claimed", func(p *pod, token string) (*tandem.Reservation, error) { return p.Claim(ctx, 13, token) }},
	}
	faults := []struct {
		name      string
		set, heal func(p *pod, c flipCase)
		// cut: the new SoT cannot be written until healed.
		cut bool
	}{
		{"Cut", func(p *pod, c flipCase) { c.new(p).setCut(true) }, func(p *pod, c flipCase) { c.new(p).setCut(false) }, true},
		// Every shadow job is dropped, as when max_inflight is reached.
		{"Dropped", func(p *pod, c flipCase) { p.Router.MaxInflight = -1 }, func(p *pod, c flipCase) { p.Router.MaxInflight = dualwrite.DefaultMaxInflight }, false},
	}
	for _, c := range flipCases {
		for _, end := range ends {
			for _, fault := range faults {
				for _, when := range []string{"ConvergedBeforeFlip", "DirtyAtFlip"} {
					t.Run(c.name+"/"+end.name+"/"+fault.name+"/"+when, func(t *testing.T) {
						k := tandem.Key{ShopID: 13, ItemID: 1, GroupID: 1}
						p := openFlipPod(t, c, k, 5)
						fault.set(p, c)
						req := cart("ended", 13, one(1, 1, 1))
						if _, err := p.Reserve(ctx, req); err != nil {
							t.Fatal(err)
						}
						if _, err := end.do(p, "ended"); err != nil {
							t.Fatal(err)
						}
						p.Wait()
						if when == "ConvergedBeforeFlip" {
							fault.heal(p, c)
							p.mustConverge(t)
							c.flip(p)
						} else {
							c.flip(p)
							if fault.cut {
								if _, err := p.Reserve(ctx, req); tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
									t.Fatalf("reserve of the ended token while the new SoT cannot be caught up: got %v, want %s", err, tandem.EUNAVAILABLE)
								}
							}
							fault.heal(p, c)
						}
						for _, r := range []tandem.ReserveRequest{req, cart("ended", 13, one(1, 2, 1))} {
							res, err := p.Reserve(ctx, r)
							if tandem.ErrorCode(err) != tandem.ECONFLICT {
								t.Fatalf("reserve of the ended token after the flip (%d units): got %+v, %v, want %s",
									r.Lines[0].Quantity, res, err, tandem.ECONFLICT)
							}
						}
						want := int64(5)
						if end.name == "Claimed" {
							want = 4
						}
						if got := p.onHand(t, k); got != want {
							t.Errorf("ledger on_hand: got %d, want %d", got, want)
						}
						p.mustConverge(t)
					})
				}
			}
		}
	}
}

// A hold the old SoT granted whose copy has not reached the new SoT yet
// (its shadow job failed, timed out or was dropped, and the cart waits
// for the convergence worker's backoff) is not sold again by the new SoT
// after a flip: a reserve of another cart on the same position waits for
// the hold to be copied, and is refused when the position is sold out
// (invariant 1). While the copy cannot be made, the reserve answers 503,
// never a grant of units the old SoT's buyer holds. The held cart stays
// claimable (invariant 3), and the stores converge (invariant 5).
func TestRouter_FlipDoesNotResellUncopiedHolds(t *testing.T) {
	faults := []struct {
		name      string
		set, heal func(p *pod, c flipCase)
	}{
		{"Cut", func(p *pod, c flipCase) { c.new(p).setCut(true) }, func(p *pod, c flipCase) { c.new(p).setCut(false) }},
		{"Dropped", func(p *pod, c flipCase) { p.Router.MaxInflight = -1 }, func(p *pod, c flipCase) { p.Router.MaxInflight = dualwrite.DefaultMaxInflight }},
	}
	for _, c := range flipCases {
		for _, fault := range faults {
			t.Run(c.name+"/"+fault.name, func(t *testing.T) {
				k := tandem.Key{ShopID: 14, ItemID: 1, GroupID: 1}
				p := openFlipPod(t, c, k, 2)
				fault.set(p, c)
				if res, err := p.Reserve(ctx, cart("first", 14, one(1, 2, 1))); err != nil || res.Status != tandem.StatusReserved {
					t.Fatalf("reserve under the old SoT: got %+v, %v, want reserved", res, err)
				}
				p.Wait()
				if p.DirtyCarts() == 0 {
					t.Fatal("the held cart is not dirty: the fault did not keep its copy from the new SoT")
				}
				c.flip(p)
				fault.heal(p, c)
				if fault.name == "Cut" {
					// The old SoT cannot be read: the hold cannot be copied,
					// and its units are not sold meanwhile.
					c.old(p).setCut(true)
					res, err := p.Reserve(ctx, cart("second", 14, one(1, 1, 1)))
					if tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
						t.Fatalf("reserve of the old SoT's held units while they cannot be copied: got %+v, %v, want %s",
							res, err, tandem.EUNAVAILABLE)
					}
					c.old(p).setCut(false)
				}
				res, err := p.Reserve(ctx, cart("third", 14, one(1, 1, 1)))
				if tandem.ErrorCode(err) != tandem.EINSUFFICIENT {
					t.Fatalf("reserve of the old SoT's held units after the flip: got %+v, %v, want %s (oversold)",
						res, err, tandem.EINSUFFICIENT)
				}
				res, err = p.Claim(ctx, 14, "first")
				if err != nil || res.Status != tandem.StatusClaimed {
					t.Fatalf("claim of the old SoT's hold after the flip: got %+v, %v, want claimed", res, err)
				}
				if got := p.onHand(t, k); got != 0 {
					t.Errorf("ledger on_hand: got %d, want 0", got)
				}
				p.mustConverge(t)
			})
		}
	}
}

// When the fence at a flip runs out while the old SoT is still granting a
// hold, a reserve of another cart on the same position under the new SoT
// waits for that hold to be copied before its SoT answers: the position's
// last units are not sold twice.
func TestRouter_FenceRunsOutOnPositionInFlight(t *testing.T) {
	for _, c := range flipCases {
		t.Run(c.name, func(t *testing.T) {
			k := tandem.Key{ShopID: 15, ItemID: 1, GroupID: 1}
			p := openFlipPod(t, c, k, 2)
			entered, open := c.old(p).hold("reserve", "first")
			first := make(chan answer, 1)
			go func() {
				res, err := p.Reserve(ctx, cart("first", 15, one(1, 2, 1)))
				first <- answer{res, err}
			}()
			<-entered
			c.flip(p)
			second := make(chan answer, 1)
			go func() {
				res, err := p.Reserve(ctx, cart("second", 15, one(1, 1, 1)))
				second <- answer{res, err}
			}()
			waitFor(t, "the fence at the flip running out", func() bool { return p.FenceTimeouts() > 0 })
			open()
			if a := <-first; a.err != nil || a.res.Status != tandem.StatusReserved {
				t.Fatalf("reserve under the old SoT: got %+v, %v, want reserved", a.res, a.err)
			}
			if a := <-second; tandem.ErrorCode(a.err) != tandem.EINSUFFICIENT {
				t.Fatalf("reserve of the old SoT's last units once the fence ran out: got %+v, %v, want %s (oversold)",
					a.res, a.err, tandem.EINSUFFICIENT)
			}
			if res, err := p.Claim(ctx, 15, "first"); err != nil || res.Status != tandem.StatusClaimed {
				t.Fatalf("claim after the flip: got %+v, %v, want claimed", res, err)
			}
			if got := p.onHand(t, k); got != 0 {
				t.Errorf("ledger on_hand: got %d, want 0", got)
			}
			p.mustConverge(t)
		})
	}
}

// A resync rebuilds Redis from MySQL: its counts come from the ledger,
// which already lost a claim MySQL settled while Redis was cut. The cart
// is still dirty (the worker retries after its backoff); the rebuild has
// made Redis equal to MySQL for it, so the worker must not settle the
// claim in Redis a second time (a unit too few, Redis short of MySQL).
func TestRouter_ResyncSettlesDirtyCarts(t *testing.T) {
	k := tandem.Key{ShopID: 16, ItemID: 1, GroupID: 1}
	p := mustOpenPod(t, tandem.ModeShadow)
	if _, err := p.SetOnHand(ctx, k, 5); err != nil {
		t.Fatal(err)
	}
	p.modes.set(tandem.ModeMySQL)
	p.fr.setCut(true)
	if _, err := p.Reserve(ctx, cart("sold", 16, one(1, 2, 1))); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Claim(ctx, 16, "sold"); err != nil || res.Status != tandem.StatusClaimed {
		t.Fatalf("claim with Redis cut: got %+v, %v, want claimed", res, err)
	}
	p.Wait()
	if p.DirtyCarts() == 0 {
		t.Fatal("the claimed cart is not dirty: the cut did not keep it from Redis")
	}
	p.fr.setCut(false)
	if _, err := p.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	// Before the sweep could recount the position (every 5 s).
	waitFor(t, "the dirty cart to be settled", func() bool { return p.DirtyCarts() == 0 })
	if got := p.counters(t, p.redis, k); got.Available != 3 || got.OnHand != 3 {
		t.Errorf("redis after the resync and the worker: got available %d of on_hand %d, want 3 of 3 (the claim settled twice)", got.Available, got.OnHand)
	}
	p.mustConverge(t)
}

// A resync settles the dirty carts it rebuilt (above), yet the rebuild
// writes counts and holds only: a cart MySQL claimed or released while
// Redis was cut is in no count, and Redis never knew it. Redis must know
// it as ended after the resync, or once Redis is the source of truth a
// repeated claim answers "never reserved" (exactly-once claim across
// flips) and a reserve of the ended token is granted again (invariant 7).
func TestRouter_ResyncRecordsEndedCarts(t *testing.T) {
	k := tandem.Key{ShopID: 17, ItemID: 1, GroupID: 1}
	p := mustOpenPod(t, tandem.ModeShadow)
	if _, err := p.SetOnHand(ctx, k, 5); err != nil {
		t.Fatal(err)
	}
	p.modes.set(tandem.ModeMySQL)
	p.fr.setCut(true)
	for _, token := range []string{"sold", "gone"} {
		if _, err := p.Reserve(ctx, cart(token, 17, one(1, 1, 1))); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := p.Claim(ctx, 17, "sold"); err != nil || res.Status != tandem.StatusClaimed {
		t.Fatalf("claim with Redis cut: got %+v, %v, want claimed", res, err)
	}
	if res, err := p.Release(ctx, 17, "gone"); err != nil || res.Status != tandem.StatusReleased {
		t.Fatalf("release with Redis cut: got %+v, %v, want released", res, err)
	}
	p.Wait()
	if p.DirtyCarts() != 2 {
		t.Fatalf("got %d dirty carts, want 2: the cut did not keep them from Redis", p.DirtyCarts())
	}
	p.fr.setCut(false)
	if _, err := p.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	if p.DirtyCarts() != 0 {
		t.Fatalf("got %d dirty carts after the resync, want 0", p.DirtyCarts())
	}
	p.modes.set(tandem.ModeShadow)
	res, err := p.Claim(ctx, 17, "sold")
	if err != nil || res.Status != tandem.StatusClaimed || !res.Replayed {
		t.Fatalf("repeated claim with Redis the SoT after the resync: got %+v, %v, want claimed (replayed)", res, err)
	}
	for _, token := range []string{"sold", "gone"} {
		if res, err := p.Reserve(ctx, cart(token, 17, one(1, 1, 1))); tandem.ErrorCode(err) != tandem.ECONFLICT {
			t.Errorf("reserve of the ended token %q with Redis the SoT: got %+v, %v, want %s", token, res, err, tandem.ECONFLICT)
		}
	}
	if got := p.counters(t, p.redis, k); got.Available != 4 || got.OnHand != 4 {
		t.Errorf("redis after the resync: got available %d of on_hand %d, want 4 of 4", got.Available, got.OnHand)
	}
	if got := p.onHand(t, k); got != 4 {
		t.Errorf("ledger on_hand: got %d, want 4", got)
	}
	p.mustConverge(t)
}

// A claim the old SoT made whose settle has not reached the new SoT yet
// (the shadow's claim timed out; the cart waits for the convergence
// worker's backoff) leaves the new SoT holding the sold units only as a
// hold, which its reaper returns to sale once it expires. After a flip, a
// reserve of another cart on the same position must not take them: it
// settles the claim into its SoT first, and answers 503 while it cannot
// (invariant 1). TestSoak oversold this way under load: soak-0 flipped
// mysql -> shadow 0.4 s after MySQL sold the last units, Redis's copies
// of the sold holds expired a second later, and Redis sold them again.
func TestRouter_FlipDoesNotResellUnsettledClaims(t *testing.T) {
	for _, c := range flipCases {
		t.Run(c.name, func(t *testing.T) {
			k := tandem.Key{ShopID: 18, ItemID: 1, GroupID: 1}
			p := openFlipPod(t, c, k, 2)
			if res, err := p.Reserve(ctx, cart("sold", 18, one(1, 2, 1))); err != nil || res.Status != tandem.StatusReserved {
				t.Fatalf("reserve under the old SoT: got %+v, %v, want reserved", res, err)
			}
			p.Wait()
			if p.DirtyCarts() != 0 {
				t.Fatal("the reserve's copy did not land in the new SoT")
			}
			// The new SoT's settle of the sale times out, as a shadow call
			// does under load.
			for _, op := range []string{"claim", "settle_claim"} {
				c.new(p).set(op, time.Hour, false)
			}
			if res, err := p.Claim(ctx, 18, "sold"); err != nil || res.Status != tandem.StatusClaimed {
				t.Fatalf("claim under the old SoT: got %+v, %v, want claimed", res, err)
			}
			p.Wait()
			if p.DirtyCarts() == 0 {
				t.Fatal("the claimed cart is not dirty: the fault did not keep its settle from the new SoT")
			}
			// The new SoT's reaper returns its copy of the sold hold.
			if _, err := c.new(p).inner.ExpireDue(ctx, p.clock.Now().Add(24*time.Hour), 100); err != nil {
				t.Fatal(err)
			}
			c.flip(p)
			// MySQL counts from the ledger, which the claim deducted: it
			// is short at once.
			want := tandem.EUNAVAILABLE
			if c.new(p).Name() == tandem.StoreMySQL {
				want = tandem.EINSUFFICIENT
			}
			res, err := p.Reserve(ctx, cart("second", 18, one(1, 1, 1)))
			if tandem.ErrorCode(err) != want {
				t.Fatalf("reserve of the old SoT's sold units while their claim cannot be settled in the new SoT: got %+v, %v, want %s",
					res, err, want)
			}
			c.new(p).heal()
			res, err = p.Reserve(ctx, cart("third", 18, one(1, 1, 1)))
			if tandem.ErrorCode(err) != tandem.EINSUFFICIENT {
				t.Fatalf("reserve of the old SoT's sold units after the flip: got %+v, %v, want %s (oversold)",
					res, err, tandem.EINSUFFICIENT)
			}
			if res, err := p.Claim(ctx, 18, "sold"); err != nil || res.Status != tandem.StatusClaimed {
				t.Fatalf("repeated claim after the flip: got %+v, %v, want claimed", res, err)
			}
			if got := p.onHand(t, k); got != 0 {
				t.Errorf("ledger on_hand: got %d, want 0", got)
			}
			p.mustConverge(t)
		})
	}
}
