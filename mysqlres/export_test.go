package mysqlres

// Statements the tests run on a connection of their own, to read what the
// server did for them (rows examined, plans).
const (
	ListCountersSQL     = listCountersSQL
	ConservationSQL     = conservationSQL
	OrphansSQL          = orphansSQL
	HeldFlagsSQL        = heldFlagsSQL
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

// SetInvariantPageShops makes CheckInvariants read n shops a page, until
// the returned func is called.
func SetInvariantPageShops(n int) (reset func()) {
	old := invariantPageShops
	invariantPageShops = n
	return func() { invariantPageShops = old }
}
