package mysqlres

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tandemhq/tandem"
)

// Statements of the audit reads.
//
// The audit's reads are in proportion to the active holds, the positions
// and the pool rows, never to the terminal reservations that accumulate
// until their retention ends: held lines are read through the position
// index, whose first column is held (a ref on every column of a position,
// or one range over held = 1 in position order), and reservations through
// reservations_due (status first).
const (
	// listCountersSQL reads the positions of a page of shops, (lo, hi]:
	// the page's ledger rows, each with its held units summed by
	// pageHeldSQL.
	listCountersSQL = "/* conn_tag='audit' */ SELECT g.shop_id, g.inventory_item_id, g.inventory_group_id, g.on_hand, " + pageHeldSQL + " FROM ledger g WHERE g.shop_id > ? AND g.shop_id <= ? ORDER BY g.shop_id, g.inventory_item_id, g.inventory_group_id"
	// pageHeldSQL and pagePoolSQL count a ledger row's (g) held units and
	// pool rows through an equality on every column of the position: a
	// ref of the position index on (held, shop, item, group), of the pool's
	// primary key on (shop, item, group), whatever the optimizer's
	// statistics. A range of held lines over the page's shops in a derived
	// table, as these reads were, let MariaDB take the ref on held = 1
	// alone, every held line of the pod for a page of one shop, whenever
	// the table's statistics were those of the empty table it was right
	// after the backfill filled it (400,000 rows examined a page; the
	// audit of 200,000 holds 9-14 s instead of 2-3 s).
	pageHeldSQL = "(SELECT COALESCE(SUM(l.quantity), 0) FROM reservation_lines l FORCE INDEX (reservation_lines_position) WHERE l.held = 1 AND l.shop_id = g.shop_id AND l.inventory_item_id = g.inventory_item_id AND l.inventory_group_id = g.inventory_group_id)"
	pagePoolSQL = "(SELECT COUNT(*) FROM unit_pool p WHERE p.shop_id = g.shop_id AND p.inventory_item_id = g.inventory_item_id AND p.inventory_group_id = g.inventory_group_id)"
	// The invariant checks read a page of shops at a time, (lo, hi], from
	// the page's ledger rows (the orphans' check from the held lines and
	// pool rows of the page's shops). conservationSQL reads a position's
	// on_hand, pool rows and held units in one statement, so from one
	// consistent view even while reserves run.
	conservationSQL = "/* conn_tag='audit' */ SELECT g.shop_id, g.inventory_item_id, g.inventory_group_id, g.on_hand, g.unpooled, " + pagePoolSQL + ", " + pageHeldSQL + " FROM ledger g WHERE g.shop_id > ? AND g.shop_id <= ? ORDER BY g.shop_id, g.inventory_item_id, g.inventory_group_id"
	orphansSQL      = "/* conn_tag='audit' */ SELECT DISTINCT x.shop_id, x.inventory_item_id, x.inventory_group_id, x.what FROM (SELECT shop_id, inventory_item_id, inventory_group_id, 'held units' AS what FROM reservation_lines WHERE held = 1 AND shop_id > ? AND shop_id <= ? UNION ALL SELECT shop_id, inventory_item_id, inventory_group_id, 'pool rows' AS what FROM unit_pool WHERE shop_id > ? AND shop_id <= ?) x LEFT JOIN ledger g ON g.shop_id = x.shop_id AND g.inventory_item_id = x.inventory_item_id AND g.inventory_group_id = x.inventory_group_id WHERE g.shop_id IS NULL"
	// heldFlagsSQL finds the ended reservations of a page of shops with a
	// line held: the held lines of the page's positions (as pageHeldSQL
	// reads them: a held line of no position is the orphans' check's),
	// then each cart's header and lines by primary key, joined straight
	// and forced (status <> 'reserved' is a range of reservations_due
	// too, every ended reservation, which MariaDB chose to start from, or
	// to join through a buffer, when its statistics were off).
	heldFlagsSQL = "/* conn_tag='audit' */ SELECT r.shop_id, r.cart_token, r.status, SUM(l.held), COUNT(*) FROM (SELECT DISTINCT h.shop_id, h.cart_token FROM ledger g STRAIGHT_JOIN reservation_lines h FORCE INDEX (reservation_lines_position) ON h.held = 1 AND h.shop_id = g.shop_id AND h.inventory_item_id = g.inventory_item_id AND h.inventory_group_id = g.inventory_group_id WHERE g.shop_id > ? AND g.shop_id <= ?) x STRAIGHT_JOIN reservations r FORCE INDEX (PRIMARY) ON r.shop_id = x.shop_id AND r.cart_token = x.cart_token STRAIGHT_JOIN reservation_lines l FORCE INDEX (PRIMARY) ON l.shop_id = r.shop_id AND l.cart_token = r.cart_token WHERE r.status <> 'reserved' GROUP BY r.shop_id, r.cart_token, r.status"
	// reservedHeldFirstSQL and reservedHeldNextSQL read a page of reserved
	// headers with their held and total lines, in the order of
	// reservations_due as ActiveHolds does (a shop range of reservations
	// has no index that skips the ended ones, which accumulate).
	reservedHeldFirstSQL = "/* conn_tag='audit' */ SELECT h.shop_id, h.cart_token, h.expires_at, SUM(l.held), COUNT(l.line_no) FROM (SELECT shop_id, cart_token, expires_at FROM reservations WHERE status = 'reserved' ORDER BY expires_at, shop_id, cart_token LIMIT ?) h LEFT JOIN reservation_lines l ON l.shop_id = h.shop_id AND l.cart_token = h.cart_token GROUP BY h.expires_at, h.shop_id, h.cart_token ORDER BY h.expires_at, h.shop_id, h.cart_token"
	reservedHeldNextSQL  = "/* conn_tag='audit' */ SELECT h.shop_id, h.cart_token, h.expires_at, SUM(l.held), COUNT(l.line_no) FROM (SELECT shop_id, cart_token, expires_at FROM reservations FORCE INDEX (reservations_due) WHERE status = 'reserved' AND (expires_at > ? OR (expires_at = ? AND (shop_id > ? OR (shop_id = ? AND cart_token > ?)))) ORDER BY expires_at, shop_id, cart_token LIMIT ?) h LEFT JOIN reservation_lines l ON l.shop_id = h.shop_id AND l.cart_token = h.cart_token GROUP BY h.expires_at, h.shop_id, h.cart_token ORDER BY h.expires_at, h.shop_id, h.cart_token"
	// invariantPageSQL is the last shop of the page of n shops after lo:
	// the n-th shop of the ledger after it.
	invariantPageSQL = "/* conn_tag='audit' */ SELECT MAX(shop_id) FROM (SELECT DISTINCT shop_id FROM ledger WHERE shop_id > ? ORDER BY shop_id LIMIT ?) s"
	moreShopsSQL     = "/* conn_tag='audit' */ SELECT 1 FROM ledger WHERE shop_id > ? LIMIT 1"
	// A page of active holds: the next activeHoldsPage reserved headers
	// in the order of reservations_due (status, expires_at, then the
	// primary key), after the last one of the previous page, with their
	// lines; a range of the index whatever the page.
	activeHoldsFirstSQL = "/* conn_tag='audit' */ SELECT r.shop_id, r.cart_token, r.expires_at, l.inventory_item_id, l.quantity, l.inventory_group_id FROM (SELECT shop_id, cart_token, expires_at FROM reservations WHERE status = 'reserved' ORDER BY expires_at, shop_id, cart_token LIMIT ?) r LEFT JOIN reservation_lines l ON l.shop_id = r.shop_id AND l.cart_token = r.cart_token ORDER BY r.expires_at, r.shop_id, r.cart_token, l.line_no"
	activeHoldsNextSQL  = "/* conn_tag='audit' */ SELECT r.shop_id, r.cart_token, r.expires_at, l.inventory_item_id, l.quantity, l.inventory_group_id FROM (SELECT shop_id, cart_token, expires_at FROM reservations FORCE INDEX (reservations_due) WHERE status = 'reserved' AND (expires_at > ? OR (expires_at = ? AND (shop_id > ? OR (shop_id = ? AND cart_token > ?)))) ORDER BY expires_at, shop_id, cart_token LIMIT ?) r LEFT JOIN reservation_lines l ON l.shop_id = r.shop_id AND l.cart_token = r.cart_token ORDER BY r.expires_at, r.shop_id, r.cart_token, l.line_no"
)

// ListCounters implements tandem.ReservationStore. It reads a page of
// shops at a time as CheckInvariants does, each page one statement on a
// connection of its own, resting between them (tandem.Pace).
func (s *Store) ListCounters(ctx context.Context) ([]tandem.Counters, error) {
	var out []tandem.Counters
	shops := invariantPageShops
	for lo, last := int64(math.MinInt64), false; !last; {
		start := time.Now()
		hi, err := s.invariantPage(ctx, lo, shops)
		if err != nil {
			return nil, err
		}
		last = hi == math.MaxInt64
		var page []tandem.Counters
		err = s.withConn(ctx, tagAudit, func(conn *sql.Conn) error {
			page = page[:0]
			rows, err := conn.QueryContext(ctx, listCountersSQL, lo, hi)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var c tandem.Counters
				if err := rows.Scan(&c.ShopID, &c.ItemID, &c.GroupID, &c.OnHand, &c.Reserved); err != nil {
					return err
				}
				c.Available = c.OnHand - c.Reserved
				page = append(page, c)
			}
			return rows.Err()
		})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		shops = nextPageShops(shops, time.Since(start))
		if !last {
			if err := tandem.Pace(ctx, start); err != nil {
				return nil, translate(tagAudit, err)
			}
		}
		lo = hi
	}
	return out, nil
}

// CheckInvariants implements tandem.ReservationStore. Per position:
// on_hand = unpooled + pool rows + reserved units, unpooled >= 0 (a debt
// only follows an unconditional ledger write below this store's holds),
// pool rows <= PoolCap (exceeded only when an earlier run used a larger
// cap). Per reservation: its lines are held exactly while it is reserved.
// Held units and pool rows need a ledger row.
//
// The checks read a page of shops at a time, each check of a page one
// statement on a connection of its own, and the pod's throttle is asked
// between them (tandem.Pace): no connection is held for more than one
// statement over one page, whatever the pod's size. A page's shops follow
// its statements' time: halved after a page whose slowest statement took
// over invariantPageTarget, doubled (up to invariantPageMax) after one
// under a quarter of it, so a pod of a few big shops and one of many
// small ones both read in short statements. The pages cover every shop
// id, those the ledger does not know included (the last page has no
// end): an orphan may be of any shop.
func (s *Store) CheckInvariants(ctx context.Context) ([]tandem.Violation, error) {
	var out []tandem.Violation
	checks := []func(ctx context.Context, conn *sql.Conn, lo, hi int64) ([]tandem.Violation, error){
		s.checkConservation, checkOrphans, checkHeldFlags,
	}
	var start time.Time
	shops := invariantPageShops
	for lo, last := int64(math.MinInt64), false; !last; {
		hi, err := s.invariantPage(ctx, lo, shops)
		if err != nil {
			return nil, err
		}
		last = hi == math.MaxInt64
		var slowest time.Duration
		for _, check := range checks {
			if !start.IsZero() {
				if err := tandem.Pace(ctx, start); err != nil {
					return nil, translate(tagAudit, err)
				}
			}
			start = time.Now()
			var vs []tandem.Violation
			err := s.withConn(ctx, tagAudit, func(conn *sql.Conn) error {
				var err error
				vs, err = check(ctx, conn, lo, hi)
				return err
			})
			if err != nil {
				return nil, err
			}
			slowest = max(slowest, time.Since(start))
			out = append(out, vs...)
		}
		shops = nextPageShops(shops, slowest)
		lo = hi
	}
	vs, err := s.checkReservedHeld(ctx, start)
	if err != nil {
		return nil, err
	}
	return append(out, vs...), nil
}

// checkReservedHeld finds the reserved reservations with a line not held,
// activeHoldsPage headers a statement, each on a connection of its own,
// the throttle asked between them (the first after the statement that
// started at start).
func (s *Store) checkReservedHeld(ctx context.Context, start time.Time) ([]tandem.Violation, error) {
	var out []tandem.Violation
	var after *holdsCursor
	for {
		if err := tandem.Pace(ctx, start); err != nil {
			return nil, translate(tagAudit, err)
		}
		start = time.Now()
		q, args := after.page(reservedHeldFirstSQL, reservedHeldNextSQL)
		var page []tandem.Violation
		var last holdsCursor
		headers := 0
		err := s.withConn(ctx, tagAudit, func(conn *sql.Conn) error {
			page, headers = page[:0], 0
			rows, err := conn.QueryContext(ctx, q, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var held sql.NullInt64
				var lines int64
				if err := rows.Scan(&last.shop, &last.token, &last.expires, &held, &lines); err != nil {
					return err
				}
				headers++
				if held.Int64 != lines {
					page = append(page, tandem.Violation{Key: tandem.Key{ShopID: last.shop}, CartToken: last.token, Message: fmt.Sprintf(
						"reservation reserved has %d of %d lines held", held.Int64, lines)})
				}
			}
			return rows.Err()
		})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if headers < activeHoldsPage {
			return out, nil
		}
		after = &holdsCursor{expires: last.expires, shop: last.shop, token: last.token}
	}
}

// invariantPageShops is how many of the ledger's shops the first page of
// CheckInvariants and ListCounters reads (few: a shop may hold thousands
// of holds, and 100 shops of 1,000 were 2.7 s of one statement; the pages
// grow while they are fast); invariantPageFixed (tests) keeps every page
// at that size.
var (
	invariantPageShops = 8
	invariantPageFixed = false
)

// Bounds of a page of the invariant checks: the time its slowest
// statement aims at, and its most shops.
const (
	invariantPageTarget = 50 * time.Millisecond
	invariantPageMax    = 1000
)

// nextPageShops returns the shops of the next page after a page of shops
// whose slowest statement took took.
func nextPageShops(shops int, took time.Duration) int {
	switch {
	case invariantPageFixed:
		return shops
	case took > invariantPageTarget:
		return max(shops/2, 1)
	case took < invariantPageTarget/4:
		return min(shops*2, invariantPageMax)
	}
	return shops
}

// invariantPage returns the last shop of the page after lo, MaxInt64 when
// the ledger has no more than a page of shops after it.
func (s *Store) invariantPage(ctx context.Context, lo int64, shops int) (int64, error) {
	var hi sql.NullInt64
	more := false
	err := s.withConn(ctx, tagAudit, func(conn *sql.Conn) error {
		if err := conn.QueryRowContext(ctx, invariantPageSQL, lo, shops).Scan(&hi); err != nil || !hi.Valid {
			return err
		}
		var one int
		switch err := conn.QueryRowContext(ctx, moreShopsSQL, hi.Int64).Scan(&one); {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		more = true
		return nil
	})
	if err != nil {
		return 0, err
	}
	if !more {
		return math.MaxInt64, nil
	}
	return hi.Int64, nil
}

// checkConservation checks each position of the shops in (lo, hi]: its
// conservation, unpooled count and pool size.
func (s *Store) checkConservation(ctx context.Context, conn *sql.Conn, lo, hi int64) ([]tandem.Violation, error) {
	rows, err := conn.QueryContext(ctx, conservationSQL, lo, hi)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []tandem.Violation
	for rows.Next() {
		var k tandem.Key
		var onHand, unpooled, pool, held int64
		if err := rows.Scan(&k.ShopID, &k.ItemID, &k.GroupID, &onHand, &unpooled, &pool, &held); err != nil {
			return nil, err
		}
		if onHand != unpooled+pool+held {
			out = append(out, tandem.Violation{Key: k, Message: fmt.Sprintf(
				"conservation: on_hand %d != unpooled %d + pool rows %d + reserved %d", onHand, unpooled, pool, held)})
		}
		if unpooled < 0 {
			out = append(out, tandem.Violation{Key: k, Message: fmt.Sprintf(
				"unpooled is %d: on_hand was set below the units held", unpooled)})
		}
		if pool > int64(s.PoolCap) {
			out = append(out, tandem.Violation{Key: k, Message: fmt.Sprintf(
				"pool holds %d rows, cap %d", pool, s.PoolCap)})
		}
	}
	return out, rows.Err()
}

// checkOrphans finds held units and pool rows of the shops in (lo, hi]
// without a ledger row.
func checkOrphans(ctx context.Context, conn *sql.Conn, lo, hi int64) ([]tandem.Violation, error) {
	rows, err := conn.QueryContext(ctx, orphansSQL, lo, hi, lo, hi)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []tandem.Violation
	for rows.Next() {
		var k tandem.Key
		var what string
		if err := rows.Scan(&k.ShopID, &k.ItemID, &k.GroupID, &what); err != nil {
			return nil, err
		}
		out = append(out, tandem.Violation{Key: k, Message: what + " without a ledger row"})
	}
	return out, rows.Err()
}

// checkHeldFlags finds ended reservations of the shops in (lo, hi] with a
// line held (checkReservedHeld the reserved ones with a line not held).
func checkHeldFlags(ctx context.Context, conn *sql.Conn, lo, hi int64) ([]tandem.Violation, error) {
	rows, err := conn.QueryContext(ctx, heldFlagsSQL, lo, hi)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []tandem.Violation
	for rows.Next() {
		var shop, held, lines int64
		var token, status string
		if err := rows.Scan(&shop, &token, &status, &held, &lines); err != nil {
			return nil, err
		}
		out = append(out, tandem.Violation{Key: tandem.Key{ShopID: shop}, CartToken: token, Message: fmt.Sprintf(
			"reservation %s has %d of %d lines held", status, held, lines)})
	}
	return out, rows.Err()
}

// activeHoldsPage is how many holds one statement of ActiveHolds reads, so
// that the listing holds a connection for a page at a time.
//
// A page after the first starts at its cursor through reservations_due
// (status, expires_at, and the primary key it carries), forced: left to
// itself the optimizer reads the index from status = 'reserved' on and
// filters up to the cursor, every page rereading those before it (holds
// backfilled together share one expiry: a listing of 200,000 of them read
// 20 million index records).
const activeHoldsPage = 1000

// ActiveHolds implements tandem.Resyncer: every reservation whose units are
// held, including holds past their expiry that no reaper returned yet,
// ordered by shop and cart token. It reads pages of activeHoldsPage holds,
// each one statement on a connection of its own: not one consistent view
// of the pod, as every reader of the holds allows (the sweep compares and
// converges per cart; a resync runs on a pod at rest); a hold that ends
// meanwhile may be left out, one that starts may be.
func (s *Store) ActiveHolds(ctx context.Context) ([]tandem.Reservation, error) {
	// The pages are kept and joined once: a pod's listing is hundreds of
	// thousands of holds, and growing one slice page by page copies it
	// over and over.
	var pages [][]tandem.Reservation
	n := 0
	var after *holdsCursor
	for {
		start := time.Now()
		page, last, err := s.activeHoldsAfter(ctx, after)
		if err != nil {
			return nil, err
		}
		pages, n = append(pages, page), n+len(page)
		if last == nil {
			break
		}
		after = last
		if err := tandem.Pace(ctx, start); err != nil {
			return nil, translate(tagAudit, err)
		}
	}
	out := make([]tandem.Reservation, 0, n)
	for _, page := range pages {
		out = append(out, page...)
	}
	slices.SortStableFunc(out, func(a, b tandem.Reservation) int {
		if a.ShopID != b.ShopID {
			return cmp.Compare(a.ShopID, b.ShopID)
		}
		return strings.Compare(a.CartToken, b.CartToken)
	})
	// A hold rebuilt with a later expiry during the listing shows twice:
	// the copy read last is kept.
	kept := out[:0]
	for _, h := range out {
		if n := len(kept); n > 0 && kept[n-1].ShopID == h.ShopID && kept[n-1].CartToken == h.CartToken {
			kept[n-1] = h
			continue
		}
		kept = append(kept, h)
	}
	return kept, nil
}

// holdsCursor is the last reserved header of a page, in the order of
// reservations_due.
type holdsCursor struct {
	expires time.Time
	shop    int64
	token   string
}

// page returns the statement of the page of activeHoldsPage headers after
// c, and its arguments: first from the start (c nil), else next.
func (c *holdsCursor) page(first, next string) (string, []any) {
	if c == nil {
		return first, []any{activeHoldsPage}
	}
	return next, []any{c.expires, c.expires, c.shop, c.shop, c.token, activeHoldsPage}
}

// activeHoldsAfter reads the page of holds after the cursor (from the
// first with nil) and returns the cursor of its last header, nil when the
// page was the last. A header without lines (never written so) counts in
// the page but is no hold.
func (s *Store) activeHoldsAfter(ctx context.Context, after *holdsCursor) ([]tandem.Reservation, *holdsCursor, error) {
	q, args := after.page(activeHoldsFirstSQL, activeHoldsNextSQL)
	var out []tandem.Reservation
	var last holdsCursor
	headers := 0
	err := s.withConn(ctx, tagAudit, func(conn *sql.Conn) error {
		out, headers = nil, 0
		rows, err := conn.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c holdsCursor
			var item, qty, group sql.NullInt64
			if err := rows.Scan(&c.shop, &c.token, &c.expires, &item, &qty, &group); err != nil {
				return err
			}
			if headers == 0 || c.shop != last.shop || c.token != last.token {
				headers++
				last = c
				if item.Valid {
					out = append(out, tandem.Reservation{CartToken: c.token, ShopID: c.shop, Status: tandem.StatusReserved, ExpiresAt: c.expires.UTC()})
				}
			}
			if item.Valid {
				out[len(out)-1].Lines = append(out[len(out)-1].Lines, tandem.Line{ItemID: item.Int64, Quantity: qty.Int64, GroupID: group.Int64})
			}
		}
		return rows.Err()
	})
	if err != nil || headers < activeHoldsPage {
		return out, nil, err
	}
	return out, &last, nil
}
