package redisres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
)

// cart is a cart hash as read from Redis.
type cart struct {
	status    string
	fp        string
	expiresMs string
	lines     string
}

// readCart returns the cart, or nil when Redis knows no such cart.
func (s *Store) readCart(ctx context.Context, shopID int64, token string) (*cart, error) {
	vals, err := s.rdb.HMGet(ctx, s.cartKey(shopID, token), "status", "fp", "expires_at_ms", "lines").Result()
	if err != nil {
		return nil, translate("read cart", err)
	}
	str := func(v any) string {
		x, _ := v.(string)
		return x
	}
	if vals[0] == nil {
		return nil, nil
	}
	return &cart{status: str(vals[0]), fp: str(vals[1]), expiresMs: str(vals[2]), lines: str(vals[3])}, nil
}

// effectiveStatus is the cart's status as every operation sees it at now: a
// reserved cart whose expiry has passed is expired, although its units stay
// held until the reaper returns them.
func (c *cart) effectiveStatus(now time.Time) (string, error) {
	if c.status == statusClaiming {
		return statusClaiming, nil
	}
	if c.status != statusReserved {
		return c.status, nil
	}
	exp, err := strconv.ParseInt(c.expiresMs, 10, 64)
	if err != nil {
		return "", fmt.Errorf("redisres: bad expiry %q: %w", c.expiresMs, err)
	}
	if exp <= now.UnixMilli() {
		return statusExpired, nil
	}
	return statusReserved, nil
}

func reservation(shopID int64, token, status, expiresMs, lines string) (*tandem.Reservation, error) {
	exp, err := parseMillis(expiresMs)
	if err != nil {
		return nil, err
	}
	ls, err := decodeLines(lines)
	if err != nil {
		return nil, err
	}
	return &tandem.Reservation{
		CartToken: token,
		ShopID:    shopID,
		Status:    tandem.Status(status),
		ExpiresAt: exp,
		Lines:     ls,
	}, nil
}

// lineKeys returns the cart, expiry and counter keys a script over an
// existing cart needs, the counters in the cart's line order.
func (s *Store) lineKeys(shopID int64, token string, lines []tandem.Line) []string {
	keys := make([]string, 0, 2+len(lines))
	keys = append(keys, s.cartKey(shopID, token), s.expiryKey(shopID))
	for _, l := range lines {
		keys = append(keys, s.counterKey(l.Key(shopID)))
	}
	return keys
}

func validateCart(shopID int64, token string) error {
	if shopID <= 0 {
		return tandem.Errorf(tandem.EINVALID, "shop_id must be an integer > 0")
	}
	return tandem.ValidateCartToken(token)
}

// reserveCall builds the reserve script's keys and arguments.
func (s *Store) reserveCall(req tandem.ReserveRequest, now time.Time) (keys []string, args []any) {
	exp := req.Expiry(now, s.DefaultTTL)
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

// Claim implements tandem.ReservationStore with the legacy two steps: the
// ledger deducts the cart, then a script removes the hold (see the package
// doc for the window between them).
func (s *Store) Claim(ctx context.Context, shopID int64, token string) (res *tandem.Reservation, err error) {
	defer s.observe("claim", time.Now(), &err)
	if err := validateCart(shopID, token); err != nil {
		return nil, err
	}
	c, err := s.readCart(ctx, shopID, token)
	if err != nil {
		return nil, err
	} else if c == nil {
		return nil, tandem.Errorf(tandem.ENOTFOUND, "cart %s was never reserved", token)
	}
	status, err := c.effectiveStatus(tandem.AsOf(ctx, s.Now))
	if err != nil {
		return nil, err
	}
	switch status {
	case statusClaimed:
		res, err := reservation(shopID, token, statusClaimed, c.expiresMs, c.lines)
		if err != nil {
			return nil, err
		}
		res.Replayed = true
		return res, nil
	case statusReleased, statusExpired:
		return nil, tandem.Errorf(tandem.EGONE, "cart %s is %s", token, status)
	}
	lines, err := decodeLines(c.lines)
	if err != nil {
		return nil, err
	}

	// Step 0: mark the hold claiming, so that no reaper returns its units
	// while the sale is recorded in the ledger.
	begin, err := s.scripts.beginClaim.Run(ctx, s.rdb, []string{s.cartKey(shopID, token)}, tandem.AsOf(ctx, s.Now).UnixMilli(), c.lines).StringSlice()
	if err != nil {
		return nil, translate("claim", err)
	}
	switch begin[0] {
	case "ok":
	case "claimed":
		return s.Claim(ctx, shopID, token) // answers the replay
	case "gone":
		return nil, tandem.Errorf(tandem.EGONE, "cart %s is no longer held", token)
	case "notfound":
		return nil, tandem.Errorf(tandem.ENOTFOUND, "cart %s was never reserved", token)
	default:
		return nil, tandem.Errorf(tandem.EUNAVAILABLE, "cart %s changed during the claim; retry", token)
	}

	// Step 1: the ledger, exactly once per cart. applied=false means a
	// claim through this or another store deducted it already. On failure
	// the cart stays claiming: a retried claim completes it, and the reaper
	// settles it from the ledger's claim record after a grace period.
	if _, err := s.ledger.DeductCart(ctx, shopID, token, lines); err != nil {
		return nil, fmt.Errorf("%w: %w", tandem.Errorf(tandem.EUNAVAILABLE, "the inventory ledger is unavailable"), err)
	}

	// Step 2: the hold. Failing here leaves the window the package doc
	// describes; a retried claim completes it.
	keys := s.lineKeys(shopID, token, lines)
	out, err := s.scripts.claim.Run(ctx, s.rdb, keys, token, c.lines, s.Retention.Milliseconds()).StringSlice()
	if err != nil {
		s.countWindow("claim")
		s.Logger.Warn("claim deducted the ledger but could not remove the Redis hold; a retried claim completes it",
			zap.Int64("shop_id", shopID), zap.String("cart_token", token), zap.Error(err))
		return nil, translate("claim", err)
	}
	if len(out) != 3 || (out[0] != "claimed" && out[0] != "replay") {
		// The cart vanished or changed under a claim the ledger took.
		s.countWindow("claim")
		s.Logger.Error("claim deducted the ledger but the Redis cart changed",
			zap.Int64("shop_id", shopID), zap.String("cart_token", token), zap.Strings("answer", out))
		return nil, fmt.Errorf("redisres: claim of cart %s: unexpected answer %q", token, out)
	}
	if out[0] == "claimed" && out[2] != statusReserved && out[2] != statusClaiming {
		s.countWindow("claim")
		s.Logger.Warn("claim completed after the hold was freed; sold units taken back from available",
			zap.Int64("shop_id", shopID), zap.String("cart_token", token), zap.String("freed_as", out[2]))
	}
	res, err = reservation(shopID, token, statusClaimed, out[1], c.lines)
	if err != nil {
		return nil, err
	}
	res.Replayed = out[0] == "replay"
	return res, nil
}

// Release implements tandem.ReservationStore: one script returns the
// cart's units to its counters and marks it released.
func (s *Store) Release(ctx context.Context, shopID int64, token string) (res *tandem.Reservation, err error) {
	defer s.observe("release", time.Now(), &err)
	if err := validateCart(shopID, token); err != nil {
		return nil, err
	}
	// The script needs the counters' keys, built from the cart's lines; it
	// answers "stale" when the cart changed after this read.
	for attempt := 0; attempt < 3; attempt++ {
		c, err := s.readCart(ctx, shopID, token)
		if err != nil {
			return nil, err
		} else if c == nil {
			return nil, tandem.Errorf(tandem.ENOTFOUND, "cart %s was never reserved", token)
		}
		lines, err := decodeLines(c.lines)
		if err != nil {
			return nil, err
		}
		keys := s.lineKeys(shopID, token, lines)
		out, err := s.scripts.release.Run(ctx, s.rdb, keys, token, tandem.AsOf(ctx, s.Now).UnixMilli(), c.lines, s.Retention.Milliseconds()).StringSlice()
		if err != nil {
			return nil, translate("release", err)
		}
		if len(out) == 1 && out[0] == "stale" {
			continue
		} else if len(out) == 1 && out[0] == "notfound" {
			return nil, tandem.Errorf(tandem.ENOTFOUND, "cart %s was never reserved", token)
		} else if len(out) != 3 {
			return nil, fmt.Errorf("redisres: unexpected release answer %q", out)
		}
		switch out[0] {
		case "claimed":
			return nil, tandem.Errorf(tandem.EALREADYCLAIMED, "cart %s is already claimed", token)
		case "gone":
			return nil, tandem.Errorf(tandem.EGONE, "cart %s is expired", token)
		case "released", "replay":
			res, err := reservation(shopID, token, statusReleased, out[1], out[2])
			if err != nil {
				return nil, err
			}
			res.Replayed = out[0] == "replay"
			return res, nil
		}
		return nil, fmt.Errorf("redisres: unexpected release answer %q", out)
	}
	return nil, fmt.Errorf("redisres: release of cart %s: cart kept changing", token)
}

// Get implements tandem.ReservationStore.
func (s *Store) Get(ctx context.Context, shopID int64, token string) (res *tandem.Reservation, err error) {
	defer s.observe("get", time.Now(), &err)
	if err := validateCart(shopID, token); err != nil {
		return nil, err
	}
	c, err := s.readCart(ctx, shopID, token)
	if err != nil {
		return nil, err
	} else if c == nil {
		return nil, tandem.Errorf(tandem.ENOTFOUND, "cart %s was never reserved", token)
	}
	status, err := c.effectiveStatus(s.Now())
	if err != nil {
		return nil, err
	}
	if status == statusClaiming {
		status = statusReserved // a claim is under way; the hold is still held
	}
	return reservation(shopID, token, status, c.expiresMs, c.lines)
}

// isNil reports a missing key or field.
func isNil(err error) bool { return errors.Is(err, redis.Nil) }

var _ tandem.Discarder = (*Store)(nil)

// Discard implements tandem.Discarder: the router calls it on a shadow hold
// that the source of truth refused.
func (s *Store) Discard(ctx context.Context, shopID int64, token string) (err error) {
	defer s.observe("discard", time.Now(), &err)
	if err := validateCart(shopID, token); err != nil {
		return err
	}
	for attempt := 0; attempt < 3; attempt++ {
		c, err := s.readCart(ctx, shopID, token)
		if err != nil || c == nil {
			return err
		}
		lines, err := decodeLines(c.lines)
		if err != nil {
			return err
		}
		out, err := s.scripts.discard.Run(ctx, s.rdb, s.lineKeys(shopID, token, lines), token, c.lines).StringSlice()
		if err != nil {
			return translate("discard", err)
		}
		switch {
		case len(out) == 1 && out[0] == "stale":
			continue
		case len(out) == 1 && (out[0] == "discarded" || out[0] == "notfound"):
			return nil
		case len(out) == 1 && out[0] == "claimed":
			return tandem.Errorf(tandem.ECONFLICT, "cart %s is claimed and cannot be discarded", token)
		}
		return fmt.Errorf("redisres: unexpected discard answer %q", out)
	}
	return tandem.Errorf(tandem.EUNAVAILABLE, "cart %s kept changing during discard", token)
}
