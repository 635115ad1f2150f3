package rollout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
)

// TestController_Views checks that what the plan and the pods say is what
// is true: no soak on an aborted pod, the store that really answers a
// killed pod, and whether an audit ever ran.
func TestController_Views(t *testing.T) {
	ctx := context.Background()
	shadow := []tandem.Mode{tandem.ModeShadow, tandem.ModeShadow, tandem.ModeShadow}

	t.Run("AbortedPlanShowsNoSoak", func(t *testing.T) {
		e := newEnv(t, newMemStore(), shadow...)
		zero := time.Duration(0)
		planStart(t, e, func(s *tandem.PlanStart) { s.ShadowSoak = &zero })
		e.healthy()
		e.stepPlan(t)
		p := e.stepPlan(t)
		if step(p, "pod-b") != tandem.StepMySQLSoak || !strings.Contains(p.Pods[0].Waiting, "soaking in mysql") {
			t.Fatalf("got pod-b %+v, want it soaking in mysql", p.Pods[0])
		}
		p, err := e.ctl.AbortPlan(ctx, why)
		if err != nil {
			t.Fatal(err)
		}
		pb := p.Pods[0]
		if pb.Pod != "pod-b" || pb.Step != tandem.StepAborted {
			t.Fatalf("got %+v, want pod-b aborted", pb)
		}
		if pb.Waiting != "" || pb.SoakUntil != nil || pb.SoakRemaining != "" {
			t.Errorf("got waiting %q soak until %v remaining %q, want no soak on an aborted pod", pb.Waiting, pb.SoakUntil, pb.SoakRemaining)
		}
		if c, ok := check(p, "pod-b", rollout.GateMinSoak); ok {
			t.Errorf("got %+v on an aborted pod, want no min_soak gate", c)
		}
		if _, ok := check(p, "pod-b", tandem.GateComparisons); !ok {
			t.Errorf("got gates %+v, want the promotion gates still measured", pb.Gates)
		}
	})

	t.Run("KilledPodIsServedByRedis", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeMySQL, tandem.ModeMySQL, tandem.ModeShadow)
		planStart(t, e)
		e.sw.Engage(ctx, []string{"pod-b"}, why)
		p, err := e.ctl.PlanStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]struct {
			sot    string
			killed bool
		}{"pod-a": {tandem.StoreMySQL, false}, "pod-b": {tandem.StoreRedis, true}, "pod-c": {tandem.StoreRedis, false}}
		for _, pp := range p.Pods {
			if w := want[pp.Pod]; pp.SourceOfTruth != w.sot || pp.KillSwitch != w.killed {
				t.Errorf("got %s source of truth %q killed %t, want %q %t", pp.Pod, pp.SourceOfTruth, pp.KillSwitch, w.sot, w.killed)
			}
		}
	})

	t.Run("PodSaysWhenItsLastAuditRan", func(t *testing.T) {
		e := newEnv(t, newMemStore(), shadow...)
		st, err := e.ctl.Pod(ctx, "pod-a")
		if err != nil {
			t.Fatal(err)
		}
		if st.Gates.LastAuditAt != nil || st.Gates.LastAuditClean {
			t.Fatalf("got last audit %v clean %t before any audit, want none", st.Gates.LastAuditAt, st.Gates.LastAuditClean)
		}
		at := e.clk.Now()
		e.cmp.RecordAudit(tandem.Audit{Pod: "pod-a", At: at, Checked: 1, Clean: false})
		if st, err = e.ctl.Pod(ctx, "pod-a"); err != nil {
			t.Fatal(err)
		}
		if st.Gates.LastAuditAt == nil || !st.Gates.LastAuditAt.Equal(at) || st.Gates.LastAuditClean {
			t.Errorf("got last audit %v clean %t, want %v not clean", st.Gates.LastAuditAt, st.Gates.LastAuditClean, at)
		}
	})
}
