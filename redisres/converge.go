package redisres

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
)

var (
	_ tandem.OnHandFollower = (*Store)(nil)
	_ tandem.HoldPlacer     = (*Store)(nil)
	_ tandem.ClaimSettler   = (*Store)(nil)
	_ tandem.Recounter      = (*Store)(nil)
)

// followSrc makes a counter follow a stock count that the source of truth
// wrote to the ledger: on_hand and available move by the count's change, so
// that a claim still on its way here (it lowers on_hand when it lands)
// commutes with the count. A counter Redis never had starts at on_hand.
//
// KEYS[1] counter, KEYS[2] shop positions set. ARGV[1] on_hand, ARGV[2]
// delta, ARGV[3] position member.
//
// Answers {held, available}.
const followSrc = `
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'on_hand', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'available', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'seq', 1)
else
  redis.call('HSET', KEYS[1], 'on_hand', ARGV[1], 'available', ARGV[1], 'held', '0')
end
redis.call('SADD', KEYS[2], ARGV[3])
local c = redis.call('HMGET', KEYS[1], 'held', 'available')
return {c[1] or '0', c[2] or '0'}
`

// settleClaimSrc records a cart that another store claimed while Redis does
// not hold it (never held, or released or expired here): the ledger lost
// the claimed lines, so they leave available and on_hand here too.
//
// KEYS[1] cart, KEYS[2] shop expiry zset, KEYS[3..] the counters of the
// claimed lines. ARGV[1] token, ARGV[2] the claimed lines, ARGV[3]
// retention_ms, ARGV[4] expires_at_ms.
//
// Answers {'settled'}, {'replay'} (claimed before; it shows the claimed
// lines from now on) or {'held'} (the cart is held here: the caller claims
// it instead).
const settleClaimSrc = `
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'claimed' then
  redis.call('HSET', KEYS[1], 'lines', ARGV[2])
  return {'replay'}
end
if st == 'reserved' or st == 'claiming' then
  return {'held'}
end
local k = 3
for item, qty, group in string.gmatch(ARGV[2], '(%d+):(%d+):(%d+)') do
  redis.call('HINCRBY', KEYS[k], 'available', -qty)
  redis.call('HINCRBY', KEYS[k], 'on_hand', -qty)
  redis.call('HINCRBY', KEYS[k], 'seq', 1)
  k = k + 1
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'status', 'claimed', 'fp', '', 'expires_at_ms', ARGV[4], 'lines', ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'settled'}
`

var (
	followScript      = redis.NewScript(followSrc)
	settleClaimScript = redis.NewScript(settleClaimSrc)
)

// FollowOnHand implements tandem.OnHandFollower: on_hand and available move
// by delta, the change the source of truth made to the ledger, in one
// script; the ledger is not written.
func (s *Store) FollowOnHand(ctx context.Context, key tandem.Key, onHand, delta int64) (res *tandem.Counters, err error) {
	defer s.observe("follow_on_hand", time.Now(), &err)
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if err := s.rdb.SAdd(ctx, s.shopsKey(), key.ShopID).Err(); err != nil {
		return nil, translate("follow on_hand", err)
	}
	keys := []string{s.counterKey(key), s.positionsKey(key.ShopID)}
	out, err := followScript.Run(ctx, s.rdb, keys, onHand, delta, positionMember(key)).StringSlice()
	if err != nil {
		return nil, translate("follow on_hand", err)
	}
	if len(out) != 2 {
		return nil, fmt.Errorf("redisres: unexpected follow answer %q", out)
	}
	h, err1 := strconv.ParseInt(out[0], 10, 64)
	a, err2 := strconv.ParseInt(out[1], 10, 64)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("redisres: follow answer %q", out)
	}
	c := &tandem.Counters{Key: key, OnHand: a + h, Reserved: h, Available: a}
	if c.Available < 0 {
		return c, tandem.Errorf(tandem.ECONFLICT, "Redis holds %d units of %s, more than on_hand %d", c.Reserved, key, c.OnHand)
	}
	return c, nil
}

// Recount implements tandem.Recounter: on_hand from the ledger, available
// = on_hand - held, held as the counter keeps it. It answers ECONFLICT,
// changing nothing, while a legacy claim of the position is between its
// ledger step and its Redis step, or when the counter's on_hand moved
// between its read and the ledger's (recountSrc): the caller tries again
// later.
func (s *Store) Recount(ctx context.Context, key tandem.Key) (res *tandem.Counters, err error) {
	defer s.observe("recount", time.Now(), &err)
	if err := validateKey(key); err != nil {
		return nil, err
	}
	// The counter's seq first, then the ledger: the script refuses when
	// on_hand moved in between.
	seq, err := s.counterSeq(ctx, key)
	if err != nil {
		return nil, err
	}
	if seq == "" {
		// A counter Redis no longer has (its data was lost) is not
		// recounted: its holds are gone too, and only a resync from MySQL
		// restores them.
		return nil, tandem.Errorf(tandem.EUNAVAILABLE, "redis has no counter for %s: resync it from MySQL", key)
	}
	onHand, err := s.ledger.OnHand(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", tandem.Errorf(tandem.EUNAVAILABLE, "the inventory ledger is unavailable"), err)
	}
	return s.recountTo(ctx, key, onHand, seq, false)
}

// counterSeq reads the seq of key's counter, "0" when it has none yet and
// "" when Redis has no such counter.
func (s *Store) counterSeq(ctx context.Context, key tandem.Key) (string, error) {
	vals, err := s.rdb.HMGet(ctx, s.counterKey(key), "seq", "on_hand").Result()
	if err != nil {
		return "", translate("recount", err)
	}
	if vals[1] == nil {
		return "", nil
	}
	seq, _ := vals[0].(string)
	return cmp.Or(seq, "0"), nil
}

// recountTo sets key's counter to onHand, read from the ledger after the
// counter's seq was (recountSrc). With claiming it does so even while a
// claim of the position is between its steps (the put-back of a stock
// count: an undersell until the next count, rather than a count the
// ledger never had).
func (s *Store) recountTo(ctx context.Context, key tandem.Key, onHand int64, seq string, claiming bool) (*tandem.Counters, error) {
	mode := ""
	if claiming {
		mode = "claiming"
	}
	keys := []string{s.counterKey(key), s.positionsKey(key.ShopID)}
	out, err := s.scripts.recount.Run(ctx, s.rdb, keys, onHand, positionMember(key), seq, mode).StringSlice()
	if err != nil {
		return nil, translate("recount", err)
	}
	switch {
	case len(out) == 1 && out[0] == "missing":
		return nil, tandem.Errorf(tandem.EUNAVAILABLE, "redis has no counter for %s: resync it from MySQL", key)
	case len(out) == 2 && out[0] == "busy" && out[1] == "claiming":
		return nil, tandem.Errorf(tandem.ECONFLICT, "a claim of %s is between its ledger step and its Redis step: recount it later", key)
	case len(out) == 2 && out[0] == "busy":
		return nil, tandem.Errorf(tandem.ECONFLICT, "on_hand of %s changed during the recount: recount it again", key)
	}
	c, _, err := countersAnswer(key, "recount", out)
	return c, err
}

// Place implements tandem.HoldPlacer with the reserve script: each line
// names only the hold's group, the expiry is the hold's, and the
// fingerprint is the hold's shape, which the buyer's own retry matches.
func (s *Store) Place(ctx context.Context, hold tandem.Reservation) (res *tandem.Reservation, err error) {
	defer s.observe("place", time.Now(), &err)
	req := tandem.ReserveRequest{CartToken: hold.CartToken, ShopID: hold.ShopID, Lines: make([]tandem.LineRequest, len(hold.Lines))}
	for i, l := range hold.Lines {
		req.Lines[i] = tandem.LineRequest{ItemID: l.ItemID, Quantity: l.Quantity, GroupIDs: []int64{l.GroupID}}
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	now := s.Now()
	if !hold.ExpiresAt.After(now) {
		return nil, tandem.Errorf(tandem.EINVALID, "hold %s expired at %s", hold.CartToken, hold.ExpiresAt)
	}
	claimed, err := s.ledger.Claimed(ctx, hold.ShopID, hold.CartToken)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", tandem.Errorf(tandem.EUNAVAILABLE, "the inventory ledger is unavailable"), err)
	}
	if claimed {
		return nil, tandem.Errorf(tandem.ECONFLICT, "cart %s is already claimed", hold.CartToken)
	}
	keys, args := s.reserveCall(req, now)
	args[1] = hold.ExpiresAt.UnixMilli()
	args[2] = "shape:" + linesShape(hold.Lines)
	out, err := s.scripts.reserve.Run(ctx, s.rdb, keys, args...).StringSlice()
	if err != nil {
		return nil, translate("place", err)
	}
	return reserveAnswer(req, out)
}

// SettleClaim implements tandem.ClaimSettler.
func (s *Store) SettleClaim(ctx context.Context, claimed tandem.Reservation) (err error) {
	defer s.observe("settle_claim", time.Now(), &err)
	if err := validateHold(claimed); err != nil {
		return err
	}
	shop, token := claimed.ShopID, claimed.CartToken
	encoded := encodeLines(claimed.Lines)
	exp := claimed.ExpiresAt.UnixMilli()
	if claimed.ExpiresAt.IsZero() {
		exp = s.Now().UnixMilli()
	}
	out, err := settleClaimScript.Run(ctx, s.rdb, s.lineKeys(shop, token, claimed.Lines),
		token, encoded, s.Retention.Milliseconds(), exp).StringSlice()
	if err != nil {
		return translate("settle claim", err)
	}
	if len(out) == 1 && out[0] == "held" {
		_, err := s.Claim(ctx, shop, token)
		return err
	}
	if len(out) != 1 || out[0] != "settled" && out[0] != "replay" {
		return fmt.Errorf("redisres: unexpected settle claim answer %q", out)
	}
	return nil
}
