// Package memres holds in-memory stand-ins for tests: a Ledger, and the
// sequential reference model that the property tests compare both engines
// against.
package memres

import (
	"context"
	"sync"

	"github.com/tandemhq/tandem"
)

var _ tandem.Ledger = (*Ledger)(nil)

// Ledger is an in-memory tandem.Ledger, for redisres's fast tests on
// miniredis. Safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	onHand  map[tandem.Key]int64
	claimed map[claimKey]bool
	// Err, when set, is returned by every call (a ledger that is down).
	Err error
}

type claimKey struct {
	shop  int64
	token string
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{onHand: map[tandem.Key]int64{}, claimed: map[claimKey]bool{}}
}

// OnHand implements tandem.Ledger.
func (l *Ledger) OnHand(ctx context.Context, key tandem.Key) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.onHand[key], l.Err
}

// ListOnHand implements tandem.Ledger.
func (l *Ledger) ListOnHand(ctx context.Context) (map[tandem.Key]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err != nil {
		return nil, l.Err
	}
	m := make(map[tandem.Key]int64, len(l.onHand))
	for k, v := range l.onHand {
		m[k] = v
	}
	return m, nil
}

// SetOnHand implements tandem.Ledger.
func (l *Ledger) SetOnHand(ctx context.Context, key tandem.Key, onHand int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err != nil {
		return l.Err
	}
	l.onHand[key] = onHand
	return nil
}

// DeductCart implements tandem.Ledger.
func (l *Ledger) DeductCart(ctx context.Context, shopID int64, cartToken string, lines []tandem.Line) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err != nil {
		return false, l.Err
	}
	ck := claimKey{shopID, cartToken}
	if l.claimed[ck] {
		return false, nil
	}
	l.claimed[ck] = true
	for _, ln := range lines {
		l.onHand[ln.Key(shopID)] -= ln.Quantity
	}
	return true, nil
}

// Claimed implements tandem.Ledger.
func (l *Ledger) Claimed(ctx context.Context, shopID int64, cartToken string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.claimed[claimKey{shopID, cartToken}], l.Err
}
