package mysqlres_test

import (
	"context"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

// A claim or release that arrived before the expiry is judged as of its
// arrival, even when processed after it, as long as the reaper has not
// returned the hold.
func TestSettleAsOfArrival(t *testing.T) {
	ctx := context.Background()
	h := newConformanceHarness(t)
	s, clock := h.Store, h.Clock
	k := tandem.Key{ShopID: 1, ItemID: 10, GroupID: 1}
	if _, err := s.SetOnHand(ctx, k, 3); err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{"claim-me", "release-me"} {
		req := tandem.ReserveRequest{CartToken: token, ShopID: 1, TTL: 10 * time.Second,
			Lines: []tandem.LineRequest{{ItemID: 10, Quantity: 1, GroupIDs: []int64{1}}}}
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	arrived := clock.Now().Add(9 * time.Second)
	clock.Advance(11 * time.Second)
	if _, err := s.Claim(ctx, 1, "claim-me"); tandem.ErrorCode(err) != tandem.EGONE {
		t.Fatalf("claim judged now: got %v, want gone", err)
	}
	at := tandem.WithAsOf(ctx, arrived)
	if res, err := s.Claim(at, 1, "claim-me"); err != nil || res.Status != tandem.StatusClaimed {
		t.Fatalf("claim judged at arrival: got %+v, %v, want claimed", res, err)
	}
	if res, err := s.Release(at, 1, "release-me"); err != nil || res.Status != tandem.StatusReleased {
		t.Fatalf("release judged at arrival: got %+v, %v, want released", res, err)
	}
	c, err := s.Counters(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if c.OnHand != 2 || c.Reserved != 0 || c.Available != 2 {
		t.Errorf("counters: got %+v, want on_hand 2, none held", c)
	}
}
