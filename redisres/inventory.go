package redisres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
)

// maxWatchAttempts bounds the optimistic retries of a shop-wide snapshot or
// rebuild (WATCH/MULTI) that concurrent traffic keeps invalidating.
const maxWatchAttempts = 50

// counter is a counter hash; ok is false when Redis has no such key.
type counter struct {
	available, held, onHand int64
	ok                      bool
}

func parseCounter(vals []any) (counter, error) {
	var c counter
	for i, p := range []*int64{&c.available, &c.held, &c.onHand} {
		s, isStr := vals[i].(string)
		if !isStr {
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return counter{}, fmt.Errorf("redisres: bad counter field %q: %w", s, err)
		}
		*p = v
		c.ok = true
	}
	return c, nil
}

func (c counter) counters(k tandem.Key) tandem.Counters {
	return tandem.Counters{Key: k, OnHand: c.available + c.held, Reserved: c.held, Available: c.available}
}

func validateKey(k tandem.Key) error {
	if k.ShopID <= 0 || k.ItemID <= 0 || k.GroupID <= 0 {
		return tandem.Errorf(tandem.EINVALID, "shop_id, inventory_item_id and group_id must be integers > 0")
	}
	return nil
}

// Counters implements tandem.ReservationStore: OnHand is available + held as
// Redis sees them; a key Redis does not have is all zeros.
func (s *Store) Counters(ctx context.Context, key tandem.Key) (res *tandem.Counters, err error) {
	defer s.observe("counters", time.Now(), &err)
	if err := validateKey(key); err != nil {
		return nil, err
	}
	vals, err := s.rdb.HMGet(ctx, s.counterKey(key), "available", "held", "on_hand").Result()
	if err != nil {
		return nil, translate("counters", err)
	}
	c, err := parseCounter(vals)
	if err != nil {
		return nil, err
	}
	out := c.counters(key)
	return &out, nil
}

// SetOnHand implements tandem.ReservationStore: it refuses a count below
// what Redis holds, writes the ledger, then sets available = on_hand - held
// in one script (see the package doc for the window in between).
func (s *Store) SetOnHand(ctx context.Context, key tandem.Key, onHand int64) (res *tandem.Counters, err error) {
	defer s.observe("set_on_hand", time.Now(), &err)
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if onHand < 0 || onHand > tandem.MaxOnHand {
		return nil, tandem.Errorf(tandem.EINVALID, "on_hand must be 0..%d", tandem.MaxOnHand)
	}
	if err := s.rdb.SAdd(ctx, s.shopsKey(), key.ShopID).Err(); err != nil {
		return nil, translate("set on_hand", err)
	}
	// Redis first, checked and set in one script, so that no reserve can
	// slip between the check and the update; then the ledger. Should the
	// ledger write fail, Redis is put back to the previous count: the legacy
	// two-system window is that short compensation, which the drift audit
	// covers.
	c, prev, err := s.applyOnHand(ctx, key, onHand, true)
	if err != nil {
		return nil, err
	}
	if err := s.ledger.SetOnHand(ctx, key, onHand); err != nil {
		if prev != "" {
			if p, perr := strconv.ParseInt(prev, 10, 64); perr == nil {
				if _, _, rerr := s.applyOnHand(context.WithoutCancel(ctx), key, p, false); rerr != nil {
					s.countWindow("set_on_hand")
					s.Logger.Warn("stock count reached Redis but not the ledger, and Redis could not be put back; the drift audit will flag it",
						zap.Stringer("key", key), zap.Int64("on_hand", onHand), zap.Error(rerr))
				}
			}
		}
		return nil, fmt.Errorf("%w: %w", tandem.Errorf(tandem.EUNAVAILABLE, "the inventory ledger is unavailable"), err)
	}
	c.Before, _ = strconv.ParseInt(prev, 10, 64)
	return c, nil
}

// applyOnHand runs the set-on-hand script; with check it refuses (ECONFLICT,
// nothing changed) an on_hand below what Redis holds. It returns the
// counters and the previous on_hand ("" when the position was new).
func (s *Store) applyOnHand(ctx context.Context, key tandem.Key, onHand int64, check bool) (*tandem.Counters, string, error) {
	mode := ""
	if check {
		mode = "check"
	}
	keys := []string{s.counterKey(key), s.positionsKey(key.ShopID)}
	out, err := s.scripts.setOnHand.Run(ctx, s.rdb, keys, onHand, positionMember(key), mode).StringSlice()
	if err != nil {
		return nil, "", translate("set on_hand", err)
	}
	if len(out) == 2 && out[0] == "conflict" {
		return nil, "", tandem.Errorf(tandem.ECONFLICT, "on_hand %d is below the %s units held for %s", onHand, out[1], key)
	}
	if len(out) != 3 {
		return nil, "", fmt.Errorf("redisres: unexpected set on_hand answer %q", out)
	}
	h, err1 := strconv.ParseInt(out[0], 10, 64)
	a, err2 := strconv.ParseInt(out[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, "", fmt.Errorf("redisres: set on_hand answer %q: %w", out, err)
	}
	return &tandem.Counters{Key: key, OnHand: a + h, Reserved: h, Available: a}, out[2], nil
}

// shops returns every shop the store has counters for, ascending.
func (s *Store) shops(ctx context.Context) ([]int64, error) {
	members, err := s.rdb.SMembers(ctx, s.shopsKey()).Result()
	if err != nil {
		return nil, translate("list shops", err)
	}
	ids := make([]int64, 0, len(members))
	for _, m := range members {
		id, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redisres: bad shop id %q: %w", m, err)
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

func sortKeys(keys []tandem.Key) {
	sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
}

func keyLess(a, b tandem.Key) bool {
	if a.ShopID != b.ShopID {
		return a.ShopID < b.ShopID
	}
	if a.ItemID != b.ItemID {
		return a.ItemID < b.ItemID
	}
	return a.GroupID < b.GroupID
}

// snapshot is one shop as one atomic read sees it: its counters and the
// carts of its expiry set (the carts that hold units).
type snapshot struct {
	shopID   int64
	counters map[tandem.Key]counter
	tokens   []string
	carts    map[string]*cart // nil value: in the expiry set, no cart hash
}

// snapshotBatch is how many shops one MULTI/EXEC reads on a single Redis;
// a cluster (or ring) client reads one shop per MULTI, the shop's slot.
const snapshotBatch = 64

// snapshots reads every given shop's positions, counters and active carts,
// each shop atomically: a first pipeline lists the keys, then one MULTI/EXEC
// per batch reads the lists again with every value; a shop whose lists
// changed in between is read again.
func (s *Store) snapshots(ctx context.Context, shops []int64) ([]*snapshot, error) {
	done := make(map[int64]*snapshot, len(shops))
	pending := shops
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == maxWatchAttempts {
			return nil, tandem.Errorf(tandem.EUNAVAILABLE, "%d shops kept changing while being read; try again", len(pending))
		}
		members := make([]*redis.StringSliceCmd, len(pending))
		tokens := make([]*redis.StringSliceCmd, len(pending))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, shop := range pending {
				members[i] = p.SMembers(ctx, s.positionsKey(shop))
				tokens[i] = p.ZRange(ctx, s.expiryKey(shop), 0, -1)
			}
			return nil
		})
		if err != nil {
			return nil, translate("read shops", err)
		}
		size := 1
		if _, single := s.rdb.(*redis.Client); single {
			size = snapshotBatch
		}
		var retry []int64
		for lo := 0; lo < len(pending); lo += size {
			hi := min(lo+size, len(pending))
			snaps, err := s.readSnapshots(ctx, pending[lo:hi], members[lo:hi], tokens[lo:hi])
			if err != nil {
				return nil, err
			}
			for i, snap := range snaps {
				if snap == nil {
					retry = append(retry, pending[lo+i])
				} else {
					done[snap.shopID] = snap
				}
			}
		}
		pending = retry
	}
	out := make([]*snapshot, len(shops))
	for i, shop := range shops {
		out[i] = done[shop]
	}
	return out, nil
}

// readSnapshots reads the shops in one MULTI/EXEC given the lists the first
// pipeline saw; a nil snapshot means that shop's lists changed meanwhile.
func (s *Store) readSnapshots(ctx context.Context, shops []int64, members, tokens []*redis.StringSliceCmd) ([]*snapshot, error) {
	type reads struct {
		keys               []tandem.Key
		members, tokens    *redis.StringSliceCmd
		counterCmds, carts []*redis.SliceCmd
	}
	all := make([]reads, len(shops))
	for i, shop := range shops {
		for _, m := range members[i].Val() {
			k, err := parsePositionMember(shop, m)
			if err != nil {
				return nil, err
			}
			all[i].keys = append(all[i].keys, k)
		}
	}
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, shop := range shops {
			r := &all[i]
			r.members = p.SMembers(ctx, s.positionsKey(shop))
			r.tokens = p.ZRange(ctx, s.expiryKey(shop), 0, -1)
			for _, k := range r.keys {
				r.counterCmds = append(r.counterCmds, p.HMGet(ctx, s.counterKey(k), "available", "held", "on_hand"))
			}
			for _, t := range tokens[i].Val() {
				r.carts = append(r.carts, p.HMGet(ctx, s.cartKey(shop, t), "status", "fp", "expires_at_ms", "lines"))
			}
		}
		return nil
	})
	if err != nil {
		return nil, translate("read shops", err)
	}
	out := make([]*snapshot, len(shops))
	for i, shop := range shops {
		r := all[i]
		if !sameSet(r.members.Val(), members[i].Val()) || !sameSet(r.tokens.Val(), tokens[i].Val()) {
			continue
		}
		snap := &snapshot{shopID: shop, counters: make(map[tandem.Key]counter, len(r.keys)),
			tokens: tokens[i].Val(), carts: make(map[string]*cart, len(r.carts))}
		for j, k := range r.keys {
			c, err := parseCounter(r.counterCmds[j].Val())
			if err != nil {
				return nil, err
			}
			snap.counters[k] = c
		}
		for j, t := range snap.tokens {
			v := r.carts[j].Val()
			if v[0] == nil {
				snap.carts[t] = nil
				continue
			}
			str := func(x any) string { s, _ := x.(string); return s }
			snap.carts[t] = &cart{status: str(v[0]), fp: str(v[1]), expiresMs: str(v[2]), lines: str(v[3])}
		}
		out[i] = snap
	}
	return out, nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// ListCounters implements tandem.ReservationStore.
func (s *Store) ListCounters(ctx context.Context) (res []tandem.Counters, err error) {
	defer s.observe("list_counters", time.Now(), &err)
	shops, err := s.shops(ctx)
	if err != nil {
		return nil, err
	}
	members := make([]*redis.StringSliceCmd, len(shops))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, shop := range shops {
			members[i] = p.SMembers(ctx, s.positionsKey(shop))
		}
		return nil
	})
	if err != nil {
		return nil, translate("list counters", err)
	}
	var keys []tandem.Key
	for i, shop := range shops {
		for _, m := range members[i].Val() {
			k, err := parsePositionMember(shop, m)
			if err != nil {
				return nil, err
			}
			keys = append(keys, k)
		}
	}
	sortKeys(keys)
	cmds := make([]*redis.SliceCmd, len(keys))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HMGet(ctx, s.counterKey(k), "available", "held", "on_hand")
		}
		return nil
	})
	if err != nil {
		return nil, translate("list counters", err)
	}
	res = make([]tandem.Counters, 0, len(keys))
	for i, k := range keys {
		c, err := parseCounter(cmds[i].Val())
		if err != nil {
			return nil, err
		}
		res = append(res, c.counters(k))
	}
	return res, nil
}

// CheckInvariants implements tandem.ReservationStore: per position, the
// counter plus the quantities of the carts holding it equals the on_hand
// copy, held equals those quantities, and available is not negative; every
// cart in an expiry set is a reserved cart.
func (s *Store) CheckInvariants(ctx context.Context) (res []tandem.Violation, err error) {
	defer s.observe("check_invariants", time.Now(), &err)
	shops, err := s.shops(ctx)
	if err != nil {
		return nil, err
	}
	snaps, err := s.snapshots(ctx, shops)
	if err != nil {
		return nil, err
	}
	for _, snap := range snaps {
		res = append(res, snap.violations()...)
	}
	return res, nil
}

func (snap *snapshot) violations() []tandem.Violation {
	var out []tandem.Violation
	holds := map[tandem.Key]int64{}
	for _, t := range snap.tokens {
		c := snap.carts[t]
		shopKey := tandem.Key{ShopID: snap.shopID}
		if c == nil {
			out = append(out, tandem.Violation{Key: shopKey, CartToken: t, Message: "cart in the expiry set has no cart hash"})
			continue
		}
		if c.status != statusReserved && c.status != statusClaiming {
			out = append(out, tandem.Violation{Key: shopKey, CartToken: t, Message: fmt.Sprintf("cart in the expiry set is %s", c.status)})
			continue
		}
		lines, err := decodeLines(c.lines)
		if err != nil {
			out = append(out, tandem.Violation{Key: shopKey, CartToken: t, Message: err.Error()})
			continue
		}
		for _, l := range lines {
			holds[l.Key(snap.shopID)] += l.Quantity
		}
	}
	keys := make([]tandem.Key, 0, len(snap.counters))
	for k := range snap.counters {
		keys = append(keys, k)
	}
	for k := range holds {
		if _, ok := snap.counters[k]; !ok {
			keys = append(keys, k)
		}
	}
	sortKeys(keys)
	for _, k := range keys {
		c, h := snap.counters[k], holds[k]
		if c.available+h != c.onHand {
			out = append(out, tandem.Violation{Key: k, Message: fmt.Sprintf(
				"available %d + active holds %d != on_hand %d", c.available, h, c.onHand)})
		}
		if c.held != h {
			out = append(out, tandem.Violation{Key: k, Message: fmt.Sprintf(
				"held %d != active holds %d", c.held, h)})
		}
		if c.available < 0 {
			out = append(out, tandem.Violation{Key: k, Message: fmt.Sprintf("available %d < 0", c.available)})
		}
	}
	return out
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

// ActiveHolds implements tandem.Resyncer: every reserved cart, including
// those past their expiry that the reaper has not returned yet (their
// units are still held), ordered by shop and cart token.
func (s *Store) ActiveHolds(ctx context.Context) (res []tandem.Reservation, err error) {
	defer s.observe("active_holds", time.Now(), &err)
	shops, err := s.shops(ctx)
	if err != nil {
		return nil, err
	}
	snaps, err := s.snapshots(ctx, shops)
	if err != nil {
		return nil, err
	}
	for _, snap := range snaps {
		shop := snap.shopID
		tokens := append([]string(nil), snap.tokens...)
		sort.Strings(tokens)
		for _, t := range tokens {
			c := snap.carts[t]
			if c == nil || c.status != statusReserved && c.status != statusClaiming {
				continue
			}
			r, err := reservation(shop, t, statusReserved, c.expiresMs, c.lines)
			if err != nil {
				return nil, err
			}
			res = append(res, *r)
		}
	}
	return res, nil
}

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
// active and are not among the given holds are marked expired (their
// units are in no counter any more); terminal carts are kept. Positions
// Redis knew that are neither in the ledger nor held are removed (zero
// available). Holds written here carry no request fingerprint: a retried
// reserve matches them by items and quantities.
func (s *Store) Rebuild(ctx context.Context, holds []tandem.Reservation) (n int, err error) {
	defer s.observe("rebuild", time.Now(), &err)
	for _, h := range holds {
		if err := validateHold(h); err != nil {
			return 0, err
		}
	}
	ledger, err := s.ledger.ListOnHand(ctx)
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
			for _, t := range oldTokens {
				if !given[t] {
					ck := s.cartKey(shop, t)
					p.HSet(ctx, ck, "status", statusExpired)
					p.PExpire(ctx, ck, s.Retention)
				}
			}
			for k, v := range onHand {
				h := held[k]
				p.HSet(ctx, s.counterKey(k), "on_hand", v, "available", v-h, "held", h)
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
