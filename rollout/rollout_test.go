package rollout_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
)

var why = tandem.Change{Actor: "alice", Reason: "rollout step"}

func failedGates(t *testing.T, err error) []string {
	t.Helper()
	if code := tandem.ErrorCode(err); code != tandem.ETRANSITIONREFUSED {
		t.Fatalf("got %v, want %s", err, tandem.ETRANSITIONREFUSED)
	}
	g, _ := tandem.ErrorDetails(err)["failed_gates"].([]string)
	return g
}

func TestController_Open(t *testing.T) {
	ctx := context.Background()
	t.Run("ConfiguredModesOnFirstStart", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		if got := e.ctl.Mode("pod-a"); got != tandem.ModeRedis {
			t.Errorf("pod-a: got %s, want redis", got)
		}
		if got := e.ctl.Mode("pod-x"); got != "" {
			t.Errorf("unknown pod: got %q, want empty", got)
		}
	})

	t.Run("PersistedModeWins", func(t *testing.T) {
		store := newMemStore()
		e := newEnv(t, store)
		if _, _, err := e.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow}); err != nil {
			t.Fatal(err)
		}
		e.ctl.Close()
		again := newEnv(t, store) // config still says redis
		if got := again.ctl.Mode("pod-a"); got != tandem.ModeShadow {
			t.Errorf("after restart: got %s, want shadow", got)
		}
	})

	t.Run("ErrStoreDown", func(t *testing.T) {
		store := newMemStore()
		store.fail(errDown)
		c := &rollout.Controller{PodConfigs: []rollout.PodConfig{{Name: "pod-a", Mode: tandem.ModeRedis}}, Store: store}
		if err := c.Open(ctx); !errors.Is(err, errDown) {
			t.Errorf("got %v, want %v", err, errDown)
		}
		c.Close()
	})
}

func TestController_SetMode(t *testing.T) {
	ctx := context.Background()

	t.Run("OK", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		st, dry, err := e.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow})
		if err != nil || dry != nil {
			t.Fatalf("got %v %v, want a status", err, dry)
		}
		if st.Mode != tandem.ModeShadow || st.SourceOfTruth != tandem.StoreRedis || st.Shadow != tandem.StoreMySQL || st.Shops != "1-3" {
			t.Errorf("got %+v, want shadow, SoT redis, shadow mysql, shops 1-3", st)
		}
		if !slices.Equal(e.ops.backfilled, []string{"pod-a"}) {
			t.Errorf("backfilled: got %v, want [pod-a]", e.ops.backfilled)
		}
		log, _ := e.ctl.AuditLog(ctx, 10)
		if len(log) != 1 || log[0].Action != rollout.ActionSetMode || log[0].Before != "redis" || log[0].After != "shadow" || log[0].Actor != "alice" {
			t.Errorf("audit log: got %+v, want one set_mode redis -> shadow by alice", log)
		}
		if e.ctl.Version() != 1 {
			t.Errorf("version: got %d, want 1", e.ctl.Version())
		}
	})

	t.Run("ErrInvalid", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		for name, ch := range map[string]tandem.ModeChange{
			"UnknownMode":  {Change: why, Mode: "postgres"},
			"NoReason":     {Mode: tandem.ModeShadow},
			"LongReason":   {Change: tandem.Change{Reason: strings.Repeat("é", 501)}, Mode: tandem.ModeShadow},
			"EmptyMode":    {Change: why},
			"UnknownMode2": {Change: why, Mode: "MYSQL"},
		} {
			if _, _, err := e.ctl.SetMode(ctx, "pod-a", ch); tandem.ErrorCode(err) != tandem.EINVALID {
				t.Errorf("%s: got %v, want %s", name, err, tandem.EINVALID)
			}
		}
		if e.ctl.Mode("pod-a") != tandem.ModeRedis {
			t.Error("mode changed by an invalid request")
		}
	})

	t.Run("ErrUnknownPod", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		if _, _, err := e.ctl.SetMode(ctx, "pod-x", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow}); tandem.ErrorCode(err) != tandem.EUNKNOWNPOD {
			t.Errorf("got %v, want %s", err, tandem.EUNKNOWNPOD)
		}
	})

	t.Run("RefusedTransition", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		for _, to := range []tandem.Mode{tandem.ModeMySQL, tandem.ModeMySQLOnly} {
			_, _, err := e.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: why, Mode: to, Force: true})
			if g := failedGates(t, err); !slices.Contains(g, rollout.RefusedTransition) {
				t.Errorf("redis -> %s: failed gates %v, want transition", to, g)
			}
		}
	})

	t.Run("RefusedByGates", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		_, _, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQL})
		want := []string{rollout.GateMinComparisons, rollout.GateAuditClean}
		if g := failedGates(t, err); !slices.Equal(g, want) {
			t.Errorf("got %v, want %v", g, want)
		}
		e.record("pod-b", 100, 2) // 2 % > 1 %
		_, _, err = e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQL})
		want = []string{rollout.GateMaxDivergenceRate, rollout.GateAuditClean}
		if g := failedGates(t, err); !slices.Equal(g, want) {
			t.Errorf("got %v, want %v", g, want)
		}
		if e.ctl.Mode("pod-b") != tandem.ModeShadow {
			t.Error("mode changed by a refused request")
		}
	})

	t.Run("GatesPass", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		e.passGates(t, "pod-b")
		st, _, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQL})
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode != tandem.ModeMySQL || st.SourceOfTruth != tandem.StoreMySQL || st.Shadow != tandem.StoreRedis {
			t.Errorf("got %+v, want mysql with SoT mysql and shadow redis", st)
		}
	})

	t.Run("UncleanOrOldAuditFails", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		e.record("pod-b", 200, 0)
		one := int64(1)
		e.ops.audit = tandem.Audit{Checked: 3, Clean: false, Drifted: []tandem.Drift{{ShopID: 7, ItemID: 1, GroupID: 1, RedisAvailable: &one}}}
		e.ctl.Audit(ctx, "pod-b", why)
		if g := e.ctl.EvaluateGates("pod-b"); g.Passing || !slices.Equal(g.FailedGates, []string{rollout.GateAuditClean}) || g.LastAuditClean {
			t.Errorf("unclean audit: got %+v, want only audit_clean failing", g)
		}
		e.ops.audit = tandem.Audit{Checked: 3, Clean: true}
		e.ctl.Audit(ctx, "pod-b", why)
		if g := e.ctl.EvaluateGates("pod-b"); !g.Passing {
			t.Errorf("clean audit: got %+v, want passing", g)
		}
		e.clk.Advance(16 * time.Minute)
		e.record("pod-b", 200, 0)
		if g := e.ctl.EvaluateGates("pod-b"); !slices.Equal(g.FailedGates, []string{rollout.GateAuditClean}) || !g.LastAuditClean {
			t.Errorf("audit older than the window: got %+v, want audit_clean failing, last audit clean", g)
		}
	})

	t.Run("ForceIsLogged", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		st, _, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQL, Force: true})
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode != tandem.ModeMySQL {
			t.Errorf("got %s, want mysql", st.Mode)
		}
		log, _ := e.ctl.AuditLog(ctx, 1)
		if log[0].Action != rollout.ActionForceMode || !strings.Contains(log[0].Reason, rollout.GateMinComparisons) {
			t.Errorf("got %+v, want a forced entry naming the failed gates", log[0])
		}
	})

	t.Run("DryRunChangesNothing", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		st, dry, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQL, DryRun: true})
		if err != nil || st != nil {
			t.Fatalf("got %v %v, want a dry run verdict only", st, err)
		}
		if dry.WouldApply || !slices.Contains(dry.FailedGates, rollout.GateMinComparisons) {
			t.Errorf("got %+v, want would_apply false with min_comparisons", dry)
		}
		_, dry, _ = e.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow, DryRun: true})
		if !dry.WouldApply || len(dry.FailedGates) != 0 || dry.FailedGates == nil {
			t.Errorf("got %+v, want would_apply true and an empty list", dry)
		}
		if e.ctl.Mode("pod-a") != tandem.ModeRedis || len(e.ops.backfilled) != 0 || len(e.store.actions()) != 0 {
			t.Error("a dry run changed the mode, backfilled or wrote the audit log")
		}
	})

	t.Run("RefusedWhileKilled", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		e.passGates(t, "pod-b")
		e.sw.Engage(ctx, []string{"pod-b"}, why)
		_, _, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQL, Force: true})
		if g := failedGates(t, err); !slices.Equal(g, []string{rollout.RefusedKillSwitch}) {
			t.Errorf("got %v, want [kill_switch]", g)
		}
	})

	// The kill switch refuses every mode whose source of truth is MySQL,
	// force or not: mysql_only would escape it (it cannot fall back).
	t.Run("RefusedToMySQLOnlyWhileKilled", func(t *testing.T) {
		for _, force := range []bool{false, true} {
			e := newEnv(t, newMemStore(), tandem.ModeRedis, tandem.ModeMySQL, tandem.ModeShadow)
			e.sw.Engage(ctx, []string{"pod-b"}, why)
			_, _, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQLOnly, Force: force})
			if g := failedGates(t, err); !slices.Equal(g, []string{rollout.RefusedKillSwitch}) {
				t.Errorf("force %v: got %v, want [kill_switch]", force, g)
			}
			_, dry, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQLOnly, Force: force, DryRun: true})
			if err != nil || dry.WouldApply || !slices.Equal(dry.FailedGates, []string{rollout.RefusedKillSwitch}) {
				t.Errorf("force %v dry run: got %+v %v, want would_apply false with [kill_switch]", force, dry, err)
			}
			if e.ctl.Mode("pod-b") != tandem.ModeMySQL || len(e.store.actions()) != 0 {
				t.Errorf("force %v: got mode %s and log %v, want mysql and nothing written", force, e.ctl.Mode("pod-b"), e.store.actions())
			}
			st, _ := e.ctl.Pod(ctx, "pod-b")
			if st.SourceOfTruth != tandem.StoreRedis {
				t.Errorf("force %v: got source of truth %s, want redis while killed", force, st.SourceOfTruth)
			}
		}
	})

	t.Run("TowardRedisAllowedWhileKilled", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeRedis, tandem.ModeMySQL, tandem.ModeShadow)
		e.sw.Engage(ctx, []string{"pod-b", "pod-c"}, why)
		if _, _, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow}); err != nil {
			t.Errorf("mysql -> shadow while killed: got %v, want it applied", err)
		}
		if _, _, err := e.ctl.SetMode(ctx, "pod-c", tandem.ModeChange{Change: why, Mode: tandem.ModeRedis}); err != nil {
			t.Errorf("shadow -> redis while killed: got %v, want it applied", err)
		}
	})

	t.Run("SameModeIsPlainNoOp", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeRedis, tandem.ModeMySQL, tandem.ModeShadow)
		e.sw.Engage(ctx, []string{"pod-b"}, why)
		for _, pod := range []string{"pod-a", "pod-b", "pod-c"} {
			mode := e.ctl.Mode(pod)
			st, _, err := e.ctl.SetMode(ctx, pod, tandem.ModeChange{Change: why, Mode: mode, Force: pod == "pod-b"})
			if err != nil || st == nil || st.Mode != mode {
				t.Errorf("%s %s -> %s: got %+v %v, want its status and no error", pod, mode, mode, st, err)
			}
			_, dry, err := e.ctl.SetMode(ctx, pod, tandem.ModeChange{Change: why, Mode: mode, DryRun: true})
			if err != nil || !dry.WouldApply || dry.FailedGates == nil || len(dry.FailedGates) != 0 {
				t.Errorf("%s dry run: got %+v %v, want would_apply true", pod, dry, err)
			}
		}
		if got := e.store.actions(); len(got) != 0 {
			t.Errorf("got audit log %v after no-ops, want nothing written", got)
		}
	})

	t.Run("MySQLOnlyBackNeedsResync", func(t *testing.T) {
		e := newEnv(t, newMemStore(), tandem.ModeRedis, tandem.ModeMySQL, tandem.ModeShadow)
		if _, _, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQLOnly}); err != nil {
			t.Fatal(err)
		}
		st, _ := e.ctl.Pod(ctx, "pod-b")
		if st.SourceOfTruth != tandem.StoreMySQL || st.Shadow != "" {
			t.Errorf("mysql_only status: got %+v, want SoT mysql and no shadow", st)
		}
		_, _, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQL})
		if g := failedGates(t, err); !slices.Equal(g, []string{rollout.RefusedResync}) {
			t.Errorf("before resync: got %v, want [resync]", g)
		}
		n, err := e.ctl.Resync(ctx, "pod-b", "mysql", why)
		if err != nil || n != 7 {
			t.Fatalf("resync: got %d %v, want 7 nil", n, err)
		}
		if _, _, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQL}); err != nil {
			t.Errorf("after resync: got %v, want the change", err)
		}
		// A later trip to mysql_only needs a new resync.
		e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQLOnly})
		_, _, err = e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeMySQL})
		if g := failedGates(t, err); !slices.Equal(g, []string{rollout.RefusedResync}) {
			t.Errorf("second trip: got %v, want [resync]", g)
		}
	})

	t.Run("ErrBackfillLeavesModeUnchanged", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		e.ops.backfillErr = errors.New("mysql down")
		if _, _, err := e.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow}); tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
			t.Fatalf("got %v, want %s", err, tandem.EUNAVAILABLE)
		}
		if e.ctl.Mode("pod-a") != tandem.ModeRedis || len(e.store.actions()) != 0 {
			t.Error("mode changed or logged after a failed backfill")
		}
	})

	t.Run("ErrControlDatabaseDown", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		e.store.fail(errDown)
		if _, _, err := e.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: why, Mode: tandem.ModeRedis}); tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
			t.Errorf("got %v, want %s", err, tandem.EUNAVAILABLE)
		}
		if _, err := e.ctl.AuditLog(ctx, 10); tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
			t.Errorf("audit log: got %v, want %s", err, tandem.EUNAVAILABLE)
		}
	})

	t.Run("ErrConflictWhenChangedElsewhere", func(t *testing.T) {
		store := newMemStore()
		a := newEnv(t, store)
		b := newEnv(t, store)
		b.ctl.Close() // b stops following changes
		if _, _, err := a.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow}); err != nil {
			t.Fatal(err)
		}
		// b still believes redis; the store refuses its stale compare-and-set.
		b.ops.backfillErr = nil
		_, _, err := b.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow})
		if tandem.ErrorCode(err) != tandem.ECONFLICT {
			t.Fatalf("got %v, want %s", err, tandem.ECONFLICT)
		}
		if b.ctl.Mode("pod-a") != tandem.ModeShadow {
			t.Error("b did not reload after the conflict")
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not observed", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestController_OtherInstanceFollows(t *testing.T) {
	store := newMemStore()
	a := newEnv(t, store)
	b := newEnv(t, store)
	if _, _, err := a.ctl.SetMode(context.Background(), "pod-a", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod-a in shadow on b", func() bool { return b.ctl.Mode("pod-a") == tandem.ModeShadow })
	waitFor(t, "b at a's version", func() bool { return b.ctl.Version() == a.ctl.Version() })
}

func TestController_KillSwitchStatus(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, newMemStore(), tandem.ModeRedis, tandem.ModeMySQL, tandem.ModeShadow)
	if _, err := e.ctl.EngageKillSwitch(ctx, []string{"pod-b"}, why); err != nil {
		t.Fatal(err)
	}
	st, _ := e.ctl.Pod(ctx, "pod-b")
	if st.Mode != tandem.ModeMySQL || st.SourceOfTruth != tandem.StoreRedis || st.Shadow != tandem.StoreMySQL || !st.KillSwitch {
		t.Errorf("got %+v, want mode mysql served as shadow with the kill switch", st)
	}
	ks, _ := e.ctl.KillSwitch(ctx)
	if !ks.Engaged {
		t.Error("kill switch state not engaged")
	}
}

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

func TestController_Instances(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	e := newEnv(t, store)
	store.Heartbeat(ctx, "old", e.clk.Now().Add(-time.Minute), 0)
	store.Heartbeat(ctx, "test", e.clk.Now(), 3)
	ins, err := e.ctl.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stale := map[string]bool{}
	for _, in := range ins {
		stale[in.ID] = in.Stale
	}
	if len(stale) != 2 || !stale["old"] || stale["test"] {
		t.Errorf("got %v, want old stale and test fresh", stale)
	}
}

func TestController_ReportAndDivergences(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, newMemStore())
	e.record("pod-b", 10, 1)
	rs, _ := e.ctl.Report(ctx)
	if len(rs) != 3 || rs[1].Pod != "pod-b" || rs[1].Comparisons != 10 || rs[1].Mode != tandem.ModeShadow || rs[1].Window != "15m" {
		t.Errorf("got %+v, want pod-b with 10 comparisons in shadow over 15m", rs)
	}
	if _, err := e.ctl.Divergences(ctx, tandem.DivergenceFilter{Pod: "pod-x"}); tandem.ErrorCode(err) != tandem.EUNKNOWNPOD {
		t.Errorf("unknown pod filter: got %v, want %s", err, tandem.EUNKNOWNPOD)
	}
	if _, err := e.ctl.Divergences(ctx, tandem.DivergenceFilter{Kind: "weird"}); tandem.ErrorCode(err) != tandem.EINVALID {
		t.Errorf("unknown kind filter: got %v, want %s", err, tandem.EINVALID)
	}
	ds, err := e.ctl.Divergences(ctx, tandem.DivergenceFilter{})
	if err != nil || ds == nil {
		t.Errorf("got %v %v, want an empty list without a log", ds, err)
	}
	if _, err := e.ctl.Resync(ctx, "pod-b", "redis", why); tandem.ErrorCode(err) != tandem.EINVALID {
		t.Errorf("resync from redis: got %v, want %s", err, tandem.EINVALID)
	}
	if _, err := e.ctl.Resync(ctx, "pod-b", "mysql", why); tandem.ErrorCode(err) != tandem.ETRANSITIONREFUSED {
		t.Errorf("resync of a shadow pod: got %v, want %s", err, tandem.ETRANSITIONREFUSED)
	}
}
