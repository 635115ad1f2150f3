// Package soak keeps the books of a long, randomized run of tandem against
// real stores, and checks them against the product's invariants (no
// oversell, no undersell, no lost hold, exactly-once claims, both stores
// equal at rest; docs/reliability.md) once the run
// is over. The run itself (pods, workers, flips, faults) is TestSoak, driven
// by -soak.duration and -soak.pods; `make soak` runs it for minutes.
//
// A Book records what the buyers were told: which carts the source of truth
// granted (with their lines and expiry), which releases and claims it
// answered, and how much stock the test put in. From that record it can say
// whether the stores ever let more units be held or sold than were stocked
// (Oversold), and what every position's ledger must read at rest
// (ExpectedOnHand).
//
// The book under-approximates every hold on purpose: a hold counts from the
// moment its grant was answered (the store committed it earlier) until the
// release was issued or the hold's expiry (the store frees it later), and a
// claimed hold never ends. Any overlap that exceeds the stock is therefore a
// real oversell, never an artefact of timing.
package soak

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/tandemhq/tandem"
)

// CartID names a cart: its shop and token.
type CartID struct {
	ShopID int64
	Token  string
}

// Cart is a grant as the book knows it.
type Cart struct {
	CartID
	Lines     []tandem.Line
	GrantedAt time.Time
	ExpiresAt time.Time
	// ReleasedAt is when the first release of the cart was issued, zero if
	// none was.
	ReleasedAt time.Time
	// Claimed is true once a claim answered "claimed"; ClaimedAt is when
	// the claim that did so was issued.
	Claimed   bool
	ClaimedAt time.Time
	// ClaimAnsweredAt is when that claim answered; zero when the answer was
	// lost and the claim was resolved from the ledger.
	ClaimAnsweredAt time.Time
	// ClaimTried is true once any claim was issued for the cart, whatever
	// its answer.
	ClaimTried bool
}

// Oversell is a moment when the holds and sales of one position, as the
// buyers were told, exceeded its stock.
type Oversell struct {
	Key   tandem.Key
	At    time.Time
	Units int64
	Stock int64
	// Carts are the carts holding or sold at At, with their windows.
	Carts []string
	// RacedExpiry names the claimed carts among them whose claim was issued
	// before the hold's expiry and answered after it: a claim that raced
	// the reaper (the legacy Redis claim window).
	RacedExpiry []string
}

// String formats the oversell for a test failure.
func (o Oversell) String() string {
	return fmt.Sprintf("%s at %s: %d units held or sold, %d stocked, by %v",
		o.Key, o.At.Format("15:04:05.000"), o.Units, o.Stock, o.Carts)
}

// Book is the record of a run. Safe for concurrent use.
type Book struct {
	mu     sync.Mutex
	stock  map[tandem.Key][]stockEvent
	carts  map[CartID]*Cart
	claims int
}

type stockEvent struct {
	at    time.Time
	delta int64
}

// NewBook returns an empty book.
func NewBook() *Book {
	return &Book{stock: map[tandem.Key][]stockEvent{}, carts: map[CartID]*Cart{}}
}

// Stock records that delta units of key were stocked at at (the initial
// count or a restock; the test stocks only while no buyer traffic runs).
func (b *Book) Stock(key tandem.Key, delta int64, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stock[key] = append(b.stock[key], stockEvent{at: at, delta: delta})
}

// Stocked returns the total stocked for key.
func (b *Book) Stocked(key tandem.Key) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for _, e := range b.stock[key] {
		n += e.delta
	}
	return n
}

// Keys returns every stocked position, ordered.
func (b *Book) Keys() []tandem.Key {
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := make([]tandem.Key, 0, len(b.stock))
	for k := range b.stock {
		keys = append(keys, k)
	}
	sortKeys(keys)
	return keys
}

// Granted records a reservation the source of truth granted, answered at at.
// A replayed grant of a known cart changes nothing.
func (b *Book) Granted(res *tandem.Reservation, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := CartID{res.ShopID, res.CartToken}
	if _, ok := b.carts[id]; ok {
		return
	}
	b.carts[id] = &Cart{
		CartID: id, Lines: append([]tandem.Line(nil), res.Lines...),
		GrantedAt: at, ExpiresAt: res.ExpiresAt,
	}
}

// Cart returns a copy of the cart's record.
func (b *Book) Cart(id CartID) (Cart, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.carts[id]
	if !ok {
		return Cart{}, false
	}
	return *c, true
}

// ReleaseIssued records that a release of the cart was issued at at; the
// units may be free from then on, whatever the answer.
func (b *Book) ReleaseIssued(id CartID, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.carts[id]; ok && c.ReleasedAt.IsZero() {
		c.ReleasedAt = at
	}
}

// ClaimIssued records that a claim of the cart was issued.
func (b *Book) ClaimIssued(id CartID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.carts[id]; ok {
		c.ClaimTried = true
	}
}

// Claimed records that a claim of the cart, issued at issued, answered
// "claimed" at answered.
func (b *Book) Claimed(id CartID, issued, answered time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.carts[id]; ok {
		if !c.Claimed {
			b.claims++
			c.ClaimedAt, c.ClaimAnsweredAt = issued, answered
		}
		c.Claimed = true
		c.ClaimTried = true
	}
}

// Counts returns how many carts were granted and how many claimed.
func (b *Book) Counts() (granted, claimed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.carts), b.claims
}

// Reconcile compares the book's claims with the ledger's claim record (the
// carts the ledger deducted): every cart the book saw claimed must be in
// it, and every cart in it must be a granted cart some claim was issued
// for. Carts in the record whose claim answer was lost (an error) become
// claimed in the book. It returns the discrepancies, and how many claims
// were resolved from the record.
func (b *Book) Reconcile(deducted map[CartID]bool) (problems []string, resolved int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id := range deducted {
		c, ok := b.carts[id]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("cart %d/%s was deducted but never granted to a buyer", id.ShopID, id.Token))
		case !c.ClaimTried:
			problems = append(problems, fmt.Sprintf("cart %d/%s was deducted but never claimed", id.ShopID, id.Token))
		case !c.Claimed:
			c.Claimed = true
			b.claims++
			resolved++
		}
	}
	for id, c := range b.carts {
		if c.Claimed && !deducted[id] {
			problems = append(problems, fmt.Sprintf("cart %d/%s answered claimed but the ledger never deducted it", id.ShopID, id.Token))
		}
	}
	sort.Strings(problems)
	return problems, resolved
}

// ExpectedOnHand returns what every stocked position's ledger must read:
// its stock less the lines of every claimed cart.
func (b *Book) ExpectedOnHand() map[tandem.Key]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[tandem.Key]int64, len(b.stock))
	for k, es := range b.stock {
		for _, e := range es {
			out[k] += e.delta
		}
	}
	for _, c := range b.carts {
		if !c.Claimed {
			continue
		}
		for _, l := range c.Lines {
			out[l.Key(c.ShopID)] -= l.Quantity
		}
	}
	return out
}

// Oversold sweeps every position's timeline and returns the moments when
// the units held (granted, not yet released or expired) plus the units sold
// exceeded what was stocked by then, at most one per position (the worst).
func (b *Book) Oversold() []Oversell {
	b.mu.Lock()
	defer b.mu.Unlock()
	type event struct {
		at    time.Time
		units int64 // held or sold units from at on
		stock int64 // stock from at on
	}
	timeline := map[tandem.Key][]event{}
	for k, es := range b.stock {
		for _, e := range es {
			timeline[k] = append(timeline[k], event{at: e.at, stock: e.delta})
		}
	}
	for _, c := range b.carts {
		end := c.ExpiresAt
		if !c.ReleasedAt.IsZero() && c.ReleasedAt.Before(end) {
			end = c.ReleasedAt
		}
		if !c.Claimed && !c.GrantedAt.Before(end) {
			continue // answered after it ended: nothing provable
		}
		for _, l := range c.Lines {
			k := l.Key(c.ShopID)
			timeline[k] = append(timeline[k], event{at: c.GrantedAt, units: l.Quantity})
			if !c.Claimed {
				timeline[k] = append(timeline[k], event{at: end, units: -l.Quantity})
			}
		}
	}
	var out []Oversell
	for k, evs := range timeline {
		// At equal times, stock arrives and holds end before holds start.
		sort.SliceStable(evs, func(i, j int) bool {
			if !evs[i].at.Equal(evs[j].at) {
				return evs[i].at.Before(evs[j].at)
			}
			return evs[i].units < evs[j].units
		})
		var units, stock int64
		var worst *Oversell
		for _, e := range evs {
			units += e.units
			stock += e.stock
			if units > stock && (worst == nil || units-stock > worst.Units-worst.Stock) {
				worst = &Oversell{Key: k, At: e.at, Units: units, Stock: stock}
			}
		}
		if worst != nil {
			worst.Carts = b.cartsAt(k, worst.At)
			worst.RacedExpiry = b.racedExpiry(k, worst.At)
			out = append(out, *worst)
		}
	}
	sort.Slice(out, func(i, j int) bool { return keyLess(out[i].Key, out[j].Key) })
	return out
}

// cartsAt describes the carts that hold or sold units of k at t.
func (b *Book) cartsAt(k tandem.Key, t time.Time) []string {
	var out []string
	for _, c := range b.carts {
		end := c.ExpiresAt
		if !c.ReleasedAt.IsZero() && c.ReleasedAt.Before(end) {
			end = c.ReleasedAt
		}
		if t.Before(c.GrantedAt) || (!c.Claimed && !t.Before(end)) {
			continue
		}
		for _, l := range c.Lines {
			if l.Key(c.ShopID) != k {
				continue
			}
			state := "held until " + end.Format("15:04:05.000")
			if c.Claimed {
				state = fmt.Sprintf("claimed (claim issued %s, answered %s, hold expiring %s)", c.ClaimedAt.Format("15:04:05.000"),
					c.ClaimAnsweredAt.Format("15:04:05.000"), c.ExpiresAt.Format("15:04:05.000"))
			}
			out = append(out, fmt.Sprintf("%s x%d granted %s %s", c.Token, l.Quantity, c.GrantedAt.Format("15:04:05.000"), state))
		}
	}
	sort.Strings(out)
	return out
}

// racedExpiry names the claimed carts of k granted by t whose claim was
// issued before the hold expired and answered after.
func (b *Book) racedExpiry(k tandem.Key, t time.Time) []string {
	var out []string
	for _, c := range b.carts {
		if !c.Claimed || t.Before(c.GrantedAt) || c.ClaimAnsweredAt.IsZero() ||
			!c.ClaimedAt.Before(c.ExpiresAt) || !c.ClaimAnsweredAt.After(c.ExpiresAt) {
			continue
		}
		for _, l := range c.Lines {
			if l.Key(c.ShopID) == k {
				out = append(out, c.Token)
			}
		}
	}
	sort.Strings(out)
	return out
}

func keyLess(a, b tandem.Key) bool {
	if a.ShopID != b.ShopID {
		return a.ShopID < b.ShopID
	}
	if a.ItemID != b.ItemID {
		return a.ItemID < b.ItemID
	}
	return a.GroupID < b.GroupID
}

func sortKeys(keys []tandem.Key) {
	sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
}
