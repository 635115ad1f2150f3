package conformance

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

// Run runs every scenario of the suite as a subtest, each on a fresh
// harness, and checks after each that the store reports no broken invariant.
func Run(t *testing.T, newHarness Factory) {
	scenarios := []struct {
		name string
		run  func(f *fixture)
	}{
		{"ReserveGetClaim", reserveGetClaim},
		{"ReserveRelease", reserveRelease},
		{"UnknownCart", unknownCart},
		{"ExpiredCart", expiredCart},
		{"IdempotentRetry", idempotentRetry},
		{"SameTokenDifferentRequest", sameTokenDifferentRequest},
		{"ReserveFinishedToken", reserveFinishedToken},
		{"EndRecordsEndedCart", endRecordsEndedCart},
		{"TombstoneRecordsUnknownCarts", tombstoneRecordsUnknownCarts},
		{"EndShowsTheEndersLines", endShowsTheEndersLines},
		{"AllOrNothing", allOrNothing},
		{"GroupPreference", groupPreference},
		{"ErrInvalid", errInvalid},
		{"SetOnHandBelowHeld", setOnHandBelowHeld},
		{"ExpiryReturnsStock", expiryReturnsStock},
		{"ListCountersOrdered", listCountersOrdered},
		{"ConcurrentReapers", concurrentReapers},
		{"ConcurrentHotItem", concurrentHotItem},
		{"ConcurrentScarceLine", concurrentScarceLine},
		{"ConcurrentClaimOnce", concurrentClaimOnce},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			f := newFixture(t, newHarness)
			sc.run(f)
			checkInvariants(t, f.s)
		})
	}
}

// reserveGetClaim: a two-line cart is held, read back and claimed; the
// claim deducts on_hand once per line and a repeated claim changes nothing.
func reserveGetClaim(f *fixture) {
	f.stock(1, 1, 10)
	f.stock(2, 2, 5)
	want := []tandem.Line{{ItemID: 1, Quantity: 3, GroupID: 1}, {ItemID: 2, Quantity: 2, GroupID: 2}}
	res := f.reserve(f.request("c-claim", time.Minute, line(1, 3, 1), line(2, 2, 2)), want...)
	f.counters(1, 1, 10, 3)
	f.counters(2, 2, 5, 2)

	got := f.get("c-claim", tandem.StatusReserved, want...)
	if !got.ExpiresAt.Equal(res.ExpiresAt) {
		f.t.Errorf("Get(cart %q): got expires_at %s, want %s", "c-claim", got.ExpiresAt, res.ExpiresAt)
	}

	f.claim("c-claim", false, want...)
	f.counters(1, 1, 7, 0)
	f.counters(2, 2, 3, 0)
	f.get("c-claim", tandem.StatusClaimed, want...)

	f.claim("c-claim", true, want...)
	f.counters(1, 1, 7, 0)
	f.counters(2, 2, 3, 0)

	f.releaseFails("c-claim", tandem.EALREADYCLAIMED)
	f.counters(1, 1, 7, 0)
	f.get("c-claim", tandem.StatusClaimed, want...)
}

// reserveRelease: a released cart's units are back at once; a repeated
// release changes nothing and a released cart can't be claimed.
func reserveRelease(f *fixture) {
	f.stock(1, 1, 10)
	want := []tandem.Line{{ItemID: 1, Quantity: 4, GroupID: 1}}
	f.reserve(f.request("c-release", time.Minute, line(1, 4, 1)), want...)
	f.counters(1, 1, 10, 4)

	f.release("c-release", false, want...)
	f.counters(1, 1, 10, 0)
	f.get("c-release", tandem.StatusReleased, want...)

	f.release("c-release", true, want...)
	f.counters(1, 1, 10, 0)

	f.claimFails("c-release", tandem.EGONE)
	f.counters(1, 1, 10, 0)
	f.get("c-release", tandem.StatusReleased, want...)
}

// unknownCart: a cart never reserved, or reserved in another shop, is
// not found.
func unknownCart(f *fixture) {
	f.claimFails("c-unknown", tandem.ENOTFOUND)
	f.releaseFails("c-unknown", tandem.ENOTFOUND)
	f.getFails("c-unknown", tandem.ENOTFOUND)

	f.stock(1, 1, 5)
	f.reserve(f.request("c-other-shop", time.Minute, line(1, 1, 1)), tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
	other := &fixture{t: f.t, ctx: f.ctx, s: f.s, c: f.c, shop: nextShop()}
	other.getFails("c-other-shop", tandem.ENOTFOUND)
	other.claimFails("c-other-shop", tandem.ENOTFOUND)
	other.releaseFails("c-other-shop", tandem.ENOTFOUND)
	f.counters(1, 1, 5, 1)
	f.get("c-other-shop", tandem.StatusReserved, tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
}

// expiredCart: at its expiry a hold is expired for every caller, yet its
// units stay held until a reaper returns them, once.
func expiredCart(f *fixture) {
	f.stock(1, 1, 5)
	want := []tandem.Line{{ItemID: 1, Quantity: 2, GroupID: 1}}
	req := f.request("c-expire", 30*time.Second, line(1, 2, 1))
	f.reserve(req, want...)

	f.c.Advance(29 * time.Second)
	f.get("c-expire", tandem.StatusReserved, want...)
	f.expireDue(100, 0)
	f.counters(1, 1, 5, 2)

	f.c.Advance(time.Second) // exactly at expires_at
	f.get("c-expire", tandem.StatusExpired, want...)
	f.claimFails("c-expire", tandem.EGONE)
	f.releaseFails("c-expire", tandem.EGONE)
	f.reserveFails(req, tandem.ECONFLICT)
	f.counters(1, 1, 5, 2) // not reaped yet

	f.expireDue(100, 1)
	f.counters(1, 1, 5, 0)
	f.get("c-expire", tandem.StatusExpired, want...)
	f.claimFails("c-expire", tandem.EGONE)
	f.releaseFails("c-expire", tandem.EGONE)
	f.reserveFails(req, tandem.ECONFLICT)
	f.expireDue(100, 0)
	f.counters(1, 1, 5, 0)
}

// idempotentRetry: an identical request while active answers the stored
// hold (same lines and expiry, whatever its TTL) and takes no more stock.
func idempotentRetry(f *fixture) {
	f.stock(1, 1, 10)
	f.stock(2, 1, 10)
	req := f.request("c-retry", time.Minute, line(1, 3, 1), line(2, 1, 2, 1))
	want := []tandem.Line{{ItemID: 1, Quantity: 3, GroupID: 1}, {ItemID: 2, Quantity: 1, GroupID: 1}}
	first := f.reserve(req, want...)

	f.c.Advance(10 * time.Second)
	for _, ttl := range []time.Duration{time.Minute, 5 * time.Minute, 0} {
		retry := req
		retry.TTL = ttl
		res, err := f.s.Reserve(f.ctx, retry)
		if err != nil {
			f.t.Fatalf("Reserve(cart %q) retry with ttl %s: %v", req.CartToken, ttl, err)
		}
		f.expectRes("Reserve retry", req.CartToken, res, tandem.StatusReserved, true, want)
		if !res.ExpiresAt.Equal(first.ExpiresAt) {
			f.t.Errorf("Reserve(cart %q) retry with ttl %s: got expires_at %s, want the first answer's %s",
				req.CartToken, ttl, res.ExpiresAt, first.ExpiresAt)
		}
	}
	f.counters(1, 1, 10, 3)
	f.counters(2, 1, 10, 1)
	f.counters(2, 2, 0, 0)
}

// sameTokenDifferentRequest: a token in use answers any other request with
// a conflict and the first hold stays as it was.
func sameTokenDifferentRequest(f *fixture) {
	f.stock(1, 1, 10)
	f.stock(1, 2, 10)
	f.stock(2, 1, 10)
	want := []tandem.Line{{ItemID: 1, Quantity: 2, GroupID: 1}}
	f.reserve(f.request("c-same", time.Minute, line(1, 2, 1, 2)), want...)
	for name, req := range map[string]tandem.ReserveRequest{
		"other quantity":    f.request("c-same", time.Minute, line(1, 3, 1, 2)),
		"other group order": f.request("c-same", time.Minute, line(1, 2, 2, 1)),
		"other groups":      f.request("c-same", time.Minute, line(1, 2, 1)),
		"other item":        f.request("c-same", time.Minute, line(2, 2, 1, 2)),
		"one more line":     f.request("c-same", time.Minute, line(1, 2, 1, 2), line(2, 1, 1)),
	} {
		_, err := f.s.Reserve(f.ctx, req)
		expectCode(f.t, "Reserve(cart \"c-same\") with "+name, err, tandem.ECONFLICT)
	}
	f.counters(1, 1, 10, 2)
	f.counters(1, 2, 10, 0)
	f.counters(2, 1, 10, 0)
	f.get("c-same", tandem.StatusReserved, want...)
}

// reserveFinishedToken: a claimed or released token can't be reserved
// again, not even with the identical request.
func reserveFinishedToken(f *fixture) {
	f.stock(1, 1, 10)
	claimed := f.request("c-claimed", time.Minute, line(1, 1, 1))
	released := f.request("c-released", time.Minute, line(1, 2, 1))
	f.reserve(claimed, tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
	f.reserve(released, tandem.Line{ItemID: 1, Quantity: 2, GroupID: 1})
	f.claim("c-claimed", false, tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
	f.release("c-released", false, tandem.Line{ItemID: 1, Quantity: 2, GroupID: 1})
	f.counters(1, 1, 9, 0)

	f.reserveFails(claimed, tandem.ECONFLICT)
	f.reserveFails(released, tandem.ECONFLICT)
	f.reserveFails(f.request("c-claimed", time.Minute, line(1, 5, 1)), tandem.ECONFLICT)
	f.counters(1, 1, 9, 0)
	f.get("c-claimed", tandem.StatusClaimed, tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
	f.get("c-released", tandem.StatusReleased, tandem.Line{ItemID: 1, Quantity: 2, GroupID: 1})
}

// endRecordsEndedCart: a store that can record a cart as another store
// ended it (tandem.CartEnder) keeps the token of a cart it never saw as
// ended without touching stock, so that it never reserves the token again;
// a hold it has is returned to stock; a claimed cart is never ended.
func endRecordsEndedCart(f *fixture) {
	e, ok := f.s.(tandem.CartEnder)
	if !ok {
		f.t.Skipf("%s records no ended cart (not a tandem.CartEnder)", f.s.Name())
	}
	f.stock(1, 1, 10)
	two := tandem.Line{ItemID: 1, Quantity: 2, GroupID: 1}
	end := func(token string, st tandem.Status, lines ...tandem.Line) error {
		return e.End(f.ctx, tandem.Reservation{ShopID: f.shop, CartToken: token, Status: st,
			ExpiresAt: f.c.Now().Add(time.Minute), Lines: lines})
	}

	// Never seen here: a tombstone, stock untouched.
	for _, st := range []tandem.Status{tandem.StatusReleased, tandem.StatusExpired} {
		token := "t-" + string(st)
		if err := end(token, st, two); err != nil {
			f.t.Fatalf("End(cart %q, %s) of a cart never seen: %v", token, st, err)
		}
		f.get(token, st, two)
		f.counters(1, 1, 10, 0)
		f.reserveFails(f.request(token, time.Minute, line(1, 2, 1)), tandem.ECONFLICT)
		f.reserveFails(f.request(token, time.Minute, line(1, 1, 1)), tandem.ECONFLICT)
		f.claimFails(token, tandem.EGONE)
		if err := end(token, st, two); err != nil {
			f.t.Errorf("End(cart %q, %s) again: %v, want nil (no change)", token, st, err)
		}
	}
	f.release("t-released", true, two)
	f.releaseFails("t-expired", tandem.EGONE)
	f.counters(1, 1, 10, 0)

	// Held here: its units come back, with the status it ended with.
	f.reserve(f.request("t-held", time.Minute, line(1, 3, 1)), tandem.Line{ItemID: 1, Quantity: 3, GroupID: 1})
	f.counters(1, 1, 10, 3)
	if err := end("t-held", tandem.StatusExpired, tandem.Line{ItemID: 1, Quantity: 3, GroupID: 1}); err != nil {
		f.t.Fatalf("End(cart %q) of a hold: %v", "t-held", err)
	}
	f.get("t-held", tandem.StatusExpired, tandem.Line{ItemID: 1, Quantity: 3, GroupID: 1})
	f.counters(1, 1, 10, 0)
	f.reserveFails(f.request("t-held", time.Minute, line(1, 3, 1)), tandem.ECONFLICT)

	// Claimed: never ended; a bad status changes nothing.
	f.reserve(f.request("t-sold", time.Minute, line(1, 1, 1)), tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
	f.claim("t-sold", false, tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
	expectCode(f.t, "End of a claimed cart", end("t-sold", tandem.StatusReleased, tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1}), tandem.ECONFLICT)
	f.get("t-sold", tandem.StatusClaimed, tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
	expectCode(f.t, "End with status reserved", end("t-bad", tandem.StatusReserved, two), tandem.EINVALID)
	f.getFails("t-bad", tandem.ENOTFOUND)
	f.counters(1, 1, 9, 0)
}

// tombstoneRecordsUnknownCarts: a store rebuilt from another's state
// learns of the carts that store ended (tandem.Tombstoner): each cart it
// never saw keeps its status and lines, no counter moves (the rebuilt
// counts account for it), a repeated claim of a claimed one replays, and
// no ended token is reserved again; a cart it knows is left as it is; a
// cart that is not ended is refused and nothing is recorded.
func tombstoneRecordsUnknownCarts(f *fixture) {
	ts, ok := f.s.(tandem.Tombstoner)
	if !ok {
		f.t.Skipf("%s records no tombstone (not a tandem.Tombstoner)", f.s.Name())
	}
	f.stock(1, 1, 10)
	one := tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1}
	two := tandem.Line{ItemID: 1, Quantity: 2, GroupID: 1}
	ended := func(token string, st tandem.Status, lines ...tandem.Line) tandem.Reservation {
		return tandem.Reservation{ShopID: f.shop, CartToken: token, Status: st, ExpiresAt: f.c.Now().Add(time.Minute), Lines: lines}
	}
	f.reserve(f.request("t-known", time.Minute, line(1, 1, 1)), one)

	n, err := ts.Tombstone(f.ctx, []tandem.Reservation{ended("t-bad", tandem.StatusReserved, two), ended("t-ok", tandem.StatusClaimed, two)})
	expectCode(f.t, "Tombstone of a reserved cart", err, tandem.EINVALID)
	if n != 0 {
		f.t.Errorf("Tombstone refused: recorded %d carts, want 0", n)
	}
	f.getFails("t-ok", tandem.ENOTFOUND)

	n, err = ts.Tombstone(f.ctx, []tandem.Reservation{
		ended("t-sold", tandem.StatusClaimed, two),
		ended("t-gone", tandem.StatusReleased, two),
		ended("t-late", tandem.StatusExpired, two),
		ended("t-known", tandem.StatusClaimed, one),
	})
	if err != nil || n != 3 {
		f.t.Fatalf("Tombstone: got %d, %v, want 3 recorded", n, err)
	}
	f.counters(1, 1, 10, 1)
	f.get("t-sold", tandem.StatusClaimed, two)
	f.get("t-gone", tandem.StatusReleased, two)
	f.get("t-late", tandem.StatusExpired, two)
	f.get("t-known", tandem.StatusReserved, one)
	for _, token := range []string{"t-sold", "t-gone", "t-late"} {
		f.reserveFails(f.request(token, time.Minute, line(1, 2, 1)), tandem.ECONFLICT)
	}
	f.claim("t-sold", true, two)
	f.claimFails("t-gone", tandem.EGONE)
	f.counters(1, 1, 10, 1)
	if n, err := ts.Tombstone(f.ctx, []tandem.Reservation{ended("t-sold", tandem.StatusClaimed, two)}); err != nil || n != 0 {
		f.t.Errorf("Tombstone again: got %d, %v, want 0 recorded (known)", n, err)
	}
	f.release("t-known", false, one)
	f.counters(1, 1, 10, 0)
}

// endShowsTheEndersLines: a store that held a cart in other groups than
// the store that ended it (a location not converged yet) returns its own
// units, and from then on shows the ender's lines, so that a replay after
// a flip answers what the buyer was answered; the same for a cart it has
// ended already.
func endShowsTheEndersLines(f *fixture) {
	e, ok := f.s.(tandem.CartEnder)
	if !ok {
		f.t.Skipf("%s records no ended cart (not a tandem.CartEnder)", f.s.Name())
	}
	f.stock(1, 1, 5)
	f.stock(1, 2, 5)
	mine := tandem.Line{ItemID: 1, Quantity: 2, GroupID: 1}
	theirs := tandem.Line{ItemID: 1, Quantity: 2, GroupID: 2}
	end := func(token string, lines ...tandem.Line) {
		f.t.Helper()
		if err := e.End(f.ctx, tandem.Reservation{ShopID: f.shop, CartToken: token, Status: tandem.StatusReleased,
			ExpiresAt: f.c.Now().Add(time.Minute), Lines: lines}); err != nil {
			f.t.Fatalf("End(cart %q): %v", token, err)
		}
	}
	f.reserve(f.request("t-moved", time.Minute, line(1, 2, 1)), mine)
	f.counters(1, 1, 5, 2)
	end("t-moved", theirs)
	f.get("t-moved", tandem.StatusReleased, theirs)
	f.counters(1, 1, 5, 0)
	f.counters(1, 2, 5, 0)
	f.release("t-moved", true, theirs)

	f.reserve(f.request("t-gone", time.Minute, line(1, 2, 1)), mine)
	f.release("t-gone", false, mine)
	end("t-gone", theirs)
	f.get("t-gone", tandem.StatusReleased, theirs)
	f.counters(1, 1, 5, 0)
	f.counters(1, 2, 5, 0)
}

// allOrNothing: a cart with a line that can't be covered holds nothing,
// names the first failing line and leaves its token free.
func allOrNothing(f *fixture) {
	f.stock(1, 1, 10)
	f.stock(2, 1, 1)
	f.stock(3, 1, 10)
	err := f.reserveFails(f.request("c-aon", time.Minute, line(1, 3, 1), line(2, 2, 1), line(3, 1, 1)), tandem.EINSUFFICIENT)
	f.expectDetailItem(`Reserve(cart "c-aon")`, err, 2)
	f.counters(1, 1, 10, 0)
	f.counters(2, 1, 1, 0)
	f.counters(3, 1, 10, 0)
	f.getFails("c-aon", tandem.ENOTFOUND)

	// Two failing lines: the first one is named.
	err = f.reserveFails(f.request("c-aon2", time.Minute, line(1, 1, 1), line(2, 5, 1), line(3, 11, 1)), tandem.EINSUFFICIENT)
	f.expectDetailItem(`Reserve(cart "c-aon2")`, err, 2)
	f.counters(1, 1, 10, 0)

	// The refused token is free for a request that can be covered.
	f.reserve(f.request("c-aon", time.Minute, line(1, 3, 1), line(2, 1, 1)),
		tandem.Line{ItemID: 1, Quantity: 3, GroupID: 1}, tandem.Line{ItemID: 2, Quantity: 1, GroupID: 1})
	f.counters(1, 1, 10, 3)
	f.counters(2, 1, 1, 1)
}

// groupPreference: a line is taken whole from the first of its groups that
// covers it, never split across groups.
func groupPreference(f *fixture) {
	f.stock(1, 1, 5)
	f.stock(1, 2, 5)
	f.reserve(f.request("c-first", time.Minute, line(1, 3, 1, 2)), tandem.Line{ItemID: 1, Quantity: 3, GroupID: 1})
	// Group 1 has 2 left: the line falls to group 2.
	f.reserve(f.request("c-second", time.Minute, line(1, 3, 1, 2)), tandem.Line{ItemID: 1, Quantity: 3, GroupID: 2})
	// Preference order is the buyer's: group 2 first, and it still covers 2.
	f.reserve(f.request("c-order", time.Minute, line(1, 2, 2, 1)), tandem.Line{ItemID: 1, Quantity: 2, GroupID: 2})
	f.counters(1, 1, 5, 3)
	f.counters(1, 2, 5, 5)
	// 2 left in group 1, none in group 2: 2 fits, 3 doesn't.
	err := f.reserveFails(f.request("c-none", time.Minute, line(1, 3, 2, 1)), tandem.EINSUFFICIENT)
	f.expectDetailItem(`Reserve(cart "c-none")`, err, 1)

	// Never split: 2 + 2 would cover 3, but no group does alone.
	f.stock(2, 1, 2)
	f.stock(2, 2, 2)
	err = f.reserveFails(f.request("c-split", time.Minute, line(2, 3, 1, 2)), tandem.EINSUFFICIENT)
	f.expectDetailItem(`Reserve(cart "c-split")`, err, 2)
	f.counters(2, 1, 2, 0)
	f.counters(2, 2, 2, 0)

	// A group never stocked is skipped; lines of one cart pick groups apart.
	f.stock(3, 3, 4)
	f.reserve(f.request("c-mixed", time.Minute, line(3, 4, 7, 3), line(2, 2, 1, 2)),
		tandem.Line{ItemID: 3, Quantity: 4, GroupID: 3}, tandem.Line{ItemID: 2, Quantity: 2, GroupID: 1})
	f.counters(3, 7, 0, 0)
	f.counters(3, 3, 4, 4)
	f.counters(2, 1, 2, 2)
	f.counters(2, 2, 2, 0)
	f.counters(1, 1, 5, 3)
	f.counters(1, 2, 5, 5)
}

// errInvalid: requests that break ReserveRequest.Validate's rules are
// refused and change nothing.
func errInvalid(f *fixture) {
	f.stock(1, 1, 10)
	f.stock(2, 1, 10)
	ok := line(1, 1, 1)
	manyLines := make([]tandem.LineRequest, tandem.MaxLines+1)
	for i := range manyLines {
		manyLines[i] = line(int64(i+1), 1, 1)
	}
	manyGroups := make([]int64, tandem.MaxGroups+1)
	for i := range manyGroups {
		manyGroups[i] = int64(i + 1)
	}
	tests := []struct {
		name string
		req  tandem.ReserveRequest
	}{
		{"EmptyToken", f.request("", 0, ok)},
		{"TokenBadCharacter", f.request("c/1", 0, ok)},
		{"TokenTooLong", f.request(strings.Repeat("a", tandem.MaxCartTokenLen+1), 0, ok)},
		{"ShopZero", tandem.ReserveRequest{CartToken: "c-inv", ShopID: 0, Lines: []tandem.LineRequest{ok}}},
		{"NoLines", f.request("c-inv", 0)},
		{"TooManyLines", f.request("c-inv", 0, manyLines...)},
		{"ItemZero", f.request("c-inv", 0, line(0, 1, 1))},
		{"QuantityZero", f.request("c-inv", 0, line(1, 0, 1))},
		{"QuantityTooLarge", f.request("c-inv", 0, line(1, tandem.MaxQuantity+1, 1))},
		{"SameItemTwice", f.request("c-inv", 0, line(1, 1, 1), line(1, 1, 1))},
		{"NoGroups", f.request("c-inv", 0, line(1, 1))},
		{"TooManyGroups", f.request("c-inv", 0, line(1, 1, manyGroups...))},
		{"GroupZero", f.request("c-inv", 0, line(1, 1, 0))},
		{"GroupRepeated", f.request("c-inv", 0, line(1, 1, 1, 1))},
		{"TTLUnderASecond", f.request("c-inv", 500*time.Millisecond, ok)},
		{"TTLOverAnHour", f.request("c-inv", tandem.MaxTTL+time.Second, ok)},
		{"InvalidSecondLine", f.request("c-inv", 0, line(2, 1, 1), line(1, 1, -1))},
	}
	for _, tt := range tests {
		_, err := f.s.Reserve(f.ctx, tt.req)
		expectCode(f.t, "Reserve "+tt.name, err, tandem.EINVALID)
	}
	f.getFails("c-inv", tandem.ENOTFOUND)
	f.counters(1, 1, 10, 0)
	f.counters(2, 1, 10, 0)

	for _, v := range []int64{-1, tandem.MaxOnHand + 1} {
		_, err := f.s.SetOnHand(f.ctx, f.key(1, 1), v)
		expectCode(f.t, fmt.Sprintf("SetOnHand(%s, %d)", f.key(1, 1), v), err, tandem.EINVALID)
	}
	f.counters(1, 1, 10, 0)
	f.stock(1, 1, tandem.MaxOnHand)
	f.stock(1, 1, 0)
}

// setOnHandBelowHeld: a count below what is held is refused and changes
// nothing; a restock raises what can be reserved.
func setOnHandBelowHeld(f *fixture) {
	f.stock(1, 1, 10)
	f.reserve(f.request("c-held", time.Minute, line(1, 6, 1)), tandem.Line{ItemID: 1, Quantity: 6, GroupID: 1})
	_, err := f.s.SetOnHand(f.ctx, f.key(1, 1), 5)
	expectCode(f.t, fmt.Sprintf("SetOnHand(%s, 5) with 6 held", f.key(1, 1)), err, tandem.ECONFLICT)
	f.counters(1, 1, 10, 6)

	f.stock(1, 1, 6) // exactly what is held
	f.counters(1, 1, 6, 6)
	err = f.reserveFails(f.request("c-more", time.Minute, line(1, 1, 1)), tandem.EINSUFFICIENT)
	f.expectDetailItem(`Reserve(cart "c-more")`, err, 1)

	f.stock(1, 1, 20)
	f.counters(1, 1, 20, 6)
	f.reserve(f.request("c-more", time.Minute, line(1, 14, 1)), tandem.Line{ItemID: 1, Quantity: 14, GroupID: 1})
	f.reserveFails(f.request("c-over", time.Minute, line(1, 1, 1)), tandem.EINSUFFICIENT)
	f.counters(1, 1, 20, 20)
}

// expiryReturnsStock: each hold expires after its own TTL (or the default)
// and ExpireDue returns it to stock once, at most limit at a time.
func expiryReturnsStock(f *fixture) {
	f.stock(1, 1, 100)
	def := f.reserve(f.request("c-default", 0, line(1, 1, 1)), tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
	f.reserve(f.request("c-60", time.Minute, line(1, 2, 1)), tandem.Line{ItemID: 1, Quantity: 2, GroupID: 1})
	f.reserve(f.request("c-120", 2*time.Minute, line(1, 4, 1)), tandem.Line{ItemID: 1, Quantity: 4, GroupID: 1})
	f.reserve(f.request("c-120b", 2*time.Minute, line(1, 8, 1)), tandem.Line{ItemID: 1, Quantity: 8, GroupID: 1})
	f.reserve(f.request("c-120c", 2*time.Minute, line(1, 16, 1)), tandem.Line{ItemID: 1, Quantity: 16, GroupID: 1})
	f.counters(1, 1, 100, 31)

	f.c.Advance(time.Minute)
	// The reaper goes by the time it is given, not by the store's clock.
	n, err := f.s.ExpireDue(f.ctx, f.c.Now().Add(-time.Second), 100)
	if err != nil || n != 0 {
		f.t.Errorf("ExpireDue(now - 1s): got %d, %v, want 0 expired", n, err)
	}
	f.expireDue(100, 1)
	f.counters(1, 1, 100, 29)
	f.get("c-60", tandem.StatusExpired, tandem.Line{ItemID: 1, Quantity: 2, GroupID: 1})
	f.get("c-120", tandem.StatusReserved, tandem.Line{ItemID: 1, Quantity: 4, GroupID: 1})

	f.c.Advance(time.Minute)
	f.expireDue(2, 2)
	f.expireDue(2, 1)
	f.expireDue(2, 0)
	f.counters(1, 1, 100, 1)

	if wait := def.ExpiresAt.Sub(f.c.Now()); wait > 0 {
		f.c.Advance(wait)
	}
	if def.ExpiresAt.After(f.c.Now()) {
		f.t.Fatalf("clock at %s, want at or past the default expiry %s", f.c.Now(), def.ExpiresAt)
	}
	f.expireDue(100, 1)
	f.counters(1, 1, 100, 0)
	f.get("c-default", tandem.StatusExpired, tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
}

// listCountersOrdered: every stocked position is listed, by (shop, item,
// group), with its counters.
func listCountersOrdered(f *fixture) {
	stock := []struct{ item, group, onHand int64 }{{2, 1, 4}, {1, 2, 3}, {1, 1, 5}, {2, 3, 0}, {3, 1, 7}}
	for _, s := range stock {
		f.stock(s.item, s.group, s.onHand)
	}
	f.reserve(f.request("c-list", time.Minute, line(1, 2, 1), line(3, 7, 1)),
		tandem.Line{ItemID: 1, Quantity: 2, GroupID: 1}, tandem.Line{ItemID: 3, Quantity: 7, GroupID: 1})
	list, err := f.s.ListCounters(f.ctx)
	if err != nil {
		f.t.Fatalf("ListCounters: %v", err)
	}
	for i := 1; i < len(list); i++ {
		a, b := list[i-1].Key, list[i].Key
		if a.ShopID > b.ShopID || a.ShopID == b.ShopID && (a.ItemID > b.ItemID || a.ItemID == b.ItemID && a.GroupID >= b.GroupID) {
			f.t.Errorf("ListCounters: got %s before %s, want ordered by (shop, item, group) without repeats", a, b)
		}
	}
	var got []tandem.Counters
	for _, c := range list {
		if c.ShopID == f.shop {
			got = append(got, c)
		}
	}
	want := []tandem.Counters{
		{Key: f.key(1, 1), OnHand: 5, Reserved: 2, Available: 3},
		{Key: f.key(1, 2), OnHand: 3, Available: 3},
		{Key: f.key(2, 1), OnHand: 4, Available: 4},
		{Key: f.key(2, 3), OnHand: 0, Available: 0},
		{Key: f.key(3, 1), OnHand: 7, Reserved: 7, Available: 0},
	}
	if !slices.Equal(got, want) {
		f.t.Errorf("ListCounters of shop %d: got %+v, want %+v", f.shop, got, want)
	}
}

// parallel runs fn(i) for i in [0, n) on n goroutines released together.
func parallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

// concurrentReapers: many reapers at once return every hold exactly once.
func concurrentReapers(f *fixture) {
	const holds, reapers = 50, 8
	f.stock(1, 1, 100)
	for i := range holds {
		token := fmt.Sprintf("c-reap-%d", i)
		f.reserve(f.request(token, 10*time.Second, line(1, 1, 1)), tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
	}
	f.counters(1, 1, 100, holds)
	f.c.Advance(10 * time.Second)

	now := f.c.Now()
	counts := make([]int, reapers)
	errs := make([]error, reapers)
	parallel(reapers, func(i int) {
		for {
			n, err := f.s.ExpireDue(f.ctx, now, 5)
			if err != nil {
				errs[i] = err
				return
			}
			if n == 0 {
				return
			}
			counts[i] += n
		}
	})
	total := 0
	for i := range reapers {
		if errs[i] != nil {
			f.t.Errorf("reaper %d: ExpireDue: %v", i, errs[i])
		}
		total += counts[i]
	}
	if total != holds {
		f.t.Errorf("%d concurrent reapers: got %d expired in total (per reaper %v), want %d", reapers, total, counts, holds)
	}
	f.counters(1, 1, 100, 0)
	f.expireDue(100, 0)
	for i := range holds {
		f.get(fmt.Sprintf("c-reap-%d", i), tandem.StatusExpired, tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
	}
}

// tally counts concurrent outcomes by error code ("" for success).
type tally struct {
	mu     sync.Mutex
	codes  map[string]int
	errors []error
	tokens []string
}

func (t *tally) add(token string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.codes == nil {
		t.codes = map[string]int{}
	}
	code := tandem.ErrorCode(err)
	t.codes[code]++
	switch code {
	case "":
		t.tokens = append(t.tokens, token)
	case tandem.EINSUFFICIENT:
	default:
		t.errors = append(t.errors, fmt.Errorf("cart %q: %w", token, err))
	}
}

// concurrentHotItem: N units and M > N concurrent single-unit carts:
// exactly N succeed, the others are sold out (no oversell, no undersell).
func concurrentHotItem(f *fixture) {
	const units, carts = 100, 300
	f.stock(1, 1, units)
	var out tally
	parallel(carts, func(i int) {
		token := fmt.Sprintf("c-hot-%d", i)
		_, err := f.s.Reserve(f.ctx, f.request(token, time.Minute, line(1, 1, 1)))
		out.add(token, err)
	})
	for _, err := range out.errors {
		f.t.Errorf("Reserve: got %v, want success or %s", err, tandem.EINSUFFICIENT)
	}
	if out.codes[""] != units || out.codes[tandem.EINSUFFICIENT] != carts-units {
		f.t.Errorf("%d carts for %d units: got %d reserved and %d %s, want %d and %d",
			carts, units, out.codes[""], out.codes[tandem.EINSUFFICIENT], tandem.EINSUFFICIENT, units, carts-units)
	}
	f.counters(1, 1, units, units)
	for _, token := range out.tokens {
		f.get(token, tandem.StatusReserved, tandem.Line{ItemID: 1, Quantity: 1, GroupID: 1})
	}
}

// concurrentScarceLine: carts of a plentiful and a scarce item: the scarce
// one decides, and the refused carts leak no unit of the plentiful one.
func concurrentScarceLine(f *fixture) {
	const plenty, scarce, carts = 1000, 20, 100
	f.stock(1, 1, plenty)
	f.stock(2, 1, scarce)
	var out tally
	parallel(carts, func(i int) {
		token := fmt.Sprintf("c-scarce-%d", i)
		_, err := f.s.Reserve(f.ctx, f.request(token, time.Minute, line(1, 1, 1), line(2, 1, 1)))
		out.add(token, err)
	})
	for _, err := range out.errors {
		f.t.Errorf("Reserve: got %v, want success or %s", err, tandem.EINSUFFICIENT)
	}
	if out.codes[""] != scarce || out.codes[tandem.EINSUFFICIENT] != carts-scarce {
		f.t.Errorf("%d carts of items 1+2 with %d of item 2: got %d reserved and %d %s, want %d and %d",
			carts, scarce, out.codes[""], out.codes[tandem.EINSUFFICIENT], tandem.EINSUFFICIENT, scarce, carts-scarce)
	}
	f.counters(1, 1, plenty, scarce)
	f.counters(2, 1, scarce, scarce)
}

// concurrentClaimOnce: the same cart claimed many times at once deducts
// the ledger once; exactly one answer is not a replay.
func concurrentClaimOnce(f *fixture) {
	const claimers = 10
	f.stock(1, 1, 10)
	want := tandem.Line{ItemID: 1, Quantity: 3, GroupID: 1}
	f.reserve(f.request("c-claim-once", time.Minute, line(1, 3, 1)), want)
	var mu sync.Mutex
	fresh := 0
	parallel(claimers, func(int) {
		res, err := f.s.Claim(f.ctx, f.shop, "c-claim-once")
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			f.t.Errorf("Claim(cart %q): %v", "c-claim-once", err)
			return
		}
		if msg := diffRes(res, f.shop, "c-claim-once", tandem.StatusClaimed, res.Replayed, []tandem.Line{want}); msg != "" {
			f.t.Errorf("Claim(cart %q): %s", "c-claim-once", msg)
		}
		if !res.Replayed {
			fresh++
		}
	})
	if fresh != 1 {
		f.t.Errorf("%d concurrent claims of one cart: got %d not replayed, want 1", claimers, fresh)
	}
	f.counters(1, 1, 7, 0)
}
