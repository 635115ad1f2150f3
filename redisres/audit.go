package redisres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
)

// maxWatchAttempts bounds the optimistic retries of a shop-wide snapshot or
// rebuild (WATCH/MULTI) that concurrent traffic keeps invalidating.
const maxWatchAttempts = 50

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
// each shop as one atomic read sees it, with no round trip that carries
// every cart of a shop of tens of thousands of holds.
//
// A cart's lines do not change while it is in its shop's expiry set: the
// reserve script writes them with the ZADD, and the scripts that end a
// cart take it out of the set in the same step (only a rebuild rewrites a
// held cart). So the carts are read first, listBatch per round trip; one
// MULTI/EXEC per batch of shops then reads each shop's positions, the
// members of its expiry set and its counters; the carts that joined the
// set in between are read last. The sums of a shop are those of the carts
// in its set at the MULTI. A shop whose positions changed between the
// pipeline that names its counters and the MULTI is read again.
func (s *Store) snapshots(ctx context.Context, shops []int64) ([]*snapshot, error) {
	listed, err := s.activeCarts(ctx, shops)
	if err != nil {
		return nil, err
	}
	read, err := s.readCarts(ctx, listed)
	if err != nil {
		return nil, err
	}
	known := make(map[shopCart]*cart, len(listed))
	for i, sc := range listed {
		known[sc] = read[i]
	}
	size := 1
	if _, single := s.rdb.(*redis.Client); single {
		size = snapshotBatch
	}
	held := make(map[int64]int, len(shops))
	for _, sc := range listed {
		held[sc.shop]++
	}
	done := make(map[int64]*snapshot, len(shops))
	pending := shops
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == maxWatchAttempts {
			return nil, tandem.Errorf(tandem.EUNAVAILABLE, "%d shops kept changing while being read; try again", len(pending))
		}
		var retry []int64
		for _, batch := range snapshotBatches(pending, held, size) {
			snaps, err := s.readSnapshots(ctx, batch, known)
			if err != nil {
				return nil, err
			}
			for i, snap := range snaps {
				if snap == nil {
					retry = append(retry, batch[i])
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
	return out, s.readJoined(ctx, out, known)
}

// snapshotMembers bounds the expiry-set members one MULTI/EXEC of
// snapshots reads (a shop with more is read alone): Redis runs a
// transaction whole, every other client waiting, and 64 shops of a
// thousand holds each were 64,000 members, tens of milliseconds of a
// buyer's reserve waiting behind an audit.
const snapshotMembers = 2000

// snapshotBatches cuts shops into batches of at most size shops and about
// snapshotMembers holds, counted in held.
func snapshotBatches(shops []int64, held map[int64]int, size int) [][]int64 {
	var out [][]int64
	for lo := 0; lo < len(shops); {
		hi, n := lo, 0
		for hi < len(shops) && hi-lo < size && (hi == lo || n+held[shops[hi]] <= snapshotMembers) {
			n += held[shops[hi]]
			hi++
		}
		out = append(out, shops[lo:hi])
		lo = hi
	}
	return out
}

// readSnapshots reads the shops' positions, then in one MULTI/EXEC their
// positions again, the members of their expiry sets and their counters; a
// nil snapshot means that shop's positions changed meanwhile. The carts
// are taken from known where it has them.
func (s *Store) readSnapshots(ctx context.Context, shops []int64, known map[shopCart]*cart) ([]*snapshot, error) {
	members := make([]*redis.StringSliceCmd, len(shops))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, shop := range shops {
			members[i] = p.SMembers(ctx, s.positionsKey(shop))
		}
		return nil
	})
	if err != nil {
		return nil, translate("read shops", err)
	}
	type reads struct {
		keys            []tandem.Key
		members, tokens *redis.StringSliceCmd
		counterCmds     []*redis.SliceCmd
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
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, shop := range shops {
			r := &all[i]
			r.members = p.SMembers(ctx, s.positionsKey(shop))
			r.tokens = p.ZRange(ctx, s.expiryKey(shop), 0, -1)
			for _, k := range r.keys {
				r.counterCmds = append(r.counterCmds, p.HMGet(ctx, s.counterKey(k), "available", "held", "on_hand", "claiming"))
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
		if !sameSet(r.members.Val(), members[i].Val()) {
			continue
		}
		snap := &snapshot{shopID: shop, counters: make(map[tandem.Key]counter, len(r.keys)),
			tokens: r.tokens.Val(), carts: make(map[string]*cart, len(r.tokens.Val()))}
		for j, k := range r.keys {
			c, err := parseCounter(r.counterCmds[j].Val())
			if err != nil {
				return nil, err
			}
			snap.counters[k] = c
		}
		for _, t := range snap.tokens {
			if c, ok := known[shopCart{shop, t}]; ok {
				snap.carts[t] = c
			}
		}
		out[i] = snap
	}
	return out, nil
}

// readJoined reads again the carts of the snapshots' expiry sets that
// known does not have as active (they joined after the carts were read,
// or a rebuild gave an ended token a new hold), listBatch per round trip.
// Such a cart that has ended since the MULTI and left its set held its
// lines at the MULTI: it counts as reserved. One still in its set with no
// hash, or ended, is what it is: a broken invariant.
func (s *Store) readJoined(ctx context.Context, snaps []*snapshot, known map[shopCart]*cart) error {
	var late []shopCart
	for _, snap := range snaps {
		for _, t := range snap.tokens {
			if c := known[shopCart{snap.shopID, t}]; c == nil || c.status != statusReserved && c.status != statusClaiming {
				late = append(late, shopCart{snap.shopID, t})
			}
		}
	}
	for lo := 0; lo < len(late); lo += listBatch {
		batch := late[lo:min(lo+listBatch, len(late))]
		carts := make([]*redis.SliceCmd, len(batch))
		scores := make([]*redis.FloatCmd, len(batch))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, sc := range batch {
				carts[i] = p.HMGet(ctx, s.cartKey(sc.shop, sc.token), cartFields...)
				scores[i] = p.ZScore(ctx, s.expiryKey(sc.shop), sc.token)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) { // Nil: a cart no longer in its set
			return translate("read shops", err)
		}
		for i, sc := range batch {
			if err := carts[i].Err(); err != nil {
				return translate("read shops", err)
			}
			if err := scores[i].Err(); err != nil && !errors.Is(err, redis.Nil) {
				return translate("read shops", err)
			}
			c := parseCart(carts[i].Val())
			if c != nil && c.status != statusReserved && c.status != statusClaiming && errors.Is(scores[i].Err(), redis.Nil) {
				c.status = statusReserved
			}
			known[sc] = c
		}
	}
	for _, snap := range snaps {
		for _, t := range snap.tokens {
			snap.carts[t] = known[shopCart{snap.shopID, t}]
		}
	}
	return nil
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
// copy, held equals those quantities, claiming those of the claiming carts,
// and available is not negative; every cart in an expiry set is a reserved
// or claiming cart.
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
	holds, claiming := map[tandem.Key]int64{}, map[tandem.Key]int64{}
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
			if c.status == statusClaiming {
				claiming[l.Key(snap.shopID)] += l.Quantity
			}
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
		if c.claiming != claiming[k] {
			out = append(out, tandem.Violation{Key: k, Message: fmt.Sprintf(
				"claiming %d != units of claiming carts %d", c.claiming, claiming[k])})
		}
	}
	return out
}

// listBatch bounds the commands of one round trip of ActiveHolds and of
// the cart reads of CheckInvariants: a shop with tens of thousands of
// holds is read in many short round trips, not one reply that holds Redis
// and outlasts the client's read timeout.
const listBatch = 500

// scanRound and scanCount bound the scan of the expiry sets: scanRound
// ZSCANs a round trip, each asking for about scanCount members. Redis runs
// the commands of a pipeline one after the other before it serves another
// client: 200 ZSCANs of 500 members in one round trip were 60 ms of every
// buyer's reserve waiting behind a listing; a round is now about 2,000
// members, a few milliseconds.
const (
	scanRound = 20
	scanCount = 100
)

// ActiveHolds implements tandem.Resyncer: every reserved cart, including
// those past their expiry that the reaper has not returned yet (their
// units are still held), ordered by shop and cart token. It scans each
// shop's expiry set (ZSCAN) and reads the carts it names, listBatch
// commands per round trip: not one atomic view of a shop, as every reader
// of the holds (the sweep, the backfill's copy and its catch-up) allows; a
// cart that ends meanwhile is left out, one that starts may be.
func (s *Store) ActiveHolds(ctx context.Context) (res []tandem.Reservation, err error) {
	defer s.observe("active_holds", time.Now(), &err)
	shops, err := s.shops(ctx)
	if err != nil {
		return nil, err
	}
	return s.shopHolds(ctx, shops)
}

var _ tandem.ShopLister = (*Store)(nil)

// ShopHolds implements tandem.ShopLister.
func (s *Store) ShopHolds(ctx context.Context, shops []int64) (res []tandem.Reservation, err error) {
	defer s.observe("shop_holds", time.Now(), &err)
	return s.shopHolds(ctx, shops)
}

func (s *Store) shopHolds(ctx context.Context, shops []int64) (res []tandem.Reservation, err error) {
	listed, err := s.activeCarts(ctx, shops)
	if err != nil {
		return nil, err
	}
	carts, err := s.readCarts(ctx, listed)
	if err != nil {
		return nil, err
	}
	res = make([]tandem.Reservation, 0, len(listed))
	for i, sc := range listed {
		c := carts[i]
		if c == nil || c.status != statusReserved && c.status != statusClaiming {
			continue // ended since the scan, or no cart (CheckInvariants reports it)
		}
		r, err := reservation(sc.shop, sc.token, statusReserved, c.expiresMs, c.lines)
		if err != nil {
			return nil, err
		}
		res = append(res, *r)
	}
	return res, nil
}

var _ tandem.HoldCounter = (*Store)(nil)

// ShopHoldCounts implements tandem.HoldCounter: the size of every shop's
// expiry set (ZCARD), listBatch shops per round trip. It counts, as
// ActiveHolds lists, the carts past their expiry that the reaper has not
// returned yet.
func (s *Store) ShopHoldCounts(ctx context.Context) (res map[int64]int, err error) {
	defer s.observe("hold_counts", time.Now(), &err)
	shops, err := s.shops(ctx)
	if err != nil {
		return nil, err
	}
	res = make(map[int64]int, len(shops))
	for lo := 0; lo < len(shops); lo += listBatch {
		start := time.Now()
		batch := shops[lo:min(lo+listBatch, len(shops))]
		cmds := make([]*redis.IntCmd, len(batch))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, shop := range batch {
				cmds[i] = p.ZCard(ctx, s.expiryKey(shop))
			}
			return nil
		})
		if err != nil {
			return nil, translate("count holds", err)
		}
		for i, shop := range batch {
			res[shop] = int(cmds[i].Val())
		}
		if lo+listBatch < len(shops) {
			if err := tandem.Pace(ctx, start); err != nil {
				return nil, translate("count holds", err)
			}
		}
	}
	return res, nil
}

// shopCart names a cart of a shop.
type shopCart struct {
	shop  int64
	token string
}

// activeCarts returns the members of every shop's expiry set, scanned with
// ZSCAN, scanRound shops per round trip, ordered by shop and token.
func (s *Store) activeCarts(ctx context.Context, shops []int64) ([]shopCart, error) {
	type scan struct {
		shop   int64
		cursor uint64
	}
	tokens := make(map[int64][]string, len(shops))
	pending := make([]scan, len(shops))
	for i, shop := range shops {
		pending[i] = scan{shop: shop}
	}
	for len(pending) > 0 {
		start := time.Now()
		round := pending[:min(scanRound, len(pending))]
		cmds := make([]*redis.ScanCmd, len(round))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, sc := range round {
				cmds[i] = p.ZScan(ctx, s.expiryKey(sc.shop), sc.cursor, "", scanCount)
			}
			return nil
		})
		if err != nil {
			return nil, translate("list holds", err)
		}
		var next []scan
		for i, sc := range round {
			pairs, cursor := cmds[i].Val()
			for j := 0; j+1 < len(pairs); j += 2 { // member, score
				tokens[sc.shop] = append(tokens[sc.shop], pairs[j])
			}
			if cursor != 0 {
				next = append(next, scan{sc.shop, cursor})
			}
		}
		pending = append(next, pending[len(round):]...)
		if len(pending) > 0 {
			if err := tandem.Pace(ctx, start); err != nil {
				return nil, translate("list holds", err)
			}
		}
	}
	var out []shopCart
	for _, shop := range shops {
		ts := tokens[shop]
		sort.Strings(ts)
		for i, t := range ts {
			if i == 0 || t != ts[i-1] { // ZSCAN may name a member twice
				out = append(out, shopCart{shop, t})
			}
		}
	}
	return out, nil
}

// cartFields are the fields of a cart hash, in the order parseCart reads.
var cartFields = []string{"status", "fp", "expires_at_ms", "lines"}

// readCarts reads the carts, listBatch per round trip; nil for a cart
// Redis does not know.
func (s *Store) readCarts(ctx context.Context, carts []shopCart) ([]*cart, error) {
	out := make([]*cart, len(carts))
	for lo := 0; lo < len(carts); lo += listBatch {
		start := time.Now()
		batch := carts[lo:min(lo+listBatch, len(carts))]
		cmds := make([]*redis.SliceCmd, len(batch))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, sc := range batch {
				cmds[i] = p.HMGet(ctx, s.cartKey(sc.shop, sc.token), cartFields...)
			}
			return nil
		})
		if err != nil {
			return nil, translate("read carts", err)
		}
		for i := range batch {
			out[lo+i] = parseCart(cmds[i].Val())
		}
		if lo+listBatch < len(carts) {
			if err := tandem.Pace(ctx, start); err != nil {
				return nil, translate("read carts", err)
			}
		}
	}
	return out, nil
}

// parseCart reads an HMGET of cartFields; nil when the cart has no hash.
func parseCart(v []any) *cart {
	if len(v) < len(cartFields) || v[0] == nil {
		return nil
	}
	str := func(x any) string { s, _ := x.(string); return s }
	return &cart{status: str(v[0]), fp: str(v[1]), expiresMs: str(v[2]), lines: str(v[3])}
}
