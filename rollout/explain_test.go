package rollout_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
)

func TestAllowedNext(t *testing.T) {
	for from, want := range map[tandem.Mode][]tandem.Mode{
		tandem.ModeRedis:     {tandem.ModeShadow},
		tandem.ModeShadow:    {tandem.ModeRedis, tandem.ModeMySQL},
		tandem.ModeMySQL:     {tandem.ModeShadow, tandem.ModeMySQLOnly},
		tandem.ModeMySQLOnly: {tandem.ModeMySQL},
	} {
		if got := rollout.AllowedNext(from); !reflect.DeepEqual(got, want) {
			t.Errorf("from %s: got %v, want %v", from, got, want)
		}
	}
}

// TestRefusalExplains checks that a refused transition names what failed
// and the way forward, in the message and in details.allowed.
func TestRefusalExplains(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name        string
		modes       []tandem.Mode
		pod         string
		to          tandem.Mode
		setup       func(e *env)
		wantMessage []string
		wantAllowed []tandem.Mode
	}{
		{"SkipsAStep", nil, "pod-a", tandem.ModeMySQL, nil,
			[]string{"pod pod-a cannot go from redis to mysql: redis -> shadow first"},
			[]tandem.Mode{tandem.ModeShadow}},
		{"SkipsTwoSteps", nil, "pod-a", tandem.ModeMySQLOnly, nil,
			[]string{"pod pod-a cannot go from redis to mysql_only: redis -> shadow -> mysql first"},
			[]tandem.Mode{tandem.ModeShadow}},
		{"BackFromMySQLOnlyNeedsAResync", []tandem.Mode{tandem.ModeMySQLOnly, tandem.ModeShadow, tandem.ModeShadow}, "pod-a", tandem.ModeMySQL, nil,
			[]string{"tandemctl resync pod-a --from mysql first"}, []tandem.Mode{tandem.ModeMySQL}},
		{"KillSwitch", []tandem.Mode{tandem.ModeRedis, tandem.ModeShadow, tandem.ModeShadow}, "pod-b", tandem.ModeMySQL,
			func(e *env) {
				e.passGates(t, "pod-b")
				e.sw.Engage(ctx, []string{"pod-b"}, why)
			},
			[]string{"kill switch is engaged: tandemctl unkill --pods pod-b first"}, []tandem.Mode{tandem.ModeRedis, tandem.ModeMySQL}},
		{"GatesWithWhatTheyLack", nil, "pod-b", tandem.ModeMySQL, func(e *env) { e.record("pod-b", 60, 3) },
			[]string{"gates failing: min_comparisons 60 of 100: 40 more comparisons in the 15m window",
				"max_divergence_rate 5% > 1%: a divergence rate at most 1%",
				"; audit_clean: no audit yet: run tandemctl audit pod-b"},
			[]tandem.Mode{tandem.ModeRedis, tandem.ModeMySQL}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, newMemStore(), tt.modes...)
			if tt.setup != nil {
				tt.setup(e)
			}
			_, _, err := e.ctl.SetMode(ctx, tt.pod, tandem.ModeChange{Change: why, Mode: tt.to})
			if code := tandem.ErrorCode(err); code != tandem.ETRANSITIONREFUSED {
				t.Fatalf("got %v, want %s", err, tandem.ETRANSITIONREFUSED)
			}
			msg := tandem.ErrorMessage(err)
			for _, want := range tt.wantMessage {
				if !strings.Contains(msg, want) {
					t.Errorf("got message %q, want it to contain %q", msg, want)
				}
			}
			if got := tandem.ErrorDetails(err)["allowed"]; !reflect.DeepEqual(got, tt.wantAllowed) {
				t.Errorf("got details.allowed %v, want %v", got, tt.wantAllowed)
			}
			_, d, err := e.ctl.SetMode(ctx, tt.pod, tandem.ModeChange{Change: why, Mode: tt.to, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if d.WouldApply || d.Message != msg || !reflect.DeepEqual(d.Allowed, tt.wantAllowed) {
				t.Errorf("got dry run %+v, want would_apply false, the refusal's message %q and allowed %v", d, msg, tt.wantAllowed)
			}
		})
	}
}

// TestGateChecks checks each gate's value, threshold and what it lacks, in
// the pod status and in a dry run of the promotion.
func TestGateChecks(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, newMemStore())
	check := func(t *testing.T, checks []tandem.GateCheck, want []tandem.GateCheck) {
		t.Helper()
		if !reflect.DeepEqual(checks, want) {
			t.Errorf("got checks\n%+v,\nwant\n%+v", checks, want)
		}
	}
	t.Run("NothingYet", func(t *testing.T) {
		st, err := e.ctl.Pod(ctx, "pod-b")
		if err != nil {
			t.Fatal(err)
		}
		check(t, st.Gates.Checks, []tandem.GateCheck{
			{Gate: "min_comparisons", Value: 0, Threshold: 100, State: tandem.GateInconclusive, Missing: "100 more comparisons in the 15m window"},
			{Gate: "max_divergence_rate", Value: 0, Threshold: 0.01, Passing: true, State: tandem.GatePass},
			{Gate: "audit_clean", Value: 0, Threshold: 1, State: tandem.GateInconclusive, Missing: "no audit yet: run tandemctl audit pod-b"},
		})
		if st.Gates.State != tandem.GateInconclusive || st.Gates.Passing {
			t.Errorf("got gates %s (passing %v), want inconclusive: nothing failed, data is missing", st.Gates.State, st.Gates.Passing)
		}
	})
	t.Run("InconclusiveThenFailing", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		e.record("pod-b", 50, 1) // 2 % of 50: one divergence in 100 would still be 1 %
		st, _ := e.ctl.Pod(ctx, "pod-b")
		rate := st.Gates.Checks[1]
		if rate.State != tandem.GateInconclusive || rate.Passing || rate.Missing != "2% on 50 of 100 comparisons: too few to judge against 1%" {
			t.Errorf("got %+v, want an inconclusive divergence rate saying what is missing", rate)
		}
		e.record("pod-b", 10, 1) // 2 divergences: 100 comparisons cannot bring it to 1 %
		st, _ = e.ctl.Pod(ctx, "pod-b")
		if rate = st.Gates.Checks[1]; rate.State != tandem.GateFail || st.Gates.State != tandem.GateFail {
			t.Errorf("got %+v (gates %s), want the divergence rate failing", rate, st.Gates.State)
		}
		if !slices.Contains(st.Gates.FailedGates, rollout.GateMaxDivergenceRate) {
			t.Errorf("got failed_gates %v, want max_divergence_rate", st.Gates.FailedGates)
		}
	})
	t.Run("Passing", func(t *testing.T) {
		e.passGates(t, "pod-b")
		_, d, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQL, DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if !d.WouldApply || d.Message != "" {
			t.Errorf("got %+v, want would_apply and no message", d)
		}
		check(t, d.Checks, []tandem.GateCheck{
			{Gate: "min_comparisons", Value: 200, Threshold: 100, Passing: true, State: tandem.GatePass},
			{Gate: "max_divergence_rate", Value: 0, Threshold: 0.01, Passing: true, State: tandem.GatePass},
			{Gate: "audit_clean", Value: 1, Threshold: 1, Passing: true, State: tandem.GatePass},
		})
	})
	t.Run("AuditAged", func(t *testing.T) {
		e.clk.Advance(20 * time.Minute)
		st, _ := e.ctl.Pod(ctx, "pod-b")
		got := st.Gates.Checks[2]
		if got.Passing || got.State != tandem.GateInconclusive || got.Missing != "the last clean audit is 20m old, beyond the 15m window: run tandemctl audit pod-b" {
			t.Errorf("got %+v, want a failing audit check saying it is too old", got)
		}
	})
	t.Run("NoChecksOutsideThePromotion", func(t *testing.T) {
		_, d, err := e.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow, DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if !d.WouldApply || d.Checks != nil {
			t.Errorf("got %+v, want would_apply and no gate checks for redis -> shadow", d)
		}
	})
}
