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
