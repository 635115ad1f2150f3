package rollout

import (
	"context"
	"fmt"
	"slices"

	"github.com/tandemhq/tandem"
)

// The admin front's reads and the changes that are not mode changes: the
// kill switch, divergences, reports, audits, resyncs, the audit log and
// the instances.

// Pods returns every pod's status, in config order.
func (c *Controller) Pods(ctx context.Context) ([]tandem.PodStatus, error) {
	out := make([]tandem.PodStatus, 0, len(c.PodConfigs))
	for _, p := range c.PodConfigs {
		out = append(out, c.status(p.Name))
	}
	c.remoteTransitions(ctx, out)
	return out, nil
}

// Pod returns pod's status. Returns EUNKNOWNPOD.
func (c *Controller) Pod(ctx context.Context, pod string) (*tandem.PodStatus, error) {
	if _, ok := c.config(pod); !ok {
		return nil, unknownPod(pod)
	}
	st := []tandem.PodStatus{c.status(pod)}
	c.remoteTransitions(ctx, st)
	return &st[0], nil
}

func (c *Controller) status(pod string) tandem.PodStatus {
	cfg, _ := c.config(pod)
	st := c.state(pod)
	c.observeKillSwitch()
	killed := c.engaged(pod)
	eff := st.mode.Effective(killed)
	gates := c.EvaluateGates(pod)
	gates.LastAuditAt = c.lastAuditAt(pod)
	return tandem.PodStatus{
		Pod:           pod,
		Mode:          st.mode,
		SourceOfTruth: eff.SourceOfTruth(),
		Shadow:        eff.Shadow(),
		KillSwitch:    killed,
		Shops:         cfg.Shops.String(),
		UpdatedAt:     st.updatedAt,
		Gates:         gates,
		Abort:         c.abortWatch(pod, eff),
		Transition:    c.transition(pod),
		Throttle:      c.throttleState(pod),
	}
}

// EngageKillSwitch engages pods (every pod when nil; a non-nil list must
// name known pods, see killswitch).
func (c *Controller) EngageKillSwitch(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	return c.Switch.Engage(ctx, pods, ch)
}

// DisengageKillSwitch disengages pods (every pod when nil).
// The comparisons made from then on are the only ones the pods' gates and
// automatic abort count.
func (c *Controller) DisengageKillSwitch(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	st, err := c.Switch.Disengage(ctx, pods, ch)
	if err == nil {
		c.observeKillSwitch()
	}
	return st, err
}

// KillSwitch returns the kill switch state.
func (c *Controller) KillSwitch(ctx context.Context) (*tandem.KillSwitchState, error) {
	st := c.Switch.State()
	return &st, nil
}

// Divergences returns persisted divergences, newest first. Returns
// EUNKNOWNPOD for a pod filter that names no pod, EINVALID for an unknown
// kind, EUNAVAILABLE.
func (c *Controller) Divergences(ctx context.Context, f tandem.DivergenceFilter) ([]tandem.Divergence, error) {
	if f.Pod != "" {
		if _, ok := c.config(f.Pod); !ok {
			return nil, unknownPod(f.Pod)
		}
	}
	if f.Kind != "" && !slices.Contains(tandem.DivergenceKinds, f.Kind) {
		return nil, tandem.Errorf(tandem.EINVALID, "unknown divergence kind %q", f.Kind)
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.Limit > 1000 {
		f.Limit = 1000
	}
	ds, err := c.Comparator.Divergences(ctx, f)
	if err != nil {
		return nil, unavailable(err, "list divergences")
	}
	if ds == nil {
		ds = []tandem.Divergence{}
	}
	return ds, nil
}

// Report returns every pod's comparisons over the gate window.
func (c *Controller) Report(ctx context.Context) ([]tandem.Report, error) {
	out := make([]tandem.Report, 0, len(c.PodConfigs))
	for _, p := range c.PodConfigs {
		out = append(out, c.Comparator.Report(p.Name, c.Mode(p.Name)))
	}
	return out, nil
}

// Audit runs the drift audit of pod, records it for the audit gate and
// writes it to the audit log. Returns EINVALID, EUNKNOWNPOD, EUNAVAILABLE.
func (c *Controller) Audit(ctx context.Context, pod string, ch tandem.Change) (*tandem.Audit, error) {
	if _, ok := c.config(pod); !ok {
		return nil, unknownPod(pod)
	}
	ch, err := validateChange(ch)
	if err != nil {
		return nil, err
	}
	a, err := c.Fleet.Audit(ctx, pod)
	if err != nil {
		return nil, err
	}
	if a.Pod == "" {
		a.Pod = pod
	}
	if a.At.IsZero() {
		a.At = c.Now().UTC()
	}
	c.Comparator.RecordAudit(*a)
	verdict := "clean"
	if !a.Clean {
		verdict = fmt.Sprintf("%d drifted of %d", len(a.Drifted), a.Checked)
	}
	e := tandem.AuditLogEntry{At: c.Now().UTC(), Actor: ch.Actor, Action: ActionAudit, Pod: pod, Reason: ch.Reason,
		Before: string(c.Mode(pod)), After: verdict}
	if err := c.Store.AppendAudit(ctx, e); err != nil {
		c.report(fmt.Errorf("record audit of %s: %w", pod, err))
	}
	c.changed(e)
	return a, nil
}

// Resync rebuilds pod's Redis from MySQL (from must be "mysql"), which lets
// a mysql_only pod go back to mysql. Returns EINVALID, EUNKNOWNPOD,
// ETRANSITIONREFUSED (the pod's mode has no MySQL to rebuild from),
// EUNAVAILABLE.
func (c *Controller) Resync(ctx context.Context, pod, from string, ch tandem.Change) (int, error) {
	if _, ok := c.config(pod); !ok {
		return 0, unknownPod(pod)
	}
	if from != tandem.StoreMySQL {
		return 0, tandem.Errorf(tandem.EINVALID, "from must be %q", tandem.StoreMySQL)
	}
	ch, err := validateChange(ch)
	if err != nil {
		return 0, err
	}
	mode := c.Mode(pod)
	if mode != tandem.ModeMySQL && mode != tandem.ModeMySQLOnly {
		return 0, tandem.Errorf(tandem.ETRANSITIONREFUSED, "pod %s is in %s: MySQL is not its source of truth, nothing to resync from", pod, mode).
			WithDetail("failed_gates", []string{RefusedTransition})
	}
	n, err := c.Fleet.Resync(ctx, pod)
	if err != nil {
		return 0, err
	}
	e := tandem.AuditLogEntry{At: c.Now().UTC(), Actor: ch.Actor, Action: ActionResync, Pod: pod, Reason: ch.Reason,
		Before: string(mode), After: fmt.Sprintf("%d keys rewritten", n)}
	if err := c.Store.MarkResynced(ctx, pod, e); err != nil {
		return 0, unavailable(err, "mark resynced")
	}
	c.changed(e)
	return n, nil
}

// AuditLog returns the last limit (default 100, at most 1000) audit-log
// entries, newest first. Returns EUNAVAILABLE.
func (c *Controller) AuditLog(ctx context.Context, limit int) ([]tandem.AuditLogEntry, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	es, err := c.Store.AuditLog(ctx, limit)
	if err != nil {
		return nil, unavailable(err, "read audit log")
	}
	if es == nil {
		es = []tandem.AuditLogEntry{}
	}
	return es, nil
}

// Instances returns every recorded instance, stale when it has not been
// seen for StaleAfter. Returns EUNAVAILABLE.
func (c *Controller) Instances(ctx context.Context) ([]tandem.Instance, error) {
	ins, err := c.Store.Instances(ctx)
	if err != nil {
		return nil, unavailable(err, "list instances")
	}
	now := c.Now()
	for i := range ins {
		ins[i].Stale = now.Sub(ins[i].LastSeen) > c.StaleAfter
	}
	if ins == nil {
		ins = []tandem.Instance{}
	}
	return ins, nil
}
