package redisres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tandemhq/tandem"
)

// reserveCall builds the reserve script's keys and arguments.
func (s *Store) reserveCall(req tandem.ReserveRequest, now time.Time) (keys []string, args []any) {
	exp := req.Expiry(now)
	keys = []string{s.cartKey(req.ShopID, req.CartToken), s.expiryKey(req.ShopID)}
	args = []any{now.UnixMilli(), exp.UnixMilli(), req.Fingerprint(), requestShape(req), req.CartToken, len(req.Lines)}
	for _, l := range req.Lines {
		args = append(args, l.ItemID, l.Quantity, len(l.GroupIDs))
		for _, g := range l.GroupIDs {
			keys = append(keys, s.counterKey(tandem.Key{ShopID: req.ShopID, ItemID: l.ItemID, GroupID: g}))
			args = append(args, g)
		}
	}
	return keys, args
}

// Reserve implements tandem.ReservationStore: one script holds every line
// or none, taking each line whole from the first of its groups whose
// counter covers it.
func (s *Store) Reserve(ctx context.Context, req tandem.ReserveRequest) (res *tandem.Reservation, err error) {
	defer s.observe("reserve", time.Now(), &err)
	if err := req.Validate(); err != nil {
		return nil, err
	}
	keys, args := s.reserveCall(req, s.Now())
	out, err := s.scripts.reserve.Run(ctx, s.rdb, keys, args...).StringSlice()
	if err != nil {
		return nil, translate("reserve", err)
	}
	return reserveAnswer(req, out)
}

func reserveAnswer(req tandem.ReserveRequest, out []string) (*tandem.Reservation, error) {
	switch {
	case len(out) == 3 && (out[0] == "ok" || out[0] == "replay"):
		res, err := reservation(req.ShopID, req.CartToken, statusReserved, out[1], out[2])
		if err != nil {
			return nil, err
		}
		res.Replayed = out[0] == "replay"
		return res, nil
	case len(out) == 2 && out[0] == "conflict":
		if out[1] == statusReserved {
			return nil, tandem.Errorf(tandem.ECONFLICT, "cart %s is in use with a different request", req.CartToken)
		}
		return nil, tandem.Errorf(tandem.ECONFLICT, "cart %s is already %s", req.CartToken, out[1])
	case len(out) == 4 && out[0] == "insufficient":
		item, err1 := strconv.ParseInt(out[1], 10, 64)
		want, err2 := strconv.ParseInt(out[2], 10, 64)
		have, err3 := strconv.ParseInt(out[3], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("redisres: reserve answer %q: %w", out, err)
		}
		unit := "units"
		if have == 1 {
			unit = "unit"
		}
		return nil, tandem.Errorf(tandem.EINSUFFICIENT, "item %d has %d sellable %s, %d requested", item, have, unit, want).
			WithDetail("inventory_item_id", item)
	}
	return nil, fmt.Errorf("redisres: unexpected reserve answer %q", out)
}
