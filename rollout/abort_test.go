package rollout_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
)

func TestController_Abort(t *testing.T) {
	ctx := context.Background()
	t.Run("TripsMySQLPodOverThreshold", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeMySQL, tandem.ModeShadow, tandem.ModeMySQL)
		e.record("pod-a", 100, 5)  // 5 % >= 5 %
		e.record("pod-b", 100, 50) // shadow: Redis is the SoT already
		e.record("pod-c", 100, 4)  // 4 %
		tripped := e.ctl.CheckAbort(ctx)
		if !slices.Equal(tripped, []string{"pod-a"}) {
			t.Fatalf("got %v, want [pod-a]", tripped)
		}
		ch := e.sw.change("pod-a")
		if ch.Actor != rollout.ActorAuto || !strings.Contains(ch.Reason, "0.0500") {
			t.Errorf("got %+v, want actor auto and a reason naming the rate", ch)
		}
		if again := e.ctl.CheckAbort(ctx); len(again) != 0 {
			t.Errorf("second check: got %v, want nothing (pod-a runs on Redis now)", again)
		}
	})

	t.Run("TripsOnMySQLErrors", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeMySQL, tandem.ModeShadow, tandem.ModeShadow)
		for i := range 100 {
			cmp := tandem.Comparison{Pod: "pod-a", Op: tandem.OpReserve, Primary: tandem.Outcome{Store: tandem.StoreMySQL, Status: "reserved"}}
			if i < 6 {
				cmp.Primary.Status = tandem.EUNAVAILABLE
			}
			e.cmp.Record(cmp)
		}
		if tripped := e.ctl.CheckAbort(ctx); !slices.Equal(tripped, []string{"pod-a"}) {
			t.Fatalf("got %v, want [pod-a]", tripped)
		}
		if r := e.sw.change("pod-a").Reason; !strings.Contains(r, "MySQL error rate 0.0600") {
			t.Errorf("reason: got %q, want it to name the MySQL error rate", r)
		}
	})

	t.Run("LeavesKilledAndMySQLOnlyPodsAlone", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeMySQL, tandem.ModeMySQLOnly, tandem.ModeShadow)
		e.sw.Engage(ctx, []string{"pod-a"}, tandem.Change{Actor: "oncall", Reason: "manual"})
		e.record("pod-a", 100, 100)
		e.record("pod-b", 100, 100)
		if tripped := e.ctl.CheckAbort(ctx); len(tripped) != 0 {
			t.Errorf("got %v, want nothing: pod-a already runs on Redis, pod-b cannot fall back", tripped)
		}
		if ch := e.sw.change("pod-a"); ch.Actor != "oncall" {
			t.Errorf("got pod-a engaged by %+v, want the operator's engagement kept", ch)
		}
	})

	t.Run("NeedsMinComparisons", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeMySQL, tandem.ModeShadow, tandem.ModeShadow)
		e.record("pod-a", 49, 49)
		if tripped := e.ctl.CheckAbort(ctx); len(tripped) != 0 {
			t.Errorf("got %v, want nothing under abort_min_comparisons", tripped)
		}
	})

	t.Run("ZeroRateDisables", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeMySQL, tandem.ModeShadow, tandem.ModeShadow)
		e.ctl.Gates.AbortDivergenceRate = 0
		e.record("pod-a", 100, 100)
		if tripped := e.ctl.CheckAbort(ctx); len(tripped) != 0 {
			t.Errorf("got %v, want nothing when disabled", tripped)
		}
	})
}
