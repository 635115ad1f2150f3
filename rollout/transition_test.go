package rollout_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
)

// eventually waits for cond, failing the test if it never holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 10000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("never: %s", what)
}

// backfillWhy is the change of the backfill tests' redis -> shadow.
var backfillWhy = tandem.Change{Actor: "alice", Reason: "enter shadow"}

// heldEnv is an env whose SetMode answers at once while a held backfill
// runs.
func heldEnv(t *testing.T) *env {
	return newEnvWith(t, newMemStore(), "test", func(c *rollout.Controller) { c.BackfillWait = time.Millisecond })
}

// startHeld answers redis -> shadow of pod-a while the held backfill runs.
func startHeld(t *testing.T, e *env) *tandem.PodStatus {
	t.Helper()
	e.ops.holdBackfills()
	st, _, err := e.ctl.SetMode(context.Background(), "pod-a", tandem.ModeChange{Change: backfillWhy, Mode: tandem.ModeShadow})
	if err != nil {
		t.Fatal(err)
	}
	<-e.ops.started
	return st
}

func TestController_BackfillInBackground(t *testing.T) {
	t.Run("AnswersTransitionWithProgress", testBackfillAnswersTransitionWithProgress)
	t.Run("SameRequestJoinsTheRunningCopy", testBackfillSameRequestJoinsTheRunningCopy)
	t.Run("CancelByRedis", testBackfillCancelByRedis)
	t.Run("ResumesAfterACrash", testBackfillResumesAfterACrash)
	t.Run("LeavesAnotherLiveInstancesCopy", testBackfillLeavesAnotherLiveInstancesCopy)
}

func testBackfillAnswersTransitionWithProgress(t *testing.T) {
	ctx := context.Background()
	e := heldEnv(t)
	st := startHeld(t, e)
	if st.Mode != tandem.ModeRedis || st.Transition == nil || st.Transition.To != tandem.ModeShadow || st.Transition.Phase != tandem.TransitionBackfill {
		t.Fatalf("got mode %s transition %+v, want redis with a backfill to shadow", st.Mode, st.Transition)
	}
	got, err := e.ctl.Pod(ctx, "pod-a")
	if err != nil {
		t.Fatal(err)
	}
	if tr := got.Transition; tr == nil || tr.Copied != 1 || tr.Total != 2 || tr.StartedAt.IsZero() {
		t.Fatalf("got transition %+v, want copied 1 of 2", tr)
	}
	if slices.Contains(e.store.actions(), rollout.ActionSetMode) {
		t.Error("the mode was persisted before the copy was done")
	}
	e.ops.releaseBackfills()
	eventually(t, "pod-a enters shadow", func() bool { return e.ctl.Mode("pod-a") == tandem.ModeShadow })
	log, _ := e.store.AuditLog(ctx, 10)
	if len(log) == 0 || log[0].Action != rollout.ActionSetMode || log[0].Actor != "alice" || log[0].Reason != "enter shadow" {
		t.Fatalf("got audit log %+v, want set_mode by alice first", log)
	}
	eventually(t, "the transition ends", func() bool { return !e.ctl.Transitioning("pod-a") })
	if got, _ := e.ctl.Pod(ctx, "pod-a"); got.Transition != nil {
		t.Errorf("got transition %+v after the copy, want none", got.Transition)
	}
	if pts, _ := e.store.PendingTransitions(ctx); len(pts) != 0 {
		t.Errorf("got pending %+v, want none", pts)
	}
}

func testBackfillSameRequestJoinsTheRunningCopy(t *testing.T) {
	ctx := context.Background()
	e := heldEnv(t)
	startHeld(t, e)
	st, _, err := e.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: backfillWhy, Mode: tandem.ModeShadow})
	if err != nil || st.Transition == nil {
		t.Fatalf("got %+v, %v, want the running transition", st, err)
	}
	e.ops.releaseBackfills()
	eventually(t, "pod-a enters shadow", func() bool { return e.ctl.Mode("pod-a") == tandem.ModeShadow })
}

func testBackfillCancelByRedis(t *testing.T) {
	ctx := context.Background()
	e := heldEnv(t)
	startHeld(t, e)
	st, _, err := e.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: tandem.Change{Actor: "bob", Reason: "stop"}, Mode: tandem.ModeRedis})
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode != tandem.ModeRedis || st.Transition != nil {
		t.Fatalf("got mode %s transition %+v, want redis and none", st.Mode, st.Transition)
	}
	if !slices.Contains(e.store.actions(), rollout.ActionBackfillCancel) {
		t.Errorf("got actions %v, want %s", e.store.actions(), rollout.ActionBackfillCancel)
	}
	if pts, _ := e.store.PendingTransitions(ctx); len(pts) != 0 {
		t.Errorf("got pending %+v, want none", pts)
	}
	if e.ctl.Mode("pod-a") != tandem.ModeRedis {
		t.Errorf("got mode %s, want redis", e.ctl.Mode("pod-a"))
	}
}

func testBackfillResumesAfterACrash(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	if err := store.BeginTransition(ctx, tandem.PendingTransition{Pod: "pod-a", To: tandem.ModeShadow,
		Owner: "crashed", Actor: "alice", Reason: "enter shadow", StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, store)
	eventually(t, "pod-a enters shadow", func() bool { return e.ctl.Mode("pod-a") == tandem.ModeShadow })
	if !slices.Equal(e.ops.backfilled, []string{"pod-a"}) {
		t.Errorf("got backfilled %v, want [pod-a]", e.ops.backfilled)
	}
}

func testBackfillLeavesAnotherLiveInstancesCopy(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	_ = store.RegisterInstance(ctx, tandem.Instance{ID: "other", LastSeen: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)})
	if err := store.BeginTransition(ctx, tandem.PendingTransition{Pod: "pod-a", To: tandem.ModeShadow, Owner: "other"}); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, store)
	if err := e.ctl.ResumeTransitions(ctx); err != nil {
		t.Fatal(err)
	}
	if e.ctl.Transitioning("pod-a") || len(e.ops.backfilled) != 0 {
		t.Error("took over the copy of a live instance")
	}
	// A request here joins it rather than starting a second copy.
	st, _, err := e.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: backfillWhy, Mode: tandem.ModeShadow})
	if err != nil || st.Transition == nil || e.ctl.Transitioning("pod-a") {
		t.Fatalf("got %+v, %v, transitioning here %t, want the other instance's copy joined", st, err, e.ctl.Transitioning("pod-a"))
	}
	// Its progress shows here as that instance records it.
	_ = store.TransitionProgress(ctx, "pod-a", "other", 5, 10)
	st, err = e.ctl.Pod(ctx, "pod-a")
	if err != nil {
		t.Fatal(err)
	}
	if tr := st.Transition; tr == nil || tr.Copied != 5 || tr.Total != 10 || tr.To != tandem.ModeShadow {
		t.Fatalf("got transition %+v, want the other instance's copy, 5 of 10", tr)
	}
}
