package rollout

import (
	"context"
	"time"

	"github.com/tandemhq/tandem"
)

// StateStore persists the control state; controldb's Store implements
// it. Every change appends its audit-log entry and bumps the control
// version in one transaction. It is the sum of the roles below, so that
// each part of the Controller asks for the few methods it uses.
type StateStore interface {
	ModeStore
	AuditLogStore
	InstanceStore
	PlanStore
	TransitionStore
}

// ModeStore keeps the pods' modes and the control version.
type ModeStore interface {
	// InitPods stores each pod that has no row yet with its mode (the
	// configured initial one); stored pods keep theirs.
	InitPods(ctx context.Context, pods []tandem.Pod, at time.Time) error
	// Pods returns every stored pod (Name, Mode, UpdatedAt) and the control
	// version they were read at.
	Pods(ctx context.Context) ([]tandem.Pod, int64, error)
	// Version returns the control version.
	Version(ctx context.Context) (int64, error)
	// SetMode moves pod from mode from to mode to and clears its resynced
	// flag. Returns ECONFLICT when pod is no longer in from, EUNKNOWNPOD
	// when it is not stored.
	SetMode(ctx context.Context, pod string, from, to tandem.Mode, e tandem.AuditLogEntry) (version int64, err error)
	// MarkResynced sets pod's resynced flag (its Redis was rebuilt from MySQL).
	MarkResynced(ctx context.Context, pod string, e tandem.AuditLogEntry) error
	// Resynced returns pod's resynced flag.
	Resynced(ctx context.Context, pod string) (bool, error)
}

// AuditLogStore keeps the audit log.
type AuditLogStore interface {
	// AppendAudit appends an entry to the audit log.
	AppendAudit(ctx context.Context, e tandem.AuditLogEntry) error
	// AuditLog returns the last limit entries, newest first.
	AuditLog(ctx context.Context, limit int) ([]tandem.AuditLogEntry, error)
}

// InstanceStore keeps the instances that run a Controller.
type InstanceStore interface {
	// RegisterInstance records a starting instance (or restarts its record).
	RegisterInstance(ctx context.Context, in tandem.Instance) error
	// Heartbeat records that the instance is alive and the control version
	// it has applied.
	Heartbeat(ctx context.Context, id string, at time.Time, version int64) error
	// Instances returns every recorded instance.
	Instances(ctx context.Context) ([]tandem.Instance, error)
}

// PlanStore keeps the rollout plan and its driver's lease.
type PlanStore interface {
	// LoadPlan returns the rollout plan's record.
	LoadPlan(ctx context.Context) (tandem.PlanRecord, error)
	// SavePlan writes the plan's document if its version is still version
	// and returns the new one; ECONFLICT when another write came first.
	SavePlan(ctx context.Context, doc []byte, version int64) (int64, error)
	// LeasePlan makes instance id the plan's driver until until, if it
	// already is or the lease ran out before now; it reports whether it is.
	LeasePlan(ctx context.Context, id string, now, until time.Time) (bool, error)
}

// TransitionStore keeps the background transitions (transition.go).
type TransitionStore interface {
	// BeginTransition records that a background transition runs.
	BeginTransition(ctx context.Context, t tandem.PendingTransition) error
	// ClaimTransition hands pod's transition from instance from to
	// instance to and reports whether it was still from's.
	ClaimTransition(ctx context.Context, pod, from, to string) (bool, error)
	// TransitionProgress records how far owner's copy for pod is.
	TransitionProgress(ctx context.Context, pod, owner string, copied, total int) error
	// PendingTransitions returns every recorded transition.
	PendingTransitions(ctx context.Context) ([]tandem.PendingTransition, error)
	// EndTransition forgets pod's transition and reports whether there
	// was one.
	EndTransition(ctx context.Context, pod string) (bool, error)
	// FinishTransition forgets pod's transition and moves it from from to
	// to, in one transaction. Returns ECONFLICT when the transition was
	// cancelled meanwhile or the pod is no longer in from.
	FinishTransition(ctx context.Context, pod string, from, to tandem.Mode, e tandem.AuditLogEntry) (int64, error)
}
