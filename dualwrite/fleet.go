package dualwrite

import (
	"context"

	"github.com/tandemhq/tandem"
)

var _ tandem.CheckoutService = (*Fleet)(nil)

// Fleet routes each request to the router of the pod that lists its shop,
// and runs a named pod's backfill, audit and resync for the rollout
// controller.
type Fleet struct {
	Routers []*Router
	// BeforeBackfill, when set, runs before every backfill of a pod's
	// MySQL and may block it (ctx cancels it) or fail it; end-to-end tests
	// hold a copy with it to watch the transition.
	BeforeBackfill func(ctx context.Context, pod string) error
}

// Router returns the router of the pod that lists shop, or EUNKNOWNSHOP.
func (f *Fleet) Router(shopID int64) (*Router, error) {
	for _, r := range f.Routers {
		if r.Shops.Contains(shopID) {
			return r, nil
		}
	}
	return nil, tandem.Errorf(tandem.EUNKNOWNSHOP, "no pod serves shop %d", shopID)
}

// Pod returns the router of the named pod, or EUNKNOWNPOD.
func (f *Fleet) Pod(name string) (*Router, error) {
	for _, r := range f.Routers {
		if r.Pod == name {
			return r, nil
		}
	}
	return nil, tandem.Errorf(tandem.EUNKNOWNPOD, "no pod named %q", name)
}

// Backfill makes pod's MySQL hold what its Redis holds (see
// Router.Backfill); it blocks until the copy is done, ctx cancels it.
// Returns EUNKNOWNPOD.
func (f *Fleet) Backfill(ctx context.Context, pod string) error {
	r, err := f.Pod(pod)
	if err != nil {
		return err
	}
	if f.BeforeBackfill != nil {
		if err := f.BeforeBackfill(ctx, pod); err != nil {
			return err
		}
	}
	_, err = r.Backfill(ctx)
	return err
}

// BackfillFrom is Backfill resumed after a checkpoint of an interrupted
// copy, every new checkpoint given to save (see Router.BackfillFrom).
// Returns EUNKNOWNPOD.
func (f *Fleet) BackfillFrom(ctx context.Context, pod string, from tandem.BackfillCheckpoint, save func(context.Context, tandem.BackfillCheckpoint) error) error {
	r, err := f.Pod(pod)
	if err != nil {
		return err
	}
	if f.BeforeBackfill != nil {
		if err := f.BeforeBackfill(ctx, pod); err != nil {
			return err
		}
	}
	_, err = r.BackfillFrom(ctx, from, save)
	return err
}

// BackfillProgress returns pod's running or last backfill on this
// instance (Step, Copied, Total, StartedAt); nil when none ran or the pod
// is unknown.
func (f *Fleet) BackfillProgress(pod string) *tandem.Transition {
	r, err := f.Pod(pod)
	if err != nil {
		return nil
	}
	p := r.BackfillProgress()
	if p == nil {
		return nil
	}
	return &tandem.Transition{Step: p.Phase, Copied: p.Copied, Total: p.Total, StartedAt: p.StartedAt,
		HoldsPerSec: p.HoldsPerSec, ETASeconds: p.ETASeconds, Checkpoint: p.Checkpoint, Resumed: p.Resumed,
		YieldingToBuyers: p.YieldingToBuyers, CatchUp: p.CatchUp, CatchUpCarts: p.CatchUpCarts}
}

// Audit compares pod's stores with its ledger (see Router.Audit).
// Returns EUNKNOWNPOD.
func (f *Fleet) Audit(ctx context.Context, pod string) (*tandem.Audit, error) {
	r, err := f.Pod(pod)
	if err != nil {
		return nil, err
	}
	a, err := r.Audit(ctx)
	if a != nil {
		a.RedisLoss = r.RedisStale()
	}
	return a, err
}

// Resync rebuilds pod's Redis from its MySQL and returns how many keys it
// rewrote (see Router.Resync). Returns EUNKNOWNPOD.
func (f *Fleet) Resync(ctx context.Context, pod string) (int, error) {
	r, err := f.Pod(pod)
	if err != nil {
		return 0, err
	}
	n, err := r.Resync(ctx)
	if err == nil {
		r.migrate.redisWhole(ctx)
	}
	return n, err
}

// RedisStale says why pod's Redis is known not to be whole ("" when it is
// not, or the pod is unknown), and makes the pod's watch look at its Redis
// at once: a kill switch about to fall back to it gives it priority.
func (f *Fleet) RedisStale(pod string) string {
	r, err := f.Pod(pod)
	if err != nil {
		return ""
	}
	r.CheckRedisNow()
	return r.RedisStale()
}

// Reports returns admin whose Report adds to each pod's report the pod's
// convergence on this instance (Router.Convergence); the rest of admin is
// admin's.
func (f *Fleet) Reports(admin tandem.AdminService) tandem.AdminService {
	return fleetReports{AdminService: admin, fleet: f}
}

// fleetReports is the AdminService Reports returns.
type fleetReports struct {
	tandem.AdminService
	fleet *Fleet
}

// Report implements tandem.AdminService.
func (c fleetReports) Report(ctx context.Context) ([]tandem.Report, error) {
	reps, err := c.AdminService.Report(ctx)
	for i := range reps {
		if r, perr := c.fleet.Pod(reps[i].Pod); perr == nil {
			conv := r.Convergence()
			reps[i].Convergence = &conv
		}
	}
	return reps, err
}

// Close closes every router.
func (f *Fleet) Close() error {
	for _, r := range f.Routers {
		r.Close()
	}
	return nil
}

// Reserve implements tandem.CheckoutService.
func (f *Fleet) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	r, err := f.Router(req.ShopID)
	if err != nil {
		return nil, err
	}
	return r.Reserve(ctx, req)
}

// Claim implements tandem.CheckoutService.
func (f *Fleet) Claim(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	r, err := f.Router(shopID)
	if err != nil {
		return nil, err
	}
	return r.Claim(ctx, shopID, cartToken)
}

// Release implements tandem.CheckoutService.
func (f *Fleet) Release(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	r, err := f.Router(shopID)
	if err != nil {
		return nil, err
	}
	return r.Release(ctx, shopID, cartToken)
}

// Get implements tandem.CheckoutService.
func (f *Fleet) Get(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	r, err := f.Router(shopID)
	if err != nil {
		return nil, err
	}
	return r.Get(ctx, shopID, cartToken)
}

// SetOnHand implements tandem.CheckoutService.
func (f *Fleet) SetOnHand(ctx context.Context, key tandem.Key, onHand int64) (*tandem.Inventory, error) {
	r, err := f.Router(key.ShopID)
	if err != nil {
		return nil, err
	}
	return r.SetOnHand(ctx, key, onHand)
}

// Inventory implements tandem.CheckoutService.
func (f *Fleet) Inventory(ctx context.Context, key tandem.Key) (*tandem.Inventory, error) {
	r, err := f.Router(key.ShopID)
	if err != nil {
		return nil, err
	}
	return r.Inventory(ctx, key)
}
