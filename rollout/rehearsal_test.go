package rollout_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
)

// fakeRehearser holds a pod's captures and answers each rehearsal with
// res (or err), after release when hold is set.
type fakeRehearser struct {
	mu       sync.Mutex
	captures map[string]string
	res      rollout.RehearsalResult
	err      error
	hold     bool
	release  chan struct{}
	asked    chan string
	// stopped receives the captures whose rehearsal was cancelled.
	stopped chan string
}

func newFakeRehearser() *fakeRehearser {
	return &fakeRehearser{captures: map[string]string{}, release: make(chan struct{}), asked: make(chan string, 64), stopped: make(chan string, 64)}
}

func (f *fakeRehearser) LatestCapture(pod string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.captures[pod]
	return id, ok
}

func (f *fakeRehearser) Rehearse(ctx context.Context, id string, speed float64) (rollout.RehearsalResult, error) {
	f.asked <- id
	f.mu.Lock()
	hold, res, err := f.hold, f.res, f.err
	f.mu.Unlock()
	if hold {
		select {
		case <-f.release:
		case <-ctx.Done():
			f.stopped <- id
			return rollout.RehearsalResult{}, ctx.Err()
		}
	}
	return res, err
}

func (f *fakeRehearser) set(fn func(f *fakeRehearser)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// rehearsalEnv is an env whose plan rehearses with r, with every ended
// rehearsal told on ended.
type rehearsalEnv struct {
	*env
	r     *fakeRehearser
	ended chan tandem.AuditLogEntry
}

func newRehearsalEnv(t *testing.T, modes ...tandem.Mode) *rehearsalEnv {
	t.Helper()
	e := &rehearsalEnv{r: newFakeRehearser(), ended: make(chan tandem.AuditLogEntry, 64)}
	e.env = newEnvWith(t, newMemStore(), "test", func(c *rollout.Controller) {
		c.Rehearser = e.r
		c.OnChange = func(le tandem.AuditLogEntry) {
			if le.Action == rollout.ActionPlanRehearsal {
				e.ended <- le
			}
		}
	}, modes...)
	zero, speed, p99 := time.Duration(0), 3.0, 50*time.Millisecond
	planStart(t, e.env, func(s *tandem.PlanStart) {
		s.ShadowSoak, s.MySQLSoak = &zero, &zero
		s.RehearsalSpeed, s.RehearsalP99Max = &speed, &p99
	})
	e.healthy()
	return e
}

func planPod(t *testing.T, p *tandem.Plan, pod string) tandem.PlanPod {
	t.Helper()
	for _, pp := range p.Pods {
		if pp.Pod == pod {
			return pp
		}
	}
	t.Fatalf("no pod %s in the plan", pod)
	panic("unreachable")
}

func rehearsalGate(t *testing.T, p *tandem.Plan, pod string) tandem.GateCheck {
	t.Helper()
	for _, ch := range planPod(t, p, pod).Gates.Checks {
		if ch.Gate == rollout.GateRehearsal {
			return ch
		}
	}
	t.Fatalf("no %s gate for %s in %+v", rollout.GateRehearsal, pod, planPod(t, p, pod).Gates)
	panic("unreachable")
}

func TestController_PlanRehearsal(t *testing.T) {
	shadow := []tandem.Mode{tandem.ModeShadow, tandem.ModeShadow, tandem.ModeShadow}
	held := rollout.RehearsalResult{Ops: 500, P99: 12 * time.Millisecond, GrantedThenRefused: 3, RefusedThenGranted: 3}

	t.Run("NoCaptureIsInconclusive", func(t *testing.T) {
		e := newRehearsalEnv(t, shadow...)
		for range 3 {
			e.stepPlan(t)
		}
		p := e.stepPlan(t)
		pp := planPod(t, p, "pod-b")
		if e.ctl.Mode("pod-b") != tandem.ModeShadow || !strings.Contains(pp.Waiting, "no capture of pod-b") ||
			!strings.Contains(pp.Waiting, "tandemctl capture pod-b") {
			t.Fatalf("got %s waiting %q, want shadow waiting for a capture", e.ctl.Mode("pod-b"), pp.Waiting)
		}
		ch := rehearsalGate(t, p, "pod-b")
		if ch.State != tandem.GateInconclusive || ch.Passing || ch.Threshold != 50 || !strings.Contains(ch.Missing, "no capture") {
			t.Fatalf("got %+v, want an inconclusive rehearsal gate with threshold 50 saying there is no capture", ch)
		}
		if pp.Gates.Passing || pp.Gates.State != tandem.GateInconclusive {
			t.Fatalf("got gates %+v, want them not passing, inconclusive", pp.Gates)
		}
		if p.Settings.Rehearsal == nil || p.Settings.Rehearsal.Speed != 3 || p.Settings.Rehearsal.P99Max != "50ms" {
			t.Fatalf("got settings %+v, want the rehearsal at 3x under 50ms", p.Settings.Rehearsal)
		}
		select {
		case id := <-e.r.asked:
			t.Fatalf("rehearsed %s without a capture", id)
		default:
		}
	})

	t.Run("HeldPromotes", func(t *testing.T) {
		e := newRehearsalEnv(t, shadow...)
		e.r.set(func(f *fakeRehearser) { f.captures["pod-b"], f.res, f.hold = "cap-1", held, true })
		for range 3 {
			e.stepPlan(t)
		}
		if id := recv(t, e.r.asked, "a rehearsal"); id != "cap-1" {
			t.Fatalf("rehearsed %s, want cap-1", id)
		}
		// The rehearsal runs: turns go on, keep the lease, and wait.
		p := e.stepPlan(t)
		if ch := rehearsalGate(t, p, "pod-b"); ch.State != tandem.GateInconclusive || !strings.Contains(ch.Missing, "rehearsing capture cap-1 at 3x") {
			t.Fatalf("got %+v, want an inconclusive gate while the rehearsal runs", ch)
		}
		if p.Driver != "test" || e.ctl.Mode("pod-b") != tandem.ModeShadow {
			t.Fatalf("got driver %q, pod-b %s, want the lease kept and pod-b in shadow", p.Driver, e.ctl.Mode("pod-b"))
		}
		close(e.r.release)
		recv(t, e.ended, "the end of the rehearsal")
		p = e.stepPlan(t)
		if e.ctl.Mode("pod-b") != tandem.ModeMySQL || step(p, "pod-b") != tandem.StepMySQLSoak {
			t.Fatalf("got %s step %s waiting %q, want pod-b promoted", e.ctl.Mode("pod-b"), step(p, "pod-b"), waiting(p, "pod-b"))
		}
		if len(e.r.asked) != 0 {
			t.Fatalf("rehearsed again after it held")
		}
	})

	t.Run("FailedKeepsThePodWaiting", func(t *testing.T) {
		e := newRehearsalEnv(t, shadow...)
		slow := held
		slow.P99 = 80 * time.Millisecond
		slow.GrantedThenRefused = 5
		e.r.set(func(f *fakeRehearser) { f.captures["pod-b"], f.res = "cap-1", slow })
		for range 3 {
			e.stepPlan(t)
		}
		recv(t, e.ended, "the end of the rehearsal")
		for range 2 {
			p := e.stepPlan(t)
			ch := rehearsalGate(t, p, "pod-b")
			if e.ctl.Mode("pod-b") != tandem.ModeShadow || ch.State != tandem.GateFail || ch.Value != 80 || ch.Threshold != 50 ||
				!strings.Contains(ch.Missing, "p99 80ms over 50ms") || !strings.Contains(ch.Missing, "granted 2 fewer ops than the capture") {
				t.Fatalf("got %s, gate %+v, want shadow and a failed gate with the p99 and the diff", e.ctl.Mode("pod-b"), ch)
			}
			if w := waiting(p, "pod-b"); !strings.Contains(w, "rehearsal of capture cap-1 did not hold") {
				t.Fatalf("got waiting %q, want why", w)
			}
		}
		recv(t, e.r.asked, "the rehearsal of cap-1")
		if n := len(e.r.asked); n != 0 {
			t.Fatalf("got %d more rehearsals of the same capture, want none", n)
		}
		// A new capture is rehearsed again, and this one holds.
		e.r.set(func(f *fakeRehearser) { f.captures["pod-b"], f.res = "cap-2", held })
		e.stepPlan(t)
		if id := recv(t, e.r.asked, "a rehearsal of the new capture"); id != "cap-2" {
			t.Fatalf("rehearsed %s, want cap-2", id)
		}
		recv(t, e.ended, "the end of the second rehearsal")
		if e.stepPlan(t); e.ctl.Mode("pod-b") != tandem.ModeMySQL {
			t.Fatalf("got %s, want mysql once a rehearsal held", e.ctl.Mode("pod-b"))
		}
	})

	t.Run("NewCaptureStopsTheOldRehearsal", func(t *testing.T) {
		e := newRehearsalEnv(t, shadow...)
		e.r.set(func(f *fakeRehearser) { f.captures["pod-b"], f.res, f.hold = "cap-1", held, true })
		for range 3 {
			e.stepPlan(t)
		}
		recv(t, e.r.asked, "the rehearsal of cap-1")
		e.r.set(func(f *fakeRehearser) { f.captures["pod-b"] = "cap-2" })
		if w := waiting(e.stepPlan(t), "pod-b"); !strings.Contains(w, "stopping the rehearsal of an older capture") {
			t.Fatalf("got waiting %q, want the old rehearsal stopping", w)
		}
		if id := recv(t, e.r.stopped, "the rehearsal of cap-1 stopped"); id != "cap-1" {
			t.Fatalf("stopped %s, want cap-1", id)
		}
		// The stopped rehearsal gives up its place: the next turns start
		// the new one.
		var id string
		for deadline := time.Now().Add(20 * time.Second); id == ""; {
			if time.Now().After(deadline) {
				t.Fatal("never: a rehearsal of cap-2")
			}
			e.stepPlan(t)
			select {
			case id = <-e.r.asked:
			case <-time.After(10 * time.Millisecond):
			}
		}
		if id != "cap-2" {
			t.Fatalf("rehearsed %s, want cap-2", id)
		}
		close(e.r.release)
		recv(t, e.ended, "the end of the rehearsal of cap-2")
		if e.stepPlan(t); e.ctl.Mode("pod-b") != tandem.ModeMySQL {
			t.Fatalf("got %s, want mysql once cap-2 held", e.ctl.Mode("pod-b"))
		}
	})

	t.Run("AbortStopsTheRehearsal", func(t *testing.T) {
		e := newRehearsalEnv(t, shadow...)
		e.r.set(func(f *fakeRehearser) { f.captures["pod-b"], f.res, f.hold = "cap-1", held, true })
		for range 3 {
			e.stepPlan(t)
		}
		recv(t, e.r.asked, "the rehearsal of cap-1")
		if _, err := e.ctl.AbortPlan(context.Background(), why); err != nil {
			t.Fatal(err)
		}
		e.stepPlan(t)
		if id := recv(t, e.r.stopped, "the rehearsal stopped by the abort"); id != "cap-1" {
			t.Fatalf("stopped %s, want cap-1", id)
		}
	})

	t.Run("ErrorIsTriedAgain", func(t *testing.T) {
		e := newRehearsalEnv(t, shadow...)
		e.r.set(func(f *fakeRehearser) {
			f.captures["pod-b"], f.err = "cap-1", errors.New("no scratch database")
		})
		for range 3 {
			e.stepPlan(t)
		}
		recv(t, e.ended, "the end of the rehearsal")
		p := e.stepPlan(t)
		if ch := rehearsalGate(t, p, "pod-b"); ch.State != tandem.GateInconclusive || !strings.Contains(ch.Missing, "could not be rehearsed: no scratch database") {
			t.Fatalf("got %+v, want an inconclusive gate saying why it could not run", ch)
		}
		if e.ctl.Mode("pod-b") != tandem.ModeShadow {
			t.Fatalf("got %s, want shadow", e.ctl.Mode("pod-b"))
		}
		recv(t, e.r.asked, "the rehearsal that failed")
		// Tried again after a while, and this time it runs and holds.
		e.r.set(func(f *fakeRehearser) { f.err, f.res = nil, held })
		e.clk.Advance(31 * time.Second)
		e.healthy()
		e.stepPlan(t)
		recv(t, e.r.asked, "the rehearsal tried again")
		recv(t, e.ended, "the end of the second rehearsal")
		if e.stepPlan(t); e.ctl.Mode("pod-b") != tandem.ModeMySQL {
			t.Fatalf("got %s, want mysql once the rehearsal ran and held", e.ctl.Mode("pod-b"))
		}
	})

	t.Run("BadSettings", func(t *testing.T) {
		e := newEnv(t, newMemStore(), shadow...)
		neg, zero := -1.0, time.Duration(0)
		for _, st := range []tandem.PlanStart{
			{Change: tandem.Change{Reason: "r"}, RehearsalSpeed: &neg},
			{Change: tandem.Change{Reason: "r"}, RehearsalSpeed: new(3.0), RehearsalP99Max: &zero},
		} {
			if _, err := e.ctl.StartPlan(context.Background(), st); tandem.ErrorCode(err) != tandem.EINVALID {
				t.Errorf("got %v, want invalid", err)
			}
		}
		if p, err := e.ctl.PlanStatus(context.Background()); err != nil || p.Phase != tandem.PlanIdle {
			t.Fatalf("got %v, %v, want the plan idle", p, err)
		}
	})
}
