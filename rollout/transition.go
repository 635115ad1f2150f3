package rollout

import (
	"context"
	"errors"
	"fmt"
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
	// cancelled is set (under trMu) when an operator cancels it; err is
	// the copy's failure, read after done.
	cancelled bool
	err       error
}

// transition returns the transition running for pod on this instance, with
// the backfill's progress; nil when none runs.
func (c *Controller) transition(pod string) *tandem.Transition {
	c.trMu.Lock()
	run := c.transitions[pod]
	c.trMu.Unlock()
	if run == nil {
		return nil
	}
	t := &tandem.Transition{To: run.to, Phase: tandem.TransitionBackfill, StartedAt: run.startedAt}
	if c.Fleet != nil {
		if p := c.Fleet.BackfillProgress(pod); p != nil && !p.StartedAt.Before(run.startedAt.Add(-time.Second)) {
			t.Step, t.Copied, t.Total = p.Step, p.Copied, p.Total
			t.HoldsPerSec, t.ETASeconds, t.Checkpoint, t.Resumed = p.HoldsPerSec, p.ETASeconds, p.Checkpoint, p.Resumed
		}
	}
	return t
}

// remoteTransitions shows, in the statuses without a transition here, the
// transitions that run on other instances, with the progress they last
// recorded. A control database that does not answer shows none.
func (c *Controller) remoteTransitions(ctx context.Context, sts []tandem.PodStatus) {
	if c.Fleet == nil {
		return
	}
	// The statuses otherwise come from memory: a slow control database
	// must not hold them up.
	ctx, cancel := context.WithTimeout(ctx, remoteTimeout)
	defer cancel()
	pts, err := c.Store.PendingTransitions(ctx)
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
func (c *Controller) Transitioning(pod string) bool {
	c.trMu.Lock()
	defer c.trMu.Unlock()
	return c.transitions[pod] != nil
}

// enterShadow starts (or joins) pod's backfill and waits up to
// BackfillWait for it: a copy done by then answers the pod in shadow, a
// longer one answers with the transition running, a failed one
// EUNAVAILABLE with the mode unchanged.
func (c *Controller) enterShadow(ctx context.Context, pod string, ch tandem.Change) (*tandem.PodStatus, *tandem.DryRun, error) {
	if !c.Transitioning(pod) {
		if st, ok := c.remoteCopy(ctx, pod); ok {
			return st, nil, nil
		}
	}
	c.trMu.Lock()
	run := c.transitions[pod]
	if run == nil {
		pt := tandem.PendingTransition{Pod: pod, To: tandem.ModeShadow, Owner: c.InstanceID,
			Actor: ch.Actor, Reason: ch.Reason, StartedAt: c.Now().UTC()}
		if err := c.Store.BeginTransition(ctx, pt); err != nil {
			c.trMu.Unlock()
			return nil, nil, unavailable(err, "record transition")
		}
		run = c.startTransitionLocked(pt)
	}
	c.trMu.Unlock()
	t := time.NewTimer(c.BackfillWait)
	defer t.Stop()
	select {
	case <-run.done:
		if tandem.ErrorCode(run.err) == tandem.ECONFLICT {
			_ = c.Reload(ctx)
			return nil, nil, run.err
		}
		if run.err != nil {
			return nil, nil, tandem.Errorf(tandem.EUNAVAILABLE, "backfill of MySQL for pod %s failed, mode unchanged: %s", pod, tandem.ErrorMessage(run.err))
		}
	case <-t.C:
	case <-ctx.Done():
	}
	st := c.status(pod)
	return &st, nil, nil
}

// remoteCopy returns pod's status when a live instance other than this
// one runs its copy already: the request joins it rather than starting a
// second one.
func (c *Controller) remoteCopy(ctx context.Context, pod string) (*tandem.PodStatus, bool) {
	pts, err := c.Store.PendingTransitions(ctx)
	if err != nil {
		return nil, false
	}
	for _, pt := range pts {
		if pt.Pod != pod || pt.Owner == c.InstanceID {
			continue
		}
		live, err := c.liveInstances(ctx)
		if err != nil || !live[pt.Owner] {
			return nil, false
		}
		st := []tandem.PodStatus{c.status(pod)}
		c.remoteTransitions(ctx, st)
		return &st[0], st[0].Transition != nil
	}
	return nil, false
}

// startTransitionLocked runs pt in the background; c.trMu must be held.
func (c *Controller) startTransitionLocked(pt tandem.PendingTransition) *transitionRun {
	ctx, cancel := context.WithCancel(c.ctx)
	run := &transitionRun{pod: pt.Pod, to: pt.To, from: pt.Checkpoint, ch: tandem.Change{Actor: pt.Actor, Reason: pt.Reason},
		startedAt: pt.StartedAt, cancel: cancel, done: make(chan struct{})}
	c.transitions[pt.Pod] = run
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		c.runTransition(ctx, run)
	}()
	return run
}

// runTransition copies, then persists the mode; it tells OnChange when
// the copy starts, how it goes every ProgressInterval and how it ends.
func (c *Controller) runTransition(ctx context.Context, run *transitionRun) {
	pod := run.pod
	defer func() {
		c.trMu.Lock()
		if c.transitions[pod] == run {
			delete(c.transitions, pod)
		}
		c.trMu.Unlock()
		close(run.done)
	}()
	e := tandem.AuditLogEntry{At: c.Now().UTC(), Actor: run.ch.Actor, Action: ActionBackfillStart, Pod: pod,
		Reason: run.ch.Reason, Before: string(tandem.ModeRedis), After: "backfilling MySQL"}
	if run.from.Shop > 0 {
		e.After = fmt.Sprintf("backfilling MySQL, resumed after shop %d with %d holds copied", run.from.Shop, run.from.Copied)
	}
	c.changed(e)
	copied := make(chan error, 1)
	go func() { copied <- c.backfill(ctx, run) }()
	tick := time.NewTicker(c.ProgressInterval)
	defer tick.Stop()
	var err error
wait:
	for {
		select {
		case err = <-copied:
			break wait
		case <-tick.C:
			if t := c.transition(pod); t != nil {
				pctx, cancel := context.WithTimeout(ctx, storeTimeout)
				if err := c.Store.TransitionProgress(pctx, pod, c.InstanceID, t.Copied, t.Total); err != nil {
					c.report(fmt.Errorf("record the progress of %s: %w", pod, err))
				}
				cancel()
				c.changed(tandem.AuditLogEntry{At: c.Now().UTC(), Actor: run.ch.Actor, Action: ActionBackfillProgress, Pod: pod,
					Reason: run.ch.Reason, Before: string(tandem.ModeRedis), After: progressText(t)})
			}
		}
	}
	c.trMu.Lock()
	cancelled := run.cancelled
	c.trMu.Unlock()
	if cancelled || (err != nil && c.ctx.Err() != nil) {
		// Cancelled by an operator (who ends the record), or this
		// instance stops: the record stays for the next start.
		run.err = context.Canceled
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	e.At, e.Action, e.After = c.Now().UTC(), ActionBackfillEnd, "done"
	if err != nil {
		run.err = err
		e.After = "failed: " + tandem.ErrorMessage(err)
		c.changed(e)
		c.report(fmt.Errorf("backfill pod %s: %w", pod, err))
		if _, err := c.Store.EndTransition(sctx, pod); err != nil {
			c.report(fmt.Errorf("end transition of %s: %w", pod, err))
		}
		return
	}
	c.changed(e)
	set := tandem.AuditLogEntry{At: c.Now().UTC(), Actor: run.ch.Actor, Action: ActionSetMode, Pod: pod, Reason: run.ch.Reason,
		Before: string(tandem.ModeRedis), After: string(run.to)}
	if _, err := c.Store.FinishTransition(sctx, pod, tandem.ModeRedis, run.to, set); err != nil {
		run.err = err
		c.report(fmt.Errorf("apply %s to %s after its backfill: %w", run.to, pod, err))
		return
	}
	c.changed(set)
	if err := c.Reload(sctx); err != nil {
		c.report(err)
	}
}

// backfill runs run's copy: resumed after its checkpoint, each new one
// recorded with the transition, when the fleet and the store can.
func (c *Controller) backfill(ctx context.Context, run *transitionRun) error {
	rf, ok1 := c.Fleet.(resumableFleet)
	cs, ok2 := c.Store.(checkpointStore)
	if !ok1 || !ok2 {
		return c.Fleet.Backfill(ctx, run.pod)
	}
	save := func(ctx context.Context, at tandem.BackfillCheckpoint) error {
		sctx, cancel := context.WithTimeout(ctx, storeTimeout)
		defer cancel()
		return cs.TransitionCheckpoint(sctx, run.pod, c.InstanceID, at)
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

// cancelTransition cancels pod's running transition, here or on another
// instance (whose copy then finds its record gone and does not apply),
// and writes the cancellation to the audit log.
func (c *Controller) cancelTransition(ctx context.Context, pod string, ch tandem.Change) error {
	c.trMu.Lock()
	run := c.transitions[pod]
	if run != nil {
		run.cancelled = true
		run.cancel()
	}
	c.trMu.Unlock()
	if run != nil {
		select {
		case <-run.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ended, err := c.Store.EndTransition(ctx, pod)
	if err != nil {
		if run != nil {
			return unavailable(err, "cancel transition")
		}
		c.report(fmt.Errorf("cancel transition of %s: %w", pod, err))
		return nil
	}
	if !ended && run == nil {
		return nil
	}
	e := tandem.AuditLogEntry{At: c.Now().UTC(), Actor: ch.Actor, Action: ActionBackfillCancel, Pod: pod, Reason: ch.Reason,
		Before: "backfilling MySQL", After: string(tandem.ModeRedis)}
	if err := c.Store.AppendAudit(ctx, e); err != nil {
		c.report(fmt.Errorf("record %s: %w", e.Action, err))
	}
	c.changed(e)
	return nil
}

// ResumeTransitions starts again, on this instance, every recorded
// transition whose instance is this one (restarted) or is no longer seen,
// and forgets those whose pod has moved on.
func (c *Controller) ResumeTransitions(ctx context.Context) error {
	if c.Fleet == nil {
		return nil
	}
	pts, err := c.Store.PendingTransitions(ctx)
	if err != nil || len(pts) == 0 {
		return err
	}
	var live map[string]bool
	var errs []error
	for _, pt := range pts {
		if _, ok := c.config(pt.Pod); !ok || c.Transitioning(pt.Pod) {
			continue
		}
		if c.Mode(pt.Pod) != tandem.ModeRedis || pt.To != tandem.ModeShadow {
			if _, err := c.Store.EndTransition(ctx, pt.Pod); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if pt.Owner != c.InstanceID {
			if live == nil {
				if live, err = c.liveInstances(ctx); err != nil {
					return err
				}
			}
			if live[pt.Owner] {
				continue
			}
			ok, err := c.Store.ClaimTransition(ctx, pt.Pod, pt.Owner, c.InstanceID)
			if err != nil || !ok {
				errs = append(errs, err)
				continue
			}
		}
		c.trMu.Lock()
		if c.transitions[pt.Pod] == nil {
			c.startTransitionLocked(pt)
		}
		c.trMu.Unlock()
	}
	return errors.Join(errs...)
}

// liveInstances returns the instances seen within StaleAfter, this one
// excepted.
func (c *Controller) liveInstances(ctx context.Context) (map[string]bool, error) {
	ins, err := c.Store.Instances(ctx)
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	now := c.Now()
	for _, in := range ins {
		if in.ID != c.InstanceID && now.Sub(in.LastSeen) <= c.StaleAfter {
			live[in.ID] = true
		}
	}
	return live, nil
}
