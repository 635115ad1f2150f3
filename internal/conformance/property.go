package conformance

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/memres"
)

// The property test's small world: few enough items, groups and carts that
// random operations collide on them all the time.
var (
	propItems  = []int64{1, 2, 3}
	propGroups = []int64{1, 2, 3}
	propTokens = []string{"c0", "c1", "c2", "c3", "c4"}
	propTTLs   = []time.Duration{10 * time.Second, 30 * time.Second, time.Minute}
	propSteps  = []time.Duration{time.Second, 10 * time.Second, 30 * time.Second}
)

// drainLimit is the ExpireDue limit the property test uses: larger than any
// check can have due, so one call reaps every due hold of the check.
const drainLimit = 1000

// RunProperty runs a rapid state-machine test that drives the store under
// test and a fresh memres model side by side with random operations (set
// stock, reserve 1-3 lines with random group lists, claim, release, get,
// advance the clock and reap) and compares every answer and the counters of
// every touched position after each step, and checks both stores'
// invariants (the model's after each step, the store's after each check).
//
// A fresh store per check would cost a database per check, so RunProperty
// calls newHarness once for the whole run and keeps checks apart: each check
// uses two shop ids of its own, and starts by moving the clock past the
// longest TTL and reaping, so no hold of an earlier check is left to be
// counted by the check's ExpireDue. The store must therefore hold no other
// traffic while the test runs. Tune the run with -rapid.checks (default 100)
// and -rapid.steps (default 30); -short divides both.
func RunProperty(t *testing.T, newHarness Factory) {
	h := newHarness(t)
	if h.Store == nil || h.Clock == nil {
		t.Fatalf("factory returned a harness without Store or Clock")
	}
	rapid.Check(t, func(rt *rapid.T) {
		m := newMachine(rt, h)
		rt.Repeat(map[string]func(*rapid.T){
			"":          m.check,
			"SetOnHand": m.setOnHand,
			"Reserve":   m.reserve,
			"Claim":     m.claim,
			"Release":   m.release,
			"Get":       m.get,
			"Expire":    m.expire,
		})
		m.compareCounters(rt, "end of check", m.allKeys())
		m.checkInvariants(rt, m.sut, m.model)
	})
}

// machine is one check: the store under test, the model, and the check's
// shops.
type machine struct {
	ctx   context.Context
	sut   tandem.ReservationStore
	model *memres.Store
	clock *Clock
	shops []int64
	// held lists the carts the model has granted a hold, so that claims,
	// releases and gets mostly hit carts that exist.
	held []cartKey
}

type cartKey struct {
	shop  int64
	token string
}

func newMachine(rt *rapid.T, h Harness) *machine {
	ctx := context.Background()
	h.Clock.Advance(tandem.MaxTTL + time.Second)
	for {
		n, err := h.Store.ExpireDue(ctx, h.Clock.Now(), drainLimit)
		if err != nil {
			rt.Fatalf("ExpireDue before the check: %v", err)
		}
		if n == 0 {
			break
		}
	}
	model := memres.NewStore(nil)
	model.Now = h.Clock.Now
	m := &machine{ctx: ctx, sut: h.Store, model: model, clock: h.Clock, shops: []int64{nextShop(), nextShop()}}
	// Stock every position up front, so that most reserves can succeed and
	// the check reaches claims, releases and expiries of real holds.
	for _, key := range m.allKeys() {
		m.setKey(rt, key, rapid.Int64Range(0, 10).Draw(rt, "initial on_hand"))
	}
	return m
}

func (m *machine) allKeys() []tandem.Key {
	var keys []tandem.Key
	for _, s := range m.shops {
		for _, i := range propItems {
			for _, g := range propGroups {
				keys = append(keys, tandem.Key{ShopID: s, ItemID: i, GroupID: g})
			}
		}
	}
	return keys
}

func (m *machine) drawShop(rt *rapid.T) int64 { return rapid.SampledFrom(m.shops).Draw(rt, "shop") }

func (m *machine) drawToken(rt *rapid.T) string {
	return rapid.SampledFrom(propTokens).Draw(rt, "cart")
}

// check is run after every action: the model breaks no invariant.
func (m *machine) check(rt *rapid.T) {
	m.checkInvariants(rt, m.model)
}

// checkInvariants fails rt with every violation s reports. The store under
// test is checked once at the end of each check rather than after every
// step: its CheckInvariants reads the whole store, which holds every
// earlier check's shops too, so per-step checks would make the run
// quadratic; a violation found at the end is still shrunk by rapid to the
// shortest sequence of steps that causes it.
func (m *machine) checkInvariants(rt *rapid.T, stores ...tandem.ReservationStore) {
	for _, s := range stores {
		vs, err := s.CheckInvariants(m.ctx)
		if err != nil {
			rt.Fatalf("%s: CheckInvariants: %v", s.Name(), err)
		}
		for _, v := range vs {
			rt.Errorf("%s: CheckInvariants: got violation at %s (cart %q): %s, want none", s.Name(), v.Key, v.CartToken, v.Message)
		}
	}
}

func (m *machine) setOnHand(rt *rapid.T) {
	key := tandem.Key{
		ShopID:  m.drawShop(rt),
		ItemID:  rapid.SampledFrom(propItems).Draw(rt, "item"),
		GroupID: rapid.SampledFrom(propGroups).Draw(rt, "group"),
	}
	m.setKey(rt, key, rapid.Int64Range(0, 10).Draw(rt, "on_hand"))
}

// setKey sets key's on_hand in both stores and compares the answers.
func (m *machine) setKey(rt *rapid.T, key tandem.Key, v int64) {
	got, gotErr := m.sut.SetOnHand(m.ctx, key, v)
	want, wantErr := m.model.SetOnHand(m.ctx, key, v)
	what := fmt.Sprintf("SetOnHand(%s, %d)", key, v)
	if compareErr(rt, what, gotErr, wantErr) && *got != *want {
		rt.Fatalf("%s: got %+v, want %+v", what, *got, *want)
	}
	m.compareCounters(rt, what, []tandem.Key{key})
}

func (m *machine) reserve(rt *rapid.T) {
	req := tandem.ReserveRequest{
		CartToken: m.drawToken(rt),
		ShopID:    m.drawShop(rt),
		TTL:       rapid.SampledFrom(propTTLs).Draw(rt, "ttl"),
	}
	items := rapid.SliceOfNDistinct(rapid.SampledFrom(propItems), 1, 3, rapid.ID[int64]).Draw(rt, "items")
	var keys []tandem.Key
	for _, item := range items {
		groups := rapid.SliceOfNDistinct(rapid.SampledFrom(propGroups), 1, 3, rapid.ID[int64]).Draw(rt, "groups")
		req.Lines = append(req.Lines, tandem.LineRequest{
			ItemID:   item,
			Quantity: rapid.Int64Range(1, 4).Draw(rt, "quantity"),
			GroupIDs: groups,
		})
		for _, g := range groups {
			keys = append(keys, tandem.Key{ShopID: req.ShopID, ItemID: item, GroupID: g})
		}
	}
	got, gotErr := m.sut.Reserve(m.ctx, req)
	want, wantErr := m.model.Reserve(m.ctx, req)
	what := fmt.Sprintf("Reserve(shop %d, cart %q, %+v)", req.ShopID, req.CartToken, req.Lines)
	if compareErr(rt, what, gotErr, wantErr) {
		compareRes(rt, what, got, want)
		if !want.Replayed {
			m.held = append(m.held, cartKey{req.ShopID, req.CartToken})
		}
	}
	m.compareCounters(rt, what, keys)
}

// drawCart picks a cart: mostly one that was granted a hold, else any.
func (m *machine) drawCart(rt *rapid.T) (int64, string) {
	if len(m.held) > 0 && rapid.IntRange(0, 3).Draw(rt, "known cart") > 0 {
		c := rapid.SampledFrom(m.held).Draw(rt, "cart")
		return c.shop, c.token
	}
	return m.drawShop(rt), m.drawToken(rt)
}

// cartOp runs a claim, release or get on both stores and compares them.
func (m *machine) cartOp(rt *rapid.T, op string, call func(tandem.ReservationStore, int64, string) (*tandem.Reservation, error)) {
	shop, token := m.drawCart(rt)
	var keys []tandem.Key
	if before, err := m.model.Get(m.ctx, shop, token); err == nil {
		for _, l := range before.Lines {
			keys = append(keys, l.Key(shop))
		}
	}
	got, gotErr := call(m.sut, shop, token)
	want, wantErr := call(m.model, shop, token)
	what := fmt.Sprintf("%s(shop %d, cart %q)", op, shop, token)
	if compareErr(rt, what, gotErr, wantErr) {
		compareRes(rt, what, got, want)
	}
	m.compareCounters(rt, what, keys)
}

func (m *machine) claim(rt *rapid.T) {
	m.cartOp(rt, "Claim", func(s tandem.ReservationStore, shop int64, token string) (*tandem.Reservation, error) {
		return s.Claim(m.ctx, shop, token)
	})
}

func (m *machine) release(rt *rapid.T) {
	m.cartOp(rt, "Release", func(s tandem.ReservationStore, shop int64, token string) (*tandem.Reservation, error) {
		return s.Release(m.ctx, shop, token)
	})
}

func (m *machine) get(rt *rapid.T) {
	m.cartOp(rt, "Get", func(s tandem.ReservationStore, shop int64, token string) (*tandem.Reservation, error) {
		return s.Get(m.ctx, shop, token)
	})
}

// expire advances the clock and, mostly, reaps every due hold in both.
func (m *machine) expire(rt *rapid.T) {
	step := rapid.SampledFrom(propSteps).Draw(rt, "advance")
	m.clock.Advance(step)
	if !rapid.Bool().Draw(rt, "reap") {
		return
	}
	now := m.clock.Now()
	got, err := m.sut.ExpireDue(m.ctx, now, drainLimit)
	if err != nil {
		rt.Fatalf("ExpireDue after advancing %s: %v", step, err)
	}
	want, err := m.model.ExpireDue(m.ctx, now, drainLimit)
	if err != nil {
		rt.Fatalf("model: ExpireDue: %v", err)
	}
	if got != want {
		rt.Fatalf("ExpireDue after advancing %s: got %d expired, want %d", step, got, want)
	}
	m.compareCounters(rt, "ExpireDue", m.allKeys())
}

// compareErr fails rt when the stores' error codes differ (and, for
// EINSUFFICIENT, the item named); it reports whether both succeeded.
func compareErr(rt *rapid.T, what string, got, want error) bool {
	if g, w := tandem.ErrorCode(got), tandem.ErrorCode(want); g != w {
		rt.Fatalf("%s: got error code %q (%v), want %q (%v)", what, g, got, w, want)
	}
	if tandem.ErrorCode(want) == tandem.EINSUFFICIENT {
		g, gok := detailItem(got)
		w, _ := detailItem(want)
		if !gok || g != w {
			rt.Fatalf("%s: got details %v, want inventory_item_id %d", what, tandem.ErrorDetails(got), w)
		}
	}
	return want == nil
}

// compareRes fails rt when two successful answers differ in cart, status,
// lines or Replayed, or in expiry while the hold is active.
func compareRes(rt *rapid.T, what string, got, want *tandem.Reservation) {
	if msg := diffRes(got, want.ShopID, want.CartToken, want.Status, want.Replayed, want.Lines); msg != "" {
		rt.Fatalf("%s: %s", what, msg)
	}
	if want.Status == tandem.StatusReserved && !got.ExpiresAt.Equal(want.ExpiresAt) {
		rt.Fatalf("%s: got expires_at %s, want %s", what, got.ExpiresAt, want.ExpiresAt)
	}
}

// compareCounters fails rt when the stores' counters of keys differ.
func (m *machine) compareCounters(rt *rapid.T, after string, keys []tandem.Key) {
	slices.SortFunc(keys, memres.CompareKeys)
	for _, key := range slices.Compact(keys) {
		got, err := m.sut.Counters(m.ctx, key)
		if err != nil {
			rt.Fatalf("after %s: Counters(%s): %v", after, key, err)
		}
		want, err := m.model.Counters(m.ctx, key)
		if err != nil {
			rt.Fatalf("after %s: model: Counters(%s): %v", after, key, err)
		}
		if *got != *want {
			rt.Fatalf("after %s: Counters(%s): got on_hand=%d reserved=%d available=%d, want on_hand=%d reserved=%d available=%d",
				after, key, got.OnHand, got.Reserved, got.Available, want.OnHand, want.Reserved, want.Available)
		}
	}
}
