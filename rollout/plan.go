package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tandemhq/tandem"
)

// The rollout plan moves the fleet pod by pod, smallest first: redis ->
// shadow (with the backfill), a soak in shadow until the gates pass and
// the minimum time has passed, shadow -> mysql, a soak in mysql, and
// optionally mysql -> mysql_only. Its definition and progress live in the
// control database (one document, every write guarded by its version), so
// that any instance can answer for it and change it; exactly one instance,
// the holder of the lease, drives it (see plandrive.go).

// inTransition reports whether a pod at step s counts against Parallel.
func inTransition(s tandem.PlanStep) bool {
	return s == tandem.StepBackfill || s == tandem.StepShadowSoak || s == tandem.StepAwaitingApproval || s == tandem.StepMySQLSoak
}

// soaking reports whether a pod at step s has a soak that runs or has run:
// the other steps (pending, backfill, done, skipped, aborted) have no soak
// to show.
func soaking(s tandem.PlanStep) bool {
	return s == tandem.StepShadowSoak || s == tandem.StepAwaitingApproval || s == tandem.StepMySQLSoak
}

// withoutSoak drops the min_soak gate from g, for a pod with no soak: an
// aborted pod would otherwise still say "15s more soak".
func withoutSoak(g tandem.PlanGates) tandem.PlanGates {
	out := tandem.PlanGates{Passing: true, Checks: make([]tandem.GateCheck, 0, len(g.Checks))}
	for _, ch := range g.Checks {
		if ch.Gate == GateMinSoak {
			continue
		}
		out.Checks = append(out.Checks, ch)
		out.Passing = out.Passing && ch.Passing
	}
	return out
}

// PlanSettings are a plan's settings; the config's rollout.plan.* are the
// defaults of StartPlan.
type PlanSettings struct {
	ShadowSoak time.Duration `json:"shadow_soak"`
	MySQLSoak  time.Duration `json:"mysql_soak"`
	// FinalMode is mysql or mysql_only.
	FinalMode tandem.Mode `json:"final_mode"`
	// Parallel is how many pods may be in transition at once.
	Parallel int `json:"parallel"`
	// Approval makes each promotion wait for ApprovePlan.
	Approval bool `json:"approval"`
	// ConfirmWebhooks must each answer 2xx to the pod's Promotion before
	// the plan promotes it; ConfirmTimeout bounds each call (see confirm.go).
	ConfirmWebhooks []string      `json:"confirm_webhooks,omitempty"`
	ConfirmTimeout  time.Duration `json:"confirm_timeout,omitempty"`
	// RehearsalSpeed, when above 0, makes the plan rehearse each pod's
	// latest capture at this speed before shadow -> mysql, and promote
	// only when every op's p99 stayed under RehearsalP99Max (see
	// rehearsal.go).
	RehearsalSpeed  float64       `json:"rehearsal_speed,omitempty"`
	RehearsalP99Max time.Duration `json:"rehearsal_p99_max,omitempty"`
}

// DefaultPlanSettings are the defaults of the config's rollout.plan section
// (docs/configuration.md): 30m soaks, final mode mysql, one pod
// at a time, no approval, no confirm webhooks.
var DefaultPlanSettings = PlanSettings{ShadowSoak: 30 * time.Minute, MySQLSoak: 30 * time.Minute,
	FinalMode: tandem.ModeMySQL, Parallel: 1, ConfirmTimeout: DefaultConfirmTimeout}

// planPod is one pod's progress in the persisted plan.
type planPod struct {
	Pod       string          `json:"pod"`
	Step      tandem.PlanStep `json:"step"`
	Since     time.Time       `json:"since"`
	SoakUntil time.Time       `json:"soak_until"`
	// Approved is an operator's approval of the pod's next promotion.
	Approved bool `json:"approved,omitempty"`
	// Moved is set once the plan changed the pod's mode.
	Moved bool `json:"moved,omitempty"`
	// Passes counts the evaluations in a row whose gates passed in the
	// current soak; Passed is set once they reach the consecutive passes
	// required, and a gate failing after that aborts the plan.
	Passes int  `json:"passes,omitempty"`
	Passed bool `json:"passed,omitempty"`
	// AuditedAt and AuditedBy are the plan's last audit of the pod and
	// the instance that ran it: audits are counted by the comparator of
	// the instance that ran them, so a new driver runs its own.
	AuditedAt time.Time `json:"audited_at"`
	AuditedBy string    `json:"audited_by,omitempty"`
	Waiting   string    `json:"waiting,omitempty"`
	// Rehearsal is the pod's rehearsal gate (rehearsal.go).
	Rehearsal *podRehearsal `json:"rehearsal,omitempty"`
}

// planDoc is the persisted plan.
type planDoc struct {
	// ID names the plan in its confirm webhooks' Promotions.
	ID       string           `json:"id,omitempty"`
	Phase    tandem.PlanPhase `json:"phase"`
	Settings PlanSettings     `json:"settings"`
	Waiting  string           `json:"waiting,omitempty"`
	Pods     []planPod        `json:"pods"`
	Promoted []string         `json:"promoted"`
}

func (d *planDoc) pod(name string) *planPod {
	for i := range d.Pods {
		if d.Pods[i].Pod == name {
			return &d.Pods[i]
		}
	}
	return nil
}

// planBook reads and writes the persisted plan for the plan's admin API
// (planapi.go) and its driver (plandrive.go).
type planBook struct {
	store planStore
	now   func() time.Time
	notify
}

// planStore is what the plan keeps in the control database.
type planStore interface {
	PlanStore
	AuditLogStore
}

// load reads the persisted plan; a record with no document is idle.
func (b *planBook) load(ctx context.Context) (planDoc, tandem.PlanRecord, error) {
	rec, err := b.store.LoadPlan(ctx)
	if err != nil {
		return planDoc{}, rec, unavailable(err, "load the rollout plan")
	}
	doc := planDoc{Phase: tandem.PlanIdle}
	if len(rec.Doc) > 0 {
		if err := json.Unmarshal(rec.Doc, &doc); err != nil {
			return doc, rec, fmt.Errorf("decode the rollout plan: %w", err)
		}
	}
	return doc, rec, nil
}

// save writes d if the plan's record is still at version; ECONFLICT when
// another write came first.
func (b *planBook) save(ctx context.Context, d planDoc, version int64) error {
	doc, err := json.Marshal(d)
	if err != nil {
		return err
	}
	_, err = b.store.SavePlan(ctx, doc, version)
	return err
}

// lease makes instance id the plan's driver until until, if it already
// is or the lease ran out before now; it reports whether it is.
func (b *planBook) lease(ctx context.Context, id string, now, until time.Time) (bool, error) {
	return b.store.LeasePlan(ctx, id, now, until)
}

// audit writes a change of the plan to the audit log and tells OnChange.
func (b *planBook) audit(ctx context.Context, ch tandem.Change, action, pod, after string) {
	e := tandem.AuditLogEntry{At: b.now().UTC(), Actor: ch.Actor, Action: action, Pod: pod, Reason: ch.Reason, After: after}
	if err := b.store.AppendAudit(ctx, e); err != nil {
		b.report(fmt.Errorf("record %s: %w", action, err))
	}
	b.changed(e)
}
