package mysqlres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/mysqlres"
)

// A reserve that commits while RebuildShops rewrites its shop (a shadow
// reserve already past the backfill's pause, a convergence placing a hold)
// takes pool rows that the rebuild must not count again as unpooled:
// conservation (on_hand = unpooled + pool rows + reserved units) holds
// after the rebuild, or the store would sell units that do not exist.
func TestRebuildShopsRacingReserve(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	k := key(1, 1)
	mustSetOnHand(t, s, k, 10)
	kept := tandem.Reservation{ShopID: 1, CartToken: "kept", Status: tandem.StatusReserved,
		ExpiresAt: s.Now().Add(10 * time.Minute), Lines: []tandem.Line{{ItemID: 1, Quantity: 3, GroupID: 1}}}
	raced := false
	reset := mysqlres.SetRebuildHook(func(shop int64) {
		if raced {
			return
		}
		raced = true
		if _, err := s.Reserve(ctx, reserve1("racer", 1, 2, 1)); err != nil {
			t.Errorf("reserve racing the rebuild: %v", err)
		}
	})
	defer reset()
	if _, err := s.RebuildShops(ctx, []int64{1}, []tandem.Reservation{kept}); err != nil {
		t.Fatal(err)
	}
	if !raced {
		t.Fatal("the rebuild never reached its hook")
	}
	MustHaveNoViolations(t, s)
	// Every unit is sold once: the kept hold, the racer's, and no more.
	c := mustCounters(t, s, k)
	if c.OnHand != 10 || c.Reserved != 5 {
		t.Fatalf("counters after the rebuild: got %+v, want on_hand 10, 5 held", c)
	}
	sold := 0
	for i := range 10 {
		if _, err := s.Reserve(ctx, reserve1(fmt.Sprint("after-", i), 1, 1, 1)); err == nil {
			sold++
		} else if tandem.ErrorCode(err) != tandem.EINSUFFICIENT {
			t.Fatal(err)
		}
	}
	if sold != 5 {
		t.Errorf("units sold after the rebuild: got %d, want the 5 left", sold)
	}
}

// A backfill reads the source's holds, then writes them here. A hold
// claimed in between (its claim lowered the ledger, this store never had
// it) must not become a hold here: its units were sold, and this store,
// once the source of truth, would show the cart reserved and hold units
// that do not exist. It is recorded as claimed instead, stock untouched.
func TestRebuildClaimedInBetween(t *testing.T) {
	for _, whole := range []bool{false, true} {
		t.Run(map[bool]string{false: "RebuildShops", true: "Rebuild"}[whole], func(t *testing.T) {
			ctx := context.Background()
			s := MustOpenStore(t)
			k := key(1, 1)
			mustSetOnHand(t, s, k, 10)
			hold := func(token string, qty int64) tandem.Reservation {
				return tandem.Reservation{ShopID: 1, CartToken: token, Status: tandem.StatusReserved,
					ExpiresAt: s.Now().Add(10 * time.Minute), Lines: []tandem.Line{{ItemID: 1, Quantity: qty, GroupID: 1}}}
			}
			sold, kept := hold("sold", 3), hold("kept", 2)
			if _, err := s.Ledger().DeductCart(ctx, 1, "sold", sold.Lines); err != nil {
				t.Fatal(err)
			}
			var err error
			if whole {
				_, err = s.Rebuild(ctx, []tandem.Reservation{sold, kept})
			} else {
				_, err = s.RebuildShops(ctx, []int64{1}, []tandem.Reservation{sold, kept})
			}
			if err != nil {
				t.Fatal(err)
			}
			MustHaveNoViolations(t, s)
			if c := mustCounters(t, s, k); c.OnHand != 7 || c.Reserved != 2 || c.Available != 5 {
				t.Errorf("counters after the rebuild: got %+v, want on_hand 7, 2 held (kept), 5 available", c)
			}
			res, err := s.Get(ctx, 1, "sold")
			if err != nil || res.Status != tandem.StatusClaimed {
				t.Fatalf("the cart claimed before the copy: got %+v, %v, want claimed", res, err)
			}
			if res, err := s.Claim(ctx, 1, "sold"); err != nil || res.Status != tandem.StatusClaimed || !res.Replayed {
				t.Errorf("repeated claim: got %+v, %v, want claimed (replayed)", res, err)
			}
			if _, err := s.Reserve(ctx, reserve1("sold", 1, 3, 1)); tandem.ErrorCode(err) != tandem.ECONFLICT {
				t.Errorf("reserve of the sold token: got %v, want %s", err, tandem.ECONFLICT)
			}
			if c := mustCounters(t, s, k); c.OnHand != 7 || c.Reserved != 2 {
				t.Errorf("counters at the end: got %+v, want on_hand 7, 2 held", c)
			}
		})
	}
}
