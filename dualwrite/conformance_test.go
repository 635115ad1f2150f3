package dualwrite_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/conformance"
)

// routed presents a pod's router as one tandem.ReservationStore, so that
// the engines' conformance suite runs through it: reads wait for the
// shadow, expiry runs in every maintained store (as serve's reaper does),
// and CheckInvariants adds both stores' invariants and the drift audit.
type routed struct{ p *pod }

func (s routed) Name() string { return "router" }

func (s routed) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	return s.p.Reserve(ctx, req)
}

func (s routed) Claim(ctx context.Context, shop int64, token string) (*tandem.Reservation, error) {
	return s.p.Claim(ctx, shop, token)
}

func (s routed) Release(ctx context.Context, shop int64, token string) (*tandem.Reservation, error) {
	return s.p.Release(ctx, shop, token)
}

func (s routed) Get(ctx context.Context, shop int64, token string) (*tandem.Reservation, error) {
	s.p.Wait()
	return s.p.Get(ctx, shop, token)
}

func (s routed) SetOnHand(ctx context.Context, k tandem.Key, v int64) (*tandem.Counters, error) {
	s.p.Wait()
	prev, err := s.p.Inventory(ctx, k)
	if err != nil {
		return nil, err
	}
	inv, err := s.p.SetOnHand(ctx, k, v)
	if err != nil {
		return nil, err
	}
	return &tandem.Counters{Key: k, OnHand: inv.OnHand, Reserved: inv.Reserved, Available: inv.Available, Before: prev.OnHand}, nil
}

func (s routed) Counters(ctx context.Context, k tandem.Key) (*tandem.Counters, error) {
	s.p.Wait()
	inv, err := s.p.Inventory(ctx, k)
	if err != nil {
		return nil, err
	}
	return &tandem.Counters{Key: k, OnHand: inv.OnHand, Reserved: inv.Reserved, Available: inv.Available}, nil
}

func (s routed) maintained() (sot tandem.ReservationStore, shadow tandem.ReservationStore) {
	mode := s.p.Mode()
	pick := func(name string) tandem.ReservationStore {
		switch name {
		case tandem.StoreRedis:
			return s.p.redis
		case tandem.StoreMySQL:
			return s.p.mysql
		}
		return nil
	}
	return pick(mode.SourceOfTruth()), pick(mode.Shadow())
}

func (s routed) ExpireDue(ctx context.Context, now time.Time, limit int) (int, error) {
	s.p.Wait()
	sot, shadow := s.maintained()
	n, err := sot.ExpireDue(ctx, now, limit)
	if err != nil || shadow == nil {
		return n, err
	}
	for {
		m, err := shadow.ExpireDue(ctx, now, 1000)
		if err != nil {
			return n, fmt.Errorf("shadow expiry: %w", err)
		}
		if m < 1000 {
			return n, nil
		}
	}
}

func (s routed) ListCounters(ctx context.Context) ([]tandem.Counters, error) {
	s.p.Wait()
	sot, _ := s.maintained()
	return sot.ListCounters(ctx)
}

func (s routed) CheckInvariants(ctx context.Context) ([]tandem.Violation, error) {
	s.p.Wait()
	sot, shadow := s.maintained()
	var out []tandem.Violation
	for _, st := range []tandem.ReservationStore{sot, shadow} {
		if st == nil {
			continue
		}
		vs, err := st.CheckInvariants(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
	}
	if shadow != nil {
		// Invariant 5: at rest the stores agree hold by hold, by themselves.
		cctx, cancel := context.WithTimeout(ctx, convergeWithin)
		d, err := s.p.Converged(cctx)
		cancel()
		if err != nil {
			out = append(out, tandem.Violation{Message: err.Error()})
		} else if !d.Empty() {
			out = append(out, tandem.Violation{Message: d.String()})
		}
		a, err := s.p.Audit(ctx)
		if err != nil {
			return nil, err
		}
		for _, d := range a.Drifted {
			out = append(out, tandem.Violation{Key: tandem.Key{ShopID: d.ShopID, ItemID: d.ItemID, GroupID: d.GroupID},
				Message: fmt.Sprintf("drift: ledger %d, redis %v, mysql %v", d.LedgerOnHand, deref(d.RedisAvailable), deref(d.MySQLAvailable))})
		}
		if ds := s.p.rec.mismatches(); len(ds) > 0 {
			out = append(out, tandem.Violation{Message: fmt.Sprintf("%d unrepaired divergences, first %s on %s: primary %s, shadow %s (%q after %.1f ms)",
				len(ds), ds[0].Kind, ds[0].CartToken, ds[0].Primary.Status, ds[0].Shadow.Status, ds[0].Shadow.Message, ds[0].Shadow.LatencyMS)})
		}
	}
	return out, nil
}

func TestConformanceThroughRouter(t *testing.T) {
	for _, mode := range []tandem.Mode{tandem.ModeRedis, tandem.ModeShadow, tandem.ModeMySQL, tandem.ModeMySQLOnly} {
		t.Run(string(mode), func(t *testing.T) {
			conformance.Run(t, func(t *testing.T) conformance.Harness {
				p := mustOpenPod(t, mode)
				return conformance.Harness{Store: routed{p}, Clock: p.clock}
			})
		})
	}
}
