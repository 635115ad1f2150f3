package rollout

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tandemhq/tandem"
)

// planAuditEvery is how often, at most, the plan runs the drift audit its
// gate needs for a pod: again after one found drift (which the carts in
// flight during an audit under traffic can show, and the next audit not).
const planAuditEvery = 15 * time.Second

// planAuditTimeout bounds one such audit.
const planAuditTimeout = 10 * time.Minute

// planDriver advances the persisted plan on the instance that holds its
// lease, a turn every PlanInterval (StepPlan); it asks the confirm
// webhooks (confirm.go) and runs the rehearsals (rehearsal.go) that the
// plan's promotions wait for.
type planDriver struct {
	book  *planBook
	gates planJudge
	modes modeReader
	sw    switchEngager
	// mover changes modes and runs audits through the admin front, with
	// the same checks as an operator's.
	mover     planMover
	backfills backfillWatch
	// audits is false when the Controller runs without a Fleet: the plan
	// cannot run the audits its gate needs.
	audits    bool
	confirmer Confirmer
	rehearser Rehearser

	instanceID    string
	leaseDuration time.Duration
	now           func() time.Time
	life          *background
	notify

	// auditing lists the pods whose audit the plan runs.
	auditMu  sync.Mutex
	auditing map[string]bool
	// confirms are the plan's confirm webhook calls, by pod.
	confirmMu sync.Mutex
	confirms  map[string]*confirmRun
	// rehearsals are the plan's rehearsals, by pod.
	rehearseMu sync.Mutex
	rehearsals map[string]*rehearsalRun
}

// planMover is the admin front as the plan's driver uses it.
type planMover interface {
	SetMode(ctx context.Context, pod string, ch tandem.ModeChange) (*tandem.PodStatus, *tandem.DryRun, error)
	Audit(ctx context.Context, pod string, ch tandem.Change) (*tandem.Audit, error)
}

// backfillWatch is the background transitions as the plan's driver
// follows a pod's backfill.
type backfillWatch interface {
	Transitioning(pod string) bool
	transition(pod string) *tandem.Transition
	copyOwner(ctx context.Context, pod string) (owner string, ok bool, err error)
}

// StepPlan is one turn of the plan's driver: it takes or renews the lease
// (so that exactly one instance drives the plan; another takes over once
// the lease runs out) and, while the plan runs, advances every pod it
// can and saves the plan.
func (pd *planDriver) StepPlan(ctx context.Context) error {
	doc, rec, err := pd.book.load(ctx)
	if err != nil || doc.Phase != tandem.PlanRunning && doc.Phase != tandem.PlanPaused {
		if err == nil {
			// An aborted or done plan rehearses nothing more.
			pd.stopRehearsals()
		}
		return err
	}
	now := pd.now()
	ok, err := pd.book.lease(ctx, pd.instanceID, now, now.Add(pd.leaseDuration))
	if err != nil || !ok {
		return err
	}
	if rec.Driver != pd.instanceID {
		pd.changed(tandem.AuditLogEntry{At: now.UTC(), Actor: ActorPlan, Action: ActionPlanDriver,
			Reason: "took the rollout plan's lease", Before: rec.Driver, After: pd.instanceID})
	}
	if doc.Phase != tandem.PlanRunning {
		return nil
	}
	pd.advancePlan(ctx, &doc)
	if err := pd.book.save(ctx, doc, rec.Version); err != nil && tandem.ErrorCode(err) != tandem.ECONFLICT {
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
func (pd *planDriver) advancePlan(ctx context.Context, d *planDoc) {
	for i := range d.Pods {
		pd.reconcile(&d.Pods[i], d.Settings)
	}
	if pd.planKilled(ctx, d) {
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
			pd.startPod(ctx, d, p)
		}
		if inTransition(p.Step) && pd.advancePod(ctx, d, p) {
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
	pd.book.audit(ctx, planChange("every pod reached its final mode"), ActionPlanDone, "", string(tandem.PlanDone))
}

// reconcile moves p's step to where its pod's mode says it is, for
// changes that were applied but whose save lost to an operator's change.
func (pd *planDriver) reconcile(p *planPod, set PlanSettings) {
	mode := pd.modes.Mode(p.Pod)
	now := pd.now().UTC()
	switch {
	case p.Step == tandem.StepBackfill && mode == tandem.ModeShadow:
		pd.enterSoak(p, tandem.StepShadowSoak, set.ShadowSoak, now)
	case (p.Step == tandem.StepShadowSoak || p.Step == tandem.StepAwaitingApproval) && mode == tandem.ModeMySQL && p.Moved:
		pd.enterSoak(p, tandem.StepMySQLSoak, set.MySQLSoak, now)
	case inTransition(p.Step) && mode == tandem.ModeMySQLOnly && set.FinalMode == tandem.ModeMySQLOnly:
		p.Step, p.Waiting = tandem.StepDone, ""
	}
}

func (pd *planDriver) enterSoak(p *planPod, step tandem.PlanStep, soak time.Duration, now time.Time) {
	p.Step, p.Since, p.SoakUntil, p.Passes, p.Passed, p.Approved, p.Waiting = step, now, now.Add(soak), 0, false, false, ""
}

// startPod takes a pending pod into the plan from the mode it is in.
func (pd *planDriver) startPod(ctx context.Context, d *planDoc, p *planPod) {
	now := pd.now().UTC()
	switch mode := pd.modes.Mode(p.Pod); {
	case mode == d.Settings.FinalMode || mode == tandem.ModeMySQLOnly:
		p.Step, p.Waiting = tandem.StepDone, "already in "+string(mode)
	case mode == tandem.ModeMySQL:
		pd.enterSoak(p, tandem.StepMySQLSoak, d.Settings.MySQLSoak, now)
	case mode == tandem.ModeShadow:
		pd.enterSoak(p, tandem.StepShadowSoak, d.Settings.ShadowSoak, now)
	default:
		p.Step, p.Since = tandem.StepBackfill, now
		pd.enterShadowByPlan(ctx, d, p)
	}
}

// enterShadowByPlan starts pod's redis -> shadow with its backfill.
func (pd *planDriver) enterShadowByPlan(ctx context.Context, d *planDoc, p *planPod) {
	p.Moved = true
	st, _, err := pd.mover.SetMode(ctx, p.Pod, tandem.ModeChange{Mode: tandem.ModeShadow,
		Change: planChange(fmt.Sprintf("%s redis -> shadow (smallest first)", p.Pod))})
	switch {
	case err != nil:
		p.Waiting = "redis -> shadow failed, retrying: " + tandem.ErrorMessage(err)
	case st.Mode == tandem.ModeShadow:
		pd.step(ctx, d, p, string(tandem.ModeRedis), string(tandem.ModeShadow))
		pd.enterSoak(p, tandem.StepShadowSoak, d.Settings.ShadowSoak, pd.now().UTC())
	default:
		p.Waiting = "backfilling MySQL"
	}
}

// step records a pod's mode change by the plan.
func (pd *planDriver) step(ctx context.Context, d *planDoc, p *planPod, from, to string) {
	pd.changed(tandem.AuditLogEntry{At: pd.now().UTC(), Actor: ActorPlan, Action: ActionPlanStep, Pod: p.Pod,
		Reason: "rollout plan step", Before: from, After: to})
	if tandem.Mode(to).SourceOfTruth() == tandem.StoreMySQL && tandem.Mode(from).SourceOfTruth() != tandem.StoreMySQL {
		d.Promoted = append(d.Promoted, p.Pod)
	}
}

// advancePod moves a pod in transition on; it reports whether the plan
// stopped.
func (pd *planDriver) advancePod(ctx context.Context, d *planDoc, p *planPod) bool {
	now := pd.now()
	switch p.Step {
	case tandem.StepBackfill:
		pd.advanceBackfill(ctx, d, p)
	case tandem.StepShadowSoak, tandem.StepAwaitingApproval:
		g := pd.gates.PlanGates(p.Pod, tandem.ModeShadow, p.Since, d.Settings.ShadowSoak)
		if bad := failing(g, true); p.Passed && len(bad) > 0 {
			pd.abortPlan(ctx, d, p, fmt.Sprintf("gates %v failed on %s during the shadow soak after they passed", bad, p.Pod))
			return true
		}
		if !g.Passing {
			p.Passes = 0
			p.Waiting = notPassing(g)
			pd.auditForGates(p, g)
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
		if !pd.rehearsed(d, p) {
			return false
		}
		if d.Settings.Approval && !p.Approved {
			p.Step, p.Waiting = tandem.StepAwaitingApproval, "awaiting approval: tandemctl plan approve "+p.Pod
			return false
		}
		pd.promote(ctx, d, p, tandem.ModeShadow, tandem.ModeMySQL)
	case tandem.StepMySQLSoak:
		g := pd.gates.PlanGates(p.Pod, tandem.ModeMySQL, p.Since, d.Settings.MySQLSoak)
		if bad := failing(g, true); len(bad) > 0 {
			pd.abortPlan(ctx, d, p, fmt.Sprintf("gates %v failed on %s during the mysql soak", bad, p.Pod))
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
		pd.promote(ctx, d, p, tandem.ModeMySQL, tandem.ModeMySQLOnly)
	}
	return false
}

func (pd *planDriver) advanceBackfill(ctx context.Context, d *planDoc, p *planPod) {
	if pd.backfills.Transitioning(p.Pod) {
		if t := pd.backfills.transition(p.Pod); t != nil {
			p.Waiting = fmt.Sprintf("backfilling MySQL: %d of %d holds copied", t.Copied, t.Total)
		}
		return
	}
	owner, ok, err := pd.backfills.copyOwner(ctx, p.Pod)
	if err != nil {
		p.Waiting = "backfill: " + tandem.ErrorMessage(err)
		return
	}
	if ok {
		p.Waiting = "backfilling MySQL on instance " + owner
		return
	}
	// No copy runs: it failed (or was cancelled); start it again.
	pd.enterShadowByPlan(ctx, d, p)
}

// promote moves p from from to to once its soak and gates allow it.
func (pd *planDriver) promote(ctx context.Context, d *planDoc, p *planPod, from, to tandem.Mode) {
	if killBlocks(to, engaged(pd.sw, p.Pod)) {
		p.Waiting = "kill switch engaged: the plan promotes it only once disengaged"
		return
	}
	if !pd.confirmed(d, p, from, to) {
		return
	}
	p.Moved = true
	_, _, err := pd.mover.SetMode(ctx, p.Pod, tandem.ModeChange{Mode: to,
		Change: planChange(fmt.Sprintf("%s %s -> %s after its soak", p.Pod, from, to))})
	if err != nil {
		p.Waiting = fmt.Sprintf("%s -> %s: %s", from, to, tandem.ErrorMessage(err))
		return
	}
	pd.step(ctx, d, p, string(from), string(to))
	if to == tandem.ModeMySQLOnly {
		p.Step, p.Waiting = tandem.StepDone, ""
		return
	}
	pd.enterSoak(p, tandem.StepMySQLSoak, d.Settings.MySQLSoak, pd.now().UTC())
	p.Passed = true
}

// auditForGates starts the drift audit the audit gate lacks, at most
// every planAuditEvery per pod. It runs in the background: an audit of a
// big pod can outlast the lease, which the driver's turns must renew.
func (pd *planDriver) auditForGates(p *planPod, g tandem.PlanGates) {
	// Without RequireAudit, g has no audit check to look at.
	if !pd.audits || (p.AuditedBy == pd.instanceID && pd.now().Sub(p.AuditedAt) < planAuditEvery) {
		return
	}
	for _, ch := range g.Checks {
		if ch.Gate != tandem.GateAudit || ch.Passing {
			continue
		}
		pd.auditMu.Lock()
		if pd.auditing[p.Pod] {
			pd.auditMu.Unlock()
			return
		}
		pd.auditing[p.Pod] = true
		pd.auditMu.Unlock()
		p.AuditedAt, p.AuditedBy = pd.now().UTC(), pd.instanceID
		pod := p.Pod
		pd.life.start(func() {
			defer func() {
				pd.auditMu.Lock()
				delete(pd.auditing, pod)
				pd.auditMu.Unlock()
			}()
			ctx, cancel := context.WithTimeout(pd.life.ctx, planAuditTimeout)
			defer cancel()
			if _, err := pd.mover.Audit(ctx, pod, planChange("the drift audit of the audit gate")); err != nil && pd.life.ctx.Err() == nil {
				pd.report(fmt.Errorf("plan audit of %s: %w", pod, err))
			}
		})
		return
	}
}

// planKilled aborts the plan when a pod it moved has its kill switch
// engaged (by an operator or the automatic abort).
func (pd *planDriver) planKilled(ctx context.Context, d *planDoc) bool {
	for i := range d.Pods {
		p := &d.Pods[i]
		if p.Moved && engaged(pd.sw, p.Pod) {
			pd.abortPlan(ctx, d, p, fmt.Sprintf("kill switch engaged on %s, which the plan moved", p.Pod))
			return true
		}
	}
	return false
}

// abortPlan stops the plan because of p, engages p's kill switch where
// MySQL is its source of truth, and says why.
func (pd *planDriver) abortPlan(ctx context.Context, d *planDoc, p *planPod, why string) {
	d.Phase = tandem.PlanAborted
	d.Waiting = "aborted: " + why
	p.Waiting = why
	for i := range d.Pods {
		if inTransition(d.Pods[i].Step) {
			d.Pods[i].Step = tandem.StepAborted
		}
	}
	p.Step = tandem.StepAborted
	if pd.modes.Mode(p.Pod).SourceOfTruth() == tandem.StoreMySQL && pd.sw != nil && !engaged(pd.sw, p.Pod) {
		if _, err := pd.sw.Engage(ctx, []string{p.Pod}, planChange("automatic abort: "+why)); err != nil {
			pd.report(fmt.Errorf("plan abort: engage the kill switch of %s: %w", p.Pod, err))
		}
	}
	pd.book.audit(ctx, planChange(why), ActionPlanAbort, p.Pod, string(tandem.PlanAborted))
}
