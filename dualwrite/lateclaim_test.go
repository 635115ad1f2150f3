package dualwrite_test

import (
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

// TestConverge_ClaimOvertakesLateShadowReserve: the buyer claims a cart
// whose shadow reserve timed out and lands late in the shadow (a commit
// already sent); the cart ends claimed in both stores, never held by the
// shadow once the late reserve has landed, and the stores agree when the
// shadow becomes the source of truth.
func TestConverge_ClaimOvertakesLateShadowReserve(t *testing.T) {
	for _, delay := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 1200 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			p := mustOpenPod(t, tandem.ModeShadow)
			k := tandem.Key{ShopID: 23, ItemID: 1, GroupID: 1}
			if _, err := p.SetOnHand(ctx, k, 3); err != nil {
				t.Fatal(err)
			}
			p.fm.set("reserve", delay, true)
			if _, err := p.Reserve(ctx, cart("late", 23, one(1, 2, 1))); err != nil {
				t.Fatal(err)
			}
			if res, err := p.Claim(ctx, 23, "late"); err != nil || res.Status != tandem.StatusClaimed {
				t.Fatalf("claim: got %+v, %v, want claimed", res, err)
			}
			p.fm.heal()
			p.Wait()
			if got := status(t, p.mysql, 23, "late"); got == tandem.StatusReserved {
				t.Errorf("mysql holds the cart the buyer claimed, once its late reserve landed")
			}
			p.modes.set(tandem.ModeMySQL)
			p.mustConverge(t)
			for _, s := range []tandem.ReservationStore{p.redis, p.mysql} {
				if got := p.counters(t, s, k); got.Reserved != 0 || got.OnHand != 1 {
					t.Errorf("%s: got %+v, want on_hand 1, none held", s.Name(), got)
				}
			}
		})
	}
}
