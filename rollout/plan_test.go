package rollout_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
)

// planStart starts a plan with soaks of 10m unless changed by opts.
func planStart(t *testing.T, e *env, opts ...func(*tandem.PlanStart)) *tandem.Plan {
	t.Helper()
	soak := 10 * time.Minute
	st := tandem.PlanStart{Change: why, ShadowSoak: &soak, MySQLSoak: &soak}
	for _, o := range opts {
		o(&st)
	}
	p, err := e.ctl.StartPlan(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// healthy gives every pod clean comparisons and a clean audit now.
func (e *env) healthy() {
	for _, p := range []string{"pod-a", "pod-b", "pod-c"} {
		e.record(p, 200, 0)
		e.cmp.RecordAudit(tandem.Audit{Pod: p, At: e.clk.Now(), Checked: 1, Clean: true})
	}
}

// stepPlan runs one driver turn.
func (e *env) stepPlan(t *testing.T) *tandem.Plan {
	t.Helper()
	if err := e.ctl.StepPlan(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err := e.ctl.PlanStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func step(p *tandem.Plan, pod string) tandem.PlanStep {
	for _, pp := range p.Pods {
		if pp.Pod == pod {
			return pp.Step
		}
	}
	return ""
}

func check(p *tandem.Plan, pod, gate string) (tandem.GateCheck, bool) {
	for _, pp := range p.Pods {
		if pp.Pod != pod {
			continue
		}
		for _, c := range pp.Gates.Checks {
			if c.Gate == gate {
				return c, true
			}
		}
	}
	return tandem.GateCheck{}, false
}

func TestController_Plan(t *testing.T) {
	ctx := context.Background()
	redis := []tandem.Mode{tandem.ModeRedis, tandem.ModeRedis, tandem.ModeRedis}

	t.Run("WholeLifecycleSmallestFirst", func(t *testing.T) {
		e := newEnv(t, newMemStore(), redis...)
		p := planStart(t, e)
		if got := []string{p.Pods[0].Pod, p.Pods[1].Pod, p.Pods[2].Pod}; !slices.Equal(got, []string{"pod-b", "pod-a", "pod-c"}) {
			t.Fatalf("got order %v, want pod-b, pod-a, pod-c", got)
		}
		var entered []string
		for i := 0; i < 40 && p.Phase != tandem.PlanDone; i++ {
			e.healthy()
			p = e.stepPlan(t)
			for _, pp := range p.Pods {
				if pp.Step != "pending" && !slices.Contains(entered, pp.Pod) {
					entered = append(entered, pp.Pod)
				}
			}
			inflight := 0
			for _, pp := range p.Pods {
				if pp.Step != "pending" && pp.Step != "done" {
					inflight++
				}
			}
			if inflight > 1 {
				t.Fatalf("got %d pods in transition, want at most 1: %+v", inflight, p.Pods)
			}
			e.clk.Advance(4 * time.Minute)
		}
		if p.Phase != tandem.PlanDone {
			t.Fatalf("got phase %s (%s), want done", p.Phase, p.Waiting)
		}
		if !slices.Equal(entered, []string{"pod-b", "pod-a", "pod-c"}) {
			t.Errorf("got pods entering %v, want smallest first", entered)
		}
		for _, pod := range []string{"pod-a", "pod-b", "pod-c"} {
			if e.ctl.Mode(pod) != tandem.ModeMySQL {
				t.Errorf("%s: got %s, want mysql", pod, e.ctl.Mode(pod))
			}
		}
		log, _ := e.store.AuditLog(ctx, 100)
		steps := 0
		for _, l := range log {
			if l.Action == rollout.ActionSetMode && l.Actor == rollout.ActorPlan {
				steps++
			}
		}
		if steps != 6 {
			t.Errorf("got %d set_mode entries by %s, want 6 (two per pod)", steps, rollout.ActorPlan)
		}
		if !slices.Contains(e.store.actions(), rollout.ActionPlanDone) {
			t.Error("no plan_done in the audit log")
		}
	})

	t.Run("MinSoakHoldsThePromotion", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeShadow, tandem.ModeShadow, tandem.ModeShadow)
		planStart(t, e)
		e.healthy()
		p := e.stepPlan(t)
		if step(p, "pod-b") != "shadow_soak" || p.Pods[0].SoakUntil == nil || p.Pods[0].SoakRemaining != "10m0s" {
			t.Fatalf("got %+v, want pod-b soaking 10m", p.Pods[0])
		}
		c, ok := check(p, "pod-b", rollout.GateMinSoak)
		if !ok || c.Passing || c.Threshold != 600 || c.Value != 0 {
			t.Fatalf("got min_soak %+v, want failing 0 of 600", c)
		}
		for _, g := range []string{rollout.GateMySQLP99, rollout.GateMySQLErrorRate, tandem.GateComparisons, tandem.GateDivergenceRate, tandem.GateAudit} {
			if _, ok := check(p, "pod-b", g); !ok {
				t.Errorf("got no %s gate in %+v", g, p.Pods[0].Gates)
			}
		}
		e.clk.Advance(9 * time.Minute)
		e.healthy()
		if p = e.stepPlan(t); e.ctl.Mode("pod-b") != tandem.ModeShadow {
			t.Fatal("promoted before the soak ended")
		}
		e.clk.Advance(time.Minute)
		p = e.stepPlan(t)
		if e.ctl.Mode("pod-b") != tandem.ModeMySQL || step(p, "pod-b") != "mysql_soak" {
			t.Fatalf("got %s, step %s, want mysql in mysql_soak", e.ctl.Mode("pod-b"), step(p, "pod-b"))
		}
	})

	t.Run("FailingGatesWait", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeShadow, tandem.ModeShadow, tandem.ModeShadow)
		planStart(t, e)
		e.stepPlan(t)
		e.clk.Advance(11 * time.Minute)
		p := e.stepPlan(t)
		if e.ctl.Mode("pod-b") != tandem.ModeShadow || !strings.Contains(p.Waiting, "gates inconclusive: min_comparisons (100 more comparisons") {
			t.Fatalf("got mode %s waiting %q, want shadow, waiting on gates inconclusive for want of comparisons", e.ctl.Mode("pod-b"), p.Waiting)
		}
		if c, _ := check(p, "pod-b", tandem.GateComparisons); c.Passing || c.State != tandem.GateInconclusive || c.Threshold != 100 {
			t.Errorf("got %+v, want comparisons inconclusive against 100", c)
		}
		eventually(t, "the plan runs the audit its gate needs", func() bool {
			return slices.Contains(e.store.actions(), rollout.ActionAudit)
		})
	})

	t.Run("P99GateFails", func(t *testing.T) {
		e := newEnvWith(t, newMemStore(), "test", func(c *rollout.Controller) { c.Gates.MaxP99Factor = 1.5 },
			tandem.ModeShadow, tandem.ModeShadow, tandem.ModeShadow)
		for range 200 {
			e.cmp.Record(tandem.Comparison{Pod: "pod-b", Op: tandem.OpReserve,
				Primary: tandem.Outcome{Store: tandem.StoreRedis, Latency: time.Millisecond},
				Shadow:  tandem.Outcome{Store: tandem.StoreMySQL, Latency: 10 * time.Millisecond}})
		}
		c := e.ctl.PlanGates("pod-b", tandem.ModeShadow, e.clk.Now(), 0)
		var p99 tandem.GateCheck
		for _, ch := range c.Checks {
			if ch.Gate == rollout.GateMySQLP99 {
				p99 = ch
			}
		}
		if p99.Passing || p99.State != tandem.GateFail || p99.Value < 9 || p99.Threshold > 2 || c.Passing || c.State != tandem.GateFail {
			t.Fatalf("got %+v, want MySQL p99 ~10ms failing against 1.5x Redis's ~1ms", p99)
		}
	})

	t.Run("ApprovalWaitsForTheOperator", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeShadow, tandem.ModeShadow, tandem.ModeShadow)
		yes, zero := true, time.Duration(0)
		planStart(t, e, func(s *tandem.PlanStart) { s.Approval, s.ShadowSoak = &yes, &zero })
		e.healthy()
		e.stepPlan(t)
		p := e.stepPlan(t)
		if step(p, "pod-b") != "awaiting_approval" || e.ctl.Mode("pod-b") != tandem.ModeShadow {
			t.Fatalf("got step %s, want awaiting_approval", step(p, "pod-b"))
		}
		if _, err := e.ctl.ApprovePlan(ctx, why, "pod-b"); err != nil {
			t.Fatal(err)
		}
		e.stepPlan(t)
		if e.ctl.Mode("pod-b") != tandem.ModeMySQL {
			t.Fatalf("got %s after approval, want mysql", e.ctl.Mode("pod-b"))
		}
	})

	t.Run("ParallelMovesTwo", func(t *testing.T) {
		e := newEnv(t, newMemStore(), redis...)
		two := 2
		planStart(t, e, func(s *tandem.PlanStart) { s.Parallel = &two })
		p := e.stepPlan(t)
		if step(p, "pod-b") != "shadow_soak" || step(p, "pod-a") != "shadow_soak" || step(p, "pod-c") != "pending" {
			t.Fatalf("got %+v, want pod-b and pod-a soaking, pod-c pending", p.Pods)
		}
	})

	t.Run("FinalModeMySQLOnly", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeMySQL, tandem.ModeMySQL, tandem.ModeMySQL)
		final, zero := tandem.ModeMySQLOnly, time.Duration(0)
		planStart(t, e, func(s *tandem.PlanStart) { s.FinalMode, s.MySQLSoak = &final, &zero })
		var p *tandem.Plan
		for range 8 {
			e.healthy()
			p = e.stepPlan(t)
		}
		if p.Phase != tandem.PlanDone || e.ctl.Mode("pod-c") != tandem.ModeMySQLOnly {
			t.Fatalf("got %s, pod-c %s, want done with mysql_only", p.Phase, e.ctl.Mode("pod-c"))
		}
	})

	t.Run("KillSwitchOnAMovedPodAborts", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeShadow, tandem.ModeShadow, tandem.ModeShadow)
		zero := time.Duration(0)
		planStart(t, e, func(s *tandem.PlanStart) { s.ShadowSoak = &zero })
		e.healthy()
		e.stepPlan(t)
		if e.ctl.Mode("pod-b") != tandem.ModeMySQL {
			t.Fatalf("got %s, want pod-b promoted", e.ctl.Mode("pod-b"))
		}
		e.sw.Engage(ctx, []string{"pod-b"}, why)
		p := e.stepPlan(t)
		if p.Phase != tandem.PlanAborted || !strings.Contains(p.Waiting, "kill switch engaged on pod-b") || step(p, "pod-b") != "aborted" {
			t.Fatalf("got %s %q step %s, want aborted by the kill switch", p.Phase, p.Waiting, step(p, "pod-b"))
		}
	})

	t.Run("GateFailingInTheMySQLSoakAbortsAndKills", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeShadow, tandem.ModeShadow, tandem.ModeShadow)
		zero := time.Duration(0)
		planStart(t, e, func(s *tandem.PlanStart) { s.ShadowSoak = &zero })
		e.healthy()
		e.stepPlan(t)
		e.record("pod-b", 200, 100)
		p := e.stepPlan(t)
		if p.Phase != tandem.PlanAborted || !strings.Contains(p.Waiting, "divergence_rate") {
			t.Fatalf("got %s %q, want aborted by the divergence rate", p.Phase, p.Waiting)
		}
		if !e.sw.Engaged("pod-b") {
			t.Error("the kill switch of pod-b, on MySQL, is not engaged")
		}
	})

	t.Run("PauseResumeSkip", func(t *testing.T) {
		e := newEnv(t, newMemStore(), redis...)
		planStart(t, e)
		if _, err := e.ctl.PausePlan(ctx, why); err != nil {
			t.Fatal(err)
		}
		if p := e.stepPlan(t); step(p, "pod-b") != "pending" || p.Phase != tandem.PlanPaused {
			t.Fatalf("a paused plan moved: %+v", p)
		}
		if _, err := e.ctl.StartPlan(ctx, tandem.PlanStart{Change: why}); tandem.ErrorCode(err) != tandem.ECONFLICT {
			t.Fatalf("start while paused: got %v, want conflict", err)
		}
		if _, err := e.ctl.SkipPlan(ctx, why, "pod-b"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ctl.ResumePlan(ctx, why); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ctl.ResumePlan(ctx, why); tandem.ErrorCode(err) != tandem.ECONFLICT {
			t.Fatalf("resume while running: got %v, want conflict", err)
		}
		p := e.stepPlan(t)
		if step(p, "pod-b") != "skipped" || step(p, "pod-a") != "shadow_soak" || e.ctl.Mode("pod-b") != tandem.ModeRedis {
			t.Fatalf("got %+v, want pod-b skipped and pod-a moving", p.Pods)
		}
		if _, err := e.ctl.AbortPlan(ctx, why); err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{rollout.ActionPlanStart, rollout.ActionPlanPause, rollout.ActionPlanSkip, rollout.ActionPlanResume, rollout.ActionPlanAbort} {
			if !slices.Contains(e.store.actions(), a) {
				t.Errorf("got actions %v, want %s", e.store.actions(), a)
			}
		}
	})

	t.Run("BadSettings", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		zero, redisMode := 0, tandem.ModeRedis
		for _, o := range []func(*tandem.PlanStart){
			func(s *tandem.PlanStart) { s.Parallel = &zero },
			func(s *tandem.PlanStart) { s.FinalMode = &redisMode },
		} {
			st := tandem.PlanStart{Change: why}
			o(&st)
			if _, err := e.ctl.StartPlan(ctx, st); tandem.ErrorCode(err) != tandem.EINVALID {
				t.Errorf("got %v, want invalid", err)
			}
		}
	})

	t.Run("LeaseTakeover", func(t *testing.T) {
		store := newMemStore()
		a := newEnvAs(t, store, "a", redis...)
		b := newEnvAs(t, store, "b", redis...)
		planStart(t, a)
		p := a.stepPlan(t)
		if p.Driver != "a" || step(p, "pod-b") != "shadow_soak" {
			t.Fatalf("got driver %q step %s, want a driving", p.Driver, step(p, "pod-b"))
		}
		b.clk.Advance(5 * time.Second)
		if p := b.stepPlan(t); p.Driver != "a" {
			t.Fatalf("got driver %q within a's lease, want a", p.Driver)
		}
		// a dies: its lease runs out and b continues where it stopped.
		a.ctl.Close()
		b.clk.Advance(6 * time.Second)
		if err := b.ctl.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		p = b.stepPlan(t)
		if p.Driver != "b" || step(p, "pod-b") != "shadow_soak" {
			t.Fatalf("got driver %q step %s, want b driving pod-b's soak", p.Driver, step(p, "pod-b"))
		}
	})
}
