package redisres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
)

func validateHold(h tandem.Reservation) error {
	if err := validateCart(h.ShopID, h.CartToken); err != nil {
		return err
	}
	if len(h.Lines) == 0 {
		return tandem.Errorf(tandem.EINVALID, "hold %d/%s has no lines", h.ShopID, h.CartToken)
	}
	for _, l := range h.Lines {
		if err := validateKey(l.Key(h.ShopID)); err != nil {
			return err
		}
		if l.Quantity <= 0 {
			return tandem.Errorf(tandem.EINVALID, "hold %d/%s has a line of quantity %d", h.ShopID, h.CartToken, l.Quantity)
		}
	}
	return nil
}

// Rebuild implements tandem.Resyncer: per shop, in one MULTI/EXEC, every
// position of the ledger (and every position a given hold draws from)
// gets on_hand from the ledger and available = on_hand - the given holds
// on it; the given holds become the shop's active carts. Carts that were
// active and are not among the given holds are marked claimed when the
// ledger recorded their claim, else expired (their units are in no
// counter any more either way); terminal carts are kept. Positions
// Redis knew that are neither in the ledger nor held are removed (zero
// available). Holds written here carry no request fingerprint: a retried
// reserve matches them by items and quantities.
func (s *Store) Rebuild(ctx context.Context, holds []tandem.Reservation) (n int, err error) {
	defer s.observe("rebuild", time.Now(), &err)
	return s.rebuild(ctx, nil, holds)
}

var _ tandem.ShopRebuilder = (*Store)(nil)

// RebuildShops implements tandem.ShopRebuilder: Rebuild limited to the
// given shops, each in its own MULTI/EXEC, so that the pod's Redis is
// rebuilt from MySQL a batch of shops at a time while buyers are served.
func (s *Store) RebuildShops(ctx context.Context, shops []int64, holds []tandem.Reservation) (n int, err error) {
	defer s.observe("rebuild_shops", time.Now(), &err)
	if len(shops) == 0 {
		return 0, nil
	}
	only := make(map[int64]bool, len(shops))
	for _, sh := range shops {
		only[sh] = true
	}
	for _, h := range holds {
		if !only[h.ShopID] {
			return 0, tandem.Errorf(tandem.EINVALID, "hold %d/%s is of a shop not rebuilt", h.ShopID, h.CartToken)
		}
	}
	return s.rebuild(ctx, only, holds)
}

// rebuild is Rebuild for the shops of only (every shop when nil).
func (s *Store) rebuild(ctx context.Context, only map[int64]bool, holds []tandem.Reservation) (n int, err error) {
	for _, h := range holds {
		if err := validateHold(h); err != nil {
			return 0, err
		}
	}
	var ledger map[tandem.Key]int64
	if only == nil {
		ledger, err = s.ledger.ListOnHand(ctx)
	} else {
		ledger, err = s.shopsOnHand(ctx, only)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %w", tandem.Errorf(tandem.EUNAVAILABLE, "the inventory ledger is unavailable"), err)
	}
	type shopPlan struct {
		onHand map[tandem.Key]int64
		held   map[tandem.Key]int64
		holds  []tandem.Reservation
	}
	plans := map[int64]*shopPlan{}
	plan := func(shop int64) *shopPlan {
		p := plans[shop]
		if p == nil {
			p = &shopPlan{onHand: map[tandem.Key]int64{}, held: map[tandem.Key]int64{}}
			plans[shop] = p
		}
		return p
	}
	for k, v := range ledger {
		plan(k.ShopID).onHand[k] = v
	}
	for _, h := range holds {
		p := plan(h.ShopID)
		p.holds = append(p.holds, h)
		for _, l := range h.Lines {
			k := l.Key(h.ShopID)
			p.held[k] += l.Quantity
			if _, ok := p.onHand[k]; !ok {
				p.onHand[k] = 0
			}
		}
	}
	existing, err := s.shops(ctx)
	if err != nil {
		return 0, err
	}
	for _, shop := range existing {
		if only == nil || only[shop] {
			plan(shop)
		}
	}
	for shop := range only {
		plan(shop)
	}
	shops := make([]int64, 0, len(plans))
	for shop := range plans {
		shops = append(shops, shop)
	}
	sort.Slice(shops, func(i, j int) bool { return shops[i] < shops[j] })

	for _, shop := range shops {
		p := plans[shop]
		if len(p.onHand) > 0 {
			if err := s.rdb.SAdd(ctx, s.shopsKey(), shop).Err(); err != nil {
				return n, translate("rebuild", err)
			}
		}
		if err := s.rebuildShop(ctx, shop, p.onHand, p.held, p.holds); err != nil {
			return n, err
		}
		n += len(p.onHand)
		if len(p.onHand) == 0 {
			if err := s.rdb.SRem(ctx, s.shopsKey(), shop).Err(); err != nil {
				return n, translate("rebuild", err)
			}
		}
	}
	return n, nil
}

func (s *Store) rebuildShop(ctx context.Context, shop int64, onHand, held map[tandem.Key]int64, holds []tandem.Reservation) error {
	posKey, expKey := s.positionsKey(shop), s.expiryKey(shop)
	given := make(map[string]bool, len(holds))
	for _, h := range holds {
		given[h.CartToken] = true
	}
	write := func(tx *redis.Tx) error {
		oldMembers, err := tx.SMembers(ctx, posKey).Result()
		if err != nil {
			return err
		}
		oldTokens, err := tx.ZRange(ctx, expKey, 0, -1).Result()
		if err != nil {
			return err
		}
		// An active cart that is not among the given holds ended while
		// Redis was not written: sold when the ledger has its claim, else
		// gone. Either way its units are counted from the ledger below.
		ended := make(map[string]string, len(oldTokens))
		for _, t := range oldTokens {
			if given[t] {
				continue
			}
			claimed, err := s.ledger.Claimed(ctx, shop, t)
			if err != nil {
				return fmt.Errorf("%w: %w", tandem.Errorf(tandem.EUNAVAILABLE, "the inventory ledger is unavailable"), err)
			}
			ended[t] = statusExpired
			if claimed {
				ended[t] = statusClaimed
			}
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, m := range oldMembers {
				k, err := parsePositionMember(shop, m)
				if err != nil {
					return err
				}
				if _, ok := onHand[k]; !ok {
					p.Del(ctx, s.counterKey(k))
				}
			}
			p.Del(ctx, posKey, expKey)
			for t, status := range ended {
				ck := s.cartKey(shop, t)
				p.HSet(ctx, ck, "status", status)
				p.PExpire(ctx, ck, s.Retention)
			}
			for k, v := range onHand {
				h := held[k]
				// The holds are written reserved: none is claiming.
				p.HSet(ctx, s.counterKey(k), "on_hand", v, "available", v-h, "held", h, "claiming", 0)
				p.HIncrBy(ctx, s.counterKey(k), "seq", 1)
				p.SAdd(ctx, posKey, positionMember(k))
			}
			for _, h := range holds {
				ck := s.cartKey(shop, h.CartToken)
				exp := h.ExpiresAt.UnixMilli()
				p.Del(ctx, ck)
				p.HSet(ctx, ck, "status", statusReserved, "fp", "shape:"+linesShape(h.Lines),
					"expires_at_ms", exp, "lines", encodeLines(h.Lines))
				p.ZAdd(ctx, expKey, redis.Z{Score: float64(exp), Member: h.CartToken})
			}
			return nil
		})
		return err
	}
	for attempt := 0; attempt < maxWatchAttempts; attempt++ {
		err := s.rdb.Watch(ctx, write, posKey, expKey)
		if errors.Is(err, redis.TxFailedErr) {
			continue
		}
		if err != nil {
			return translate("rebuild", err)
		}
		return nil
	}
	return tandem.Errorf(tandem.EUNAVAILABLE, "shop %d kept changing while being rebuilt; try again", shop)
}
