package mysqlres

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/tandemhq/tandem"
)

// Statements of the audit reads and of Rebuild.
const (
	listCountersSQL = "/* conn_tag='audit' */ SELECT g.shop_id, g.inventory_item_id, g.inventory_group_id, g.on_hand, COALESCE(h.held, 0) FROM ledger g LEFT JOIN (SELECT shop_id, inventory_item_id, inventory_group_id, SUM(quantity) AS held FROM reservation_lines WHERE held = 1 GROUP BY shop_id, inventory_item_id, inventory_group_id) h ON h.shop_id = g.shop_id AND h.inventory_item_id = g.inventory_item_id AND h.inventory_group_id = g.inventory_group_id ORDER BY g.shop_id, g.inventory_item_id, g.inventory_group_id"
	// conservationSQL reads every position in one statement, so from one
	// consistent view even while reserves run.
	conservationSQL = "/* conn_tag='audit' */ SELECT g.shop_id, g.inventory_item_id, g.inventory_group_id, g.on_hand, g.unpooled, (SELECT COUNT(*) FROM unit_pool p WHERE p.shop_id = g.shop_id AND p.inventory_item_id = g.inventory_item_id AND p.inventory_group_id = g.inventory_group_id), (SELECT COALESCE(SUM(l.quantity), 0) FROM reservation_lines l WHERE l.shop_id = g.shop_id AND l.inventory_item_id = g.inventory_item_id AND l.inventory_group_id = g.inventory_group_id AND l.held = 1) FROM ledger g ORDER BY g.shop_id, g.inventory_item_id, g.inventory_group_id"
	orphansSQL      = "/* conn_tag='audit' */ SELECT DISTINCT x.shop_id, x.inventory_item_id, x.inventory_group_id, x.what FROM (SELECT shop_id, inventory_item_id, inventory_group_id, 'held units' AS what FROM reservation_lines WHERE held = 1 UNION ALL SELECT shop_id, inventory_item_id, inventory_group_id, 'pool rows' AS what FROM unit_pool) x LEFT JOIN ledger g ON g.shop_id = x.shop_id AND g.inventory_item_id = x.inventory_item_id AND g.inventory_group_id = x.inventory_group_id WHERE g.shop_id IS NULL"
	heldFlagsSQL    = "/* conn_tag='audit' */ SELECT r.shop_id, r.cart_token, r.status, SUM(l.held), COUNT(*) FROM reservations r JOIN reservation_lines l ON l.shop_id = r.shop_id AND l.cart_token = r.cart_token GROUP BY r.shop_id, r.cart_token, r.status HAVING (r.status = 'reserved' AND SUM(l.held) <> COUNT(*)) OR (r.status <> 'reserved' AND SUM(l.held) <> 0)"
	activeHoldsSQL  = "/* conn_tag='audit' */ SELECT r.shop_id, r.cart_token, r.expires_at, l.inventory_item_id, l.quantity, l.inventory_group_id FROM reservations r JOIN reservation_lines l ON l.shop_id = r.shop_id AND l.cart_token = r.cart_token WHERE r.status = 'reserved' ORDER BY r.shop_id, r.cart_token, l.line_no"

	rebuildLockSQL        = "/* conn_tag='rebuild' */ SELECT shop_id, inventory_item_id, inventory_group_id FROM ledger ORDER BY shop_id, inventory_item_id, inventory_group_id FOR UPDATE"
	rebuildDropLinesSQL   = "/* conn_tag='rebuild' */ DELETE l FROM reservation_lines l JOIN reservations r ON r.shop_id = l.shop_id AND r.cart_token = l.cart_token WHERE r.status = 'reserved'"
	rebuildDropActiveSQL  = "/* conn_tag='rebuild' */ DELETE FROM reservations WHERE status = 'reserved'"
	rebuildDropCartLines  = "/* conn_tag='rebuild' */ DELETE FROM reservation_lines WHERE %s"
	rebuildDropCartsSQL   = "/* conn_tag='rebuild' */ DELETE FROM reservations WHERE %s"
	rebuildDropPoolSQL    = "/* conn_tag='rebuild' */ DELETE FROM unit_pool"
	rebuildResetSQL       = "/* conn_tag='rebuild' */ UPDATE ledger SET unpooled = on_hand, updated_at = ?"
	rebuildHoldSQL        = "/* conn_tag='rebuild' */ UPDATE ledger SET unpooled = unpooled - ? WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?"
	rebuildNewPositionSQL = "/* conn_tag='rebuild' */ INSERT INTO ledger (shop_id, inventory_item_id, inventory_group_id, on_hand, unpooled, next_unit_id, updated_at) VALUES (?, ?, ?, 0, ?, 1, ?)"
	rebuildHeadersSQL     = "/* conn_tag='rebuild' */ INSERT INTO reservations (shop_id, cart_token, status, fingerprint, expires_at, created_at, updated_at) VALUES "
	rebuildHeaderValues   = "(?, ?, 'reserved', '', ?, ?, ?)"
	rebuildLinesSQL       = "/* conn_tag='rebuild' */ INSERT INTO reservation_lines (shop_id, cart_token, line_no, inventory_item_id, inventory_group_id, quantity, held) VALUES "
	rebuildPositionsSQL   = "/* conn_tag='rebuild' */ SELECT shop_id, inventory_item_id, inventory_group_id FROM ledger WHERE unpooled > 0"
)

// ListCounters implements tandem.ReservationStore.
func (s *Store) ListCounters(ctx context.Context) ([]tandem.Counters, error) {
	var out []tandem.Counters
	err := s.withConn(ctx, tagAudit, func(conn *sql.Conn) error {
		out = nil
		rows, err := conn.QueryContext(ctx, listCountersSQL)
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
			out = append(out, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CheckInvariants implements tandem.ReservationStore. Per position:
// on_hand = unpooled + pool rows + reserved units, unpooled >= 0 (a debt
// only follows an unconditional ledger write below this store's holds),
// pool rows <= PoolCap (exceeded only when an earlier run used a larger
// cap). Per reservation: its lines are held exactly while it is reserved.
// Held units and pool rows need a ledger row.
func (s *Store) CheckInvariants(ctx context.Context) ([]tandem.Violation, error) {
	var out []tandem.Violation
	err := s.withConn(ctx, tagAudit, func(conn *sql.Conn) error {
		out = nil
		rows, err := conn.QueryContext(ctx, conservationSQL)
		if err != nil {
			return err
		}
		for rows.Next() {
			var k tandem.Key
			var onHand, unpooled, pool, held int64
			if err := rows.Scan(&k.ShopID, &k.ItemID, &k.GroupID, &onHand, &unpooled, &pool, &held); err != nil {
				rows.Close()
				return err
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
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}

		rows, err = conn.QueryContext(ctx, orphansSQL)
		if err != nil {
			return err
		}
		for rows.Next() {
			var k tandem.Key
			var what string
			if err := rows.Scan(&k.ShopID, &k.ItemID, &k.GroupID, &what); err != nil {
				rows.Close()
				return err
			}
			out = append(out, tandem.Violation{Key: k, Message: what + " without a ledger row"})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}

		rows, err = conn.QueryContext(ctx, heldFlagsSQL)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var shop, held, lines int64
			var token, status string
			if err := rows.Scan(&shop, &token, &status, &held, &lines); err != nil {
				return err
			}
			out = append(out, tandem.Violation{Key: tandem.Key{ShopID: shop}, CartToken: token, Message: fmt.Sprintf(
				"reservation %s has %d of %d lines held", status, held, lines)})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ActiveHolds implements tandem.Resyncer: every reservation whose units are
// held, including holds past their expiry that no reaper returned yet.
func (s *Store) ActiveHolds(ctx context.Context) ([]tandem.Reservation, error) {
	var out []tandem.Reservation
	err := s.withConn(ctx, tagAudit, func(conn *sql.Conn) error {
		out = nil
		rows, err := conn.QueryContext(ctx, activeHoldsSQL)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var shop int64
			var token string
			var exp time.Time
			var l tandem.Line
			if err := rows.Scan(&shop, &token, &exp, &l.ItemID, &l.Quantity, &l.GroupID); err != nil {
				return err
			}
			if n := len(out); n == 0 || out[n-1].ShopID != shop || out[n-1].CartToken != token {
				out = append(out, tandem.Reservation{CartToken: token, ShopID: shop, Status: tandem.StatusReserved, ExpiresAt: exp.UTC()})
			}
			out[len(out)-1].Lines = append(out[len(out)-1].Lines, l)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Rebuild implements tandem.Resyncer for the whole database (the pod): in
// one transaction, with every ledger row locked, it drops the pools and the
// active reservations, gives every position unpooled = on_hand - the given
// holds, and inserts the holds as active reservations (with their lines and
// expiry; a hold whose token this store knew replaces it). Terminal
// reservations and claims stay. The pools are then refilled, one short
// transaction per position. It returns how many positions it rewrote.
//
// Backfilled holds carry no request fingerprint: a retried reserve matches
// them by items, quantities and groups.
func (s *Store) Rebuild(ctx context.Context, holds []tandem.Reservation) (int, error) {
	for i, h := range holds {
		if err := tandem.ValidateCartToken(h.CartToken); err != nil {
			return 0, err
		}
		if h.ShopID <= 0 || len(h.Lines) == 0 {
			return 0, tandem.Errorf(tandem.EINVALID, "holds[%d] needs a shop and lines", i)
		}
		for _, l := range h.Lines {
			if l.ItemID <= 0 || l.GroupID <= 0 || l.Quantity <= 0 {
				return 0, tandem.Errorf(tandem.EINVALID, "holds[%d] has a line without item, group or quantity", i)
			}
		}
	}
	now := s.Now().UTC()
	held := map[tandem.Key]int64{}
	for _, h := range holds {
		for k, q := range lineQuantities(h.ShopID, h.Lines) {
			held[k] += q
		}
	}
	var positions int
	err := s.withTx(ctx, tagRebuild, func(tx *sql.Tx) error {
		known := map[tandem.Key]bool{}
		rows, err := tx.QueryContext(ctx, rebuildLockSQL)
		if err != nil {
			return fmt.Errorf("lock ledger: %w", err)
		}
		for rows.Next() {
			var k tandem.Key
			if err := rows.Scan(&k.ShopID, &k.ItemID, &k.GroupID); err != nil {
				rows.Close()
				return fmt.Errorf("lock ledger: %w", err)
			}
			known[k] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lock ledger: %w", err)
		}
		for _, stmt := range []string{rebuildDropLinesSQL, rebuildDropActiveSQL, rebuildDropPoolSQL} {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("rebuild: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, rebuildResetSQL, now); err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
		for _, k := range sortKeys(mapKeys(held)) {
			if known[k] {
				_, err = tx.ExecContext(ctx, rebuildHoldSQL, held[k], k.ShopID, k.ItemID, k.GroupID)
			} else {
				_, err = tx.ExecContext(ctx, rebuildNewPositionSQL, k.ShopID, k.ItemID, k.GroupID, -held[k], now)
				known[k] = true
			}
			if err != nil {
				return fmt.Errorf("rebuild %s: %w", k, err)
			}
		}
		for start := 0; start < len(holds); start += expireBatch {
			if err := insertHolds(ctx, tx, holds[start:min(start+expireBatch, len(holds))], now); err != nil {
				return err
			}
		}
		positions = len(known)
		return nil
	})
	if err != nil {
		return 0, err
	}
	s.repl.forget()
	var keys []tandem.Key
	err = s.withConn(ctx, tagRebuild, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, rebuildPositionsSQL)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k tandem.Key
			if err := rows.Scan(&k.ShopID, &k.ItemID, &k.GroupID); err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return rows.Err()
	})
	if err != nil {
		return positions, err
	}
	for _, k := range keys {
		if _, err := s.replenish(ctx, k); err != nil {
			return positions, err
		}
	}
	return positions, nil
}

// insertHolds writes backfilled holds, replacing any reservation of the
// same carts.
func insertHolds(ctx context.Context, tx *sql.Tx, holds []tandem.Reservation, now time.Time) error {
	if len(holds) == 0 {
		return nil
	}
	conds := make([]string, len(holds))
	cargs := make([]any, 0, 2*len(holds))
	var hb, lb strings.Builder
	hb.WriteString(rebuildHeadersSQL)
	lb.WriteString(rebuildLinesSQL)
	var hargs, largs []any
	nl := 0
	for i, h := range holds {
		conds[i] = cartCondSQL
		cargs = append(cargs, h.ShopID, h.CartToken)
		if i > 0 {
			hb.WriteString(", ")
		}
		hb.WriteString(rebuildHeaderValues)
		hargs = append(hargs, h.ShopID, h.CartToken, h.ExpiresAt.UTC().Truncate(time.Microsecond), now, now)
		for j, l := range h.Lines {
			if nl > 0 {
				lb.WriteString(", ")
			}
			lb.WriteString(lineValuesSQL)
			largs = append(largs, h.ShopID, h.CartToken, j, l.ItemID, l.GroupID, l.Quantity)
			nl++
		}
	}
	where := strings.Join(conds, " OR ")
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(rebuildDropCartLines, where), cargs...); err != nil {
		return fmt.Errorf("rebuild: drop replaced lines: %w", err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(rebuildDropCartsSQL, where), cargs...); err != nil {
		return fmt.Errorf("rebuild: drop replaced reservations: %w", err)
	}
	if _, err := tx.ExecContext(ctx, hb.String(), hargs...); err != nil {
		return fmt.Errorf("rebuild: insert holds: %w", err)
	}
	if _, err := tx.ExecContext(ctx, lb.String(), largs...); err != nil {
		return fmt.Errorf("rebuild: insert hold lines: %w", err)
	}
	return nil
}

func mapKeys(m map[tandem.Key]int64) []tandem.Key {
	out := make([]tandem.Key, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
