package rollout

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tandemhq/tandem"
)

// The admin front's reads and the changes that are not mode changes: the
// kill switch, divergences, reports, audits, resyncs, the audit log and
// the instances. Mode changes are in mode.go, their refusals explained in
// explain.go, the manual throttle in throttle.go.

// front is the admin front (tandem.AdminService and
// tandem.ThrottleService): what web and cmd ask of the rollout besides
// the plan. It answers from the other parts (the modes, the gates, the
// transitions), which it reads through small interfaces.
type front struct {
	store frontStore
	// throttles is the store's manual throttles; nil when it keeps none.
	throttles throttleStore
	modes     frontModes
	gates     frontGates
	backfills frontBackfills
	// sw, cmp and fleet are the Controller's Switch, Comparator and Fleet.
	sw    KillSwitch
	cmp   Comparisons
	fleet Fleet
	// states is the Controller's Throttles: nil shows the manual throttle
	// alone.
	states     ThrottleStates
	pods       podConfigs
	staleAfter time.Duration
	now        func() time.Time
	notify
}

// frontStore is what the admin front reads and writes in the control
// database besides the modes' table.
type frontStore interface {
	ModeStore
	AuditLogStore
	InstanceStore
}

// frontModes is the pods' modes as the admin front reads and reloads them.
type frontModes interface {
	modeReloader
	state(pod string) podState
	ManualThrottle(pod string) (tandem.ManualThrottle, bool)
}

// frontGates is the gates as the admin front shows them and checks a
// promotion against them.
type frontGates interface {
	EvaluateGates(pod string) tandem.Gates
	observeKillSwitch()
	abortWatch(pod string, eff tandem.Mode) *tandem.AbortWatch
	lastAuditAt(pod string) *time.Time
}

// frontBackfills is the background transitions as the admin front shows,
// starts and cancels them.
type frontBackfills interface {
	Transitioning(pod string) bool
	transition(pod string) *tandem.Transition
	remoteTransitions(ctx context.Context, sts []tandem.PodStatus)
	copiedElsewhere(ctx context.Context, pod string) bool
	begin(ctx context.Context, pod string, ch tandem.Change) error
	cancel(ctx context.Context, pod string, ch tandem.Change) error
}

// Pods returns every pod's status, in config order.
func (fr *front) Pods(ctx context.Context) ([]tandem.PodStatus, error) {
	out := make([]tandem.PodStatus, 0, len(fr.pods))
	for _, p := range fr.pods {
		out = append(out, fr.status(p.Name))
	}
	fr.backfills.remoteTransitions(ctx, out)
	return out, nil
}

// Pod returns pod's status. Returns EUNKNOWNPOD.
func (fr *front) Pod(ctx context.Context, pod string) (*tandem.PodStatus, error) {
	if _, ok := fr.pods.find(pod); !ok {
		return nil, unknownPod(pod)
	}
	st := []tandem.PodStatus{fr.status(pod)}
	fr.backfills.remoteTransitions(ctx, st)
	return &st[0], nil
}

func (fr *front) status(pod string) tandem.PodStatus {
	cfg, _ := fr.pods.find(pod)
	st := fr.modes.state(pod)
	fr.gates.observeKillSwitch()
	killed := engaged(fr.sw, pod)
	eff := st.mode.Effective(killed)
	gates := fr.gates.EvaluateGates(pod)
	gates.LastAuditAt = fr.gates.lastAuditAt(pod)
	return tandem.PodStatus{
		Pod:           pod,
		Mode:          st.mode,
		SourceOfTruth: eff.SourceOfTruth(),
		Shadow:        eff.Shadow(),
		KillSwitch:    killed,
		Shops:         cfg.Shops.String(),
		UpdatedAt:     st.updatedAt,
		Gates:         gates,
		Abort:         fr.gates.abortWatch(pod, eff),
		Transition:    fr.backfills.transition(pod),
		Throttle:      fr.throttleState(pod),
	}
}

// EngageKillSwitch engages pods (every pod when nil; a non-nil list must
// name known pods, see killswitch).
func (fr *front) EngageKillSwitch(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	return fr.sw.Engage(ctx, pods, ch)
}

// DisengageKillSwitch disengages pods (every pod when nil).
// The comparisons made from then on are the only ones the pods' gates and
// automatic abort count.
func (fr *front) DisengageKillSwitch(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	st, err := fr.sw.Disengage(ctx, pods, ch)
	if err == nil {
		fr.gates.observeKillSwitch()
	}
	return st, err
}

// KillSwitch returns the kill switch state.
func (fr *front) KillSwitch(ctx context.Context) (*tandem.KillSwitchState, error) {
	st := fr.sw.State()
	return &st, nil
}

// Divergences returns persisted divergences, newest first. Returns
// EUNKNOWNPOD for a pod filter that names no pod, EINVALID for an unknown
// kind, EUNAVAILABLE.
func (fr *front) Divergences(ctx context.Context, f tandem.DivergenceFilter) ([]tandem.Divergence, error) {
	if f.Pod != "" {
		if _, ok := fr.pods.find(f.Pod); !ok {
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
	ds, err := fr.cmp.Divergences(ctx, f)
	if err != nil {
		return nil, unavailable(err, "list divergences")
	}
	if ds == nil {
		ds = []tandem.Divergence{}
	}
	return ds, nil
}

// Report returns every pod's comparisons over the gate window.
func (fr *front) Report(ctx context.Context) ([]tandem.Report, error) {
	out := make([]tandem.Report, 0, len(fr.pods))
	for _, p := range fr.pods {
		out = append(out, fr.cmp.Report(p.Name, fr.modes.Mode(p.Name)))
	}
	return out, nil
}

// Audit runs the drift audit of pod, records it for the audit gate and
// writes it to the audit log. Returns EINVALID, EUNKNOWNPOD, EUNAVAILABLE.
func (fr *front) Audit(ctx context.Context, pod string, ch tandem.Change) (*tandem.Audit, error) {
	if _, ok := fr.pods.find(pod); !ok {
		return nil, unknownPod(pod)
	}
	ch, err := validateChange(ch)
	if err != nil {
		return nil, err
	}
	a, err := fr.fleet.Audit(ctx, pod)
	if err != nil {
		return nil, err
	}
	if a.Pod == "" {
		a.Pod = pod
	}
	if a.At.IsZero() {
		a.At = fr.now().UTC()
	}
	fr.cmp.RecordAudit(*a)
	verdict := "clean"
	if !a.Clean {
		verdict = fmt.Sprintf("%d drifted of %d", len(a.Drifted), a.Checked)
	}
	e := tandem.AuditLogEntry{At: fr.now().UTC(), Actor: ch.Actor, Action: ActionAudit, Pod: pod, Reason: ch.Reason,
		Before: string(fr.modes.Mode(pod)), After: verdict}
	if err := fr.store.AppendAudit(ctx, e); err != nil {
		fr.report(fmt.Errorf("record audit of %s: %w", pod, err))
	}
	fr.changed(e)
	return a, nil
}

// Resync rebuilds pod's Redis from MySQL (from must be "mysql"), which lets
// a mysql_only pod go back to mysql. Returns EINVALID, EUNKNOWNPOD,
// ETRANSITIONREFUSED (the pod's mode has no MySQL to rebuild from),
// EUNAVAILABLE.
func (fr *front) Resync(ctx context.Context, pod, from string, ch tandem.Change) (int, error) {
	if _, ok := fr.pods.find(pod); !ok {
		return 0, unknownPod(pod)
	}
	if from != tandem.StoreMySQL {
		return 0, tandem.Errorf(tandem.EINVALID, "from must be %q", tandem.StoreMySQL)
	}
	ch, err := validateChange(ch)
	if err != nil {
		return 0, err
	}
	mode := fr.modes.Mode(pod)
	if mode != tandem.ModeMySQL && mode != tandem.ModeMySQLOnly {
		return 0, tandem.Errorf(tandem.ETRANSITIONREFUSED, "pod %s is in %s: MySQL is not its source of truth, nothing to resync from", pod, mode).
			WithDetail("failed_gates", []string{RefusedTransition})
	}
	n, err := fr.fleet.Resync(ctx, pod)
	if err != nil {
		return 0, err
	}
	e := tandem.AuditLogEntry{At: fr.now().UTC(), Actor: ch.Actor, Action: ActionResync, Pod: pod, Reason: ch.Reason,
		Before: string(mode), After: fmt.Sprintf("%d keys rewritten", n)}
	if err := fr.store.MarkResynced(ctx, pod, e); err != nil {
		return 0, unavailable(err, "mark resynced")
	}
	fr.changed(e)
	return n, nil
}

// AuditLog returns the last limit (default 100, at most 1000) audit-log
// entries, newest first. Returns EUNAVAILABLE.
func (fr *front) AuditLog(ctx context.Context, limit int) ([]tandem.AuditLogEntry, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	es, err := fr.store.AuditLog(ctx, limit)
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
func (fr *front) Instances(ctx context.Context) ([]tandem.Instance, error) {
	ins, err := fr.store.Instances(ctx)
	if err != nil {
		return nil, unavailable(err, "list instances")
	}
	now := fr.now()
	for i := range ins {
		ins[i].Stale = now.Sub(ins[i].LastSeen) > fr.staleAfter
	}
	if ins == nil {
		ins = []tandem.Instance{}
	}
	return ins, nil
}
