package rollout_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
)

// latencies records n matches of pod with Redis and MySQL answering in
// these times.
func (e *env) latencies(pod string, n int, redis, mysql time.Duration) {
	for range n {
		e.cmp.Record(tandem.Comparison{Pod: pod, Op: tandem.OpReserve,
			Primary: tandem.Outcome{Store: tandem.StoreRedis, Status: "reserved", Latency: redis},
			Shadow:  tandem.Outcome{Store: tandem.StoreMySQL, Status: "reserved", Latency: mysql}})
	}
}

func p99Of(g tandem.PlanGates) tandem.GateCheck {
	for _, ch := range g.Checks {
		if ch.Gate == rollout.GateMySQLP99 {
			return ch
		}
	}
	return tandem.GateCheck{}
}

// TestPlanGates_P99ServiceLevel checks the p99 gate: MySQL within the
// absolute budget and within max(factor x Redis, Redis + slack).
func TestPlanGates_P99ServiceLevel(t *testing.T) {
	slo := rollout.Gates{MaxMySQLP99: 50 * time.Millisecond, MaxP99Factor: 3, P99Slack: 25 * time.Millisecond}
	tests := []struct {
		name         string
		gates        func(g *rollout.Gates)
		redis, mysql time.Duration
		n            int
		want         tandem.GateState
		missing      string
	}{
		// Issue 21: 9.58 ms against Redis's 2.54 ms refused at 3x.
		{"SlackPassesAFastRedis", nil, 2 * time.Millisecond, 10 * time.Millisecond, 200, tandem.GatePass, ""},
		{"FactorFailsWithoutSlack", func(g *rollout.Gates) { g.P99Slack = 0 }, 2 * time.Millisecond, 10 * time.Millisecond, 200,
			tandem.GateFail, "over 3x Redis's p99"},
		{"AbsoluteBudgetFails", nil, 30 * time.Millisecond, 70 * time.Millisecond, 200, tandem.GateFail, "over the 50ms budget"},
		{"OverRedisPlusSlackFails", nil, 2 * time.Millisecond, 40 * time.Millisecond, 200, tandem.GateFail, "over Redis's p99"},
		{"FactorAllowsASlowRedis", func(g *rollout.Gates) { g.MaxMySQLP99 = 0 }, 30 * time.Millisecond, 70 * time.Millisecond, 200,
			tandem.GatePass, ""},
		{"ZeroBudgetDisablesIt", func(g *rollout.Gates) { g.MaxMySQLP99 = 0 }, 2 * time.Millisecond, 20 * time.Millisecond, 200,
			tandem.GatePass, ""},
		{"AllZeroDisables", func(g *rollout.Gates) { g.MaxMySQLP99, g.MaxP99Factor, g.P99Slack = 0, 0, 0 },
			time.Millisecond, time.Second, 200, tandem.GatePass, ""},
		{"TooFewIsInconclusive", nil, 30 * time.Millisecond, 70 * time.Millisecond, 20, tandem.GateInconclusive, "too few to judge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := testGates
			g.MaxMySQLP99, g.MaxP99Factor, g.P99Slack = slo.MaxMySQLP99, slo.MaxP99Factor, slo.P99Slack
			if tt.gates != nil {
				tt.gates(&g)
			}
			e := newEnvWith(t, newMemStore(), "test", func(c *rollout.Controller) { c.Gates = g },
				tandem.ModeShadow, tandem.ModeShadow, tandem.ModeShadow)
			e.latencies("pod-b", tt.n, tt.redis, tt.mysql)
			ch := p99Of(e.ctl.PlanGates("pod-b", tandem.ModeShadow, e.clk.Now(), 0))
			if ch.State != tt.want || ch.Passing != (tt.want == tandem.GatePass) || !strings.Contains(ch.Missing, tt.missing) {
				t.Fatalf("got %+v, want %s saying %q", ch, tt.want, tt.missing)
			}
			if tt.want != tandem.GatePass && (ch.Value <= ch.Threshold || ch.Threshold <= 0) {
				t.Errorf("got value %v and threshold %v, want MySQL's p99 over its limit, in ms", ch.Value, ch.Threshold)
			}
		})
	}
}

// TestPlanGates_MySQLErrorRate checks the error-rate gate: an absolute
// maximum, inconclusive on too few comparisons, 0 disables.
func TestPlanGates_MySQLErrorRate(t *testing.T) {
	errs := func(e *env, n, bad int) {
		for i := range n {
			c := tandem.Comparison{Pod: "pod-b", Op: tandem.OpReserve, Primary: tandem.Outcome{Store: tandem.StoreRedis, Status: "reserved"},
				Shadow: tandem.Outcome{Store: tandem.StoreMySQL, Status: "reserved"}}
			if i < bad {
				c.Kind, c.Shadow.Status = tandem.KindShadowError, tandem.EUNAVAILABLE
			}
			e.cmp.Record(c)
		}
	}
	state := func(e *env) tandem.GateCheck {
		for _, ch := range e.ctl.PlanGates("pod-b", tandem.ModeShadow, e.clk.Now(), 0).Checks {
			if ch.Gate == rollout.GateMySQLErrorRate {
				return ch
			}
		}
		return tandem.GateCheck{}
	}
	withRate := func(limit float64) *env {
		return newEnvWith(t, newMemStore(), "test", func(c *rollout.Controller) { c.Gates.MaxMySQLErrorRate = limit },
			tandem.ModeShadow, tandem.ModeShadow, tandem.ModeShadow)
	}
	e := withRate(0.02)
	errs(e, 50, 2) // 4 % of 50; 2 of 100 would be 2 %: too few to say
	if ch := state(e); ch.State != tandem.GateInconclusive {
		t.Errorf("got %+v, want inconclusive", ch)
	}
	errs(e, 50, 1) // 3 of 100
	if ch := state(e); ch.State != tandem.GateFail || !strings.Contains(ch.Missing, "at most 2%") {
		t.Errorf("got %+v, want failing", ch)
	}
	off := withRate(0)
	errs(off, 50, 2)
	errs(off, 50, 1)
	if ch := state(off); ch.State != tandem.GatePass {
		t.Errorf("got %+v, want passing when disabled", ch)
	}
}

// TestPlan_ConsecutivePasses checks that the plan promotes a pod only once
// its gates passed the required evaluations in a row, and starts counting
// again after one that does not pass.
func TestPlan_ConsecutivePasses(t *testing.T) {
	e := newEnvWith(t, newMemStore(), "test", func(c *rollout.Controller) { c.Gates.ConsecutivePasses = 3 },
		tandem.ModeShadow, tandem.ModeShadow, tandem.ModeShadow)
	zero := time.Duration(0)
	planStart(t, e, func(s *tandem.PlanStart) { s.ShadowSoak = &zero })
	e.healthy()
	for i := 1; i <= 2; i++ {
		p := e.stepPlan(t)
		if e.ctl.Mode("pod-b") != tandem.ModeShadow || !strings.Contains(p.Waiting, "gates passing: "+string(rune('0'+i))+" of 3") {
			t.Fatalf("evaluation %d: got %s waiting %q, want shadow, %d of 3 passes", i, e.ctl.Mode("pod-b"), p.Waiting, i)
		}
		if p.Pods[0].Gates.Passes != i || p.Pods[0].Gates.PassesRequired != 3 {
			t.Errorf("got passes %d of %d, want %d of 3", p.Pods[0].Gates.Passes, p.Pods[0].Gates.PassesRequired, i)
		}
	}
	// One evaluation that does not pass (the audit found drift) starts
	// the count again.
	e.cmp.RecordAudit(tandem.Audit{Pod: "pod-b", At: e.clk.Now(), Checked: 1, Clean: false})
	if p := e.stepPlan(t); !strings.Contains(p.Waiting, "gates failing: audit") || p.Phase != tandem.PlanRunning {
		t.Fatalf("got %s waiting %q, want the plan running, waiting on the audit", p.Phase, p.Waiting)
	}
	e.clk.Advance(time.Second)
	e.cmp.RecordAudit(tandem.Audit{Pod: "pod-b", At: e.clk.Now(), Checked: 1, Clean: true})
	for i := 1; i <= 2; i++ {
		if e.stepPlan(t); e.ctl.Mode("pod-b") != tandem.ModeShadow {
			t.Fatalf("promoted after %d passes in a row, want 3", i)
		}
	}
	p := e.stepPlan(t)
	if e.ctl.Mode("pod-b") != tandem.ModeMySQL || step(p, "pod-b") != tandem.StepMySQLSoak {
		t.Fatalf("got %s, step %s after 3 passes in a row, want mysql in mysql_soak", e.ctl.Mode("pod-b"), step(p, "pod-b"))
	}
}
