package tandem

import "time"

// PlanPhase is where the rollout plan stands.
type PlanPhase string

// Plan phases. A paused plan resumes where it stopped; an aborted or done
// one is replaced by the next start.
const (
	PlanIdle    PlanPhase = "idle"
	PlanRunning PlanPhase = "running"
	PlanPaused  PlanPhase = "paused"
	PlanAborted PlanPhase = "aborted"
	PlanDone    PlanPhase = "done"
)

// PlanStep is where one pod stands in the rollout plan.
type PlanStep string

// Plan steps of a pod.
const (
	StepPending          PlanStep = "pending"
	StepBackfill         PlanStep = "backfill"
	StepShadowSoak       PlanStep = "shadow_soak"
	StepAwaitingApproval PlanStep = "awaiting_approval"
	StepMySQLSoak        PlanStep = "mysql_soak"
	StepDone             PlanStep = "done"
	StepSkipped          PlanStep = "skipped"
	StepAborted          PlanStep = "aborted"
)

// PlanSettings are a rollout plan's settings as GET /admin/plan shows them:
// soaks as durations ("30m"), the final mode, how many pods may be in
// transition at once, and whether each promotion waits for an approval
// and for the confirm webhooks.
type PlanSettings struct {
	ShadowSoak string `json:"shadow_soak"`
	MySQLSoak  string `json:"mysql_soak"`
	FinalMode  Mode   `json:"final_mode"`
	Parallel   int    `json:"parallel"`
	Approval   bool   `json:"approval"`
	// ConfirmWebhooks are the URLs (passwords redacted) that must answer
	// 2xx to a Promotion before the plan moves a pod; ConfirmTimeout
	// bounds each call ("10s").
	ConfirmWebhooks []string `json:"confirm_webhooks"`
	ConfirmTimeout  string   `json:"confirm_timeout"`
	// Rehearsal, when set, is the rehearsal gate: before shadow -> mysql
	// the plan replays the pod's latest capture on a scratch database at
	// Speed times its speed and promotes only when it held.
	Rehearsal *PlanRehearsal `json:"rehearsal,omitempty"`
}

// PlanRehearsal is the plan's rehearsal gate: the speed of the replay
// and the p99 every op must stay under ("50ms").
type PlanRehearsal struct {
	Speed  float64 `json:"speed"`
	P99Max string  `json:"p99_max"`
}

// PlanStart asks to start a rollout plan; nil fields take the config's
// defaults.
type PlanStart struct {
	Change
	ShadowSoak *time.Duration
	MySQLSoak  *time.Duration
	FinalMode  *Mode
	Parallel   *int
	Approval   *bool
	// ConfirmWebhooks, when not nil, replaces the configured URLs (an
	// empty list asks none).
	ConfirmWebhooks []string
	ConfirmTimeout  *time.Duration
	// RehearsalSpeed and RehearsalP99Max, when not nil, replace the
	// configured rehearsal gate's (a speed of 0 turns it off).
	RehearsalSpeed  *float64
	RehearsalP99Max *time.Duration
}

// PlanGates is a pod's gate evaluation in the plan: every gate's value
// and threshold.
type PlanGates struct {
	Passing bool `json:"passing"`
	// State combines the checks' states (CombineGateStates).
	State  GateState   `json:"state,omitempty"`
	Checks []GateCheck `json:"checks"`
	// Passes is how many of the plan's evaluations in a row passed, and
	// PassesRequired how many promote the pod (rollout.gate_consecutive_passes).
	Passes         int `json:"passes,omitempty"`
	PassesRequired int `json:"passes_required,omitempty"`
}

// PlanPod is one pod of the plan (GET /admin/plan).
type PlanPod struct {
	Pod  string `json:"pod"`
	Mode Mode   `json:"mode"`
	// SourceOfTruth is the store that answers the pod's buyers now: redis
	// while its kill switch is engaged, whatever its mode.
	SourceOfTruth string     `json:"source_of_truth,omitempty"`
	KillSwitch    bool       `json:"kill_switch,omitempty"`
	Step          PlanStep   `json:"step"`
	SoakUntil     *time.Time `json:"soak_until,omitempty"`
	// SoakRemaining is how long the soak still runs ("4m10s").
	SoakRemaining string `json:"soak_remaining,omitempty"`
	// Waiting says why this pod does not advance.
	Waiting string    `json:"waiting,omitempty"`
	Gates   PlanGates `json:"gates"`
}

// Plan is the rollout plan as GET /admin/plan shows it: the pod-by-pod
// rollout, smallest pods first.
type Plan struct {
	Phase PlanPhase `json:"phase"`
	// Driver is the instance that holds the lease and drives the plan.
	Driver     string       `json:"driver"`
	LeaseUntil *time.Time   `json:"lease_until,omitempty"`
	Settings   PlanSettings `json:"settings"`
	// Waiting says why the plan does not advance, or why it stopped.
	Waiting string    `json:"waiting,omitempty"`
	Pods    []PlanPod `json:"pods"`
	// Order is every pod in rollout order and Promoted those the plan
	// moved to MySQL as source of truth (kept for older clients).
	Order    []string `json:"order"`
	Promoted []string `json:"promoted"`
}

// Promotion is what the rollout plan asks its confirm webhooks before it
// moves a pod toward MySQL (shadow -> mysql, mysql -> mysql_only): the
// pod, the move, the plan and its driver, and the gates the pod passed
// with their values and thresholds. Only a 2xx answer lets it go.
type Promotion struct {
	Pod  string `json:"pod"`
	From Mode   `json:"from"`
	To   Mode   `json:"to"`
	// PlanID names the plan (its start time); Driver is the instance
	// that asks.
	PlanID string    `json:"plan_id"`
	Driver string    `json:"driver"`
	Gates  PlanGates `json:"gates"`
	At     time.Time `json:"at"`
}
