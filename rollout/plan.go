package rollout

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tandemhq/tandem"
)

// PlanPhase is where the rollout plan stands.
type PlanPhase string

// Plan phases. A paused plan resumes where it stopped; an aborted one (by
// an operator, or by a kill switch on a pod it promoted) starts over.
const (
	PlanIdle    PlanPhase = "idle"
	PlanRunning PlanPhase = "running"
	PlanPaused  PlanPhase = "paused"
	PlanAborted PlanPhase = "aborted"
	PlanDone    PlanPhase = "done"
)

// PlanStatus is the rollout plan as an operator sees it.
type PlanStatus struct {
	Phase PlanPhase `json:"phase"`
	// Order is every pod, smallest (fewest shops) first.
	Order []string `json:"order"`
	// Promoted lists the pods the plan moved to mysql, in order.
	Promoted []string `json:"promoted"`
	// SoakUntil is when the last promoted pod has soaked long enough.
	SoakUntil *time.Time `json:"soak_until,omitempty"`
	// Waiting says why the plan does not advance, or why it stopped.
	Waiting string `json:"waiting,omitempty"`
}

type planState struct {
	phase      PlanPhase
	promoted   []string
	promotedAt time.Time
	waiting    string
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

// PlanStatus returns the plan's state on this instance.
func (c *Controller) PlanStatus() PlanStatus {
	c.init()
	c.planMu.Lock()
	defer c.planMu.Unlock()
	return c.planStatusLocked()
}

func (c *Controller) planStatusLocked() PlanStatus {
	p := c.plan
	st := PlanStatus{Phase: p.phase, Order: c.PlanOrder(), Promoted: append([]string{}, p.promoted...), Waiting: p.waiting}
	if st.Phase == "" {
		st.Phase = PlanIdle
	}
	if len(p.promoted) > 0 {
		until := p.promotedAt.Add(c.Soak)
		st.SoakUntil = &until
	}
	return st
}

// StartPlan starts (or resumes after a pause) the rollout plan on this
// instance: every PlanInterval it promotes the next pod in PlanOrder from
// shadow to mysql once its gates pass and the pod it promoted before has
// soaked for Soak without its kill switch engaged. It never promotes two
// pods in one step. Returns EINVALID, ECONFLICT (already running or done).
func (c *Controller) StartPlan(ctx context.Context, ch tandem.Change) (PlanStatus, error) {
	c.init()
	ch, err := validateChange(ch)
	if err != nil {
		return PlanStatus{}, err
	}
	c.planMu.Lock()
	defer c.planMu.Unlock()
	switch c.plan.phase {
	case PlanRunning:
		return c.planStatusLocked(), tandem.Errorf(tandem.ECONFLICT, "the rollout plan is already running")
	case PlanPaused:
		c.plan.phase, c.plan.waiting = PlanRunning, ""
	default:
		c.plan = planState{phase: PlanRunning}
	}
	c.planAudit(ctx, ch, ActionPlanStart, "")
	return c.planStatusLocked(), nil
}

// PausePlan stops the plan from advancing until StartPlan. Returns EINVALID,
// ECONFLICT (not running).
func (c *Controller) PausePlan(ctx context.Context, ch tandem.Change) (PlanStatus, error) {
	return c.stopPlan(ctx, ch, PlanPaused, ActionPlanPause)
}

// AbortPlan stops the plan for good; StartPlan begins a new one. Pods it
// promoted keep their mode (use the kill switch to move them back).
// Returns EINVALID, ECONFLICT (not running or paused).
func (c *Controller) AbortPlan(ctx context.Context, ch tandem.Change) (PlanStatus, error) {
	return c.stopPlan(ctx, ch, PlanAborted, ActionPlanAbort)
}

func (c *Controller) stopPlan(ctx context.Context, ch tandem.Change, to PlanPhase, action string) (PlanStatus, error) {
	c.init()
	ch, err := validateChange(ch)
	if err != nil {
		return PlanStatus{}, err
	}
	c.planMu.Lock()
	defer c.planMu.Unlock()
	if c.plan.phase != PlanRunning && !(to == PlanAborted && c.plan.phase == PlanPaused) {
		return c.planStatusLocked(), tandem.Errorf(tandem.ECONFLICT, "the rollout plan is %s", c.planStatusLocked().Phase)
	}
	c.plan.phase = to
	c.plan.waiting = fmt.Sprintf("%s by %s: %s", to, ch.Actor, ch.Reason)
	c.planAudit(ctx, ch, action, "")
	return c.planStatusLocked(), nil
}

func (c *Controller) planAudit(ctx context.Context, ch tandem.Change, action, pod string) {
	e := tandem.AuditLogEntry{At: c.Now().UTC(), Actor: ch.Actor, Action: action, Pod: pod, Reason: ch.Reason,
		Before: strings.Join(c.plan.promoted, ","), After: string(c.plan.phase)}
	if err := c.Store.AppendAudit(ctx, e); err != nil {
		c.report(fmt.Errorf("record %s: %w", action, err))
	}
	c.changed(e)
}

// StepPlan advances a running plan by at most one promotion.
func (c *Controller) StepPlan(ctx context.Context) error {
	c.init()
	c.planMu.Lock()
	defer c.planMu.Unlock()
	if c.plan.phase != PlanRunning {
		return nil
	}
	for _, pod := range c.plan.promoted {
		if c.engaged(pod) {
			c.plan.phase = PlanAborted
			c.plan.waiting = fmt.Sprintf("aborted: kill switch engaged on %s, which the plan promoted", pod)
			c.planAudit(ctx, tandem.Change{Actor: ActorPlan, Reason: c.plan.waiting}, ActionPlanAbort, pod)
			return nil
		}
	}
	if n := len(c.plan.promoted); n > 0 {
		if until := c.plan.promotedAt.Add(c.Soak); c.Now().Before(until) {
			c.plan.waiting = fmt.Sprintf("soaking %s until %s", c.plan.promoted[n-1], until.UTC().Format(time.RFC3339))
			return nil
		}
	}
	for _, pod := range c.PlanOrder() {
		mode := c.Mode(pod)
		if mode == tandem.ModeMySQL || mode == tandem.ModeMySQLOnly {
			continue
		}
		if mode == tandem.ModeRedis {
			c.plan.waiting = fmt.Sprintf("%s is in redis: move it to shadow first", pod)
			return nil
		}
		if killBlocks(tandem.ModeMySQL, c.engaged(pod)) {
			// The plan obeys the kill switch like an operator: it waits
			// for someone to disengage it, and never promotes past it.
			c.plan.waiting = fmt.Sprintf("%s: kill switch engaged; the plan promotes it only once disengaged", pod)
			return nil
		}
		if g := c.EvaluateGates(pod); !g.Passing {
			c.plan.waiting = fmt.Sprintf("%s: gates failing %v", pod, g.FailedGates)
			return nil
		}
		ch := tandem.ModeChange{Mode: tandem.ModeMySQL, Change: tandem.Change{Actor: ActorPlan,
			Reason: fmt.Sprintf("rollout plan: promote %s (step %d of %d, smallest first)", pod, len(c.plan.promoted)+1, len(c.PodConfigs))}}
		if _, _, err := c.SetMode(ctx, pod, ch); err != nil {
			c.plan.waiting = fmt.Sprintf("%s: %s", pod, tandem.ErrorMessage(err))
			return fmt.Errorf("promote %s: %w", pod, err)
		}
		c.plan.promoted = append(c.plan.promoted, pod)
		c.plan.promotedAt = c.Now()
		c.plan.waiting = ""
		c.changed(tandem.AuditLogEntry{At: c.Now().UTC(), Actor: ActorPlan, Action: ActionPlanStep, Pod: pod, Reason: ch.Reason,
			Before: string(mode), After: string(tandem.ModeMySQL)})
		return nil
	}
	c.plan.phase = PlanDone
	c.plan.waiting = ""
	c.planAudit(ctx, tandem.Change{Actor: ActorPlan, Reason: "every pod is on mysql"}, ActionPlanDone, "")
	return nil
}
