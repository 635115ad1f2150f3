package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

// TestScheduledAuditContext checks what a pod's scheduled audit runs under:
// paced reads (nobody waits for it), a bound of its own, and the end of the
// server's context.
func TestScheduledAuditContext(t *testing.T) {
	parent, stop := context.WithCancel(context.Background())
	ctx, cancel := scheduledAuditContext(parent)
	defer cancel()
	if !tandem.Paced(ctx) {
		t.Error("the scheduled audit reads at full speed, want it paced")
	}
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) <= scheduledAuditTimeout/2 {
		t.Errorf("deadline %v (set: %v), want about %v from now", deadline, ok, scheduledAuditTimeout)
	}
	stop()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("got %v after the server stopped, want context.Canceled", ctx.Err())
	}
}
