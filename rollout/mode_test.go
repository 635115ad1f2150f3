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

func failedGates(t *testing.T, err error) []string {
	t.Helper()
	if code := tandem.ErrorCode(err); code != tandem.ETRANSITIONREFUSED {
		t.Fatalf("got %v, want %s", err, tandem.ETRANSITIONREFUSED)
	}
	g, _ := tandem.ErrorDetails(err)["failed_gates"].([]string)
	return g
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
