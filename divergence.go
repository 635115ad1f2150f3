package tandem

import (
	"fmt"
	"time"
)

// DivergenceKind is what kind of difference a comparison found between a
// pod's source of truth and its shadow; "" is a match.
type DivergenceKind string

// Divergence kinds: how a dual-written operation's shadow outcome differed
// from the SoT's, and state_drift from the drift audit.
const (
	KindOutcomeMismatch  DivergenceKind = "outcome_mismatch"
	KindLocationMismatch DivergenceKind = "location_mismatch"
	KindShadowError      DivergenceKind = "shadow_error"
	KindShadowTimeout    DivergenceKind = "shadow_timeout"
	KindShadowDropped    DivergenceKind = "shadow_dropped"
	KindStateDrift       DivergenceKind = "state_drift"
)

// DivergenceKinds lists every kind, in report order.
var DivergenceKinds = []DivergenceKind{
	KindOutcomeMismatch, KindLocationMismatch, KindShadowError,
	KindShadowTimeout, KindShadowDropped, KindStateDrift,
}

// KindNames lists every divergence kind, in report order, joined by sep.
func KindNames(sep string) string {
	s := ""
	for i, k := range DivergenceKinds {
		if i > 0 {
			s += sep
		}
		s += string(k)
	}
	return s
}

// Op is an operation that is dual-written and compared, or the audit.
type Op string

// Operations that are dual-written and compared.
const (
	OpReserve   Op = "reserve"
	OpClaim     Op = "claim"
	OpRelease   Op = "release"
	OpSetOnHand Op = "set_on_hand"
	OpAudit     Op = "audit"
)

// OutcomeStatus is what a store answered to one operation: a reservation
// status on success, the error code on failure, or one of the Outcome
// statuses below.
type OutcomeStatus string

// Statuses of an Outcome that are neither a reservation status nor an error
// code: what the router saw of a shadow operation, and what the sweep and
// the audit saw of a store.
const (
	// OutcomeOK is a stock count that the store followed.
	OutcomeOK OutcomeStatus = "ok"
	// OutcomeTimeout is a shadow operation that ran out of shadow.timeout:
	// its answer was lost, not necessarily its work.
	OutcomeTimeout OutcomeStatus = "timeout"
	// OutcomeDropped is a shadow operation not run: the in-flight cap was
	// reached (the cart is converged later instead).
	OutcomeDropped OutcomeStatus = "dropped"
	// OutcomeSkipped is a claim or release the shadow does not follow,
	// because the source of truth did not settle it.
	OutcomeSkipped OutcomeStatus = "skipped"
	// OutcomeNoHold is a cart a store holds nothing for, as the sweep
	// found it.
	OutcomeNoHold OutcomeStatus = "no_hold"
	// OutcomeMissing is a position a store does not count, as the audit
	// found it.
	OutcomeMissing OutcomeStatus = "missing"
)

// StatusOf returns the outcome status of a reservation status.
func StatusOf(s Status) OutcomeStatus { return OutcomeStatus(s) }

// Is reports whether the outcome is the reservation status s.
func (s OutcomeStatus) Is(st Status) bool { return s == OutcomeStatus(st) }

// Failed reports whether the store gave no answer about the reservation: it
// failed (StoreFailed), the answer was lost (timeout), or the operation
// never ran (dropped, skipped, or no status at all).
func (o Outcome) Failed() bool {
	switch o.Status {
	case "", OutcomeTimeout, OutcomeDropped, OutcomeSkipped:
		return true
	}
	return o.StoreFailed()
}

// StoreFailed reports whether the store itself failed: it could not be
// reached or failed inside (unavailable, internal). The automatic abort
// counts these of the source of truth.
func (o Outcome) StoreFailed() bool {
	return o.Status == EUNAVAILABLE || o.Status == EINTERNAL
}

// Outcome is what one store answered to one operation.
type Outcome struct {
	Store string `json:"store"`
	// Status is the reservation status on success, or the error code.
	Status OutcomeStatus `json:"status"`
	Lines  []Line        `json:"lines,omitempty"`
	// Replayed is the reservation's Replayed flag (a repeated request).
	Replayed bool `json:"replayed,omitempty"`
	// ExpiresAt is the hold's expiry, for a reservation.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Message is the error message, if any.
	Message string        `json:"message,omitempty"`
	Latency time.Duration `json:"-"`
	// LatencyMS is Latency in milliseconds, for the JSON form.
	LatencyMS float64 `json:"latency_ms"`
}

// OutcomeOf summarises a store's answer.
func OutcomeOf(store string, res *Reservation, err error, latency time.Duration) Outcome {
	o := Outcome{Store: store, Latency: latency, LatencyMS: float64(latency.Microseconds()) / 1000}
	if err != nil {
		o.Status, o.Message = OutcomeStatus(ErrorCode(err)), ErrorMessage(err)
		return o
	}
	if res != nil {
		o.Status, o.Lines, o.Replayed, o.ExpiresAt = StatusOf(res.Status), res.Lines, res.Replayed, res.ExpiresAt
	}
	return o
}

// Comparison is the result of one dual-written operation.
type Comparison struct {
	At            time.Time
	Pod           string
	Op            Op
	ShopID        int64
	CartToken     string
	SourceOfTruth string
	Primary       Outcome
	Shadow        Outcome
	// Kind is "" for a match, else one of the divergence kinds.
	Kind DivergenceKind
	// Contention is set on a match whose answers differed only as the
	// sold-out boundary makes them differ, and whose difference was
	// explained: once the carts in flight on its positions had settled,
	// both stores' counts of them agreed with the ledger and each other.
	// It counts as a match, and as contention of its own in the report.
	Contention bool
	// Drift is the positions found drifted while the comparison was
	// explained (Kind is then a divergence), each also recorded as a
	// state_drift of its own.
	Drift []Drift
	// Repaired is true when the shadow first answered differently only
	// because of contention (at the sold-out boundary its units were briefly
	// taken by carts the SoT refused, or the other way round; or another
	// cart's shadow release had not landed yet) and the router brought it to
	// the SoT's outcome and groups; such a comparison counts as a match.
	Repaired bool
}

// Divergence is a persisted comparison that did not match, or a drift found
// by the audit.
type Divergence struct {
	ID            int64          `json:"id"`
	At            time.Time      `json:"at"`
	Pod           string         `json:"pod"`
	Op            Op             `json:"op"`
	Kind          DivergenceKind `json:"kind"`
	CartToken     string         `json:"cart_token,omitempty"`
	ShopID        int64          `json:"shop_id,omitempty"`
	SourceOfTruth string         `json:"source_of_truth"`
	Primary       Outcome        `json:"primary"`
	Shadow        Outcome        `json:"shadow"`
	// Position is the drifted position of a state_drift (absent for a
	// cart's drift found by the sweep).
	Position *Drift `json:"position,omitempty"`
}

// Drift is one position whose stores disagree with the ledger.
type Drift struct {
	ShopID         int64  `json:"shop_id"`
	ItemID         int64  `json:"inventory_item_id"`
	GroupID        int64  `json:"group_id"`
	LedgerOnHand   int64  `json:"ledger_on_hand"`
	RedisAvailable *int64 `json:"redis_available"`
	MySQLAvailable *int64 `json:"mysql_available"`
	// RedisHeld and MySQLHeld are the units each store holds there, and
	// RedisSellable and MySQLSellable what each store's own records would
	// still hand out (tandem.Counters.Sellable), when known (extensions).
	RedisHeld     *int64 `json:"redis_held,omitempty"`
	MySQLHeld     *int64 `json:"mysql_held,omitempty"`
	RedisSellable *int64 `json:"redis_sellable,omitempty"`
	MySQLSellable *int64 `json:"mysql_sellable,omitempty"`
	// Cause says in words what is wrong, and Fixed what was done about it
	// (extensions; empty when the audit found it and the sweep fixes it).
	Cause string `json:"cause,omitempty"`
	Fixed string `json:"fixed,omitempty"`
}

// Audit is the result of a drift audit of one pod.
type Audit struct {
	Pod     string    `json:"pod"`
	At      time.Time `json:"at"`
	Checked int       `json:"checked"`
	Clean   bool      `json:"clean"`
	Drifted []Drift   `json:"drifted"`
	// Converged and Recounted say what the audit fixed by itself before it
	// answered: carts made equal in the shadow, shadow positions set again
	// from the ledger. Drifted is what was still wrong after that; a clean
	// audit with fixes still reports the drift it found as state_drift.
	Converged int     `json:"converged_carts"`
	Recounted int     `json:"recounted_positions"`
	Found     []Drift `json:"found,omitempty"`
	// RedisLoss says, when the pod's Redis is known to have lost its data,
	// what that means: rebuilt from MySQL (mode mysql), or the legacy
	// disaster (Redis was the SoT); an extension of the AUDIT answer.
	RedisLoss string `json:"redis_loss,omitempty"`
}

// DriftOutcomes are a drifted position's two sides as a divergence shows
// them: each store's available quantity as its status (missing when it
// does not count the position), and the whole finding as the message.
func DriftOutcomes(d Drift) (redis, mysql Outcome) {
	msg := DriftMessage(d)
	return Outcome{Store: StoreRedis, Status: availableStatus(d.RedisAvailable), Message: msg},
		Outcome{Store: StoreMySQL, Status: availableStatus(d.MySQLAvailable), Message: msg}
}

// DriftMessage describes a drifted position in words: where, the ledger's
// figure, what each store counts, and the cause and fix when known.
func DriftMessage(d Drift) string {
	s := fmt.Sprintf("item %d group %d: ledger on_hand %d, redis %s, mysql %s",
		d.ItemID, d.GroupID, d.LedgerOnHand, storeFigures(d.RedisAvailable, d.RedisHeld, d.RedisSellable),
		storeFigures(d.MySQLAvailable, d.MySQLHeld, d.MySQLSellable))
	if d.Cause != "" {
		s += "; " + d.Cause
	}
	if d.Fixed != "" {
		s += "; fixed: " + d.Fixed
	}
	return s
}

func availableStatus(v *int64) OutcomeStatus {
	if v == nil {
		return OutcomeMissing
	}
	return OutcomeStatus(fmt.Sprintf("available=%d", *v))
}

func storeFigures(available, held, sellable *int64) string {
	s := string(availableStatus(available))
	if held != nil {
		s += fmt.Sprintf(" held=%d", *held)
	}
	if sellable != nil && available != nil && *sellable != *available {
		s += fmt.Sprintf(" sellable=%d", *sellable)
	}
	return s
}
