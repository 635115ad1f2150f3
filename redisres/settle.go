package redisres

import (
	"cmp"
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
)

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
	if !claimed {
		if err := s.scripts.unclaim.Run(ctx, s.rdb, []string{s.cartKey(shopID, token)}).Err(); err != nil {
			return translate("expire", err)
		}
		s.Logger.Warn("undid an interrupted claim the ledger never recorded", zap.Int64("shop_id", shopID), zap.String("cart_token", token))
		return nil
	}
	lines, err := decodeLines(c.lines)
	if err != nil {
		return err
	}
	keys := s.lineKeys(shopID, token, lines)
	if err := s.scripts.claim.Run(ctx, s.rdb, keys, token, c.lines, s.Retention.Milliseconds()).Err(); err != nil {
		return translate("expire", err)
	}
	s.Logger.Warn("completed an interrupted claim from the ledger's record", zap.Int64("shop_id", shopID), zap.String("cart_token", token))
	return nil
}
