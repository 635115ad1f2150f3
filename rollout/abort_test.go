package rollout_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/comparator"
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
		e := newEnvWith(t, newMemStore(), "test", func(c *rollout.Controller) { c.Gates.AbortDivergenceRate = 0 },
			tandem.ModeMySQL, tandem.ModeShadow, tandem.ModeShadow)
		e.record("pod-a", 100, 100)
		if tripped := e.ctl.CheckAbort(ctx); len(tripped) != 0 {
			t.Errorf("got %v, want nothing when disabled", tripped)
		}
	})
}

// TestController_AbortJudgesNow checks that the automatic abort judges
// what happens now: a rate that rises only because older matches leave
// the recent window never trips it, a new divergence does.
func TestController_AbortJudgesNow(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, newMemStore(), tandem.ModeMySQL, tandem.ModeShadow, tandem.ModeShadow)
	e.record("pod-a", 900, 0)
	e.clk.Advance(30 * time.Second)
	e.record("pod-a", 100, 45) // 45 of 1000 in the last minute: 4.5 % < 5 %
	if tripped := e.ctl.CheckAbort(ctx); len(tripped) != 0 {
		t.Fatalf("got %v, want nothing under the threshold", tripped)
	}
	// The 900 matches leave the 1m window: 45 of 100, with nothing new.
	e.clk.Advance(35 * time.Second)
	if st, _ := e.ctl.Pod(ctx, "pod-a"); st.Abort == nil || st.Abort.Comparisons != 100 || !st.Abort.WouldTrip || !st.Abort.Armed {
		t.Fatalf("got abort %+v, want 100 comparisons at 45 %%, over the threshold", st.Abort)
	}
	if tripped := e.ctl.CheckAbort(ctx); len(tripped) != 0 {
		t.Fatalf("got %v, want nothing: the rate rose only because matches aged out", tripped)
	}
	e.record("pod-a", 1, 1)
	if tripped := e.ctl.CheckAbort(ctx); !slices.Equal(tripped, []string{"pod-a"}) {
		t.Fatalf("got %v, want pod-a tripped by a new divergence at that rate", tripped)
	}
	if r := e.sw.change("pod-a").Reason; !strings.Contains(r, "over the last 101 comparisons (1m window)") {
		t.Errorf("got reason %q, want it to name the recent window", r)
	}
}

// TestController_UnkillHolds is issue 21's item 2 on synctest's clock: a
// pod killed by the automatic abort on a burst of divergences, unkilled
// once they stopped while matches keep coming (fewer than before, so that
// old matches leave any window faster than old divergences), is not
// killed again.
func TestController_UnkillHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store, sw := newMemStore(), newFakeSwitch()
		cmp := comparator.New(comparator.Config{Window: 15 * time.Minute})
		ctl := rollout.New(rollout.Config{
			PodConfigs: []rollout.PodConfig{{Name: "pod-a", Shops: mustShops(t, "1-3"), Mode: tandem.ModeMySQL}},
			Gates:      testGates, InstanceID: "sync", PlanInterval: time.Hour,
		}, store)
		ctl.Switch, ctl.Comparator = sw, cmp
		if err := ctl.Open(ctx); err != nil {
			t.Fatal(err)
		}
		defer ctl.Close()

		// Traffic: one comparison every every, diverging while diverge.
		var every atomic.Int64
		var diverge atomic.Bool
		every.Store(int64(50 * time.Millisecond))
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(every.Load())):
				}
				c := tandem.Comparison{Pod: "pod-a", Op: tandem.OpReserve,
					Primary: tandem.Outcome{Store: tandem.StoreMySQL, Status: "reserved"},
					Shadow:  tandem.Outcome{Store: tandem.StoreRedis, Status: "reserved"}}
				if diverge.Load() && i%4 == 0 {
					c.Kind, c.Shadow.Status = tandem.KindOutcomeMismatch, "insufficient_inventory"
				}
				cmp.Record(c)
			}
		}()
		defer func() { close(stop); <-done }()

		time.Sleep(time.Minute) // a minute of matches
		diverge.Store(true)     // a quarter diverges: far over 5 %
		waitKilled(t, sw, "pod-a")
		if ch := sw.change("pod-a"); ch.Actor != rollout.ActorAuto {
			t.Fatalf("got pod-a engaged by %+v, want the automatic abort", ch)
		}
		killedAt := time.Now()
		time.Sleep(10 * time.Second)
		diverge.Store(false)                       // the divergences stop
		every.Store(int64(400 * time.Millisecond)) // and traffic thins out
		st, _ := ctl.Pod(ctx, "pod-a")
		if st.Abort == nil || !st.Abort.WouldTrip || st.Abort.Armed {
			t.Fatalf("got abort %+v right after the burst, want would_trip on a killed (unarmed) pod", st.Abort)
		}
		time.Sleep(70 * time.Second) // the burst leaves the recent window
		if st, _ = ctl.Pod(ctx, "pod-a"); st.Abort.WouldTrip || st.Abort.DivergenceRate != 0 {
			t.Fatalf("got abort %+v a minute after the burst, want the unkill to hold", st.Abort)
		}
		if _, err := ctl.DisengageKillSwitch(ctx, []string{"pod-a"}, tandem.Change{Actor: "oncall", Reason: "divergences stopped"}); err != nil {
			t.Fatal(err)
		}
		unkilledAt := time.Now()
		time.Sleep(3 * time.Minute)
		if sw.Engaged("pod-a") {
			t.Fatalf("pod-a re-killed after the unkill: %+v", sw.change("pod-a"))
		}
		st, _ = ctl.Pod(ctx, "pod-a")
		if st.Abort.Since == nil || !st.Abort.Since.Equal(unkilledAt.UTC()) || !st.Abort.Armed || st.Abort.WouldTrip {
			t.Errorf("got abort %+v, want it armed, counted since the unkill at %s", st.Abort, unkilledAt.UTC())
		}
		// The gates count from the unkill too; the report keeps the window.
		// A tick of the traffic may land at the very instant of the unkill
		// and of the read (synctest runs either first): 449 ticks in
		// between, and at most those two.
		if n, _ := cmp.GateStats("pod-a"); n > int64(3*time.Minute/(400*time.Millisecond))+1 {
			t.Errorf("got %d comparisons in the gates, want only those since the unkill", n)
		}
		if r := cmp.Report("pod-a", tandem.ModeMySQL); r.Divergences[tandem.KindOutcomeMismatch] == 0 {
			t.Errorf("got report %+v, want the burst (killed at %s) still reported", r.Divergences, killedAt)
		}
		// A real burst after the unkill still trips it.
		diverge.Store(true)
		every.Store(int64(50 * time.Millisecond))
		waitKilled(t, sw, "pod-a")
		if ch := sw.change("pod-a"); ch.Actor != rollout.ActorAuto {
			t.Errorf("got pod-a engaged by %+v, want the automatic abort", ch)
		}
	})
}

// waitKilled waits, on synctest's clock, up to a minute for pod's kill
// switch.
func waitKilled(t *testing.T, sw *fakeSwitch, pod string) {
	t.Helper()
	for range 600 {
		if sw.Engaged(pod) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s not killed within a minute", pod)
}
