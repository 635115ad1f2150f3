package tandem

import (
	"context"
	"time"
)

// Background jobs, as a pod's throttle names them (the job label of
// tandem_throttled_seconds_total). Buyer flows and the replenisher are
// never throttled and have no name here.
const (
	JobBackfill = "backfill"
	JobSweep    = "sweep"
	JobAudit    = "audit"
	JobConverge = "converge"
	JobPurge    = "purge"
	JobResync   = "resync"
)

// Throttle signals: what throttles a pod's background work (the reason
// label of tandem_throttled_seconds_total, ThrottleState.Signal).
const (
	SignalBuyerP99       = "buyer_p99"
	SignalAdmissionWait  = "admission_wait"
	SignalThreadsRunning = "threads_running"
	SignalReplicaLag     = "replica_lag"
	SignalManual         = "manual"
	SignalCriticalLoad   = "critical_load"
)

// Throttle is a pod's throttle of background work: every background job
// asks it before each batch or page.
type Throttle interface {
	// Wait returns nil when job may run its next batch: at once when the
	// pod is not throttled, else once it no longer is. It returns ctx's
	// error when ctx ends first, and an error of code EUNAVAILABLE when
	// the pod's load is critical: job must stop (a backfill aborts).
	Wait(ctx context.Context, job string) error
}

// BuyerTraffic is the part of a pod's throttle that sees the pod's buyers.
// A background job that can run gentler (one batch at a time, smaller
// batches, paced reads) asks it whether to: on a pod serving buyers, the
// job's bursts are what their latency tail is made of, whatever the
// throttle's limits.
type BuyerTraffic interface {
	// BuyersActive reports whether the pod is serving buyers now.
	BuyersActive() bool
}

// ThrottleState is POD.throttle: whether the pod's background work is
// throttled now, why (in words, and the signal), and since when.
type ThrottleState struct {
	Throttled bool   `json:"throttled"`
	Reason    string `json:"reason,omitempty"`
	// Signal names what throttles: buyer_p99, admission_wait,
	// threads_running, replica_lag, manual or critical_load.
	Signal string     `json:"signal,omitempty"`
	Since  *time.Time `json:"since,omitempty"`
	// Manual is the operator's throttle when one is on.
	Manual *ManualThrottle `json:"manual,omitempty"`
}

// ManualThrottle is an operator's throttle of a pod's background work
// (tandemctl throttle POD on), persisted in the control database.
type ManualThrottle struct {
	On     bool      `json:"on"`
	Reason string    `json:"reason"`
	Actor  string    `json:"actor"`
	Since  time.Time `json:"since"`
}

// ThrottleService is the manual throttle as the admin API serves it (PUT
// /admin/pods/{pod}/throttle); the rollout controller implements it.
type ThrottleService interface {
	// SetThrottle turns pod's manual throttle on or off, persisted and
	// written to the audit log, and returns the pod's status. Returns
	// EINVALID, EUNKNOWNPOD and EUNAVAILABLE (control database down).
	SetThrottle(ctx context.Context, pod string, on bool, ch Change) (*PodStatus, error)
}

type throttleKey struct{}

type throttleJob struct {
	t   Throttle
	job string
}

// WithThrottle returns ctx asking t before each batch or page of the
// background work done under it (WaitThrottle, Pace), as job. A ctx that
// already has a throttle keeps it and its job: a backfill's catch-up sweep
// is the backfill's. A nil t returns ctx.
func WithThrottle(ctx context.Context, t Throttle, job string) context.Context {
	if t == nil {
		return ctx
	}
	if _, ok := ctx.Value(throttleKey{}).(throttleJob); ok {
		return ctx
	}
	return context.WithValue(ctx, throttleKey{}, throttleJob{t: t, job: job})
}

// WaitThrottle asks ctx's throttle (WithThrottle) whether the next batch
// or page may run, and waits as it says; nil at once without one.
func WaitThrottle(ctx context.Context) error {
	tj, ok := ctx.Value(throttleKey{}).(throttleJob)
	if !ok {
		return nil
	}
	return tj.t.Wait(ctx, tj.job)
}
