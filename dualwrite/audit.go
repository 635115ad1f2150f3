package dualwrite

import (
	"context"
	"fmt"
	"time"

	"github.com/tandemhq/tandem"
)

// Audit compares, per position, the ledger's on_hand with what each store
// the mode maintains can sell: Redis must hold available + held = on_hand,
// MySQL its conservation invariant, and the two stores must offer the same
// available quantity. A position that disagrees is looked at again after
// AuditSettle, so holds in flight (a shadow write not yet landed) do not
// show as drift; one that still disagrees is converged by a sweep (its
// carts from the SoT, then its shadow count from the ledger), and the
// audit reports what it found, what it fixed and what is left.
func (r *Router) Audit(ctx context.Context) (*tandem.Audit, error) {
	ctx = tandem.WithThrottle(ctx, r.Throttle, tandem.JobAudit)
	a, err := r.audit(ctx)
	if err != nil || a.Clean || r.store(r.Mode().Shadow()) == nil {
		return a, err
	}
	rep, err := r.repair.sweep(ctx)
	if err != nil {
		return a, nil
	}
	after, err := r.audit(ctx)
	if err != nil {
		return a, nil
	}
	after.Found = a.Drifted
	after.Converged, after.Recounted = rep.Converged, len(rep.Recounted)
	return after, nil
}

func (r *Router) audit(ctx context.Context) (*tandem.Audit, error) {
	mode := r.Mode()
	first, err := r.repair.auditPass(ctx, mode, nil)
	if err != nil {
		return nil, err
	}
	checked := first.checked
	drifted := first.drifted
	if len(drifted) > 0 {
		select {
		case <-time.After(r.auditSettle()):
		case <-ctx.Done():
			return nil, tandem.Errorf(tandem.EUNAVAILABLE, "audit of pod %s: %v", r.Pod, ctx.Err())
		}
		suspects := make(map[tandem.Key]bool, len(drifted))
		for _, d := range drifted {
			suspects[tandem.Key{ShopID: d.ShopID, ItemID: d.ItemID, GroupID: d.GroupID}] = true
		}
		second, err := r.repair.auditPass(ctx, mode, suspects)
		if err != nil {
			return nil, err
		}
		drifted = second.drifted
	}
	return &tandem.Audit{Pod: r.Pod, At: r.Now().UTC(), Checked: checked, Clean: len(drifted) == 0, Drifted: drifted}, nil
}

// Resync rebuilds the pod's Redis counters and holds from the ledger and the
// active MySQL holds.
func (r *Router) Resync(ctx context.Context) (int, error) {
	return rebuild(tandem.WithThrottle(ctx, r.Throttle, tandem.JobResync), r.MySQL, r.Redis)
}

func rebuild(ctx context.Context, from, to tandem.ReservationStore) (int, error) {
	src, ok1 := from.(tandem.Resyncer)
	dst, ok2 := to.(tandem.Resyncer)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("rebuild %s from %s: stores cannot be listed and rebuilt", to.Name(), from.Name())
	}
	holds, err := src.ActiveHolds(ctx)
	if err != nil {
		return 0, fmt.Errorf("rebuild %s: list %s holds: %w", to.Name(), from.Name(), err)
	}
	return dst.Rebuild(ctx, holds)
}
