package mysqlres

import (
	"context"
	"database/sql"

	"github.com/tandemhq/tandem"
)

// Statements the tests run on a connection of their own, to read what the
// server did for them (rows examined, plans).
const (
	ListCountersSQL     = listCountersSQL
	ConservationSQL     = conservationSQL
	OrphansSQL          = orphansSQL
	HeldFlagsSQL        = heldFlagsSQL
	ReservedHeldSQL     = reservedHeldFirstSQL
	ActiveHoldsFirstSQL = activeHoldsFirstSQL
	ActiveHoldsNextSQL  = activeHoldsNextSQL
	ActiveHoldsPage     = activeHoldsPage
	CountersSQL         = countersSQL
	HeldSQL             = heldSQL
	DueReservationsSQL  = dueReservationsSQL
)

// PurgeDueSQL is the statement that finds a purge batch.
const PurgeDueSQL = purgeDueSQL

// SetRebuildHook runs f in RebuildShops once a shop's active reservations
// are dropped, until the returned func is called.
func SetRebuildHook(f func(shop int64)) (reset func()) {
	testHookRebuildDropped = f
	return func() { testHookRebuildDropped = nil }
}

// SetInvariantPageShops makes CheckInvariants and ListCounters read n
// shops every page, until the returned func is called.
func SetInvariantPageShops(n int) (reset func()) {
	old, oldFixed := invariantPageShops, invariantPageFixed
	invariantPageShops, invariantPageFixed = n, true
	return func() { invariantPageShops, invariantPageFixed = old, oldFixed }
}

// NextPageShops is nextPageShops, for its unit test.
var NextPageShops = nextPageShops

// InvariantPageTarget and InvariantPageMax are the page's bounds.
const (
	InvariantPageTarget = invariantPageTarget
	InvariantPageMax    = invariantPageMax
)

// DeductUnseen is DeductCart as it runs when the cart's hold here is not
// committed yet (a claim through another store racing this store's
// reserve of the same token): the claim recorded and on_hand lowered by
// lines, the hold left as it is. A reserve refuses a token already
// claimed, so only this race leaves a hold here beside its claim record.
func DeductUnseen(ctx context.Context, s *Store, shopID int64, token string, lines []tandem.Line) error {
	now := s.Now().UTC()
	return s.withTx(ctx, tagLedger, func(tx *sql.Tx) error {
		if _, err := recordClaim(ctx, tx, tagLedger, shopID, token, now); err != nil {
			return err
		}
		return s.settle(ctx, tx, tagLedger, nil, lineQuantities(shopID, lines), now)
	})
}
