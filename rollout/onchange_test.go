package rollout_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
)

// changes collects what a Controller tells OnChange.
type changes struct {
	mu      sync.Mutex
	entries []tandem.AuditLogEntry
}

func (c *changes) add(e tandem.AuditLogEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = append(c.entries, e)
}

func (c *changes) find(action, pod string) (tandem.AuditLogEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if e.Action == action && e.Pod == pod {
			return e, true
		}
	}
	return tandem.AuditLogEntry{}, false
}

// TestController_OnChange: every control action is told once, with actor,
// reason, pod, before and after, for the log.
func TestController_OnChange(t *testing.T) {
	ctx := context.Background()
	got := &changes{}
	e := newEnvWith(t, newMemStore(), "test", func(c *rollout.Controller) { c.OnChange = got.add },
		tandem.ModeRedis, tandem.ModeShadow, tandem.ModeMySQL)

	e.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow})
	e.passGates(t, "pod-b")
	zero := time.Duration(0)
	if _, err := e.ctl.StartPlan(ctx, tandem.PlanStart{Change: why, ShadowSoak: &zero, MySQLSoak: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := e.ctl.StepPlan(ctx); err != nil {
		t.Fatal(err)
	}
	e.record("pod-c", 100, 50)
	e.ctl.CheckAbort(ctx)

	for _, w := range []struct{ action, pod, actor, before, after string }{
		{rollout.ActionBackfillStart, "pod-a", "alice", "redis", "backfilling MySQL"},
		{rollout.ActionBackfillEnd, "pod-a", "alice", "redis", "done"},
		{rollout.ActionSetMode, "pod-a", "alice", "shadow", "shadow"},
		{rollout.ActionAudit, "pod-b", "t", "shadow", "clean"},
		{rollout.ActionPlanStart, "", "alice", "", "running"},
		{rollout.ActionPlanStep, "pod-b", rollout.ActorPlan, "shadow", "mysql"},
		{rollout.ActionSetMode, "pod-b", rollout.ActorPlan, "shadow", "mysql"},
		{rollout.ActionAutomaticAbort, "pod-c", rollout.ActorAuto, "mysql", "kill switch engaged"},
	} {
		c, ok := got.find(w.action, w.pod)
		if !ok {
			t.Errorf("got no %s of %q told, want one", w.action, w.pod)
			continue
		}
		if c.Actor != w.actor || c.Reason == "" || c.After != w.after || (w.action != rollout.ActionSetMode && c.Before != w.before) {
			t.Errorf("%s of %q: got %+v, want actor %s before %s after %s and a reason", w.action, w.pod, c, w.actor, w.before, w.after)
		}
	}
	if c, _ := got.find(rollout.ActionSetMode, "pod-a"); c.Before != "redis" || c.After != "shadow" {
		t.Errorf("set_mode of pod-a: got %s -> %s, want redis -> shadow", c.Before, c.After)
	}
	if slices.ContainsFunc(got.entries, func(e tandem.AuditLogEntry) bool { return e.At.IsZero() }) {
		t.Error("got an entry without its time")
	}
}
