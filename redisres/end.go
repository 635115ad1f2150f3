package redisres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
)

var _ tandem.CartEnder = (*Store)(nil)

// endSrc records a cart as another store ended it (released or expired): a
// hold Redis has returns its units to its counters and takes that status,
// and a cart Redis never saw is written with that status and the given
// lines, touching no counter (a tombstone: the reserve script answers a
// conflict for it). A released or expired cart keeps its status. Either
// way the cart shows the given lines: Redis may have held it in other
// groups than the store that ended it, and a replay must show those.
//
// KEYS[1] cart, KEYS[2] shop expiry zset, KEYS[3..] the counters of the
// lines the caller read (none when it read no cart). ARGV[1] token,
// ARGV[2] the lines the caller read (” when it read no cart), ARGV[3]
// the status, ARGV[4] the ended lines, ARGV[5] expires_at_ms, ARGV[6]
// retention_ms.
//
// Answers {'ended'}, {'recorded'}, {'stale'} (the cart changed since the
// caller read it) or {'claimed'}.
const endSrc = unholdLua + `
local cart = redis.call('HMGET', KEYS[1], 'status', 'lines')
if not cart[1] then
  if ARGV[2] ~= '' then
    return {'stale'}
  end
  redis.call('HSET', KEYS[1], 'status', ARGV[3], 'fp', '', 'expires_at_ms', ARGV[5], 'lines', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  return {'recorded'}
end
if cart[2] ~= ARGV[2] then
  return {'stale'}
end
if cart[1] == 'claimed' or cart[1] == 'claiming' then
  return {'claimed'}
end
if cart[1] ~= 'reserved' then
  redis.call('HSET', KEYS[1], 'lines', ARGV[4])
  return {'ended'}
end
unhold(cart[2])
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'lines', ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {'ended'}
`

var endScript = redis.NewScript(endSrc)

// End implements tandem.CartEnder.
func (s *Store) End(ctx context.Context, ended tandem.Reservation) (err error) {
	defer s.observe("end", time.Now(), &err)
	if ended.Status != tandem.StatusReleased && ended.Status != tandem.StatusExpired {
		return tandem.Errorf(tandem.EINVALID, "cart %s: end takes a released or expired cart, not %q", ended.CartToken, ended.Status)
	}
	if err := validateHold(ended); err != nil {
		return err
	}
	shop, token := ended.ShopID, ended.CartToken
	exp := ended.ExpiresAt.UnixMilli()
	if ended.ExpiresAt.IsZero() {
		exp = s.Now().UnixMilli()
	}
	for attempt := 0; attempt < 3; attempt++ {
		c, err := s.readCart(ctx, shop, token)
		if err != nil {
			return err
		}
		var read []tandem.Line
		encoded := ""
		if c != nil {
			if read, err = decodeLines(c.lines); err != nil {
				return err
			}
			encoded = c.lines
		}
		out, err := endScript.Run(ctx, s.rdb, s.lineKeys(shop, token, read),
			token, encoded, string(ended.Status), encodeLines(ended.Lines), strconv.FormatInt(exp, 10), s.Retention.Milliseconds()).StringSlice()
		if err != nil {
			return translate("end", err)
		}
		switch {
		case len(out) == 1 && out[0] == "stale":
			continue
		case len(out) == 1 && (out[0] == "ended" || out[0] == "recorded"):
			return nil
		case len(out) == 1 && out[0] == "claimed":
			return tandem.Errorf(tandem.ECONFLICT, "cart %s is claimed and cannot be ended", token)
		}
		return fmt.Errorf("redisres: unexpected end answer %q", out)
	}
	return tandem.Errorf(tandem.EUNAVAILABLE, "cart %s kept changing while being ended", token)
}

var _ tandem.Tombstoner = (*Store)(nil)

// tombstoneSrc records a cart another store ended that Redis does not
// know, touching no counter; a cart Redis knows is left as it is.
//
// KEYS[1] cart. ARGV[1] status, ARGV[2] lines, ARGV[3] expires_at_ms,
// ARGV[4] retention_ms.
//
// Answers 1 when it recorded the cart, 0 when Redis knew it.
const tombstoneSrc = `
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'fp', '', 'expires_at_ms', ARGV[3], 'lines', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
`

var tombstoneScript = redis.NewScript(tombstoneSrc)

// Tombstone implements tandem.Tombstoner: one script per cart (a cart's
// key alone, so it runs on a Redis Cluster too), kept as long as Redis
// keeps its own ended carts (Retention).
func (s *Store) Tombstone(ctx context.Context, ended []tandem.Reservation) (n int, err error) {
	defer s.observe("tombstone", time.Now(), &err)
	for _, c := range ended {
		if err := validateTombstone(c); err != nil {
			return 0, err
		}
	}
	for _, c := range ended {
		exp := c.ExpiresAt.UnixMilli()
		if c.ExpiresAt.IsZero() {
			exp = s.Now().UnixMilli()
		}
		r, err := tombstoneScript.Run(ctx, s.rdb, []string{s.cartKey(c.ShopID, c.CartToken)},
			string(c.Status), encodeLines(c.Lines), strconv.FormatInt(exp, 10), s.Retention.Milliseconds()).Int()
		if err != nil {
			return n, translate("tombstone", err)
		}
		n += r
	}
	return n, nil
}

// validateTombstone checks a cart given to Tombstone.
func validateTombstone(c tandem.Reservation) error {
	switch c.Status {
	case tandem.StatusClaimed, tandem.StatusReleased, tandem.StatusExpired:
	default:
		return tandem.Errorf(tandem.EINVALID, "cart %s: a tombstone is of a claimed, released or expired cart, not %q", c.CartToken, c.Status)
	}
	return validateHold(c)
}
