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
)

// PurgeDueSQL is the statement that finds a purge batch.
const PurgeDueSQL = purgeDueSQL
