package controldb_test

import (
	"context"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/testenv"
)

func TestStore_Plan(t *testing.T) {
	testenv.RequireIntegration(t)
	ctx := context.Background()
	s := MustOpenStore(t, testenv.MustCreateDatabase(t))
	now := time.Now().UTC().Truncate(time.Millisecond)

	t.Run("SaveIsGuardedByVersion", func(t *testing.T) {
		r, err := s.LoadPlan(ctx)
		if err != nil || len(r.Doc) != 0 {
			t.Fatalf("got %+v, %v, want an empty plan", r, err)
		}
		v, err := s.SavePlan(ctx, []byte(`{"phase":"running"}`), r.Version)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.SavePlan(ctx, []byte(`{"phase":"paused"}`), r.Version); tandem.ErrorCode(err) != tandem.ECONFLICT {
			t.Fatalf("got %v on a stale version, want conflict", err)
		}
		r, _ = s.LoadPlan(ctx)
		if r.Version != v || string(r.Doc) != `{"phase":"running"}` {
			t.Fatalf("got %+v, want version %d and the first save", r, v)
		}
	})

	t.Run("LeaseHasOneHolderUntilItRunsOut", func(t *testing.T) {
		if ok, err := s.LeasePlan(ctx, "a", now, now.Add(10*time.Second)); err != nil || !ok {
			t.Fatalf("a: got %v, %v, want the lease", ok, err)
		}
		if ok, _ := s.LeasePlan(ctx, "b", now.Add(5*time.Second), now.Add(15*time.Second)); ok {
			t.Fatal("b took a lease a still holds")
		}
		if ok, _ := s.LeasePlan(ctx, "a", now.Add(2*time.Second), now.Add(12*time.Second)); !ok {
			t.Fatal("a could not renew its lease")
		}
		if ok, _ := s.LeasePlan(ctx, "b", now.Add(13*time.Second), now.Add(23*time.Second)); !ok {
			t.Fatal("b could not take a lease that ran out")
		}
		if r, _ := s.LoadPlan(ctx); r.Driver != "b" {
			t.Fatalf("got driver %q, want b", r.Driver)
		}
	})

	t.Run("Transitions", func(t *testing.T) {
		if err := s.InitPods(ctx, []tandem.Pod{{Name: "pod-t", Mode: tandem.ModeRedis}}, now); err != nil {
			t.Fatal(err)
		}
		pt := tandem.PendingTransition{Pod: "pod-t", To: tandem.ModeShadow, Owner: "a", Actor: "alice", Reason: "r", StartedAt: now}
		if err := s.BeginTransition(ctx, pt); err != nil {
			t.Fatal(err)
		}
		if ok, _ := s.ClaimTransition(ctx, "pod-t", "x", "b"); ok {
			t.Fatal("claimed from an instance that does not own it")
		}
		if ok, err := s.ClaimTransition(ctx, "pod-t", "a", "b"); err != nil || !ok {
			t.Fatalf("got %v, %v, want b to claim it", ok, err)
		}
		if err := s.TransitionProgress(ctx, "pod-t", "b", 4, 9); err != nil {
			t.Fatal(err)
		}
		pts, err := s.PendingTransitions(ctx)
		if err != nil || len(pts) != 1 || pts[0].Owner != "b" || pts[0].To != tandem.ModeShadow || pts[0].Actor != "alice" || pts[0].Copied != 4 || pts[0].Total != 9 {
			t.Fatalf("got %+v, %v, want pod-t owned by b", pts, err)
		}
		e := tandem.AuditLogEntry{At: now, Actor: "alice", Action: "set_mode", Pod: "pod-t", Reason: "r", Before: "redis", After: "shadow"}
		if _, err := s.FinishTransition(ctx, "pod-t", tandem.ModeRedis, tandem.ModeShadow, e); err != nil {
			t.Fatal(err)
		}
		if _, err := s.FinishTransition(ctx, "pod-t", tandem.ModeRedis, tandem.ModeShadow, e); tandem.ErrorCode(err) != tandem.ECONFLICT {
			t.Fatalf("got %v finishing twice, want conflict", err)
		}
		if ended, _ := s.EndTransition(ctx, "pod-t"); ended {
			t.Fatal("ended a transition that finished")
		}
	})
}
