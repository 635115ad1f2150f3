package controlplane_test

import (
	"context"
	"testing"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/rollout"
)

// TestControlPlane_ManualThrottle checks that an operator's throttle of a
// pod reaches the other instance, is in the audit log, shows in
// POD.throttle, survives a restart (an instance started afterwards has it
// from its first read), and that bad changes change nothing.
func TestControlPlane_ManualThrottle(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MustCreateDatabase(t)
	_, prefix := testenv.MustRedis(t)
	a := mustOpenInstance(t, dsn, prefix, "a")
	b := mustOpenInstance(t, dsn, prefix, "b")

	st, err := a.ctl.SetThrottle(ctx, "pod-a", true, tandem.Change{Actor: "alice", Reason: "black friday"})
	if err != nil {
		t.Fatal(err)
	}
	if th := st.Throttle; th == nil || !th.Throttled || th.Signal != tandem.SignalManual || th.Reason != "manual: black friday" {
		t.Fatalf("POD.throttle after turning it on: %+v, want throttled by hand", th)
	}
	waitFor(t, "pod-a throttled at b", func() bool { _, on := b.ctl.ManualThrottle("pod-a"); return on })
	if _, on := b.ctl.ManualThrottle("pod-b"); on {
		t.Fatal("pod-b throttled too, want pod-a alone")
	}

	// A restart: an instance started now has the throttle at once.
	c := mustOpenInstance(t, dsn, prefix, "c")
	if m, on := c.ctl.ManualThrottle("pod-a"); !on || m.Reason != "black friday" || m.Actor != "alice" {
		t.Fatalf("after a restart: got %+v, %v; want on by alice for black friday", m, on)
	}

	// Bad changes change nothing.
	if _, err := c.ctl.SetThrottle(ctx, "pod-x", false, change); tandem.ErrorCode(err) != tandem.EUNKNOWNPOD {
		t.Fatalf("unknown pod: got %v, want unknown_pod", err)
	}
	if _, err := c.ctl.SetThrottle(ctx, "pod-a", false, tandem.Change{}); tandem.ErrorCode(err) != tandem.EINVALID {
		t.Fatalf("no reason: got %v, want invalid", err)
	}
	if _, on := c.ctl.ManualThrottle("pod-a"); !on {
		t.Fatal("a refused change turned the throttle off")
	}

	if _, err := c.ctl.SetThrottle(ctx, "pod-a", false, tandem.Change{Actor: "bob", Reason: "sale over"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod-a unthrottled at a", func() bool { _, on := a.ctl.ManualThrottle("pod-a"); return !on })
	log, err := a.ctl.AuditLog(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range log {
		if e.Action == rollout.ActionThrottle {
			got = append(got, e.Actor+":"+e.Before+"->"+e.After)
		}
	}
	if len(got) != 2 || got[0] != "bob:on->off" || got[1] != "alice:off->on" {
		t.Fatalf("audit log throttle entries %v, want bob's off then alice's on (newest first)", got)
	}
}
