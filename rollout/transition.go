package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tandemhq/tandem"
)

// A pod enters shadow only once MySQL holds what Redis holds. The online
// backfill that copies it can take a while, so it runs in the background:
// SetMode records the pending transition in the control database, starts
// the copy and answers with POD.transition; the mode is persisted when the
// copy is done; a PUT of redis cancels it. A copy whose instance died is
// started again by any instance (ResumeTransitions).

// remoteTimeout bounds the read of the other instances' transitions.
const remoteTimeout = 300 * time.Millisecond

// transitions runs this instance's background transitions and reads the
// other instances' ones from the control database.
type transitions struct {
	store transitionStore
	// checkpoints is the store's copy checkpoints; nil when it keeps none.
	checkpoints checkpointStore
	// fleet is nil when the Controller runs without one: no transitions.
	fleet      Fleet
	modes      modeReloader
	pods       podConfigs
	instanceID string
	// staleAfter, backfillWait and progressInterval are Config's.
	staleAfter, backfillWait, progressInterval time.Duration
	now                                        func() time.Time
	life                                       *background
	notify

	mu   sync.Mutex
	runs map[string]*transitionRun
}

// transitionStore is what the transitions keep in the control database.
type transitionStore interface {
	TransitionStore
	AuditLogStore
	InstanceStore
}

// modeReloader is the pods' modes as a part that changes them reads them:
// a change is read back at once rather than at the next poll.
type modeReloader interface {
	Mode(pod string) tandem.Mode
	Reload(ctx context.Context) error
}

// resumableFleet is a Fleet whose copy resumes after a checkpoint and
// tells each new one (dualwrite.Fleet).
type resumableFleet interface {
	BackfillFrom(ctx context.Context, pod string, from tandem.BackfillCheckpoint, save func(context.Context, tandem.BackfillCheckpoint) error) error
}

// checkpointStore is a Store that keeps a copy's checkpoint with its
// transition (controldb.Store).
type checkpointStore interface {
	TransitionCheckpoint(ctx context.Context, pod, owner string, at tandem.BackfillCheckpoint) error
}

// transitionRun is a background transition running on this instance.
type transitionRun struct {
	pod string
	to  tandem.Mode
	// from is the checkpoint of an interrupted copy that this run resumes.
	from      tandem.BackfillCheckpoint
	ch        tandem.Change
	startedAt time.Time
	cancel    context.CancelFunc
	done      chan struct{}
	// cancelled is set (under transitions.mu) when an operator cancels
	// it; err is the copy's failure, read after done.
	cancelled bool
	err       error
}

// transition returns the transition running for pod on this instance, with
// the backfill's progress; nil when none runs.
func (t *transitions) transition(pod string) *tandem.Transition {
	t.mu.Lock()
	run := t.runs[pod]
	t.mu.Unlock()
	if run == nil {
		return nil
	}
	tr := &tandem.Transition{To: run.to, Phase: tandem.TransitionBackfill, StartedAt: run.startedAt}
	if t.fleet != nil {
		if p := t.fleet.BackfillProgress(pod); p != nil && !p.StartedAt.Before(run.startedAt.Add(-time.Second)) {
			tr.Step, tr.Copied, tr.Total = p.Step, p.Copied, p.Total
			tr.HoldsPerSec, tr.ETASeconds, tr.Checkpoint, tr.Resumed = p.HoldsPerSec, p.ETASeconds, p.Checkpoint, p.Resumed
		}
	}
	return tr
}

// remoteTransitions shows, in the statuses without a transition here, the
// transitions that run on other instances, with the progress they last
// recorded. A control database that does not answer shows none.
func (t *transitions) remoteTransitions(ctx context.Context, sts []tandem.PodStatus) {
	if t.fleet == nil {
		return
	}
	// The statuses otherwise come from memory: a slow control database
	// must not hold them up.
	ctx, cancel := context.WithTimeout(ctx, remoteTimeout)
	defer cancel()
	pts, err := t.store.PendingTransitions(ctx)
	if err != nil {
		return
	}
	for _, pt := range pts {
		for i := range sts {
			if sts[i].Pod == pt.Pod && sts[i].Transition == nil && sts[i].Mode == tandem.ModeRedis {
				sts[i].Transition = &tandem.Transition{To: pt.To, Phase: tandem.TransitionBackfill,
					Copied: pt.Copied, Total: pt.Total, StartedAt: pt.StartedAt, Checkpoint: pt.Checkpoint.Shop}
			}
		}
	}
}

// Transitioning reports whether a background transition runs for pod on
// this instance.
func (t *transitions) Transitioning(pod string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs[pod] != nil
}

// copiedElsewhere reports whether a live instance other than this one
// runs pod's copy: a request joins it rather than starting a second one.
func (t *transitions) copiedElsewhere(ctx context.Context, pod string) bool {
	pts, err := t.store.PendingTransitions(ctx)
	if err != nil {
		return false
	}
	for _, pt := range pts {
		if pt.Pod != pod || pt.Owner == t.instanceID {
			continue
		}
		live, err := t.liveInstances(ctx)
		return err == nil && live[pt.Owner]
	}
	return false
}

// copyOwner returns the instance whose copy of pod is recorded; false
// when none is.
func (t *transitions) copyOwner(ctx context.Context, pod string) (string, bool, error) {
	pts, err := t.store.PendingTransitions(ctx)
	if err != nil {
		return "", false, err
	}
	for _, pt := range pts {
		if pt.Pod == pod {
			return pt.Owner, true, nil
		}
	}
	return "", false, nil
}

// begin starts pod's backfill here, or joins the one that runs here, and
// waits up to backfillWait for it. It returns nil when the copy is done
// or still runs, EUNAVAILABLE (the mode unchanged) when it failed.
func (t *transitions) begin(ctx context.Context, pod string, ch tandem.Change) error {
	t.mu.Lock()
	run := t.runs[pod]
	if run == nil {
		pt := tandem.PendingTransition{Pod: pod, To: tandem.ModeShadow, Owner: t.instanceID,
			Actor: ch.Actor, Reason: ch.Reason, StartedAt: t.now().UTC()}
		if err := t.store.BeginTransition(ctx, pt); err != nil {
			t.mu.Unlock()
			return unavailable(err, "record transition")
		}
		run = t.startLocked(pt)
	}
	t.mu.Unlock()
	timer := time.NewTimer(t.backfillWait)
	defer timer.Stop()
	select {
	case <-run.done:
		if tandem.ErrorCode(run.err) == tandem.ECONFLICT {
			_ = t.modes.Reload(ctx)
			return run.err
		}
		if run.err != nil {
			return tandem.Errorf(tandem.EUNAVAILABLE, "backfill of MySQL for pod %s failed, mode unchanged: %s", pod, tandem.ErrorMessage(run.err))
		}
	case <-timer.C:
	case <-ctx.Done():
	}
	return nil
}

// startLocked runs pt in the background; t.mu must be held.
func (t *transitions) startLocked(pt tandem.PendingTransition) *transitionRun {
	ctx, cancel := context.WithCancel(t.life.ctx)
	run := &transitionRun{pod: pt.Pod, to: pt.To, from: pt.Checkpoint, ch: tandem.Change{Actor: pt.Actor, Reason: pt.Reason},
		startedAt: pt.StartedAt, cancel: cancel, done: make(chan struct{})}
	t.runs[pt.Pod] = run
	t.life.start(func() {
		defer cancel()
		t.run(ctx, run)
	})
	return run
}

// run copies, then persists the mode; it tells OnChange when the copy
// starts, how it goes every progressInterval and how it ends.
func (t *transitions) run(ctx context.Context, run *transitionRun) {
	pod := run.pod
	defer func() {
		t.mu.Lock()
		if t.runs[pod] == run {
			delete(t.runs, pod)
		}
		t.mu.Unlock()
		close(run.done)
	}()
	e := tandem.AuditLogEntry{At: t.now().UTC(), Actor: run.ch.Actor, Action: ActionBackfillStart, Pod: pod,
		Reason: run.ch.Reason, Before: string(tandem.ModeRedis), After: "backfilling MySQL"}
	if run.from.Shop > 0 {
		e.After = fmt.Sprintf("backfilling MySQL, resumed after shop %d with %d holds copied", run.from.Shop, run.from.Copied)
	}
	t.changed(e)
	err := t.copy(ctx, run)
	t.mu.Lock()
	cancelled := run.cancelled
	t.mu.Unlock()
	if cancelled || (err != nil && t.life.ctx.Err() != nil) {
		// Cancelled by an operator (who ends the record), or this
		// instance stops: the record stays for the next start.
		run.err = context.Canceled
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	e.At, e.Action, e.After = t.now().UTC(), ActionBackfillEnd, "done"
	if err != nil {
		run.err = err
		e.After = "failed: " + tandem.ErrorMessage(err)
		t.changed(e)
		t.report(fmt.Errorf("backfill pod %s: %w", pod, err))
		if _, err := t.store.EndTransition(sctx, pod); err != nil {
			t.report(fmt.Errorf("end transition of %s: %w", pod, err))
		}
		return
	}
	t.changed(e)
	set := tandem.AuditLogEntry{At: t.now().UTC(), Actor: run.ch.Actor, Action: ActionSetMode, Pod: pod, Reason: run.ch.Reason,
		Before: string(tandem.ModeRedis), After: string(run.to)}
	if _, err := t.store.FinishTransition(sctx, pod, tandem.ModeRedis, run.to, set); err != nil {
		run.err = err
		t.report(fmt.Errorf("apply %s to %s after its backfill: %w", run.to, pod, err))
		return
	}
	t.changed(set)
	if err := t.modes.Reload(sctx); err != nil {
		t.report(err)
	}
}

// copy runs run's backfill and, every progressInterval until it ends,
// records how far it is and tells OnChange.
func (t *transitions) copy(ctx context.Context, run *transitionRun) error {
	copied := make(chan error, 1)
	go func() { copied <- t.backfill(ctx, run) }()
	tick := time.NewTicker(t.progressInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-copied:
			return err
		case <-tick.C:
			tr := t.transition(run.pod)
			if tr == nil {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, storeTimeout)
			if err := t.store.TransitionProgress(pctx, run.pod, t.instanceID, tr.Copied, tr.Total); err != nil {
				t.report(fmt.Errorf("record the progress of %s: %w", run.pod, err))
			}
			cancel()
			t.changed(tandem.AuditLogEntry{At: t.now().UTC(), Actor: run.ch.Actor, Action: ActionBackfillProgress, Pod: run.pod,
				Reason: run.ch.Reason, Before: string(tandem.ModeRedis), After: progressText(tr)})
		}
	}
}

// backfill runs run's copy: resumed after its checkpoint, each new one
// recorded with the transition, when the fleet and the store can.
func (t *transitions) backfill(ctx context.Context, run *transitionRun) error {
	rf, ok := t.fleet.(resumableFleet)
	if !ok || t.checkpoints == nil {
		return t.fleet.Backfill(ctx, run.pod)
	}
	save := func(ctx context.Context, at tandem.BackfillCheckpoint) error {
		sctx, cancel := context.WithTimeout(ctx, storeTimeout)
		defer cancel()
		return t.checkpoints.TransitionCheckpoint(sctx, run.pod, t.instanceID, at)
	}
	return rf.BackfillFrom(ctx, run.pod, run.from, save)
}

// progressText is a running copy's progress in the control log: its step,
// holds copied, rate and time left, and where an interrupted run resumed.
func progressText(t *tandem.Transition) string {
	s := fmt.Sprintf("%s: copied %d of %d", t.Step, t.Copied, t.Total)
	if t.HoldsPerSec > 0 {
		s += fmt.Sprintf(", %.0f holds/s, about %s left", t.HoldsPerSec, (time.Duration(t.ETASeconds * float64(time.Second))).Round(time.Second))
	}
	if t.Resumed > 0 {
		s += fmt.Sprintf(" (resumed after shop %d with %d copied)", t.Checkpoint, t.Resumed)
	}
	return s
}

// cancel cancels pod's running transition, here or on another instance
// (whose copy then finds its record gone and does not apply), and writes
// the cancellation to the audit log.
func (t *transitions) cancel(ctx context.Context, pod string, ch tandem.Change) error {
	t.mu.Lock()
	run := t.runs[pod]
	if run != nil {
		run.cancelled = true
		run.cancel()
	}
	t.mu.Unlock()
	if run != nil {
		select {
		case <-run.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ended, err := t.store.EndTransition(ctx, pod)
	if err != nil {
		if run != nil {
			return unavailable(err, "cancel transition")
		}
		t.report(fmt.Errorf("cancel transition of %s: %w", pod, err))
		return nil
	}
	if !ended && run == nil {
		return nil
	}
	e := tandem.AuditLogEntry{At: t.now().UTC(), Actor: ch.Actor, Action: ActionBackfillCancel, Pod: pod, Reason: ch.Reason,
		Before: "backfilling MySQL", After: string(tandem.ModeRedis)}
	if err := t.store.AppendAudit(ctx, e); err != nil {
		t.report(fmt.Errorf("record %s: %w", e.Action, err))
	}
	t.changed(e)
	return nil
}

// ResumeTransitions starts again, on this instance, every recorded
// transition whose instance is this one (restarted) or is no longer seen,
// and forgets those whose pod has moved on.
func (t *transitions) ResumeTransitions(ctx context.Context) error {
	if t.fleet == nil {
		return nil
	}
	pts, err := t.store.PendingTransitions(ctx)
	if err != nil || len(pts) == 0 {
		return err
	}
	var live map[string]bool
	var errs []error
	for _, pt := range pts {
		if _, ok := t.pods.find(pt.Pod); !ok || t.Transitioning(pt.Pod) {
			continue
		}
		if t.modes.Mode(pt.Pod) != tandem.ModeRedis || pt.To != tandem.ModeShadow {
			if _, err := t.store.EndTransition(ctx, pt.Pod); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if pt.Owner != t.instanceID {
			if live == nil {
				if live, err = t.liveInstances(ctx); err != nil {
					return err
				}
			}
			if live[pt.Owner] {
				continue
			}
			ok, err := t.store.ClaimTransition(ctx, pt.Pod, pt.Owner, t.instanceID)
			if err != nil || !ok {
				errs = append(errs, err)
				continue
			}
		}
		t.mu.Lock()
		if t.runs[pt.Pod] == nil {
			t.startLocked(pt)
		}
		t.mu.Unlock()
	}
	return errors.Join(errs...)
}

// liveInstances returns the instances seen within staleAfter, this one
// excepted.
func (t *transitions) liveInstances(ctx context.Context) (map[string]bool, error) {
	ins, err := t.store.Instances(ctx)
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	now := t.now()
	for _, in := range ins {
		if in.ID != t.instanceID && now.Sub(in.LastSeen) <= t.staleAfter {
			live[in.ID] = true
		}
	}
	return live, nil
}
