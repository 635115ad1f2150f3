package rollout

import (
	"context"
	"fmt"

	"github.com/tandemhq/tandem"
)

// A pod's mode changes: the state machine of redis -> shadow -> mysql ->
// mysql_only (tandem.CanTransition) with the checks that refuse a move.

// Names of the refusals in failed_gates besides the gates.
const (
	RefusedTransition = "transition"
	RefusedResync     = "resync"
	RefusedKillSwitch = "kill_switch"
)

// SetMode moves pod to ch.Mode. Returns EINVALID (unknown mode, bad
// reason), EUNKNOWNPOD, ETRANSITIONREFUSED (details failed_gates: any of
// "transition", "resync", "kill_switch" and the gate names), ECONFLICT (the
// pod changed meanwhile on another instance), EUNAVAILABLE (control
// database, or the backfill on entering shadow, failed; nothing changed).
// With DryRun nothing changes and only the verdict is returned.
func (fr *front) SetMode(ctx context.Context, pod string, ch tandem.ModeChange) (*tandem.PodStatus, *tandem.DryRun, error) {
	if _, ok := fr.pods.find(pod); !ok {
		return nil, nil, unknownPod(pod)
	}
	if !ch.Mode.Valid() {
		return nil, nil, tandem.Errorf(tandem.EINVALID, "unknown mode %q: want redis, shadow, mysql or mysql_only", ch.Mode)
	}
	change, err := validateChange(ch.Change)
	if err != nil {
		return nil, nil, err
	}
	ch.Change = change
	from := fr.modes.Mode(pod)
	if ch.Mode == tandem.ModeRedis && from == tandem.ModeRedis && !ch.DryRun {
		if err := fr.backfills.cancel(ctx, pod, ch.Change); err != nil {
			return nil, nil, err
		}
	}
	if ch.Mode == from {
		// Nothing to change: answered as it stands, not as a refusal.
		if ch.DryRun {
			return nil, &tandem.DryRun{WouldApply: true, FailedGates: []string{}}, nil
		}
		st := fr.status(pod)
		return &st, nil, nil
	}
	failed, gatesFailed, err := fr.refusals(ctx, pod, from, ch)
	if err != nil {
		return nil, nil, err
	}
	if ch.DryRun {
		return nil, fr.dryRun(pod, from, ch.Mode, failed), nil
	}
	if len(failed) > 0 {
		return nil, nil, fr.refusedError(pod, from, ch.Mode, failed)
	}
	if from == tandem.ModeRedis && ch.Mode == tandem.ModeShadow && fr.fleet != nil {
		return fr.enterShadow(ctx, pod, ch.Change)
	}
	e := tandem.AuditLogEntry{
		At: fr.now().UTC(), Actor: ch.Actor, Action: ActionSetMode, Pod: pod, Reason: ch.Reason,
		Before: string(from), After: string(ch.Mode),
	}
	if len(gatesFailed) > 0 {
		e.Action = ActionForceMode
		e.Reason = fmt.Sprintf("%s [forced past failing gates %v]", ch.Reason, gatesFailed)
	}
	if _, err := fr.store.SetMode(ctx, pod, from, ch.Mode, e); err != nil {
		if tandem.ErrorCode(err) == tandem.ECONFLICT {
			_ = fr.modes.Reload(ctx)
		}
		return nil, nil, unavailable(err, "set mode")
	}
	fr.changed(e)
	if err := fr.modes.Reload(ctx); err != nil {
		fr.report(err)
	}
	st := fr.status(pod)
	return &st, nil, nil
}

// refusals returns why pod may not go from its current mode to ch.Mode,
// and whether only gates (which Force overrides) failed.
func (fr *front) refusals(ctx context.Context, pod string, from tandem.Mode, ch tandem.ModeChange) (failed []string, gatesFailed []string, err error) {
	to := ch.Mode
	failed = []string{}
	if !tandem.CanTransition(from, to) {
		failed = append(failed, RefusedTransition)
	}
	if from == tandem.ModeMySQLOnly && to == tandem.ModeMySQL {
		ok, err := fr.store.Resynced(ctx, pod)
		if err != nil {
			return nil, nil, unavailable(err, "read resynced flag")
		}
		if !ok {
			failed = append(failed, RefusedResync)
		}
	}
	if killBlocks(to, engaged(fr.sw, pod)) {
		failed = append(failed, RefusedKillSwitch)
	}
	if from == tandem.ModeShadow && to == tandem.ModeMySQL {
		gatesFailed = fr.gates.EvaluateGates(pod).FailedGates
		if !ch.Force {
			failed = append(failed, gatesFailed...)
		}
	}
	return failed, gatesFailed, nil
}

// killBlocks reports whether an engaged kill switch refuses a move to
// mode to: any mode whose source of truth is MySQL (mysql, and mysql_only,
// which would escape the kill switch since it cannot fall back). The kill
// switch only ever moves a pod toward Redis; force does not override it.
func killBlocks(to tandem.Mode, killed bool) bool {
	return killed && to.SourceOfTruth() == tandem.StoreMySQL
}

// enterShadow starts (or joins) pod's backfill and waits up to
// BackfillWait for it: a copy done by then answers the pod in shadow, a
// longer one answers with the transition running, a failed one
// EUNAVAILABLE with the mode unchanged. A copy that another live instance
// runs already is joined rather than started again.
func (fr *front) enterShadow(ctx context.Context, pod string, ch tandem.Change) (*tandem.PodStatus, *tandem.DryRun, error) {
	if !fr.backfills.Transitioning(pod) && fr.backfills.copiedElsewhere(ctx, pod) {
		st := []tandem.PodStatus{fr.status(pod)}
		fr.backfills.remoteTransitions(ctx, st)
		if st[0].Transition != nil {
			return &st[0], nil, nil
		}
	}
	if err := fr.backfills.begin(ctx, pod, ch); err != nil {
		return nil, nil, err
	}
	st := fr.status(pod)
	return &st, nil, nil
}
