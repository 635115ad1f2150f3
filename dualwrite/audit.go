package dualwrite

import (
	"context"
	"fmt"
	"time"

	"github.com/tandemhq/tandem"
)

// audit is Router.Audit.
func (mg *migrator) audit(ctx context.Context) (*tandem.Audit, error) {
	ctx = tandem.WithThrottle(ctx, mg.r.Throttle, tandem.JobAudit)
	a, err := mg.auditPositions(ctx)
	if err != nil || a.Clean || mg.r.store(mg.r.Mode().Shadow()) == nil {
		return a, err
	}
	rep, err := mg.r.repair.sweep(ctx)
	if err != nil {
		return a, nil
	}
	after, err := mg.auditPositions(ctx)
	if err != nil {
		return a, nil
	}
	after.Found = a.Drifted
	after.Converged, after.Recounted = rep.Converged, len(rep.Recounted)
	return after, nil
}

// auditPositions compares the positions with the ledger, and those that
// disagree again after AuditSettle.
func (mg *migrator) auditPositions(ctx context.Context) (*tandem.Audit, error) {
	mode := mg.r.Mode()
	first, err := mg.r.repair.auditPass(ctx, mode, nil)
	if err != nil {
		return nil, err
	}
	checked := first.checked
	drifted := first.drifted
	if len(drifted) > 0 {
		select {
		case <-time.After(mg.auditSettle()):
		case <-ctx.Done():
			return nil, tandem.Errorf(tandem.EUNAVAILABLE, "audit of pod %s: %v", mg.r.Pod, ctx.Err())
		}
		suspects := make(map[tandem.Key]bool, len(drifted))
		for _, d := range drifted {
			suspects[tandem.Key{ShopID: d.ShopID, ItemID: d.ItemID, GroupID: d.GroupID}] = true
		}
		second, err := mg.r.repair.auditPass(ctx, mode, suspects)
		if err != nil {
			return nil, err
		}
		drifted = second.drifted
	}
	return &tandem.Audit{Pod: mg.r.Pod, At: mg.r.Now().UTC(), Checked: checked, Clean: len(drifted) == 0, Drifted: drifted}, nil
}

// resync is Router.Resync.
func (mg *migrator) resync(ctx context.Context) (int, error) {
	seq, resume := mg.r.repair.holdRounds()
	defer resume()
	n, err := rebuild(tandem.WithThrottle(ctx, mg.r.Throttle, tandem.JobResync), mg.r.MySQL, mg.r.Redis)
	if err == nil {
		settled := mg.r.repair.rebuilt(tandem.StoreMySQL, seq)
		if err = mg.r.repair.tombstoneEnded(ctx, settled, mg.r.MySQL, mg.r.Redis); err != nil {
			err = fmt.Errorf("resync: %w", err)
		}
	}
	return n, err
}

func rebuild(ctx context.Context, from, to tandem.ShadowStore) (int, error) {
	holds, err := from.ActiveHolds(ctx)
	if err != nil {
		return 0, fmt.Errorf("rebuild %s: list %s holds: %w", to.Name(), from.Name(), err)
	}
	return to.Rebuild(ctx, holds)
}
