package memres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tandemhq/tandem"
)

var (
	_ tandem.ReservationStore = (*Store)(nil)
	_ tandem.Resyncer         = (*Store)(nil)
)

// StoreName is what the model answers to Name: it is neither engine.
const StoreName = "model"

// Store is the sequential reference model of a reservation engine: every
// operation runs whole under one mutex, so its answers are the ones both
// engines must give for the same sequence of calls. The conformance property
// test drives it side by side with an engine. Safe for concurrent use.
//
// Holds live in the model; on_hand lives in its Ledger, which claims deduct
// through exactly as redisres does.
type Store struct {
	// Now is the clock that decides whether a hold has expired.
	Now func() time.Time

	ledger *Ledger

	mu    sync.Mutex
	carts map[cartKey]*cart
	// held is the quantity held per position by holds not yet reaped
	// (including those past their expiry), kept in step with carts.
	held map[tandem.Key]int64
}

type cartKey struct {
	shop  int64
	token string
}

// cart is a reservation as the model keeps it. res.Status is the stored
// status: a hold past its expiry stays StatusReserved (its units held) until
// ExpireDue reaps it, and is answered as expired meanwhile.
type cart struct {
	res         tandem.Reservation
	fingerprint string
}

// NewStore returns an empty model that keeps on_hand in ledger (a fresh
// ledger when nil), with a 10 minute default TTL and the wall clock.
func NewStore(ledger *Ledger) *Store {
	if ledger == nil {
		ledger = NewLedger()
	}
	return &Store{
		Now:    time.Now,
		ledger: ledger,
		carts:  map[cartKey]*cart{},
		held:   map[tandem.Key]int64{},
	}
}

// Open readies the model for use, as an engine's Open does; the model holds
// no connections, so it always succeeds.
func (s *Store) Open(ctx context.Context) error { return nil }

// Close releases what Open took, which for the model is nothing. Safe to
// call twice.
func (s *Store) Close() error { return nil }

// Ledger returns the ledger the model deducts claims from.
func (s *Store) Ledger() *Ledger { return s.ledger }

// Name returns StoreName.
func (s *Store) Name() string { return StoreName }

// status returns the cart's status as callers see it at now.
func (c *cart) status(now time.Time) tandem.Status {
	if c.res.Status == tandem.StatusReserved && !now.Before(c.res.ExpiresAt) {
		return tandem.StatusExpired
	}
	return c.res.Status
}

// answer returns a copy of the cart's reservation as seen at now.
func (c *cart) answer(now time.Time, replayed bool) *tandem.Reservation {
	r := c.res
	r.Lines = slices.Clone(c.res.Lines)
	r.Status = c.status(now)
	r.Replayed = replayed
	return &r
}

// unavailable turns a failing ledger into EUNAVAILABLE, keeping the cause.
func unavailable(op string, err error) error {
	return fmt.Errorf("%w: %w", tandem.Errorf(tandem.EUNAVAILABLE, "%s: ledger unavailable", op), err)
}

// Reserve implements tandem.ReservationStore.
func (s *Store) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	ck := cartKey{req.ShopID, req.CartToken}
	if c, ok := s.carts[ck]; ok {
		st := c.status(now)
		if st == tandem.StatusReserved && c.fingerprint == req.Fingerprint() {
			return c.answer(now, true), nil
		}
		if st != tandem.StatusReserved {
			return nil, tandem.Errorf(tandem.ECONFLICT, "cart %q is already %s", req.CartToken, st)
		}
		return nil, tandem.Errorf(tandem.ECONFLICT, "cart %q is in use with a different request", req.CartToken)
	}

	lines := make([]tandem.Line, 0, len(req.Lines))
	for _, lr := range req.Lines {
		var group int64
		for _, g := range lr.GroupIDs {
			key := tandem.Key{ShopID: req.ShopID, ItemID: lr.ItemID, GroupID: g}
			onHand, err := s.ledger.OnHand(ctx, key)
			if err != nil {
				return nil, unavailable("reserve", err)
			}
			if onHand-s.held[key] >= lr.Quantity {
				group = g
				break
			}
		}
		if group == 0 {
			return nil, tandem.Errorf(tandem.EINSUFFICIENT,
				"item %d: no group of %v can cover %d units whole", lr.ItemID, lr.GroupIDs, lr.Quantity).
				WithDetail("inventory_item_id", lr.ItemID)
		}
		lines = append(lines, tandem.Line{ItemID: lr.ItemID, Quantity: lr.Quantity, GroupID: group})
	}
	// Every line is a distinct item, hence a distinct position: checking
	// each line alone above is checking the cart as a whole.
	for _, l := range lines {
		s.held[l.Key(req.ShopID)] += l.Quantity
	}
	c := &cart{
		res: tandem.Reservation{
			CartToken: req.CartToken,
			ShopID:    req.ShopID,
			Status:    tandem.StatusReserved,
			ExpiresAt: req.Expiry(now),
			Lines:     lines,
		},
		fingerprint: req.Fingerprint(),
	}
	s.carts[ck] = c
	return c.answer(now, false), nil
}

// unhold returns the cart's units to stock.
func (s *Store) unhold(c *cart) {
	for _, l := range c.res.Lines {
		key := l.Key(c.res.ShopID)
		s.held[key] -= l.Quantity
		if s.held[key] == 0 {
			delete(s.held, key)
		}
	}
}

// Claim implements tandem.ReservationStore.
func (s *Store) Claim(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	c, ok := s.carts[cartKey{shopID, cartToken}]
	if !ok {
		return nil, tandem.Errorf(tandem.ENOTFOUND, "cart %q was never reserved in shop %d", cartToken, shopID)
	}
	switch st := c.status(now); st {
	case tandem.StatusClaimed:
		return c.answer(now, true), nil
	case tandem.StatusReleased, tandem.StatusExpired:
		return nil, tandem.Errorf(tandem.EGONE, "cart %q is %s", cartToken, st)
	}
	// applied is false when another store claimed the cart first: the
	// ledger is deducted once either way, and the hold is settled here.
	if _, err := s.ledger.DeductCart(ctx, shopID, cartToken, c.res.Lines); err != nil {
		return nil, unavailable("claim", err)
	}
	s.unhold(c)
	c.res.Status = tandem.StatusClaimed
	return c.answer(now, false), nil
}

// Release implements tandem.ReservationStore.
func (s *Store) Release(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	c, ok := s.carts[cartKey{shopID, cartToken}]
	if !ok {
		return nil, tandem.Errorf(tandem.ENOTFOUND, "cart %q was never reserved in shop %d", cartToken, shopID)
	}
	switch c.status(now) {
	case tandem.StatusReleased:
		return c.answer(now, true), nil
	case tandem.StatusClaimed:
		return nil, tandem.Errorf(tandem.EALREADYCLAIMED, "cart %q is already claimed", cartToken)
	case tandem.StatusExpired:
		return nil, tandem.Errorf(tandem.EGONE, "cart %q has expired", cartToken)
	}
	s.unhold(c)
	c.res.Status = tandem.StatusReleased
	return c.answer(now, false), nil
}

// Get implements tandem.ReservationStore.
func (s *Store) Get(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.carts[cartKey{shopID, cartToken}]
	if !ok {
		return nil, tandem.Errorf(tandem.ENOTFOUND, "cart %q was never reserved in shop %d", cartToken, shopID)
	}
	return c.answer(s.Now(), false), nil
}

// SetOnHand implements tandem.ReservationStore.
func (s *Store) SetOnHand(ctx context.Context, key tandem.Key, onHand int64) (*tandem.Counters, error) {
	if onHand < 0 || onHand > tandem.MaxOnHand {
		return nil, tandem.Errorf(tandem.EINVALID, "on_hand must be 0..%d, got %d", tandem.MaxOnHand, onHand)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if held := s.held[key]; onHand < held {
		return nil, tandem.Errorf(tandem.ECONFLICT, "%s: on_hand %d is below the %d units held", key, onHand, held)
	}
	before, err := s.ledger.OnHand(ctx, key)
	if err != nil {
		return nil, unavailable("set on_hand", err)
	}
	if err := s.ledger.SetOnHand(ctx, key, onHand); err != nil {
		return nil, unavailable("set on_hand", err)
	}
	c, err := s.counters(ctx, key)
	if c != nil {
		c.Before = before
	}
	return c, err
}

// Counters implements tandem.ReservationStore.
func (s *Store) Counters(ctx context.Context, key tandem.Key) (*tandem.Counters, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counters(ctx, key)
}

func (s *Store) counters(ctx context.Context, key tandem.Key) (*tandem.Counters, error) {
	onHand, err := s.ledger.OnHand(ctx, key)
	if err != nil {
		return nil, unavailable("counters", err)
	}
	held := s.held[key]
	return &tandem.Counters{Key: key, OnHand: onHand, Reserved: held, Available: onHand - held}, nil
}

// ExpireDue implements tandem.ReservationStore. Holds are reaped soonest
// expiry first.
func (s *Store) ExpireDue(ctx context.Context, now time.Time, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []*cart
	for _, c := range s.carts {
		if c.res.Status == tandem.StatusReserved && !now.Before(c.res.ExpiresAt) {
			due = append(due, c)
		}
	}
	slices.SortFunc(due, func(a, b *cart) int {
		return cmp.Or(a.res.ExpiresAt.Compare(b.res.ExpiresAt),
			cmp.Compare(a.res.ShopID, b.res.ShopID),
			cmp.Compare(a.res.CartToken, b.res.CartToken))
	})
	n := 0
	for _, c := range due {
		if n >= limit {
			break
		}
		s.unhold(c)
		c.res.Status = tandem.StatusExpired
		n++
	}
	return n, nil
}

// ListCounters implements tandem.ReservationStore: every position the
// ledger stocks or a hold draws from, ordered by (shop, item, group).
func (s *Store) ListCounters(ctx context.Context) ([]tandem.Counters, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	onHand, err := s.ledger.ListOnHand(ctx)
	if err != nil {
		return nil, unavailable("list counters", err)
	}
	keys := make(map[tandem.Key]bool, len(onHand)+len(s.held))
	for k := range onHand {
		keys[k] = true
	}
	for k := range s.held {
		keys[k] = true
	}
	list := make([]tandem.Counters, 0, len(keys))
	for k := range keys {
		list = append(list, tandem.Counters{Key: k, OnHand: onHand[k], Reserved: s.held[k], Available: onHand[k] - s.held[k]})
	}
	slices.SortFunc(list, func(a, b tandem.Counters) int { return CompareKeys(a.Key, b.Key) })
	return list, nil
}

// CompareKeys orders keys by shop, then item, then group, the order of
// ListCounters.
func CompareKeys(a, b tandem.Key) int {
	return cmp.Or(cmp.Compare(a.ShopID, b.ShopID), cmp.Compare(a.ItemID, b.ItemID), cmp.Compare(a.GroupID, b.GroupID))
}

// CheckInvariants implements tandem.ReservationStore: the held quantities
// match the unreaped holds, and no position holds more than its on_hand.
func (s *Store) CheckInvariants(ctx context.Context) ([]tandem.Violation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	onHand, err := s.ledger.ListOnHand(ctx)
	if err != nil {
		return nil, unavailable("check invariants", err)
	}
	want := map[tandem.Key]int64{}
	for _, c := range s.carts {
		if c.res.Status == tandem.StatusReserved {
			for _, l := range c.res.Lines {
				want[l.Key(c.res.ShopID)] += l.Quantity
			}
		}
	}
	var vs []tandem.Violation
	for k, q := range want {
		if s.held[k] != q {
			vs = append(vs, tandem.Violation{Key: k, Message: fmt.Sprintf("held %d, but its holds add up to %d", s.held[k], q)})
		}
	}
	for k, q := range s.held {
		if _, ok := want[k]; !ok {
			vs = append(vs, tandem.Violation{Key: k, Message: fmt.Sprintf("held %d by no hold", q)})
		}
		if q > onHand[k] {
			vs = append(vs, tandem.Violation{Key: k, Message: fmt.Sprintf("held %d exceeds on_hand %d (oversold)", q, onHand[k])})
		}
	}
	for k, q := range onHand {
		if q < 0 {
			vs = append(vs, tandem.Violation{Key: k, Message: fmt.Sprintf("on_hand %d is negative", q)})
		}
	}
	slices.SortFunc(vs, func(a, b tandem.Violation) int {
		return cmp.Or(CompareKeys(a.Key, b.Key), cmp.Compare(a.Message, b.Message))
	})
	return vs, nil
}

// ActiveHolds implements tandem.Resyncer: every reservation whose units are
// held, including those past their expiry that ExpireDue has not reaped yet
// (their units are still out of stock), ordered by shop and cart token.
func (s *Store) ActiveHolds(ctx context.Context) ([]tandem.Reservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var holds []tandem.Reservation
	for _, c := range s.carts {
		if c.res.Status == tandem.StatusReserved {
			r := c.res
			r.Lines = slices.Clone(c.res.Lines)
			holds = append(holds, r)
		}
	}
	slices.SortFunc(holds, func(a, b tandem.Reservation) int {
		return cmp.Or(cmp.Compare(a.ShopID, b.ShopID), cmp.Compare(a.CartToken, b.CartToken))
	})
	return holds, nil
}

// Rebuild implements tandem.Resyncer: the model's holds become exactly
// holds; its claimed, released and expired carts are kept, and on_hand stays
// the ledger's. A rebuilt hold has no request fingerprint (the request's
// group preferences are not part of a Reservation), so a retried reserve of
// it answers ECONFLICT rather than a replay; claim and release work as usual.
func (s *Store) Rebuild(ctx context.Context, holds []tandem.Reservation) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	onHand, err := s.ledger.ListOnHand(ctx)
	if err != nil {
		return 0, unavailable("rebuild", err)
	}
	for ck, c := range s.carts {
		if c.res.Status == tandem.StatusReserved {
			delete(s.carts, ck)
		}
	}
	s.held = map[tandem.Key]int64{}
	positions := make(map[tandem.Key]bool, len(onHand))
	for k := range onHand {
		positions[k] = true
	}
	for _, h := range holds {
		r := h
		r.Lines = slices.Clone(h.Lines)
		r.Status = tandem.StatusReserved
		r.Replayed, r.Pod, r.SourceOfTruth = false, "", ""
		s.carts[cartKey{r.ShopID, r.CartToken}] = &cart{res: r}
		for _, l := range r.Lines {
			s.held[l.Key(r.ShopID)] += l.Quantity
			positions[l.Key(r.ShopID)] = true
		}
	}
	return len(positions), nil
}

// Solo is a model as the only store a router runs on: a router with no
// mode source serves from its Redis slot and has no shadow, so what it
// needs of the other slot is only its place. Solo satisfies
// tandem.ShadowStore; the shadow's methods, which such a router never
// calls, return EUNAVAILABLE (the model keeps no records of its own and
// takes no hold from another store).
type Solo struct{ *Store }

var _ tandem.ShadowStore = Solo{}

func soloErr(op string) error {
	return tandem.Errorf(tandem.EUNAVAILABLE, "model: %s: not a shadow store", op)
}

// Discard implements tandem.Discarder: EUNAVAILABLE.
func (Solo) Discard(context.Context, int64, string) error { return soloErr("discard") }

// End implements tandem.CartEnder: EUNAVAILABLE.
func (Solo) End(context.Context, tandem.Reservation) error { return soloErr("end") }

// Tombstone implements tandem.Tombstoner: EUNAVAILABLE.
func (Solo) Tombstone(context.Context, []tandem.Reservation) (int, error) {
	return 0, soloErr("tombstone")
}

// FollowOnHand implements tandem.OnHandFollower: EUNAVAILABLE.
func (Solo) FollowOnHand(context.Context, tandem.Key, int64, int64) (*tandem.Counters, error) {
	return nil, soloErr("follow on_hand")
}

// Place implements tandem.HoldPlacer: EUNAVAILABLE.
func (Solo) Place(context.Context, tandem.Reservation) (*tandem.Reservation, error) {
	return nil, soloErr("place")
}

// SettleClaim implements tandem.ClaimSettler: EUNAVAILABLE.
func (Solo) SettleClaim(context.Context, tandem.Reservation) error { return soloErr("settle claim") }

// Records implements tandem.Recounter: EUNAVAILABLE.
func (Solo) Records(context.Context, tandem.Key) (*tandem.Records, error) {
	return nil, soloErr("records")
}

// Recount implements tandem.Recounter: EUNAVAILABLE.
func (Solo) Recount(context.Context, tandem.Key) (*tandem.Counters, error) {
	return nil, soloErr("recount")
}

// Repair implements tandem.Recounter: EUNAVAILABLE.
func (Solo) Repair(context.Context, tandem.Key) (*tandem.Records, error) {
	return nil, soloErr("repair")
}

// RebuildShops implements tandem.ShopRebuilder: EUNAVAILABLE.
func (Solo) RebuildShops(context.Context, []int64, []tandem.Reservation) (int, error) {
	return 0, soloErr("rebuild shops")
}
