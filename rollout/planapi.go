package rollout

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/tandemhq/tandem"
)

// The plan's admin API (tandem.PlanService): an operator's changes to the
// persisted plan, and the plan as every instance shows it. The driver
// (plandrive.go) advances it.

// planFront is the plan's admin API.
type planFront struct {
	book     *planBook
	gates    planJudge
	modes    modeReader
	sw       switchReader
	pods     podConfigs
	defaults PlanSettings
	now      func() time.Time
}

// planJudge is the gates as the plan reads them.
type planJudge interface {
	PlanGates(pod string, mode tandem.Mode, since time.Time, soak time.Duration) tandem.PlanGates
}

// modeReader is the pods' modes as the parts that only read them see them.
type modeReader interface {
	Mode(pod string) tandem.Mode
}

// PlanOrder returns the pods in rollout order: by shop count ascending,
// then by name.
func (f *planFront) PlanOrder() []string {
	pods := make([]PodConfig, len(f.pods))
	copy(pods, f.pods)
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

// updatePlan applies fn to the persisted plan and saves it, again when
// another instance wrote first. fn returns the audit-log action of the
// change ("" for none) or an error that leaves the plan as it was.
func (f *planFront) updatePlan(ctx context.Context, ch tandem.Change, fn func(d *planDoc) (string, string, error)) (*tandem.Plan, error) {
	for attempt := 0; ; attempt++ {
		doc, rec, err := f.book.load(ctx)
		if err != nil {
			return nil, err
		}
		action, pod, err := fn(&doc)
		if err != nil {
			return f.planView(doc, rec), err
		}
		if err := f.book.save(ctx, doc, rec.Version); err != nil {
			if tandem.ErrorCode(err) == tandem.ECONFLICT && attempt < 5 {
				continue
			}
			return nil, unavailable(err, "save the rollout plan")
		}
		if action != "" {
			f.book.audit(ctx, ch, action, pod, string(doc.Phase))
		}
		return f.planView(doc, rec), nil
	}
}

// PlanStatus returns the persisted plan with every pod's gates. Returns
// EUNAVAILABLE.
func (f *planFront) PlanStatus(ctx context.Context) (*tandem.Plan, error) {
	doc, rec, err := f.book.load(ctx)
	if err != nil {
		return nil, err
	}
	return f.planView(doc, rec), nil
}

// StartPlan starts a plan over every pod, smallest first, with the
// defaults (PlanDefaults) overridden by st. Returns EINVALID, ECONFLICT
// (one is running or paused), EUNAVAILABLE.
func (f *planFront) StartPlan(ctx context.Context, st tandem.PlanStart) (*tandem.Plan, error) {
	ch, err := validateChange(st.Change)
	if err != nil {
		return nil, err
	}
	set, err := f.planSettings(st)
	if err != nil {
		return nil, err
	}
	return f.updatePlan(ctx, ch, func(d *planDoc) (string, string, error) {
		if d.Phase == tandem.PlanRunning || d.Phase == tandem.PlanPaused {
			return "", "", tandem.Errorf(tandem.ECONFLICT, "the rollout plan is %s: resume or abort it first", d.Phase)
		}
		now := f.now().UTC()
		*d = planDoc{ID: now.Format(time.RFC3339Nano), Phase: tandem.PlanRunning, Settings: set, Promoted: []string{}}
		for _, pod := range f.PlanOrder() {
			d.Pods = append(d.Pods, planPod{Pod: pod, Step: tandem.StepPending, Since: now})
		}
		return ActionPlanStart, "", nil
	})
}

func (f *planFront) planSettings(st tandem.PlanStart) (PlanSettings, error) {
	s := f.defaults
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
func (f *planFront) PausePlan(ctx context.Context, ch tandem.Change) (*tandem.Plan, error) {
	return f.movePlan(ctx, ch, ActionPlanPause, tandem.PlanPaused, tandem.PlanRunning)
}

// ResumePlan lets a paused plan advance again. Returns EINVALID, ECONFLICT
// (not paused), EUNAVAILABLE.
func (f *planFront) ResumePlan(ctx context.Context, ch tandem.Change) (*tandem.Plan, error) {
	return f.movePlan(ctx, ch, ActionPlanResume, tandem.PlanRunning, tandem.PlanPaused)
}

// AbortPlan stops a running or paused plan for good; pods keep their mode
// (the kill switch moves them back). Returns EINVALID, ECONFLICT,
// EUNAVAILABLE.
func (f *planFront) AbortPlan(ctx context.Context, ch tandem.Change) (*tandem.Plan, error) {
	return f.movePlan(ctx, ch, ActionPlanAbort, tandem.PlanAborted, tandem.PlanRunning, tandem.PlanPaused)
}

func (f *planFront) movePlan(ctx context.Context, ch tandem.Change, action string, to tandem.PlanPhase, from ...tandem.PlanPhase) (*tandem.Plan, error) {
	ch, err := validateChange(ch)
	if err != nil {
		return nil, err
	}
	return f.updatePlan(ctx, ch, func(d *planDoc) (string, string, error) {
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
func (f *planFront) ApprovePlan(ctx context.Context, ch tandem.Change, pod string) (*tandem.Plan, error) {
	return f.podPlanChange(ctx, ch, pod, ActionPlanApprove, func(p *planPod) {
		p.Approved = true
	})
}

// SkipPlan takes pod out of the plan where it stands. Returns EINVALID,
// EUNKNOWNPOD, ECONFLICT, EUNAVAILABLE.
func (f *planFront) SkipPlan(ctx context.Context, ch tandem.Change, pod string) (*tandem.Plan, error) {
	return f.podPlanChange(ctx, ch, pod, ActionPlanSkip, func(p *planPod) {
		p.Step, p.Waiting = tandem.StepSkipped, ""
	})
}

func (f *planFront) podPlanChange(ctx context.Context, ch tandem.Change, pod, action string, fn func(p *planPod)) (*tandem.Plan, error) {
	ch, err := validateChange(ch)
	if err != nil {
		return nil, err
	}
	if _, ok := f.pods.find(pod); !ok {
		return nil, unknownPod(pod)
	}
	return f.updatePlan(ctx, ch, func(d *planDoc) (string, string, error) {
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
func (f *planFront) planView(d planDoc, rec tandem.PlanRecord) *tandem.Plan {
	now := f.now()
	out := &tandem.Plan{Phase: d.Phase, Waiting: d.Waiting, Order: f.PlanOrder(), Promoted: d.Promoted,
		Pods: []tandem.PlanPod{}}
	if out.Phase == "" {
		out.Phase = tandem.PlanIdle
	}
	if out.Promoted == nil {
		out.Promoted = []string{}
	}
	set := d.Settings
	if d.Phase == tandem.PlanIdle || d.Phase == "" {
		set = f.defaults
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
		killed := engaged(f.sw, name)
		pp := tandem.PlanPod{Pod: name, Mode: f.modes.Mode(name), Step: p.Step, Waiting: p.Waiting, KillSwitch: killed}
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
		pp.Gates = f.gates.PlanGates(name, mode, p.Since, soak)
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
