package rollout

import (
	"context"

	"github.com/tandemhq/tandem"
)

// The manual throttle of a pod's background work (PUT
// /admin/pods/{pod}/throttle): persisted in the control database with its
// audit-log entry, applied by every instance with the pod modes (a change
// bumps the control version), and read by the pods' throttles from memory.

// ActionThrottle is the audit-log action of a manual throttle change.
const ActionThrottle = "throttle"

// throttleStore is a Store that keeps the manual throttles
// (controldb.Store).
type throttleStore interface {
	SetThrottle(ctx context.Context, pod string, m tandem.ManualThrottle, e tandem.AuditLogEntry) (int64, error)
	Throttles(ctx context.Context) (map[string]tandem.ManualThrottle, error)
}

// ThrottleStates gives a pod's throttle state on this instance (cmd's
// pods' throttles); the controller shows it as POD.throttle.
type ThrottleStates interface {
	ThrottleState(pod string) (tandem.ThrottleState, bool)
}

var _ tandem.ThrottleService = (*Controller)(nil)

// SetThrottle turns pod's manual throttle on or off (tandem.ThrottleService).
func (fr *front) SetThrottle(ctx context.Context, pod string, on bool, ch tandem.Change) (*tandem.PodStatus, error) {
	ch, err := validateChange(ch)
	if err != nil {
		return nil, err
	}
	if _, ok := fr.pods.find(pod); !ok {
		return nil, unknownPod(pod)
	}
	if fr.throttles == nil {
		return nil, tandem.Errorf(tandem.EUNAVAILABLE, "the control store keeps no throttles")
	}
	now := fr.now().UTC()
	before, after := "off", "off"
	if _, was := fr.modes.ManualThrottle(pod); was {
		before = "on"
	}
	if on {
		after = "on"
	}
	e := tandem.AuditLogEntry{At: now, Actor: ch.Actor, Action: ActionThrottle, Pod: pod, Reason: ch.Reason, Before: before, After: after}
	m := tandem.ManualThrottle{On: on, Reason: ch.Reason, Actor: ch.Actor, Since: now}
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if _, err := fr.throttles.SetThrottle(sctx, pod, m, e); err != nil {
		return nil, unavailable(err, "set throttle")
	}
	fr.changed(e)
	if err := fr.modes.Reload(sctx); err != nil {
		return nil, unavailable(err, "reload")
	}
	st := []tandem.PodStatus{fr.status(pod)}
	fr.backfills.remoteTransitions(ctx, st)
	return &st[0], nil
}

// throttleState is POD.throttle: the instance's throttle of pod, or, when
// it has none, the manual throttle alone.
func (fr *front) throttleState(pod string) *tandem.ThrottleState {
	if fr.states != nil {
		if st, ok := fr.states.ThrottleState(pod); ok {
			return &st
		}
	}
	m, on := fr.modes.ManualThrottle(pod)
	if !on {
		return nil
	}
	since := m.Since
	return &tandem.ThrottleState{Throttled: true, Signal: tandem.SignalManual, Reason: "manual: " + m.Reason, Since: &since, Manual: &m}
}
