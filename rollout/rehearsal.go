package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tandemhq/tandem"
)

// The rehearsal gate (rollout.plan.rehearsal): before the plan moves a pod
// from shadow to mysql, it replays the pod's latest capture on a scratch
// database at RehearsalSpeed times its speed, through the MySQL engine
// with production settings, and promotes only when the rehearsal held:
// every op's p99 under RehearsalP99Max, no error, the engine's invariants
// clean and the same number of grants as the capture (which cart won the
// last units may differ: that is a race, not a diff). Shadow mode proves
// MySQL at today's traffic; the rehearsal asks about Black Friday's.
//
// As the confirm webhooks, the rehearsal runs in the background: a plan
// turn only starts it and reads its answer, so the driver renews its lease
// while the replay takes its time. Its outcome is saved with the pod in the
// plan, so that every instance shows it and a new driver does not run a
// held rehearsal again.

// GateRehearsal is the rehearsal gate's check: the rehearsal's highest
// p99 of any op, in milliseconds, against RehearsalP99Max.
const GateRehearsal = "rehearsal"

// ActionPlanRehearsal is told to OnChange only: a rehearsal of a pod's
// capture ended (After is "held", else Reason says why not).
const ActionPlanRehearsal = "plan_rehearsal"

// MaxRehearsalSpeed is the fastest rehearsal a plan may ask for.
const MaxRehearsalSpeed = 1000

// rehearsalRetryEvery is how long the plan waits before it tries again a
// rehearsal that could not run (no scratch database, for one): a
// rehearsal that ran and did not hold is tried again only on a new capture.
const rehearsalRetryEvery = 30 * time.Second

// Rehearser replays a pod's captures; cmd/tandem/internal/server
// implements it over the capture recorder and internal/replay.
type Rehearser interface {
	// LatestCapture returns the ID of pod's newest ended capture on this
	// instance; false when it has none.
	LatestCapture(pod string) (string, bool)
	// Rehearse replays capture id on a scratch database at speed times
	// its speed and returns its figures; an error when it could not run.
	Rehearse(ctx context.Context, id string, speed float64) (RehearsalResult, error)
}

// RehearsalResult is what the rehearsal gate judges of a replay.
type RehearsalResult struct {
	// Ops is how many operations were replayed.
	Ops int
	// P99 is the highest p99 of any kind of op.
	P99 time.Duration
	// Errors counts ops that failed (or were cancelled).
	Errors int
	// Violations counts the engine's broken invariants at the end.
	Violations int
	// GrantedThenRefused counts ops the capture's source of truth granted
	// that the replay refused, RefusedThenGranted the reverse; as many of
	// each are races for the same units, the difference is a diff.
	GrantedThenRefused, RefusedThenGranted int
}

// podRehearsal is the rehearsal gate of a pod, saved in the plan.
type podRehearsal struct {
	// Capture is the capture rehearsed (or being rehearsed).
	Capture string `json:"capture,omitempty"`
	// State is inconclusive while there is no capture or the rehearsal
	// runs, pass or fail once it ran.
	State   tandem.GateState `json:"state"`
	P99MS   float64          `json:"p99_ms,omitempty"`
	Missing string           `json:"missing,omitempty"`
}

// rehearsalRun is one rehearsal of a pod's capture.
type rehearsalRun struct {
	// key is the plan, pod, capture and settings it rehearses.
	key    string
	cancel context.CancelFunc
	done   bool
	res    RehearsalResult
	err    error
	at     time.Time
}

// rehearsed reports whether p's latest capture was rehearsed and held.
// When not (yet), it starts the rehearsal if none runs and says in
// p.Waiting and p.Rehearsal why the pod waits.
func (pd *planDriver) rehearsed(d *planDoc, p *planPod) bool {
	set := d.Settings
	if set.RehearsalSpeed <= 0 {
		return true
	}
	if r := p.Rehearsal; r != nil && r.State == tandem.GatePass {
		return true
	}
	wait := func(capture, missing string) bool {
		p.Rehearsal = &podRehearsal{Capture: capture, State: tandem.GateInconclusive, Missing: missing}
		p.Waiting = "rehearsal: " + missing
		return false
	}
	if pd.rehearser == nil || pd.life.ctx.Err() != nil {
		return wait("", "the plan has a rehearsal gate but this instance cannot rehearse")
	}
	id, ok := pd.rehearser.LatestCapture(p.Pod)
	if !ok {
		return wait("", fmt.Sprintf("no capture of %s on this instance yet: take one under traffic (tandemctl capture %s --for 10m)", p.Pod, p.Pod))
	}
	if r := p.Rehearsal; r != nil && r.Capture == id && r.State == tandem.GateFail {
		p.Waiting = fmt.Sprintf("rehearsal of capture %s did not hold: %s; a new capture of %s is rehearsed again", id, r.Missing, p.Pod)
		return false
	}
	key := fmt.Sprintf("%s %s %s %g %s", d.ID, p.Pod, id, set.RehearsalSpeed, set.RehearsalP99Max)
	running := fmt.Sprintf("rehearsing capture %s at %gx on a scratch database", id, set.RehearsalSpeed)
	pd.rehearseMu.Lock()
	defer pd.rehearseMu.Unlock()
	if r := pd.rehearsals[p.Pod]; r != nil {
		switch {
		case !r.done && r.key != key:
			// It rehearses an older capture, or for an older plan.
			r.cancel()
			return wait(id, "stopping the rehearsal of an older capture (or plan) of "+p.Pod)
		case r.key != key:
		case !r.done:
			return wait(id, running)
		case r.err != nil && pd.now().Sub(r.at) < rehearsalRetryEvery:
			return wait(id, fmt.Sprintf("capture %s could not be rehearsed: %s; trying again", id, rehearsalError(r.err)))
		case r.err == nil:
			delete(pd.rehearsals, p.Pod)
			p.Rehearsal = judgeRehearsal(id, r.res, set)
			if p.Rehearsal.State == tandem.GatePass {
				return true
			}
			p.Waiting = fmt.Sprintf("rehearsal of capture %s did not hold: %s; a new capture of %s is rehearsed again", id, p.Rehearsal.Missing, p.Pod)
			return false
		}
	}
	ctx, cancel := context.WithCancel(pd.life.ctx)
	pd.rehearsals[p.Pod] = &rehearsalRun{key: key, cancel: cancel}
	pod, speed := p.Pod, set.RehearsalSpeed
	pd.life.start(func() { pd.rehearse(ctx, cancel, key, pod, id, speed) })
	return wait(id, running)
}

// rehearse runs one rehearsal and records its answer.
func (pd *planDriver) rehearse(ctx context.Context, cancel context.CancelFunc, key, pod, id string, speed float64) {
	defer cancel()
	res, err := pd.rehearser.Rehearse(ctx, id, speed)
	if ctx.Err() != nil {
		// Closed, or superseded by a newer capture or plan.
		pd.rehearseMu.Lock()
		if r := pd.rehearsals[pod]; r != nil && r.key == key {
			delete(pd.rehearsals, pod)
		}
		pd.rehearseMu.Unlock()
		return
	}
	pd.rehearseMu.Lock()
	if r := pd.rehearsals[pod]; r != nil && r.key == key && !r.done {
		r.done, r.res, r.err, r.at = true, res, err, pd.now()
	}
	pd.rehearseMu.Unlock()
	e := tandem.AuditLogEntry{At: pd.now().UTC(), Actor: ActorPlan, Action: ActionPlanRehearsal, Pod: pod,
		Before: fmt.Sprintf("capture %s at %gx", id, speed), After: "ran"}
	if err != nil {
		e.Reason, e.After = "could not rehearse: "+rehearsalError(err), "error"
	} else {
		e.Reason = fmt.Sprintf("%d ops, p99 %s, %d errors, %d broken invariants", res.Ops, msText(ms(res.P99)), res.Errors, res.Violations)
	}
	pd.changed(e)
}

// rehearsalError says why a rehearsal could not run: the replay's own
// errors (the scratch database's server refused, the capture's file is
// gone) are what the operator must act on, so they are shown as they are.
func rehearsalError(err error) string {
	var e *tandem.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

// stopRehearsals cancels the rehearsals that run.
func (pd *planDriver) stopRehearsals() {
	pd.rehearseMu.Lock()
	defer pd.rehearseMu.Unlock()
	for _, r := range pd.rehearsals {
		if !r.done {
			r.cancel()
		}
	}
}

// judgeRehearsal is the gate's verdict on a rehearsal of capture id.
func judgeRehearsal(id string, res RehearsalResult, set PlanSettings) *podRehearsal {
	r := &podRehearsal{Capture: id, State: tandem.GatePass, P99MS: ms(res.P99)}
	var why []string
	if res.Ops == 0 {
		why = append(why, fmt.Sprintf("capture %s recorded no operation: take one under traffic", id))
	}
	if res.Violations > 0 {
		why = append(why, fmt.Sprintf("%d broken invariants", res.Violations))
	}
	if res.Errors > 0 {
		why = append(why, fmt.Sprintf("%d errors", res.Errors))
	}
	switch diff := res.RefusedThenGranted - res.GrantedThenRefused; {
	case diff < 0:
		why = append(why, fmt.Sprintf("it granted %d fewer ops than the capture (granted then refused %d, refused then granted %d)",
			-diff, res.GrantedThenRefused, res.RefusedThenGranted))
	case diff > 0:
		why = append(why, fmt.Sprintf("it granted %d more ops than the capture (granted then refused %d, refused then granted %d)",
			diff, res.GrantedThenRefused, res.RefusedThenGranted))
	}
	if set.RehearsalP99Max > 0 && res.P99 > set.RehearsalP99Max {
		why = append(why, fmt.Sprintf("p99 %s over %s", msText(ms(res.P99)), msText(ms(set.RehearsalP99Max))))
	}
	if len(why) > 0 {
		r.State, r.Missing = tandem.GateFail, strings.Join(why, ", ")
	}
	return r
}

// rehearsalCheck is p's rehearsal gate as the plan shows it.
func rehearsalCheck(p planPod, set PlanSettings) tandem.GateCheck {
	ch := tandem.GateCheck{Gate: GateRehearsal, Threshold: ms(set.RehearsalP99Max), State: tandem.GateInconclusive,
		Missing: "not rehearsed yet: the plan rehearses the pod's latest capture once the other gates pass"}
	if r := p.Rehearsal; r != nil {
		ch.Value, ch.State, ch.Missing = r.P99MS, r.State, r.Missing
	}
	ch.Passing = ch.State == tandem.GatePass
	return ch
}

// withCheck adds ch to g.
func withCheck(g tandem.PlanGates, ch tandem.GateCheck) tandem.PlanGates {
	g.Checks = append(append([]tandem.GateCheck{}, g.Checks...), ch)
	g.Passing = g.Passing && ch.Passing
	g.State = combine(g.Checks)
	return g
}

// validateRehearsal checks a plan's rehearsal gate.
func validateRehearsal(speed float64, p99Max time.Duration) error {
	switch {
	case speed < 0 || speed > MaxRehearsalSpeed || speed != speed:
		return tandem.Errorf(tandem.EINVALID, "rehearsal.speed must be 0..%d (0 turns the rehearsal off), got %v", MaxRehearsalSpeed, speed)
	case speed > 0 && p99Max <= 0:
		return tandem.Errorf(tandem.EINVALID, "rehearsal.p99_max must be above 0, got %s", p99Max)
	}
	return nil
}
