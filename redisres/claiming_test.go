package redisres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/redisres"
)

// A claim whose ledger step is under way (or was interrupted) keeps its
// hold: the reaper must never return units that may already be sold, which
// would let a second buyer take them (the soak found that oversell).
func TestClaimInterrupted(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*env, tandem.Key) {
		e, _ := MustOpenStore(t)
		k := key(1, 10, 1)
		if _, err := e.SetOnHand(ctx, k, 3); err != nil {
			t.Fatal(err)
		}
		req := tandem.ReserveRequest{CartToken: "c", ShopID: 1, TTL: 10 * time.Second, Lines: []tandem.LineRequest{line(10, 2, 1)}}
		if _, err := e.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
		// The ledger step fails: the claim answers 503 and the cart stays
		// claiming.
		e.Ledger.Err = errors.New("ledger down")
		if _, err := e.Claim(ctx, 1, "c"); tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
			t.Fatalf("claim with the ledger down: got %v, want unavailable", err)
		}
		e.Ledger.Err = nil
		return e, k
	}
	counters := func(t *testing.T, e *env, k tandem.Key) tandem.Counters {
		c, err := e.Counters(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return *c
	}

	t.Run("ReaperKeepsTheHold", func(t *testing.T) {
		e, k := setup(t)
		e.Clock.Add(11 * time.Second) // past expiry, inside the grace
		if n, err := e.ExpireDue(ctx, e.Clock.Now(), 100); err != nil || n != 0 {
			t.Fatalf("ExpireDue: got %d, %v, want 0 (a claiming hold is not expired)", n, err)
		}
		if got := counters(t, e, k); got.Available != 1 || got.Reserved != 2 {
			t.Errorf("counters: got %+v, want 1 available, 2 held", got)
		}
		if _, err := e.Reserve(ctx, tandem.ReserveRequest{CartToken: "other", ShopID: 1, Lines: []tandem.LineRequest{line(10, 2, 1)}}); tandem.ErrorCode(err) != tandem.EINSUFFICIENT {
			t.Errorf("second buyer: got %v, want insufficient_inventory", err)
		}
		// The buyer's retry completes the claim, even past the expiry.
		res, err := e.Claim(ctx, 1, "c")
		if err != nil || res.Status != tandem.StatusClaimed {
			t.Fatalf("retried claim: got %+v, %v, want claimed", res, err)
		}
		if got := counters(t, e, k); got.OnHand != 1 || got.Available != 1 || got.Reserved != 0 {
			t.Errorf("counters after the claim: got %+v, want on_hand 1, available 1", got)
		}
		if got, _ := e.Ledger.OnHand(ctx, k); got != 1 {
			t.Errorf("ledger: got %d, want 1", got)
		}
	})

	t.Run("GraceUndoesUnrecordedClaim", func(t *testing.T) {
		e, k := setup(t)
		e.Clock.Add(10*time.Second + redisres.ClaimingGrace + time.Second)
		total := 0
		for i := 0; i < 2; i++ { // the undo and the expiry may take one run or two
			n, err := e.ExpireDue(ctx, e.Clock.Now(), 100)
			if err != nil {
				t.Fatal(err)
			}
			total += n
		}
		if total != 1 {
			t.Fatalf("ExpireDue after undo: got %d expired, want 1", total)
		}
		if got := counters(t, e, k); got.Available != 3 || got.Reserved != 0 {
			t.Errorf("counters: got %+v, want the 3 units back", got)
		}
		if got, _ := e.Ledger.OnHand(ctx, k); got != 3 {
			t.Errorf("ledger: got %d, want 3 (never deducted)", got)
		}
	})

	t.Run("GraceCompletesRecordedClaim", func(t *testing.T) {
		e, k := setup(t)
		// The ledger step happened (its answer was what got lost).
		if _, err := e.Ledger.DeductCart(ctx, 1, "c", []tandem.Line{{ItemID: 10, Quantity: 2, GroupID: 1}}); err != nil {
			t.Fatal(err)
		}
		e.Clock.Add(10*time.Second + redisres.ClaimingGrace + time.Second)
		if _, err := e.ExpireDue(ctx, e.Clock.Now(), 100); err != nil {
			t.Fatal(err)
		}
		if got := counters(t, e, k); got.OnHand != 1 || got.Available != 1 || got.Reserved != 0 {
			t.Errorf("counters: got %+v, want the claim completed (on_hand 1, available 1)", got)
		}
		res, err := e.Get(ctx, 1, "c")
		if err != nil || res.Status != tandem.StatusClaimed {
			t.Errorf("cart: got %+v, %v, want claimed", res, err)
		}
		if vs, err := e.CheckInvariants(ctx); err != nil || len(vs) != 0 {
			t.Errorf("invariants: got %v, %v", vs, err)
		}
	})

	t.Run("ReleaseWhileClaiming", func(t *testing.T) {
		e, _ := setup(t)
		if _, err := e.Release(ctx, 1, "c"); tandem.ErrorCode(err) != tandem.EALREADYCLAIMED {
			t.Errorf("release of a claiming cart: got %v, want already_claimed", err)
		}
		res, err := e.Get(ctx, 1, "c")
		if err != nil || res.Status != tandem.StatusReserved {
			t.Errorf("get: got %+v, %v, want reserved while the claim is under way", res, err)
		}
	})
}

// A claim that arrived before the expiry succeeds even when it is processed
// after it, as long as the reaper has not returned the hold.
func TestClaimAsOfArrival(t *testing.T) {
	ctx := context.Background()
	e, _ := MustOpenStore(t)
	k := key(1, 10, 1)
	if _, err := e.SetOnHand(ctx, k, 3); err != nil {
		t.Fatal(err)
	}
	req := tandem.ReserveRequest{CartToken: "c", ShopID: 1, TTL: 10 * time.Second, Lines: []tandem.LineRequest{line(10, 1, 1)}}
	if _, err := e.Reserve(ctx, req); err != nil {
		t.Fatal(err)
	}
	arrived := e.Clock.Now().Add(9 * time.Second)
	e.Clock.Add(11 * time.Second) // processed after the expiry
	if _, err := e.Claim(ctx, 1, "c"); tandem.ErrorCode(err) != tandem.EGONE {
		t.Fatalf("claim judged now: got %v, want gone", err)
	}
	res, err := e.Claim(tandem.WithAsOf(ctx, arrived), 1, "c")
	if err != nil || res.Status != tandem.StatusClaimed {
		t.Fatalf("claim judged at arrival: got %+v, %v, want claimed", res, err)
	}
	if got, _ := e.Ledger.OnHand(ctx, k); got != 2 {
		t.Errorf("ledger: got %d, want 2", got)
	}
}
