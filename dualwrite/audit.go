package dualwrite

import (
	"context"
	"fmt"
	"sort"
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
	rep, err := r.Sweep(ctx)
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
	first, err := r.auditPass(ctx, mode, nil)
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
		second, err := r.auditPass(ctx, mode, suspects)
		if err != nil {
			return nil, err
		}
		drifted = second.drifted
	}
	return &tandem.Audit{Pod: r.Pod, At: r.Now().UTC(), Checked: checked, Clean: len(drifted) == 0, Drifted: drifted}, nil
}

type auditResult struct {
	checked int
	drifted []tandem.Drift
}

func (r *Router) auditPass(ctx context.Context, mode tandem.Mode, only map[tandem.Key]bool) (auditResult, error) {
	// The pass's first page asks the pod's throttle too (the stores ask
	// before each next one, tandem.Pace).
	if err := tandem.WaitThrottle(ctx); err != nil {
		return auditResult{}, fmt.Errorf("audit %s: %w", r.Pod, err)
	}
	ledger, err := r.Ledger.ListOnHand(ctx)
	if err != nil {
		return auditResult{}, fmt.Errorf("audit %s: ledger: %w", r.Pod, err)
	}
	keys := make(map[tandem.Key]bool, len(ledger))
	for k := range ledger {
		keys[k] = true
	}
	var redis, mysql map[tandem.Key]tandem.Counters
	broken := make(map[tandem.Key]bool)
	if mode != tandem.ModeMySQLOnly {
		if redis, err = r.snapshot(ctx, r.Redis, keys, broken); err != nil {
			return auditResult{}, err
		}
	}
	if mode != tandem.ModeRedis {
		if mysql, err = r.snapshot(ctx, r.MySQL, keys, broken); err != nil {
			return auditResult{}, err
		}
	}
	var res auditResult
	for k := range keys {
		if only != nil && !only[k] {
			continue
		}
		res.checked++
		onHand := ledger[k]
		d := tandem.Drift{ShopID: k.ShopID, ItemID: k.ItemID, GroupID: k.GroupID, LedgerOnHand: onHand}
		bad := broken[k]
		var ra, ma int64
		if redis != nil {
			c := redis[k]
			ra = c.Available
			d.RedisAvailable = &ra
			bad = bad || c.Available+c.Reserved != onHand || c.Available < 0
		}
		if mysql != nil {
			c := mysql[k]
			ma = c.Available
			d.MySQLAvailable = &ma
			bad = bad || c.OnHand != onHand || c.Available < 0
		}
		if redis != nil && mysql != nil && ra != ma {
			bad = true
		}
		if bad {
			res.drifted = append(res.drifted, d)
		}
	}
	sort.Slice(res.drifted, func(i, j int) bool {
		a, b := res.drifted[i], res.drifted[j]
		if a.ShopID != b.ShopID {
			return a.ShopID < b.ShopID
		}
		if a.ItemID != b.ItemID {
			return a.ItemID < b.ItemID
		}
		return a.GroupID < b.GroupID
	})
	return res, nil
}

// snapshot lists a store's counters, adds its positions to keys and marks
// the positions whose store invariants are broken.
func (r *Router) snapshot(ctx context.Context, s tandem.ReservationStore, keys, broken map[tandem.Key]bool) (map[tandem.Key]tandem.Counters, error) {
	list, err := s.ListCounters(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit %s: %s counters: %w", r.Pod, s.Name(), err)
	}
	m := make(map[tandem.Key]tandem.Counters, len(list))
	for _, c := range list {
		m[c.Key] = c
		keys[c.Key] = true
	}
	vs, err := s.CheckInvariants(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit %s: %s invariants: %w", r.Pod, s.Name(), err)
	}
	for _, v := range vs {
		broken[v.Key] = true
		keys[v.Key] = true
	}
	return m, nil
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
