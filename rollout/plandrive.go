package rollout

import (
	"context"
	"fmt"
	"time"

	"github.com/tandemhq/tandem"
)

// planAuditEvery is how often, at most, the plan runs the drift audit its
// gate needs for a pod: again after one found drift (which the carts in
// flight during an audit under traffic can show, and the next audit not).
const planAuditEvery = 15 * time.Second

// planAuditTimeout bounds one such audit.
const planAuditTimeout = 10 * time.Minute

// StepPlan is one turn of the plan's driver: it takes or renews the lease
// (so that exactly one instance drives the plan; another takes over once
// the lease runs out) and, while the plan runs, advances every pod it
// can and saves the plan.
func (c *Controller) StepPlan(ctx context.Context) error {
	doc, rec, err := c.plans.load(ctx)
	if err != nil || doc.Phase != tandem.PlanRunning && doc.Phase != tandem.PlanPaused {
		if err == nil {
			// An aborted or done plan rehearses nothing more.
			c.stopRehearsals()
		}
		return err
	}
	now := c.Now()
	ok, err := c.Store.LeasePlan(ctx, c.InstanceID, now, now.Add(c.LeaseDuration))
	if err != nil || !ok {
		return err
	}
	if rec.Driver != c.InstanceID {
		c.changed(tandem.AuditLogEntry{At: now.UTC(), Actor: ActorPlan, Action: ActionPlanDriver,
			Reason: "took the rollout plan's lease", Before: rec.Driver, After: c.InstanceID})
	}
	if doc.Phase != tandem.PlanRunning {
		return nil
	}
	c.advancePlan(ctx, &doc)
	if err := c.plans.save(ctx, doc, rec.Version); err != nil && tandem.ErrorCode(err) != tandem.ECONFLICT {
		// A conflict is an operator's change that came first: the next
		// turn starts from it, and the modes it changed meanwhile are
		// read back from the pods.
		return err
	}
	return nil
}

// planChange is the change the plan makes on its own.
func planChange(reason string) tandem.Change {
	return tandem.Change{Actor: ActorPlan, Reason: "rollout plan: " + reason}
}

// advancePlan moves every pod it can one step, in order, with at most
// Parallel pods in transition.
func (c *Controller) advancePlan(ctx context.Context, d *planDoc) {
	for i := range d.Pods {
		c.reconcile(&d.Pods[i], d.Settings)
	}
	if c.planKilled(ctx, d) {
		return
	}
	inflight := 0
	for _, p := range d.Pods {
		if inTransition(p.Step) {
			inflight++
		}
	}
	for i := range d.Pods {
		p := &d.Pods[i]
		if p.Step == tandem.StepPending {
			if inflight >= d.Settings.Parallel {
				p.Waiting = fmt.Sprintf("waiting: at most %d pod(s) in transition", d.Settings.Parallel)
				continue
			}
			inflight++
			c.startPod(ctx, d, p)
		}
		if inTransition(p.Step) && c.advancePod(ctx, d, p) {
			return
		}
	}
	d.Waiting = ""
	for _, p := range d.Pods {
		if inTransition(p.Step) || p.Step == tandem.StepPending {
			if d.Waiting == "" && p.Waiting != "" {
				d.Waiting = p.Pod + ": " + p.Waiting
			}
			return
		}
	}
	d.Phase = tandem.PlanDone
	c.plans.audit(ctx, planChange("every pod reached its final mode"), ActionPlanDone, "", string(tandem.PlanDone))
}

// reconcile moves p's step to where its pod's mode says it is, for
// changes that were applied but whose save lost to an operator's change.
func (c *Controller) reconcile(p *planPod, set PlanSettings) {
	mode := c.Mode(p.Pod)
	now := c.Now().UTC()
	switch {
	case p.Step == tandem.StepBackfill && mode == tandem.ModeShadow:
		c.enterSoak(p, tandem.StepShadowSoak, set.ShadowSoak, now)
	case (p.Step == tandem.StepShadowSoak || p.Step == tandem.StepAwaitingApproval) && mode == tandem.ModeMySQL && p.Moved:
		c.enterSoak(p, tandem.StepMySQLSoak, set.MySQLSoak, now)
	case inTransition(p.Step) && mode == tandem.ModeMySQLOnly && set.FinalMode == tandem.ModeMySQLOnly:
		p.Step, p.Waiting = tandem.StepDone, ""
	}
}

func (c *Controller) enterSoak(p *planPod, step tandem.PlanStep, soak time.Duration, now time.Time) {
	p.Step, p.Since, p.SoakUntil, p.Passes, p.Passed, p.Approved, p.Waiting = step, now, now.Add(soak), 0, false, false, ""
}

// startPod takes a pending pod into the plan from the mode it is in.
func (c *Controller) startPod(ctx context.Context, d *planDoc, p *planPod) {
	now := c.Now().UTC()
	switch mode := c.Mode(p.Pod); {
	case mode == d.Settings.FinalMode || mode == tandem.ModeMySQLOnly:
		p.Step, p.Waiting = tandem.StepDone, "already in "+string(mode)
	case mode == tandem.ModeMySQL:
		c.enterSoak(p, tandem.StepMySQLSoak, d.Settings.MySQLSoak, now)
	case mode == tandem.ModeShadow:
		c.enterSoak(p, tandem.StepShadowSoak, d.Settings.ShadowSoak, now)
	default:
		p.Step, p.Since = tandem.StepBackfill, now
		c.enterShadowByPlan(ctx, d, p)
	}
}

// enterShadowByPlan starts pod's redis -> shadow with its backfill.
func (c *Controller) enterShadowByPlan(ctx context.Context, d *planDoc, p *planPod) {
	p.Moved = true
	st, _, err := c.SetMode(ctx, p.Pod, tandem.ModeChange{Mode: tandem.ModeShadow,
		Change: planChange(fmt.Sprintf("%s redis -> shadow (smallest first)", p.Pod))})
	switch {
	case err != nil:
		p.Waiting = "redis -> shadow failed, retrying: " + tandem.ErrorMessage(err)
	case st.Mode == tandem.ModeShadow:
		c.step(ctx, d, p, string(tandem.ModeRedis), string(tandem.ModeShadow))
		c.enterSoak(p, tandem.StepShadowSoak, d.Settings.ShadowSoak, c.Now().UTC())
	default:
		p.Waiting = "backfilling MySQL"
	}
}

// step records a pod's mode change by the plan.
func (c *Controller) step(ctx context.Context, d *planDoc, p *planPod, from, to string) {
	c.changed(tandem.AuditLogEntry{At: c.Now().UTC(), Actor: ActorPlan, Action: ActionPlanStep, Pod: p.Pod,
		Reason: "rollout plan step", Before: from, After: to})
	if tandem.Mode(to).SourceOfTruth() == tandem.StoreMySQL && tandem.Mode(from).SourceOfTruth() != tandem.StoreMySQL {
		d.Promoted = append(d.Promoted, p.Pod)
	}
}

// advancePod moves a pod in transition on; it reports whether the plan
// stopped.
func (c *Controller) advancePod(ctx context.Context, d *planDoc, p *planPod) bool {
	now := c.Now()
	switch p.Step {
	case tandem.StepBackfill:
		c.advanceBackfill(ctx, d, p)
	case tandem.StepShadowSoak, tandem.StepAwaitingApproval:
		g := c.PlanGates(p.Pod, tandem.ModeShadow, p.Since, d.Settings.ShadowSoak)
		if bad := failing(g, true); p.Passed && len(bad) > 0 {
			c.abortPlan(ctx, d, p, fmt.Sprintf("gates %v failed on %s during the shadow soak after they passed", bad, p.Pod))
			return true
		}
		if !g.Passing {
			p.Passes = 0
			p.Waiting = notPassing(g)
			c.auditForGates(p, g)
			return false
		}
		// One passing evaluation may be a lucky sample: the pod is
		// promoted once the gates passed this many turns in a row.
		if !p.Passed {
			p.Passes++
		}
		if need := g.PassesRequired; p.Passes < need {
			p.Waiting = fmt.Sprintf("gates passing: %d of %d evaluations in a row", p.Passes, need)
			return false
		}
		p.Passed = true
		if !c.rehearsed(d, p) {
			return false
		}
		if d.Settings.Approval && !p.Approved {
			p.Step, p.Waiting = tandem.StepAwaitingApproval, "awaiting approval: tandemctl plan approve "+p.Pod
			return false
		}
		c.promote(ctx, d, p, tandem.ModeShadow, tandem.ModeMySQL)
	case tandem.StepMySQLSoak:
		g := c.PlanGates(p.Pod, tandem.ModeMySQL, p.Since, d.Settings.MySQLSoak)
		if bad := failing(g, true); len(bad) > 0 {
			c.abortPlan(ctx, d, p, fmt.Sprintf("gates %v failed on %s during the mysql soak", bad, p.Pod))
			return true
		}
		if now.Before(p.SoakUntil) {
			p.Waiting = "soaking in mysql until " + p.SoakUntil.UTC().Format(time.RFC3339)
			return false
		}
		if d.Settings.FinalMode != tandem.ModeMySQLOnly {
			p.Step, p.Waiting = tandem.StepDone, ""
			return false
		}
		if d.Settings.Approval && !p.Approved {
			p.Waiting = "awaiting approval for mysql_only: tandemctl plan approve " + p.Pod
			return false
		}
		c.promote(ctx, d, p, tandem.ModeMySQL, tandem.ModeMySQLOnly)
	}
	return false
}

func (c *Controller) advanceBackfill(ctx context.Context, d *planDoc, p *planPod) {
	if c.Transitioning(p.Pod) {
		if t := c.transition(p.Pod); t != nil {
			p.Waiting = fmt.Sprintf("backfilling MySQL: %d of %d holds copied", t.Copied, t.Total)
		}
		return
	}
	pts, err := c.Store.PendingTransitions(ctx)
	if err != nil {
		p.Waiting = "backfill: " + tandem.ErrorMessage(err)
		return
	}
	for _, pt := range pts {
		if pt.Pod == p.Pod {
			p.Waiting = "backfilling MySQL on instance " + pt.Owner
			return
		}
	}
	// No copy runs: it failed (or was cancelled); start it again.
	c.enterShadowByPlan(ctx, d, p)
}

// promote moves p from from to to once its soak and gates allow it.
func (c *Controller) promote(ctx context.Context, d *planDoc, p *planPod, from, to tandem.Mode) {
	if killBlocks(to, c.engaged(p.Pod)) {
		p.Waiting = "kill switch engaged: the plan promotes it only once disengaged"
		return
	}
	if !c.confirmed(d, p, from, to) {
		return
	}
	p.Moved = true
	_, _, err := c.SetMode(ctx, p.Pod, tandem.ModeChange{Mode: to,
		Change: planChange(fmt.Sprintf("%s %s -> %s after its soak", p.Pod, from, to))})
	if err != nil {
		p.Waiting = fmt.Sprintf("%s -> %s: %s", from, to, tandem.ErrorMessage(err))
		return
	}
	c.step(ctx, d, p, string(from), string(to))
	if to == tandem.ModeMySQLOnly {
		p.Step, p.Waiting = tandem.StepDone, ""
		return
	}
	c.enterSoak(p, tandem.StepMySQLSoak, d.Settings.MySQLSoak, c.Now().UTC())
	p.Passed = true
}

// auditForGates starts the drift audit the audit gate lacks, at most
// every planAuditEvery per pod. It runs in the background: an audit of a
// big pod can outlast the lease, which the driver's turns must renew.
func (c *Controller) auditForGates(p *planPod, g tandem.PlanGates) {
	// Without RequireAudit, g has no audit check to look at.
	if c.Fleet == nil || (p.AuditedBy == c.InstanceID && c.Now().Sub(p.AuditedAt) < planAuditEvery) {
		return
	}
	for _, ch := range g.Checks {
		if ch.Gate != tandem.GateAudit || ch.Passing {
			continue
		}
		c.auditMu.Lock()
		if c.auditing[p.Pod] {
			c.auditMu.Unlock()
			return
		}
		c.auditing[p.Pod] = true
		c.auditMu.Unlock()
		p.AuditedAt, p.AuditedBy = c.Now().UTC(), c.InstanceID
		pod := p.Pod
		c.life.start(func() {
			defer func() {
				c.auditMu.Lock()
				delete(c.auditing, pod)
				c.auditMu.Unlock()
			}()
			ctx, cancel := context.WithTimeout(c.life.ctx, planAuditTimeout)
			defer cancel()
			if _, err := c.Audit(ctx, pod, planChange("the drift audit of the audit gate")); err != nil && c.life.ctx.Err() == nil {
				c.report(fmt.Errorf("plan audit of %s: %w", pod, err))
			}
		})
		return
	}
}

// planKilled aborts the plan when a pod it moved has its kill switch
// engaged (by an operator or the automatic abort).
func (c *Controller) planKilled(ctx context.Context, d *planDoc) bool {
	for i := range d.Pods {
		p := &d.Pods[i]
		if p.Moved && c.engaged(p.Pod) {
			c.abortPlan(ctx, d, p, fmt.Sprintf("kill switch engaged on %s, which the plan moved", p.Pod))
			return true
		}
	}
	return false
}

// abortPlan stops the plan because of p, engages p's kill switch where
// MySQL is its source of truth, and says why.
func (c *Controller) abortPlan(ctx context.Context, d *planDoc, p *planPod, why string) {
	d.Phase = tandem.PlanAborted
	d.Waiting = "aborted: " + why
	p.Waiting = why
	for i := range d.Pods {
		if inTransition(d.Pods[i].Step) {
			d.Pods[i].Step = tandem.StepAborted
		}
	}
	p.Step = tandem.StepAborted
	if c.Mode(p.Pod).SourceOfTruth() == tandem.StoreMySQL && c.Switch != nil && !c.engaged(p.Pod) {
		if _, err := c.Switch.Engage(ctx, []string{p.Pod}, planChange("automatic abort: "+why)); err != nil {
			c.report(fmt.Errorf("plan abort: engage the kill switch of %s: %w", p.Pod, err))
		}
	}
	c.plans.audit(ctx, planChange(why), ActionPlanAbort, p.Pod, string(tandem.PlanAborted))
}
