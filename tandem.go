// Package tandem is the domain of a shadow-mode migration controller that
// moves inventory reservations from a legacy Redis counter path to a MySQL
// unit-row engine. It holds the vocabulary (reservations, lines, modes,
// pods, divergences, error codes) and the interfaces the adapters
// implement; it imports only the standard library.
package tandem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Store names, as they appear in API answers, metrics and divergences.
const (
	StoreRedis = "redis"
	StoreMySQL = "mysql"
)

// Limits of a reservation request: a cart token of 1..128 characters,
// 1..100 lines, 1..1000 units a line, 1..20 distinct groups a line, a TTL
// of MinTTL..MaxTTL (TTLSeconds).
const (
	MaxCartTokenLen = 128
	MaxLines        = 100
	MaxQuantity     = 1000
	MaxGroups       = 20
	MinTTL          = time.Second
	MaxTTL          = time.Hour
	MaxOnHand       = 10_000_000
)

// DefaultTTL is how long a hold lasts when its request names no TTL and
// reservation.default_ttl does not say otherwise.
const DefaultTTL = 10 * time.Minute

// Key names one inventory position: an item at a group of locations of a shop.
type Key struct {
	ShopID  int64 `json:"shop_id"`
	ItemID  int64 `json:"inventory_item_id"`
	GroupID int64 `json:"group_id"`
}

// String returns "shop/item/group".
func (k Key) String() string {
	return fmt.Sprintf("%d/%d/%d", k.ShopID, k.ItemID, k.GroupID)
}

// Status is the state of a reservation.
type Status string

// Reservation states. Reserved is the only active one; the others are
// terminal and kept so that retries get the same answer.
const (
	StatusReserved Status = "reserved"
	StatusClaimed  Status = "claimed"
	StatusReleased Status = "released"
	StatusExpired  Status = "expired"
)

// LineRequest is one line of a cart as the buyer asks for it: a quantity of
// an item from the first group, in preference order, that can cover it whole.
type LineRequest struct {
	ItemID   int64   `json:"inventory_item_id"`
	Quantity int64   `json:"quantity"`
	GroupIDs []int64 `json:"group_ids"`
}

// ReserveRequest asks to hold every line of a cart, all or nothing.
type ReserveRequest struct {
	CartToken string
	ShopID    int64
	// TTL is how long the hold lasts; zero means the store's default.
	TTL time.Duration
	// ExpiresAt, when set, is when the hold ends, whatever TTL says: the
	// router sets it on the shadow's copy so that both stores' holds end
	// together. Buyers never set it.
	ExpiresAt time.Time
	Lines     []LineRequest
}

// Line is a held or claimed line: the quantity and the group that covers it.
type Line struct {
	ItemID   int64 `json:"inventory_item_id"`
	Quantity int64 `json:"quantity"`
	GroupID  int64 `json:"group_id"`
}

// Key returns the inventory position the line draws from.
func (l Line) Key(shopID int64) Key {
	return Key{ShopID: shopID, ItemID: l.ItemID, GroupID: l.GroupID}
}

// Reservation is a cart's hold as a store knows it.
type Reservation struct {
	CartToken string
	ShopID    int64
	Status    Status
	ExpiresAt time.Time
	// Lines are in request order, each with the group that covers it.
	Lines []Line
	// Replayed is true when the answer repeats an earlier identical request
	// (a retried reserve while active, a repeated claim or release).
	Replayed bool
	// Pod and SourceOfTruth are set by the router, not by the stores.
	Pod           string
	SourceOfTruth string
}

// Counters is one inventory position as one store sees it.
type Counters struct {
	Key
	// OnHand is the ledger quantity the store accounts for.
	OnHand int64 `json:"on_hand"`
	// Reserved is the quantity held by active reservations.
	Reserved int64 `json:"reserved"`
	// Available is what a reserve can still take: OnHand - Reserved.
	Available int64 `json:"available"`
	// Before is, in the answer to SetOnHand, the on_hand the stock count
	// replaced (0 for a new position), so that a store following the
	// count can apply its change.
	Before int64 `json:"-"`
}

// Violation is a broken store invariant found by CheckInvariants.
type Violation struct {
	Key       Key    `json:"key"`
	CartToken string `json:"cart_token,omitempty"`
	Message   string `json:"message"`
}

// Validate checks a request against every rule of POST /v1/reservations
// (the limits above, ids > 0, distinct items and groups) and returns an
// EINVALID error naming the first field that breaks one.
func (r *ReserveRequest) Validate() error {
	if err := ValidateCartToken(r.CartToken); err != nil {
		return err
	}
	if r.ShopID <= 0 {
		return Errorf(EINVALID, "shop_id must be an integer > 0")
	}
	if r.TTL != 0 {
		if err := checkTTL(r.TTL); err != nil {
			return err
		}
	}
	if len(r.Lines) < 1 || len(r.Lines) > MaxLines {
		return Errorf(EINVALID, "lines must hold 1..%d lines, got %d", MaxLines, len(r.Lines))
	}
	items := make(map[int64]bool, len(r.Lines))
	for i, l := range r.Lines {
		if l.ItemID <= 0 {
			return Errorf(EINVALID, "lines[%d].inventory_item_id must be an integer > 0", i)
		}
		if items[l.ItemID] {
			return Errorf(EINVALID, "lines[%d]: item %d appears twice in the cart", i, l.ItemID)
		}
		items[l.ItemID] = true
		if l.Quantity < 1 || l.Quantity > MaxQuantity {
			return Errorf(EINVALID, "lines[%d].quantity must be 1..%d", i, MaxQuantity)
		}
		if len(l.GroupIDs) < 1 || len(l.GroupIDs) > MaxGroups {
			return Errorf(EINVALID, "lines[%d].group_ids must hold 1..%d groups", i, MaxGroups)
		}
		seen := make(map[int64]bool, len(l.GroupIDs))
		for _, g := range l.GroupIDs {
			if g <= 0 {
				return Errorf(EINVALID, "lines[%d].group_ids must be integers > 0", i)
			}
			if seen[g] {
				return Errorf(EINVALID, "lines[%d].group_ids must be distinct, %d repeats", i, g)
			}
			seen[g] = true
		}
	}
	return nil
}

// checkTTL returns an EINVALID error when ttl is outside MinTTL..MaxTTL,
// the one TTL rule of a request (reservation.default_ttl is held to the
// same bounds).
func checkTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return Errorf(EINVALID, "ttl_seconds must be %d..%d", int64(MinTTL/time.Second), int64(MaxTTL/time.Second))
	}
	return nil
}

// TTLSeconds turns a request's ttl_seconds into the hold's TTL, or
// checkTTL's error. The count is clamped just outside the range before it
// is multiplied, so that no count off the wire overflows into range.
func TTLSeconds(n int64) (time.Duration, error) {
	ttl := time.Duration(min(max(n, 0), int64(MaxTTL/time.Second)+1)) * time.Second
	if err := checkTTL(ttl); err != nil {
		return 0, err
	}
	return ttl, nil
}

// ValidateCartToken checks a cart token: 1..128 of [A-Za-z0-9._:-].
func ValidateCartToken(token string) error {
	if len(token) < 1 || len(token) > MaxCartTokenLen {
		return Errorf(EINVALID, "cart_token must be 1..%d characters", MaxCartTokenLen)
	}
	for i := 0; i < len(token); i++ {
		c := token[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return Errorf(EINVALID, "cart_token may hold only A-Z a-z 0-9 . _ : -")
		}
	}
	return nil
}

// Fingerprint identifies what a request asks for (shop and lines, in order,
// with their group preferences), so that a retry is told from a different
// request under the same token. The TTL is left out: a retry answers with
// the expiry of the first request.
func (r *ReserveRequest) Fingerprint() string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(r.ShopID, 10))
	for _, l := range r.Lines {
		b.WriteByte('|')
		b.WriteString(strconv.FormatInt(l.ItemID, 10))
		b.WriteByte('x')
		b.WriteString(strconv.FormatInt(l.Quantity, 10))
		b.WriteByte('@')
		for i, g := range l.GroupIDs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(g, 10))
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:16])
}

// Expiry returns when a hold taken at now for the request ends: ExpiresAt
// when set, else now plus the request's TTL, or DefaultTTL when it has
// none. The router resolves a configured default before a store sees the
// request (TTLOr), so DefaultTTL here serves the engines' direct callers.
func (r *ReserveRequest) Expiry(now time.Time) time.Time {
	if !r.ExpiresAt.IsZero() {
		return r.ExpiresAt
	}
	return now.Add(r.TTLOr(DefaultTTL))
}

// TTLOr returns the request's TTL, or def when it has none.
func (r *ReserveRequest) TTLOr(def time.Duration) time.Duration {
	if r.TTL > 0 {
		return r.TTL
	}
	return def
}

type asOfKey struct{}

// WithAsOf returns ctx carrying the time a request arrived. Stores judge
// whether a hold has expired, for a claim or a release, as of that time: a
// buyer who claims in time is not refused because the request then waited
// (behind the cart's earlier operation, a flip's fence, a lock). A hold the
// reaper has already returned stays gone whatever the time says.
func WithAsOf(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, asOfKey{}, t)
}

// AsOf returns the arrival time ctx carries, or now() when it carries none.
func AsOf(ctx context.Context, now func() time.Time) time.Time {
	if t, ok := ctx.Value(asOfKey{}).(time.Time); ok {
		return t
	}
	return now()
}
