package mysqlres

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
