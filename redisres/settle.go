package redisres

import (
	"cmp"
	"context"
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
	// and no recount from the ledger sets its positions while the sale is
	// recorded in the ledger.
	begin, err := s.scripts.beginClaim.Run(ctx, s.rdb, s.lineKeys(shopID, token, lines), tandem.AsOf(ctx, s.Now).UnixMilli(), c.lines).StringSlice()
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

	// Step 2: the hold.
	return s.removeClaimedHold(ctx, shopID, token, c.lines, lines)
}

// removeClaimedHold is step two of a claim, after the ledger deducted the
// cart: the script marks the cart claimed and removes its hold. Failing
// here leaves the window the package doc describes; a retried claim
// completes it.
func (s *Store) removeClaimedHold(ctx context.Context, shopID int64, token, encoded string, lines []tandem.Line) (*tandem.Reservation, error) {
	keys := s.lineKeys(shopID, token, lines)
	out, err := s.scripts.claim.Run(ctx, s.rdb, keys, token, encoded, s.Retention.Milliseconds()).StringSlice()
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
	res, err := reservation(shopID, token, statusClaimed, out[1], encoded)
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

// ExpireDue implements tandem.ReservationStore. Each hold is returned by a
// script that checks the cart is still reserved and due, so that any number
// of reapers on any number of instances return it once.
func (s *Store) ExpireDue(ctx context.Context, now time.Time, limit int) (n int, err error) {
	defer s.observe("expire_due", time.Now(), &err)
	if limit <= 0 {
		return 0, nil
	}
	shops, err := s.shops(ctx)
	if err != nil {
		return 0, err
	}
	nowMs := now.UnixMilli()
	due := func(p redis.Cmdable, shop int64, count int) *redis.StringSliceCmd {
		return p.ZRangeByScore(ctx, s.expiryKey(shop), &redis.ZRangeBy{
			Min: "-inf", Max: strconv.FormatInt(nowMs, 10), Count: int64(count),
		})
	}
	// One round trip finds the shops with due holds. On a Redis Cluster a
	// master that cannot answer (down, failing over) fails only its own
	// shops: the others are reaped, and the first error is returned after.
	first := make([]*redis.StringSliceCmd, len(shops))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, shop := range shops {
			first[i] = due(p, shop, limit)
		}
		return nil
	})
	var failed error
	if err != nil {
		failed = translate("expire", err)
	}
	for i, shop := range shops {
		if first[i].Err() != nil {
			continue
		}
		tokens := first[i].Val()
		seen := map[string]bool{}
		for n < limit && len(tokens) > 0 {
			fresh := false
			for _, t := range tokens {
				if n >= limit {
					break
				}
				if !seen[t] {
					fresh = true
				}
				seen[t] = true
				ok, err := s.expireOne(ctx, shop, t, nowMs)
				if err != nil {
					failed = cmp.Or(failed, err)
					tokens = nil
					break
				}
				if ok {
					n++
				}
			}
			if !fresh || n >= limit || tokens == nil {
				// Every candidate was seen before: others hold them, or
				// they are stuck; the next run looks again.
				break
			}
			if tokens, err = due(s.rdb, shop, limit-n).Result(); err != nil {
				failed = cmp.Or(failed, translate("expire", err))
				break
			}
		}
		if n >= limit || ctx.Err() != nil {
			break
		}
	}
	if s.metrics != nil {
		s.metrics.expired.Add(float64(n))
	}
	return n, failed
}

// expireOne expires one due cart and reports whether this call did.
func (s *Store) expireOne(ctx context.Context, shopID int64, token string, nowMs int64) (bool, error) {
	for attempt := 0; attempt < 3; attempt++ {
		c, err := s.readCart(ctx, shopID, token)
		if err != nil {
			return false, err
		}
		var lines []tandem.Line
		encoded := ""
		if c != nil && (c.status == statusReserved || c.status == statusClaiming) {
			if lines, err = decodeLines(c.lines); err != nil {
				return false, err
			}
			encoded = c.lines
		}
		keys := s.lineKeys(shopID, token, lines)
		r, err := s.scripts.expire.Run(ctx, s.rdb, keys, token, nowMs, encoded, s.Retention.Milliseconds()).Int()
		if err != nil {
			return false, translate("expire", err)
		}
		if r == -2 {
			return false, s.settleClaiming(ctx, shopID, token, c, nowMs)
		}
		if r >= 0 {
			return r == 1, nil
		}
	}
	return false, nil
}

// ClaimingGrace is how long past its expiry a claiming cart (a claim
// interrupted between its steps) waits for the claim to be retried before
// the reaper settles it from the ledger.
const ClaimingGrace = time.Minute

// settleClaiming finishes a claim interrupted between its ledger step and
// its Redis step: when the ledger recorded the sale, the Redis step is run;
// when it did not, the cart is reserved again and expires as usual.
func (s *Store) settleClaiming(ctx context.Context, shopID int64, token string, c *cart, nowMs int64) error {
	exp, err := strconv.ParseInt(c.expiresMs, 10, 64)
	if err != nil || nowMs < exp+ClaimingGrace.Milliseconds() {
		return nil
	}
	claimed, err := s.ledger.Claimed(ctx, shopID, token)
	if err != nil {
		return nil // the ledger is down: the next run tries again
	}
	lines, err := decodeLines(c.lines)
	if err != nil {
		return err
	}
	keys := s.lineKeys(shopID, token, lines)
	if !claimed {
		n, err := s.scripts.unclaim.Run(ctx, s.rdb, keys, c.lines).Int()
		if err != nil {
			return translate("expire", err)
		}
		if n == 1 {
			s.Logger.Warn("undid an interrupted claim the ledger never recorded", zap.Int64("shop_id", shopID), zap.String("cart_token", token))
		}
		return nil // not claiming any more, or changed: the next run looks again
	}
	if err := s.scripts.claim.Run(ctx, s.rdb, keys, token, c.lines, s.Retention.Milliseconds()).Err(); err != nil {
		return translate("expire", err)
	}
	s.Logger.Warn("completed an interrupted claim from the ledger's record", zap.Int64("shop_id", shopID), zap.String("cart_token", token))
	return nil
}
