package main

import (
	"context"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
	"github.com/tandemhq/tandem/web"
)

// planService adapts the rollout controller's plan to web.PlanService, so
// that web need not import rollout.
type planService struct {
	ctl *rollout.Controller
}

var _ web.PlanService = planService{}

// PlanStatus returns the plan on this instance.
func (p planService) PlanStatus(ctx context.Context) (*web.PlanStatus, error) {
	return planStatus(p.ctl.PlanStatus()), nil
}

// StartPlan starts or resumes the plan.
func (p planService) StartPlan(ctx context.Context, ch tandem.Change) (*web.PlanStatus, error) {
	return planChange(p.ctl.StartPlan(ctx, ch))
}

// PausePlan pauses a running plan.
func (p planService) PausePlan(ctx context.Context, ch tandem.Change) (*web.PlanStatus, error) {
	return planChange(p.ctl.PausePlan(ctx, ch))
}

// AbortPlan aborts a running or paused plan.
func (p planService) AbortPlan(ctx context.Context, ch tandem.Change) (*web.PlanStatus, error) {
	return planChange(p.ctl.AbortPlan(ctx, ch))
}

// planChange keeps the status that comes with a conflict (the phase that
// refused the change) and drops the empty one that comes with any other
// error.
func planChange(st rollout.PlanStatus, err error) (*web.PlanStatus, error) {
	if err != nil && (tandem.ErrorCode(err) != tandem.ECONFLICT || st.Phase == "") {
		return nil, err
	}
	return planStatus(st), err
}

func planStatus(st rollout.PlanStatus) *web.PlanStatus {
	out := &web.PlanStatus{Phase: string(st.Phase), Order: st.Order, Promoted: st.Promoted, Waiting: st.Waiting}
	if st.SoakUntil != nil {
		until := st.SoakUntil.UTC()
		out.SoakUntil = &until
	}
	return out
}
