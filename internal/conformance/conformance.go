// Package conformance pins the semantics every tandem.ReservationStore must
// share: one scenario suite (Run) and one state-machine property test
// (RunProperty) that compares a store, step by step, with the sequential
// model in internal/memres. Engines wire them into their own tests:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) conformance.Harness {
//			clock := conformance.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
//			s := mysqlres.NewStore(...) // fresh database, s.Now = clock.Now
//			if err := s.Open(context.Background()); err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return conformance.Harness{Store: s, Clock: clock}
//		})
//	}
//
// The store must read time only from Harness.Clock.Now, so the suite can
// expire holds by advancing it. Times are whole seconds: NewClock truncates
// and the suite advances and asks for TTLs in whole seconds, so that an
// engine storing second-precision timestamps answers exact expiries.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

// Clock is a settable clock the suite moves forward to expire holds. Safe
// for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock standing at t, truncated to the second and in UTC.
func NewClock(t time.Time) *Clock {
	return &Clock{now: t.Truncate(time.Second).UTC()}
}

// Now returns the clock's time; it moves only by Advance.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Harness is one fresh store (its own database / key space) driven by the
// suite, and the clock it reads time from.
type Harness struct {
	Store tandem.ReservationStore
	Clock *Clock
}

// Factory makes a fresh Harness for each subtest; it registers its own
// cleanup with t. Run calls it once per scenario; RunProperty calls it once
// for the whole property run and keeps checks apart by shop id.
type Factory func(t *testing.T) Harness

// shopSeq hands out shop ids so that no two scenarios or property checks
// share one, even when a factory reuses state; the random base keeps runs of
// different processes against a shared store apart too.
var shopSeq atomic.Int64

func init() {
	var b [4]byte
	_, _ = rand.Read(b[:])
	shopSeq.Store(1_000_000 + int64(binary.BigEndian.Uint32(b[:])%1_000_000)*1000)
}

func nextShop() int64 { return shopSeq.Add(1) }

// fixture is one scenario's harness, shop and helpers. Every helper fails
// the test with the cart or key it was looking at.
type fixture struct {
	t    *testing.T
	ctx  context.Context
	s    tandem.ReservationStore
	c    *Clock
	shop int64
}

func newFixture(t *testing.T, newHarness Factory) *fixture {
	t.Helper()
	h := newHarness(t)
	if h.Store == nil || h.Clock == nil {
		t.Fatalf("factory returned a harness without Store or Clock")
	}
	return &fixture{t: t, ctx: context.Background(), s: h.Store, c: h.Clock, shop: nextShop()}
}

func (f *fixture) key(item, group int64) tandem.Key {
	return tandem.Key{ShopID: f.shop, ItemID: item, GroupID: group}
}

// stock sets on_hand and checks the answer.
func (f *fixture) stock(item, group, onHand int64) {
	f.t.Helper()
	key := f.key(item, group)
	before, err := f.s.Counters(f.ctx, key)
	if err != nil {
		f.t.Fatalf("Counters(%s): %v", key, err)
	}
	got, err := f.s.SetOnHand(f.ctx, key, onHand)
	if err != nil {
		f.t.Fatalf("SetOnHand(%s, %d): %v", key, onHand, err)
	}
	want := tandem.Counters{Key: key, OnHand: onHand, Reserved: before.Reserved, Available: onHand - before.Reserved, Before: before.OnHand}
	if *got != want {
		f.t.Fatalf("SetOnHand(%s, %d) answered %+v, want %+v", key, onHand, *got, want)
	}
}

// counters asserts key's counters.
func (f *fixture) counters(item, group, onHand, reserved int64) {
	f.t.Helper()
	key := f.key(item, group)
	got, err := f.s.Counters(f.ctx, key)
	if err != nil {
		f.t.Fatalf("Counters(%s): %v", key, err)
	}
	want := tandem.Counters{Key: key, OnHand: onHand, Reserved: reserved, Available: onHand - reserved}
	if *got != want {
		f.t.Errorf("Counters(%s): got on_hand=%d reserved=%d available=%d, want on_hand=%d reserved=%d available=%d",
			key, got.OnHand, got.Reserved, got.Available, want.OnHand, want.Reserved, want.Available)
	}
}

// line is shorthand for a line request.
func line(item, quantity int64, groups ...int64) tandem.LineRequest {
	return tandem.LineRequest{ItemID: item, Quantity: quantity, GroupIDs: groups}
}

func (f *fixture) request(token string, ttl time.Duration, lines ...tandem.LineRequest) tandem.ReserveRequest {
	return tandem.ReserveRequest{CartToken: token, ShopID: f.shop, TTL: ttl, Lines: lines}
}

// reserve reserves and checks the answer is a fresh hold of want, expiring
// at Now + ttl (any time after Now when ttl is zero).
func (f *fixture) reserve(req tandem.ReserveRequest, want ...tandem.Line) *tandem.Reservation {
	f.t.Helper()
	res, err := f.s.Reserve(f.ctx, req)
	if err != nil {
		f.t.Fatalf("Reserve(cart %q): %v", req.CartToken, err)
	}
	f.expectRes("Reserve", req.CartToken, res, tandem.StatusReserved, false, want)
	if req.TTL > 0 {
		if wantExp := f.c.Now().Add(req.TTL); !res.ExpiresAt.Equal(wantExp) {
			f.t.Errorf("Reserve(cart %q): got expires_at %s, want %s (now + ttl %s)", req.CartToken, res.ExpiresAt, wantExp, req.TTL)
		}
	} else if !res.ExpiresAt.After(f.c.Now()) || res.ExpiresAt.After(f.c.Now().Add(tandem.MaxTTL)) {
		f.t.Errorf("Reserve(cart %q) with the default TTL: got expires_at %s, want in (%s, %s]",
			req.CartToken, res.ExpiresAt, f.c.Now(), f.c.Now().Add(tandem.MaxTTL))
	}
	return res
}

// expectRes checks an answer's cart, shop, status, Replayed and lines.
func (f *fixture) expectRes(op, token string, res *tandem.Reservation, status tandem.Status, replayed bool, lines []tandem.Line) {
	f.t.Helper()
	if msg := diffRes(res, f.shop, token, status, replayed, lines); msg != "" {
		f.t.Errorf("%s(cart %q): %s", op, token, msg)
	}
}

// diffRes describes how res differs from what is wanted, "" when it doesn't.
func diffRes(res *tandem.Reservation, shop int64, token string, status tandem.Status, replayed bool, lines []tandem.Line) string {
	switch {
	case res == nil:
		return "got a nil reservation and no error"
	case res.CartToken != token || res.ShopID != shop:
		return fmt.Sprintf("got cart %q of shop %d, want cart %q of shop %d", res.CartToken, res.ShopID, token, shop)
	case res.Status != status:
		return fmt.Sprintf("got status %q, want %q", res.Status, status)
	case res.Replayed != replayed:
		return fmt.Sprintf("got replayed=%t, want %t", res.Replayed, replayed)
	case !slices.Equal(res.Lines, lines):
		return fmt.Sprintf("got lines %+v, want %+v", res.Lines, lines)
	}
	return ""
}

// get asserts a cart's state.
func (f *fixture) get(token string, status tandem.Status, lines ...tandem.Line) *tandem.Reservation {
	f.t.Helper()
	res, err := f.s.Get(f.ctx, f.shop, token)
	if err != nil {
		f.t.Fatalf("Get(cart %q): got error %v, want status %q", token, err, status)
	}
	f.expectRes("Get", token, res, status, false, lines)
	return res
}

func (f *fixture) claim(token string, replayed bool, lines ...tandem.Line) {
	f.t.Helper()
	res, err := f.s.Claim(f.ctx, f.shop, token)
	if err != nil {
		f.t.Fatalf("Claim(cart %q): %v", token, err)
	}
	f.expectRes("Claim", token, res, tandem.StatusClaimed, replayed, lines)
}

func (f *fixture) release(token string, replayed bool, lines ...tandem.Line) {
	f.t.Helper()
	res, err := f.s.Release(f.ctx, f.shop, token)
	if err != nil {
		f.t.Fatalf("Release(cart %q): %v", token, err)
	}
	f.expectRes("Release", token, res, tandem.StatusReleased, replayed, lines)
}

// expectCode asserts err carries code.
func expectCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := tandem.ErrorCode(err); got != code {
		t.Errorf("%s: got error code %q (%v), want %q", what, got, err, code)
	}
}

func (f *fixture) claimFails(token, code string) {
	f.t.Helper()
	_, err := f.s.Claim(f.ctx, f.shop, token)
	expectCode(f.t, fmt.Sprintf("Claim(cart %q)", token), err, code)
}

func (f *fixture) releaseFails(token, code string) {
	f.t.Helper()
	_, err := f.s.Release(f.ctx, f.shop, token)
	expectCode(f.t, fmt.Sprintf("Release(cart %q)", token), err, code)
}

func (f *fixture) getFails(token, code string) {
	f.t.Helper()
	_, err := f.s.Get(f.ctx, f.shop, token)
	expectCode(f.t, fmt.Sprintf("Get(cart %q)", token), err, code)
}

func (f *fixture) reserveFails(req tandem.ReserveRequest, code string) error {
	f.t.Helper()
	_, err := f.s.Reserve(f.ctx, req)
	expectCode(f.t, fmt.Sprintf("Reserve(cart %q)", req.CartToken), err, code)
	return err
}

// expireDue runs ExpireDue at the clock's time and asserts how many expired.
func (f *fixture) expireDue(limit, want int) {
	f.t.Helper()
	got, err := f.s.ExpireDue(f.ctx, f.c.Now(), limit)
	if err != nil {
		f.t.Fatalf("ExpireDue(limit %d): %v", limit, err)
	}
	if got != want {
		f.t.Errorf("ExpireDue(limit %d): got %d expired, want %d", limit, got, want)
	}
}

// checkInvariants fails t with every violation the store reports.
func checkInvariants(t *testing.T, s tandem.ReservationStore) {
	t.Helper()
	vs, err := s.CheckInvariants(context.Background())
	if err != nil {
		t.Fatalf("CheckInvariants: %v", err)
	}
	for _, v := range vs {
		t.Errorf("CheckInvariants: got violation at %s (cart %q): %s, want none", v.Key, v.CartToken, v.Message)
	}
}

// detailItem returns the inventory_item_id detail of err as an int64.
func detailItem(err error) (int64, bool) {
	switch v := tandem.ErrorDetails(err)["inventory_item_id"].(type) {
	case int64:
		return v, true
	case int:
		return int64(v), true
	case float64:
		return int64(v), float64(int64(v)) == v
	}
	return 0, false
}

func (f *fixture) expectDetailItem(what string, err error, item int64) {
	f.t.Helper()
	got, ok := detailItem(err)
	if !ok {
		f.t.Errorf("%s: got details %v, want inventory_item_id %d", what, tandem.ErrorDetails(err), item)
	} else if got != item {
		f.t.Errorf("%s: got details.inventory_item_id %d, want %d", what, got, item)
	}
}
