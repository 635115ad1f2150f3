package soak_test

import (
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/soak"
)

var (
	t0  = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	key = tandem.Key{ShopID: 1, ItemID: 10, GroupID: 1}
)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func grant(b *soak.Book, token string, qty int64, grantedMS, expiresMS int) soak.CartID {
	b.Granted(&tandem.Reservation{
		CartToken: token, ShopID: key.ShopID, Status: tandem.StatusReserved, ExpiresAt: at(expiresMS),
		Lines: []tandem.Line{{ItemID: key.ItemID, Quantity: qty, GroupID: key.GroupID}},
	}, at(grantedMS))
	return soak.CartID{ShopID: key.ShopID, Token: token}
}

func TestBookOversold(t *testing.T) {
	t.Run("OverlappingHoldsOfTheLastUnit", func(t *testing.T) {
		b := soak.NewBook()
		b.Stock(key, 1, at(0))
		grant(b, "a", 1, 10, 1000)
		grant(b, "b", 1, 20, 1000)
		got := b.Oversold()
		if len(got) != 1 || got[0].Units != 2 || got[0].Stock != 1 || !got[0].At.Equal(at(20)) {
			t.Fatalf("got %v, want one oversell of 2 units over 1 at +20ms", got)
		}
	})
	t.Run("ReleasedUnitSoldAgain", func(t *testing.T) {
		b := soak.NewBook()
		b.Stock(key, 1, at(0))
		a := grant(b, "a", 1, 10, 1000)
		b.ReleaseIssued(a, at(50))
		grant(b, "b", 1, 60, 1000)
		if got := b.Oversold(); len(got) != 0 {
			t.Fatalf("got %v, want none", got)
		}
	})
	t.Run("ExpiredUnitSoldAgain", func(t *testing.T) {
		b := soak.NewBook()
		b.Stock(key, 1, at(0))
		grant(b, "a", 1, 10, 100)
		grant(b, "b", 1, 100, 1000)
		if got := b.Oversold(); len(got) != 0 {
			t.Fatalf("got %v, want none", got)
		}
	})
	t.Run("ClaimedUnitNeverReturns", func(t *testing.T) {
		b := soak.NewBook()
		b.Stock(key, 2, at(0))
		a := grant(b, "a", 2, 10, 100)
		b.Claimed(a, at(50), at(60))
		grant(b, "b", 1, 500, 1000)
		if got := b.Oversold(); len(got) != 1 || got[0].Units != 3 {
			t.Fatalf("got %v, want one oversell of 3 units", got)
		}
	})
	t.Run("ClaimThatRacedTheExpiryIsNamed", func(t *testing.T) {
		b := soak.NewBook()
		b.Stock(key, 1, at(0))
		a := grant(b, "a", 1, 10, 100)
		b.Claimed(a, at(90), at(300)) // issued before expiry, answered after
		grant(b, "b", 1, 200, 1000)
		got := b.Oversold()
		if len(got) != 1 || len(got[0].RacedExpiry) != 1 || got[0].RacedExpiry[0] != "a" {
			t.Fatalf("got %+v, want one oversell naming cart a as racing its expiry", got)
		}
	})
	t.Run("RestockCoversLaterHolds", func(t *testing.T) {
		b := soak.NewBook()
		b.Stock(key, 1, at(0))
		grant(b, "a", 1, 10, 1000)
		b.Stock(key, 1, at(30))
		grant(b, "b", 1, 40, 1000)
		if got := b.Oversold(); len(got) != 0 {
			t.Fatalf("got %v, want none", got)
		}
	})
	t.Run("HoldBeforeRestockIsOversell", func(t *testing.T) {
		b := soak.NewBook()
		b.Stock(key, 1, at(0))
		grant(b, "a", 1, 10, 1000)
		grant(b, "b", 1, 20, 1000)
		b.Stock(key, 1, at(30))
		if got := b.Oversold(); len(got) != 1 {
			t.Fatalf("got %v, want one oversell", got)
		}
	})
}

func TestBookReconcile(t *testing.T) {
	t.Run("LostClaimAnswerResolvedFromLedger", func(t *testing.T) {
		b := soak.NewBook()
		b.Stock(key, 5, at(0))
		a := grant(b, "a", 2, 10, 1000)
		c := grant(b, "c", 1, 10, 1000)
		b.ClaimIssued(a) // answered 503, but the ledger committed it
		b.Claimed(c, at(50), at(60))
		problems, resolved := b.Reconcile(map[soak.CartID]bool{a: true, c: true})
		if len(problems) != 0 || resolved != 1 {
			t.Fatalf("got problems %v resolved %d, want none and 1", problems, resolved)
		}
		if got := b.ExpectedOnHand()[key]; got != 2 {
			t.Fatalf("got expected on_hand %d, want 2", got)
		}
		if _, claimed := b.Counts(); claimed != 2 {
			t.Fatalf("got %d claimed, want 2", claimed)
		}
	})
	t.Run("DeductedWithoutClaim", func(t *testing.T) {
		b := soak.NewBook()
		a := grant(b, "a", 1, 10, 1000)
		stranger := soak.CartID{ShopID: 1, Token: "x"}
		problems, _ := b.Reconcile(map[soak.CartID]bool{a: true, stranger: true})
		if len(problems) != 2 {
			t.Fatalf("got %v, want 2 problems (unclaimed cart, unknown cart)", problems)
		}
	})
	t.Run("ClaimedButNotDeducted", func(t *testing.T) {
		b := soak.NewBook()
		a := grant(b, "a", 1, 10, 1000)
		b.Claimed(a, at(50), at(60))
		problems, _ := b.Reconcile(map[soak.CartID]bool{})
		if len(problems) != 1 {
			t.Fatalf("got %v, want 1 problem", problems)
		}
	})
}
