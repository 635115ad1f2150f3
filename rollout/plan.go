package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
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

// PlanOrder returns the pods in rollout order: by shop count ascending,
// then by name.
func (c *Controller) PlanOrder() []string {
	pods := make([]PodConfig, len(c.PodConfigs))
	copy(pods, c.PodConfigs)
	sort.SliceStable(pods, func(i, j int) bool {
		if a, b := pods[i].Shops.Size(), pods[j].Shops.Size(); a != b {
			return a < b
		}
		return pods[i].Name < pods[j].Name
	})
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	return names
}

// loadPlan reads the persisted plan; a record with no document is idle.
func (c *Controller) loadPlan(ctx context.Context) (planDoc, tandem.PlanRecord, error) {
	rec, err := c.Store.LoadPlan(ctx)
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

// updatePlan applies fn to the persisted plan and saves it, again when
// another instance wrote first. fn returns the audit-log action of the
// change ("" for none) or an error that leaves the plan as it was.
func (c *Controller) updatePlan(ctx context.Context, ch tandem.Change, fn func(d *planDoc) (string, string, error)) (*tandem.Plan, error) {
	for attempt := 0; ; attempt++ {
		doc, rec, err := c.loadPlan(ctx)
		if err != nil {
			return nil, err
		}
		action, pod, err := fn(&doc)
		if err != nil {
			return c.planView(doc, rec), err
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return nil, err
		}
		if _, err := c.Store.SavePlan(ctx, b, rec.Version); err != nil {
			if tandem.ErrorCode(err) == tandem.ECONFLICT && attempt < 5 {
				continue
			}
			return nil, unavailable(err, "save the rollout plan")
		}
		if action != "" {
			c.planAudit(ctx, ch, action, pod, string(doc.Phase))
		}
		return c.planView(doc, rec), nil
	}
}

func (c *Controller) planAudit(ctx context.Context, ch tandem.Change, action, pod, after string) {
	e := tandem.AuditLogEntry{At: c.Now().UTC(), Actor: ch.Actor, Action: action, Pod: pod, Reason: ch.Reason, After: after}
	if err := c.Store.AppendAudit(ctx, e); err != nil {
		c.report(fmt.Errorf("record %s: %w", action, err))
	}
	c.changed(e)
}

// PlanStatus returns the persisted plan with every pod's gates. Returns
// EUNAVAILABLE.
func (c *Controller) PlanStatus(ctx context.Context) (*tandem.Plan, error) {
	doc, rec, err := c.loadPlan(ctx)
	if err != nil {
		return nil, err
	}
	return c.planView(doc, rec), nil
}

// StartPlan starts a plan over every pod, smallest first, with the
// defaults (PlanDefaults) overridden by st. Returns EINVALID, ECONFLICT
// (one is running or paused), EUNAVAILABLE.
func (c *Controller) StartPlan(ctx context.Context, st tandem.PlanStart) (*tandem.Plan, error) {
	ch, err := validateChange(st.Change)
	if err != nil {
		return nil, err
	}
	set, err := c.planSettings(st)
	if err != nil {
		return nil, err
	}
	return c.updatePlan(ctx, ch, func(d *planDoc) (string, string, error) {
		if d.Phase == tandem.PlanRunning || d.Phase == tandem.PlanPaused {
			return "", "", tandem.Errorf(tandem.ECONFLICT, "the rollout plan is %s: resume or abort it first", d.Phase)
		}
		now := c.Now().UTC()
		*d = planDoc{ID: now.Format(time.RFC3339Nano), Phase: tandem.PlanRunning, Settings: set, Promoted: []string{}}
		for _, pod := range c.PlanOrder() {
			d.Pods = append(d.Pods, planPod{Pod: pod, Step: tandem.StepPending, Since: now})
		}
		return ActionPlanStart, "", nil
	})
}

func (c *Controller) planSettings(st tandem.PlanStart) (PlanSettings, error) {
	s := c.PlanDefaults
	if st.ShadowSoak != nil {
		s.ShadowSoak = *st.ShadowSoak
	}
	if st.MySQLSoak != nil {
		s.MySQLSoak = *st.MySQLSoak
	}
	if st.FinalMode != nil {
		s.FinalMode = *st.FinalMode
	}
	if st.Parallel != nil {
		s.Parallel = *st.Parallel
	}
	if st.Approval != nil {
		s.Approval = *st.Approval
	}
	if st.ConfirmWebhooks != nil {
		s.ConfirmWebhooks = st.ConfirmWebhooks
	}
	if st.ConfirmTimeout != nil {
		s.ConfirmTimeout = *st.ConfirmTimeout
	}
	if st.RehearsalSpeed != nil {
		s.RehearsalSpeed = *st.RehearsalSpeed
	}
	if st.RehearsalP99Max != nil {
		s.RehearsalP99Max = *st.RehearsalP99Max
	}
	if err := validateConfirm(s.ConfirmWebhooks, s.ConfirmTimeout); err != nil {
		return s, err
	}
	if err := validateRehearsal(s.RehearsalSpeed, s.RehearsalP99Max); err != nil {
		return s, err
	}
	switch {
	case s.ShadowSoak < 0 || s.MySQLSoak < 0:
		return s, tandem.Errorf(tandem.EINVALID, "soaks must not be negative")
	case s.FinalMode != tandem.ModeMySQL && s.FinalMode != tandem.ModeMySQLOnly:
		return s, tandem.Errorf(tandem.EINVALID, "final_mode must be mysql or mysql_only, got %q", s.FinalMode)
	case s.Parallel < 1 || s.Parallel > 100:
		return s, tandem.Errorf(tandem.EINVALID, "parallel must be 1..100, got %d", s.Parallel)
	}
	return s, nil
}

// PausePlan stops a running plan from advancing until ResumePlan.
// Returns EINVALID, ECONFLICT (not running), EUNAVAILABLE.
func (c *Controller) PausePlan(ctx context.Context, ch tandem.Change) (*tandem.Plan, error) {
	return c.movePlan(ctx, ch, ActionPlanPause, tandem.PlanPaused, tandem.PlanRunning)
}

// ResumePlan lets a paused plan advance again. Returns EINVALID, ECONFLICT
// (not paused), EUNAVAILABLE.
func (c *Controller) ResumePlan(ctx context.Context, ch tandem.Change) (*tandem.Plan, error) {
	return c.movePlan(ctx, ch, ActionPlanResume, tandem.PlanRunning, tandem.PlanPaused)
}

// AbortPlan stops a running or paused plan for good; pods keep their mode
// (the kill switch moves them back). Returns EINVALID, ECONFLICT,
// EUNAVAILABLE.
func (c *Controller) AbortPlan(ctx context.Context, ch tandem.Change) (*tandem.Plan, error) {
	return c.movePlan(ctx, ch, ActionPlanAbort, tandem.PlanAborted, tandem.PlanRunning, tandem.PlanPaused)
}

func (c *Controller) movePlan(ctx context.Context, ch tandem.Change, action string, to tandem.PlanPhase, from ...tandem.PlanPhase) (*tandem.Plan, error) {
	ch, err := validateChange(ch)
	if err != nil {
		return nil, err
	}
	return c.updatePlan(ctx, ch, func(d *planDoc) (string, string, error) {
		ok := false
		for _, f := range from {
			ok = ok || d.Phase == f
		}
		if !ok {
			return "", "", tandem.Errorf(tandem.ECONFLICT, "the rollout plan is %s", d.Phase)
		}
		d.Phase = to
		d.Waiting = fmt.Sprintf("%s by %s: %s", to, ch.Actor, ch.Reason)
		if to == tandem.PlanRunning {
			d.Waiting = ""
		}
		if to == tandem.PlanAborted {
			for i := range d.Pods {
				if inTransition(d.Pods[i].Step) {
					// What it waited for ("soaking in mysql until ...")
					// no longer comes.
					d.Pods[i].Step, d.Pods[i].Waiting = tandem.StepAborted, ""
				}
			}
		}
		return action, "", nil
	})
}

// ApprovePlan lets pod's next promotion go. Returns EINVALID, EUNKNOWNPOD,
// ECONFLICT (no plan runs, or the pod is done), EUNAVAILABLE.
func (c *Controller) ApprovePlan(ctx context.Context, ch tandem.Change, pod string) (*tandem.Plan, error) {
	return c.podPlanChange(ctx, ch, pod, ActionPlanApprove, func(p *planPod) {
		p.Approved = true
	})
}

// SkipPlan takes pod out of the plan where it stands. Returns EINVALID,
// EUNKNOWNPOD, ECONFLICT, EUNAVAILABLE.
func (c *Controller) SkipPlan(ctx context.Context, ch tandem.Change, pod string) (*tandem.Plan, error) {
	return c.podPlanChange(ctx, ch, pod, ActionPlanSkip, func(p *planPod) {
		p.Step, p.Waiting = tandem.StepSkipped, ""
	})
}

func (c *Controller) podPlanChange(ctx context.Context, ch tandem.Change, pod, action string, fn func(p *planPod)) (*tandem.Plan, error) {
	ch, err := validateChange(ch)
	if err != nil {
		return nil, err
	}
	if _, ok := c.config(pod); !ok {
		return nil, unknownPod(pod)
	}
	return c.updatePlan(ctx, ch, func(d *planDoc) (string, string, error) {
		if d.Phase != tandem.PlanRunning && d.Phase != tandem.PlanPaused {
			return "", "", tandem.Errorf(tandem.ECONFLICT, "the rollout plan is %s", d.Phase)
		}
		p := d.pod(pod)
		if p == nil || p.Step == tandem.StepDone || p.Step == tandem.StepSkipped || p.Step == tandem.StepAborted {
			return "", "", tandem.Errorf(tandem.ECONFLICT, "pod %s has nothing left to do in the plan", pod)
		}
		fn(p)
		return action, pod, nil
	})
}

// planView is the persisted plan as PLAN shows it, with every pod's mode
// and gates as this instance sees them.
func (c *Controller) planView(d planDoc, rec tandem.PlanRecord) *tandem.Plan {
	now := c.Now()
	out := &tandem.Plan{Phase: d.Phase, Waiting: d.Waiting, Order: c.PlanOrder(), Promoted: d.Promoted,
		Pods: []tandem.PlanPod{}}
	if out.Phase == "" {
		out.Phase = tandem.PlanIdle
	}
	if out.Promoted == nil {
		out.Promoted = []string{}
	}
	set := d.Settings
	if d.Phase == tandem.PlanIdle || d.Phase == "" {
		set = c.PlanDefaults
	}
	out.Settings = tandem.PlanSettings{ShadowSoak: set.ShadowSoak.String(), MySQLSoak: set.MySQLSoak.String(),
		FinalMode: set.FinalMode, Parallel: set.Parallel, Approval: set.Approval,
		ConfirmWebhooks: redactURLs(set.ConfirmWebhooks), ConfirmTimeout: confirmTimeout(set).String()}
	if set.RehearsalSpeed > 0 {
		out.Settings.Rehearsal = &tandem.PlanRehearsal{Speed: set.RehearsalSpeed, P99Max: set.RehearsalP99Max.String()}
	}
	if rec.Driver != "" && rec.LeaseUntil.After(now) {
		out.Driver = rec.Driver
		until := rec.LeaseUntil.UTC()
		out.LeaseUntil = &until
	}
	steps := map[string]planPod{}
	for _, p := range d.Pods {
		steps[p.Pod] = p
	}
	for _, name := range out.Order {
		p, ok := steps[name]
		if !ok {
			p = planPod{Pod: name, Step: tandem.StepPending}
		}
		killed := c.engaged(name)
		pp := tandem.PlanPod{Pod: name, Mode: c.Mode(name), Step: p.Step, Waiting: p.Waiting, KillSwitch: killed}
		pp.SourceOfTruth = pp.Mode.Effective(killed).SourceOfTruth()
		soak := set.ShadowSoak
		mode := tandem.ModeShadow
		if p.Step == tandem.StepMySQLSoak {
			soak, mode = set.MySQLSoak, tandem.ModeMySQL
		}
		if !p.SoakUntil.IsZero() && (p.Step == tandem.StepShadowSoak || p.Step == tandem.StepMySQLSoak || p.Step == tandem.StepAwaitingApproval) {
			until := p.SoakUntil.UTC()
			pp.SoakUntil = &until
			if left := p.SoakUntil.Sub(now); left > 0 {
				pp.SoakRemaining = left.Round(time.Second).String()
			}
		}
		pp.Gates = c.PlanGates(name, mode, p.Since, soak)
		pp.Gates.Passes = p.Passes
		if !soaking(p.Step) {
			pp.Gates = withoutSoak(pp.Gates)
		}
		if set.RehearsalSpeed > 0 && (p.Step == tandem.StepShadowSoak || p.Step == tandem.StepAwaitingApproval) {
			pp.Gates = withCheck(pp.Gates, rehearsalCheck(p, set))
		}
		out.Pods = append(out.Pods, pp)
	}
	return out
}
