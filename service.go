package tandem

import (
	"context"
	"strings"
	"time"
)

// StoreCounters is one store's view of a position in an Inventory answer.
type StoreCounters struct {
	Available int64 `json:"available"`
	Reserved  int64 `json:"reserved"`
}

// Inventory is a position as the checkout API shows it: the ledger's
// on_hand, what the source of truth holds, and each maintained store's view.
type Inventory struct {
	ShopID        int64                    `json:"shop_id"`
	ItemID        int64                    `json:"inventory_item_id"`
	GroupID       int64                    `json:"group_id"`
	OnHand        int64                    `json:"on_hand"`
	Reserved      int64                    `json:"reserved"`
	Available     int64                    `json:"available"`
	Pod           string                   `json:"pod"`
	SourceOfTruth string                   `json:"source_of_truth"`
	Stores        map[string]StoreCounters `json:"stores"`
}

// CheckoutService is what the checkout API serves: reservations routed to
// the pod that owns the shop and answered by that pod's source of truth.
// Every method returns EUNKNOWNSHOP for a shop no pod lists and EUNAVAILABLE
// when the source of truth cannot be reached, besides the codes of the
// matching ReservationStore method.
type CheckoutService interface {
	Reserve(ctx context.Context, req ReserveRequest) (*Reservation, error)
	Claim(ctx context.Context, shopID int64, cartToken string) (*Reservation, error)
	Release(ctx context.Context, shopID int64, cartToken string) (*Reservation, error)
	Get(ctx context.Context, shopID int64, cartToken string) (*Reservation, error)
	SetOnHand(ctx context.Context, key Key, onHand int64) (*Inventory, error)
	Inventory(ctx context.Context, key Key) (*Inventory, error)
}

// Change is who asks for an admin change and why; every change is written
// to the audit log with it.
type Change struct {
	Actor  string
	Reason string
}

// Gates is the state of a pod's promotion gates for shadow -> mysql.
type Gates struct {
	Comparisons    int64   `json:"comparisons"`
	DivergenceRate float64 `json:"divergence_rate"`
	LastAuditClean bool    `json:"last_audit_clean"`
	// LastAuditAt is when the pod's last audit ran, null when none has
	// (then last_audit_clean is false without anything found).
	LastAuditAt *time.Time `json:"last_audit_at"`
	Passing     bool       `json:"passing"`
	// State is pass when every gate passes, fail when one fails on the
	// data there is, inconclusive when none fails but one lacks data.
	State GateState `json:"state,omitempty"`
	// FailedGates names the gates that do not pass (failing or
	// inconclusive): "min_comparisons", "max_divergence_rate",
	// "audit_clean".
	FailedGates []string `json:"failed_gates"`
	// Checks gives each gate's value and threshold, and what a failing
	// one lacks.
	Checks []GateCheck `json:"checks"`
}

// Names of the promotion gates: one vocabulary for a GateCheck's gate,
// failed_gates, the CLI and the dashboard.
const (
	GateComparisons    = "min_comparisons"
	GateDivergenceRate = "max_divergence_rate"
	GateAudit          = "audit_clean"
)

// Units of a gate's value and threshold (GateUnit), so that every view
// formats a gate alike; JSON keeps the plain numbers.
const (
	UnitCount   = "count"   // how many, at least the threshold
	UnitRatio   = "ratio"   // 0..1, shown as a percentage, at most the threshold
	UnitFactor  = "factor"  // a multiple ("3.00x"), at most the threshold
	UnitMS      = "ms"      // milliseconds, at most the threshold
	UnitSeconds = "seconds" // a duration, at least the threshold
	UnitClean   = "clean"   // 1 when clean, 0 when not; threshold 1
)

// gateUnits are the units of the gates whose names say nothing of them.
var gateUnits = map[string]string{
	GateComparisons:    UnitCount,
	GateDivergenceRate: UnitRatio,
	GateAudit:          UnitClean,
	"min_soak":         UnitSeconds,
	// The p99 gate keeps its name; its value and threshold are MySQL's
	// p99 and its service level, in milliseconds.
	"mysql_p99_factor": UnitMS,
	// The plan's rehearsal gate: the rehearsal's p99 and its p99_max.
	"rehearsal": UnitMS,
}

// GateUnit returns the unit of gate's value and threshold: the one of a
// promotion or plan gate, else the one its name ends with (_rate, _factor,
// _ms, _seconds, _count); "" when it cannot tell.
func GateUnit(gate string) string {
	if u, ok := gateUnits[gate]; ok {
		return u
	}
	for _, su := range [][2]string{{"_rate", UnitRatio}, {"_factor", UnitFactor}, {"_ms", UnitMS},
		{"_seconds", UnitSeconds}, {"_soak", UnitSeconds}, {"_count", UnitCount}, {"_comparisons", UnitCount}} {
		if strings.HasSuffix(gate, su[0]) {
			return su[1]
		}
	}
	return ""
}

// GateState is a gate's verdict on the data there is.
type GateState string

// Gate states. A gate is inconclusive, not failing, while it lacks the
// data to judge (too few comparisons, no audit yet, a soak not over): more
// of the same traffic may make it pass.
const (
	GatePass         GateState = "pass"
	GateFail         GateState = "fail"
	GateInconclusive GateState = "inconclusive"
)

// CombineGateStates returns the verdict of gates together: fail when one
// fails, else inconclusive when one is, else pass.
func CombineGateStates(states ...GateState) GateState {
	out := GatePass
	for _, s := range states {
		switch {
		case s == GateFail:
			return GateFail
		case s == GateInconclusive:
			out = GateInconclusive
		}
	}
	return out
}

// GateCheck is one promotion gate measured against its threshold: at
// least Threshold comparisons, a divergence rate at most Threshold, a
// clean audit within the window (Value 1 when there is one, Threshold 1).
type GateCheck struct {
	Gate      string  `json:"gate"`
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	Passing   bool    `json:"passing"`
	// State is pass, fail, or inconclusive while the gate lacks data
	// (Passing is false then too).
	State GateState `json:"state,omitempty"`
	// Missing says, in words, what the gate lacks to pass ("340 more
	// comparisons"); empty when it passes.
	Missing string `json:"missing,omitempty"`
}

// RecentComparisons counts a pod's comparisons in the automatic abort's
// recent window, made after the pod's last reset (its last unkill).
type RecentComparisons struct {
	Window      time.Duration
	Comparisons int64
	Divergences int64
	// MySQLErrors counts comparisons in which MySQL failed: as source of
	// truth (unavailable, internal) or as shadow (shadow_error,
	// shadow_timeout).
	MySQLErrors int64
	// Bad counts the divergences and MySQL errors recorded since the
	// reset, window or not: it changes only when a new one arrives.
	Bad int64
	// Since is the pod's last reset; zero when none.
	Since time.Time
}

// DivergenceRate is Divergences over Comparisons, 0 without comparisons.
func (r RecentComparisons) DivergenceRate() float64 {
	if r.Comparisons == 0 {
		return 0
	}
	return float64(r.Divergences) / float64(r.Comparisons)
}

// MySQLErrorRate is MySQLErrors over Comparisons, 0 without comparisons.
func (r RecentComparisons) MySQLErrorRate() float64 {
	if r.Comparisons == 0 {
		return 0
	}
	return float64(r.MySQLErrors) / float64(r.Comparisons)
}

// AbortWatch is POD.abort: the automatic abort's recent window of a pod
// against its threshold. WouldTrip says whether the window, were the pod
// on MySQL as source of truth, is at or over the threshold with enough
// comparisons: for a killed pod, whether an unkill under the same traffic
// would be undone.
type AbortWatch struct {
	Window         string     `json:"window"`
	Since          *time.Time `json:"since,omitempty"`
	Comparisons    int64      `json:"comparisons"`
	MinComparisons int64      `json:"min_comparisons"`
	DivergenceRate float64    `json:"divergence_rate"`
	MySQLErrorRate float64    `json:"mysql_error_rate"`
	Threshold      float64    `json:"threshold"`
	WouldTrip      bool       `json:"would_trip"`
	// Armed is false when the abort does not watch the pod now: disabled,
	// or its source of truth is not MySQL.
	Armed bool `json:"armed"`
}

// PodStatus is a pod as the admin API shows it (GET /admin/pods/{pod}).
type PodStatus struct {
	Pod           string    `json:"pod"`
	Mode          Mode      `json:"mode"`
	SourceOfTruth string    `json:"source_of_truth"`
	Shadow        string    `json:"shadow"`
	KillSwitch    bool      `json:"kill_switch"`
	Shops         string    `json:"shops"`
	UpdatedAt     time.Time `json:"updated_at"`
	Gates         Gates     `json:"gates"`
	// Abort is the automatic abort's recent window as this instance
	// counts it: whether it would trip now, so that an operator sees
	// when an unkill will hold.
	Abort *AbortWatch `json:"abort,omitempty"`
	// Transition is the change that runs in the background (the backfill
	// of MySQL before entering shadow); nil when none runs.
	Transition *Transition `json:"transition,omitempty"`
	// Throttle is whether the pod's background work is throttled on this
	// instance, and why; nil when the instance has no throttle for it.
	Throttle *ThrottleState `json:"throttle,omitempty"`
}

// Transition phases.
const (
	// TransitionBackfill is the copy of Redis's holds into MySQL before a
	// pod enters shadow.
	TransitionBackfill = "backfill"
)

// Transition is a pod's running transition (POD.transition in GET
// /admin/pods): a mode change whose work runs in
// the background; the mode applies when it is done.
type Transition struct {
	To    Mode   `json:"to"`
	Phase string `json:"phase"`
	// Step is the backfill's own step: follow, copy, catch_up or done.
	Step      string    `json:"step,omitempty"`
	Copied    int       `json:"copied"`
	Total     int       `json:"total"`
	StartedAt time.Time `json:"started_at"`
	// HoldsPerSec is the copy's rate so far and ETASeconds how long the
	// rest of it should take at that rate (both 0 until it has copied).
	HoldsPerSec float64 `json:"holds_per_sec,omitempty"`
	ETASeconds  float64 `json:"eta_seconds,omitempty"`
	// Checkpoint is the copy's last committed shop: every shop up to it is
	// copied, and a copy interrupted (its instance killed) resumes after it.
	Checkpoint int64 `json:"checkpoint,omitempty"`
	// Resumed is how many holds an earlier, interrupted run of this copy
	// had committed when this run started after its checkpoint.
	Resumed int `json:"resumed,omitempty"`
	// YieldingToBuyers is true when the copy runs gently because the pod
	// serves buyers (one batch at a time, small batches, a paced
	// catch-up).
	YieldingToBuyers bool `json:"yielding_to_buyers,omitempty"`
	// CatchUp is how the copy catches up with what changed during it, once
	// it does: "carts" (CatchUpCarts carts this instance wrote during the
	// copy, converged one by one), "swept" (both stores compared hold by
	// hold: a resumed copy, or writes it could not list) or "skipped" (no
	// write during the copy).
	CatchUp      string `json:"catch_up,omitempty"`
	CatchUpCarts int    `json:"catch_up_carts,omitempty"`
}

// BackfillCheckpoint is how far a pod's copy has committed: every shop up
// to Shop (in shop order) is copied, Copied holds in all. A copy started
// from a checkpoint copies the shops after it alone.
type BackfillCheckpoint struct {
	Shop   int64
	Copied int
}

// PlanRecord is the rollout plan as the control database stores it: its
// document (the plan's own encoding; empty when no plan ever ran), the
// version that guards every write, and the lease of the instance that
// drives it.
type PlanRecord struct {
	Doc        []byte
	Version    int64
	Driver     string
	LeaseUntil time.Time
}

// PendingTransition is a background transition as the control database
// records it, so that one interrupted by a crash starts again.
type PendingTransition struct {
	Pod string
	To  Mode
	// Owner is the instance that runs it.
	Owner     string
	Actor     string
	Reason    string
	StartedAt time.Time
	// Copied and Total are the copy's progress as its instance last wrote it.
	Copied int
	Total  int
	// Checkpoint is how far the copy had committed (zero: nothing): a copy
	// that starts again resumes after it.
	Checkpoint BackfillCheckpoint
}

// ModeChange asks to move a pod to another mode.
type ModeChange struct {
	Change
	Mode   Mode
	Force  bool
	DryRun bool
}

// DryRun is the answer to a mode change with dry_run set.
type DryRun struct {
	WouldApply  bool     `json:"would_apply"`
	FailedGates []string `json:"failed_gates"`
	// Message says why the change would be refused; empty when it would
	// apply.
	Message string `json:"message,omitempty"`
	// Allowed lists the modes the pod may go to next from its mode.
	Allowed []Mode `json:"allowed"`
	// Checks gives each promotion gate's value and threshold when the
	// change is shadow -> mysql, whose gates it passes or fails.
	Checks []GateCheck `json:"checks,omitempty"`
}

// Refusal names a pod the kill switch could not move to Redis, and why.
type Refusal struct {
	Pod    string `json:"pod"`
	Reason string `json:"reason"`
}

// KillSwitchState is the kill switch as /admin/killswitch shows it.
type KillSwitchState struct {
	Engaged bool       `json:"engaged"`
	Pods    []string   `json:"pods"`
	Since   *time.Time `json:"since"`
	Reason  string     `json:"reason"`
	Refused []Refusal  `json:"refused,omitempty"`
	// Warnings lists, in an Engage answer, the pods engaged whose Redis is
	// known not to be whole (lost its data and being rebuilt from MySQL,
	// or lost while it was the SoT), with why (an extension of the
	// documented KILLSWITCH answer).
	Warnings []Refusal `json:"warnings,omitempty"`
	// Engagements says, per engaged pod (in the order of Pods), since when
	// and why its kill switch is engaged (an extension of the documented
	// KILLSWITCH answer).
	Engagements []KillSwitchEngagement `json:"engagements,omitempty"`
}

// KillSwitchEngagement is one pod's engaged kill switch: since when, by
// whom and why.
type KillSwitchEngagement struct {
	Pod    string    `json:"pod"`
	Since  time.Time `json:"since"`
	Actor  string    `json:"actor,omitempty"`
	Reason string    `json:"reason"`
}

// LatencyStats is a store's latency percentiles in a report.
type LatencyStats struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

// Report is a pod's entry of GET /admin/report: its comparisons over the
// gate window.
type Report struct {
	Pod            string                   `json:"pod"`
	Mode           Mode                     `json:"mode"`
	Window         string                   `json:"window"`
	Comparisons    int64                    `json:"comparisons"`
	Matches        int64                    `json:"matches"`
	Divergences    map[DivergenceKind]int64 `json:"divergences"`
	DivergenceRate float64                  `json:"divergence_rate"`
	// Contention counts the matches whose answers differed only at the
	// sold-out boundary, explained (Comparison.Contention), and
	// ContentionRate is their share of the comparisons (extensions).
	Contention     int64                   `json:"contention"`
	ContentionRate float64                 `json:"contention_rate"`
	LatencyMS      map[string]LatencyStats `json:"latency_ms"`
	// Convergence is the shadow's convergence on this instance (extension;
	// absent when the instance does not route the pod).
	Convergence *Convergence `json:"convergence,omitempty"`
}

// Convergence is how far a pod's shadow is from its source of truth on one
// instance: the carts still to converge and what convergence did.
type Convergence struct {
	// DirtyCarts wait to be converged; OldestDirtySince is when the oldest
	// was marked.
	DirtyCarts       int        `json:"dirty_carts"`
	OldestDirtySince *time.Time `json:"oldest_dirty_since,omitempty"`
	// Results counts convergences by result (equal, repaired, failed,
	// conflict, dropped) since the instance started.
	Results map[string]int64 `json:"results"`
	// LastSweepAt is the last anti-entropy sweep; LastSweepLeft what it
	// could not converge (in flight, or failing).
	LastSweepAt   *time.Time `json:"last_sweep_at,omitempty"`
	LastSweepLeft int        `json:"last_sweep_left"`
}

// DivergenceFilter selects divergences, newest first.
type DivergenceFilter struct {
	Pod  string
	Kind DivergenceKind
	// Since, when set, keeps the divergences at or after it.
	Since time.Time
	Limit int
}

// AuditLogEntry is one change in the append-only audit log.
type AuditLogEntry struct {
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Pod    string    `json:"pod"`
	Reason string    `json:"reason"`
	Before string    `json:"before"`
	After  string    `json:"after"`
}

// Instance is one running `tandem serve` as the control database knows it.
type Instance struct {
	ID             string    `json:"id"`
	Addr           string    `json:"addr"`
	StartedAt      time.Time `json:"started_at"`
	LastSeen       time.Time `json:"last_seen"`
	ControlVersion int64     `json:"control_version"`
	Stale          bool      `json:"stale"`
}

// AdminService is what the admin API serves. Changes return EINVALID for a
// bad reason or mode, EUNKNOWNPOD, ETRANSITIONREFUSED (details
// failed_gates) and EUNAVAILABLE when the control database is down (except
// the kill switch, which works without it).
type AdminService interface {
	Pods(ctx context.Context) ([]PodStatus, error)
	Pod(ctx context.Context, pod string) (*PodStatus, error)
	// SetMode returns the pod's new status, or with DryRun the gate verdict
	// and a nil status.
	SetMode(ctx context.Context, pod string, ch ModeChange) (*PodStatus, *DryRun, error)
	// EngageKillSwitch engages pods (all when nil; a non-nil list must be
	// non-empty, without blank or repeated names, of known pods: EINVALID,
	// EUNKNOWNPOD, and nothing changes).
	EngageKillSwitch(ctx context.Context, pods []string, ch Change) (*KillSwitchState, error)
	DisengageKillSwitch(ctx context.Context, pods []string, ch Change) (*KillSwitchState, error)
	KillSwitch(ctx context.Context) (*KillSwitchState, error)
	Divergences(ctx context.Context, f DivergenceFilter) ([]Divergence, error)
	Report(ctx context.Context) ([]Report, error)
	Audit(ctx context.Context, pod string, ch Change) (*Audit, error)
	// Resync rebuilds the pod's Redis from MySQL (from must be "mysql") and
	// returns how many keys it rewrote.
	Resync(ctx context.Context, pod, from string, ch Change) (int, error)
	AuditLog(ctx context.Context, limit int) ([]AuditLogEntry, error)
	Instances(ctx context.Context) ([]Instance, error)
}

// PlanService runs the pod-by-pod rollout plan (GET /admin/plan); the
// rollout controller implements it and the admin API serves it.
//
// The changes return EINVALID (bad change or setting), EUNKNOWNPOD,
// ECONFLICT (the plan's phase does not allow it: start while one runs,
// pause when not running, resume when not paused) and EUNAVAILABLE. With
// ECONFLICT they may also return the plan, whose phase the answer reports
// as details.phase.
type PlanService interface {
	// PlanStatus returns the plan with every pod's step and gates.
	PlanStatus(ctx context.Context) (*Plan, error)
	// StartPlan starts a plan over every pod, smallest first.
	StartPlan(ctx context.Context, st PlanStart) (*Plan, error)
	// PausePlan stops a running plan from advancing until ResumePlan.
	PausePlan(ctx context.Context, ch Change) (*Plan, error)
	// ResumePlan lets a paused plan advance again.
	ResumePlan(ctx context.Context, ch Change) (*Plan, error)
	// AbortPlan stops a running or paused plan for good.
	AbortPlan(ctx context.Context, ch Change) (*Plan, error)
	// ApprovePlan lets pod's next promotion go.
	ApprovePlan(ctx context.Context, ch Change, pod string) (*Plan, error)
	// SkipPlan takes pod out of the plan where it stands.
	SkipPlan(ctx context.Context, ch Change, pod string) (*Plan, error)
}

// ReportSample is a pod's REPORT as it stood at one time, kept by the
// server's history (GET /admin/history).
type ReportSample struct {
	At time.Time `json:"at"`
	Report
}
