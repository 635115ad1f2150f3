package dualwrite

import (
	"context"

	"github.com/tandemhq/tandem"
)

var _ tandem.CheckoutService = (*Fleet)(nil)

// Fleet routes each request to the router of the pod that lists its shop.
type Fleet struct {
	Routers []*Router
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
