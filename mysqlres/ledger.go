package mysqlres

import (
	"context"
	"database/sql"
	"errors"
	"slices"

	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
)

// Statements of the ledger's reads.
const (
	onHandSQL     = "/* conn_tag='ledger' */ SELECT on_hand FROM ledger WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?"
	listOnHandSQL = "/* conn_tag='ledger' */ SELECT shop_id, inventory_item_id, inventory_group_id, on_hand FROM ledger"
	claimedSQL    = "/* conn_tag='ledger' */ SELECT 1 FROM claims WHERE shop_id = ? AND cart_token = ?"
	// countersSQL sums the held lines as heldSQL does, through the
	// position index, forced.
	// recordsSQL reads a position in one statement, so from one view even
	// while reserves run (they move units from the pool to holds, which
	// keeps the sum): on_hand, unpooled, pool rows and held units.
	recordsSQL  = "/* conn_tag='audit' */ SELECT (SELECT on_hand FROM ledger WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), (SELECT unpooled FROM ledger WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), (SELECT COUNT(*) FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), (SELECT COALESCE(SUM(quantity), 0) FROM reservation_lines FORCE INDEX (reservation_lines_position) WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? AND held = 1)"
	countersSQL = "/* conn_tag='audit' */ SELECT (SELECT on_hand FROM ledger WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), (SELECT COALESCE(SUM(quantity), 0) FROM reservation_lines FORCE INDEX (reservation_lines_position) WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? AND held = 1)"
)

// ledger is the pod's tandem.Ledger, in the store's database.
type ledger struct{ s *Store }

// OnHand implements tandem.Ledger.
func (l *ledger) OnHand(ctx context.Context, key tandem.Key) (int64, error) {
	var v sql.NullInt64
	err := l.s.withConn(ctx, tagLedger, func(conn *sql.Conn) error {
		err := conn.QueryRowContext(ctx, onHandSQL, key.ShopID, key.ItemID, key.GroupID).Scan(&v)
		if err == sql.ErrNoRows {
			return nil
		}
		return err
	})
	return v.Int64, err
}

// ListOnHand implements tandem.Ledger.
func (l *ledger) ListOnHand(ctx context.Context) (map[tandem.Key]int64, error) {
	out := map[tandem.Key]int64{}
	err := l.s.withConn(ctx, tagLedger, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, listOnHandSQL)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k tandem.Key
			var v int64
			if err := rows.Scan(&k.ShopID, &k.ItemID, &k.GroupID, &v); err != nil {
				return err
			}
			out[k] = v
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SetOnHand implements tandem.Ledger: on_hand is written unconditionally and
// the sellable units follow. When this store holds more than onHand, the
// shortfall is kept as debt (negative unpooled) that returning units pay
// off; CheckInvariants reports it meanwhile.
func (l *ledger) SetOnHand(ctx context.Context, key tandem.Key, onHand int64) error {
	_, err := l.s.setOnHand(ctx, key, onHand, false)
	return err
}

// DeductCart implements tandem.Ledger. In one transaction it records the
// claim (a repeat changes nothing and reports applied false), settles this
// database's hold of the cart when it has one (its units leave "reserved")
// and lowers on_hand by the given lines, which come from the store that
// claimed the cart.
func (l *ledger) DeductCart(ctx context.Context, shopID int64, cartToken string, lines []tandem.Line) (bool, error) {
	if err := tandem.ValidateCartToken(cartToken); err != nil {
		return false, err
	}
	for i, ln := range lines {
		if ln.Quantity <= 0 || ln.ItemID <= 0 || ln.GroupID <= 0 {
			return false, tandem.Errorf(tandem.EINVALID, "lines[%d] needs an item, a group and a quantity > 0", i)
		}
	}
	s := l.s
	now := s.Now().UTC()
	var applied bool
	err := s.withTx(ctx, tagLedger, func(tx *sql.Tx) error {
		applied = false
		// Header before claims record before ledger: the order of Claim.
		r, err := loadReservation(ctx, tx, tagLedger, shopID, cartToken, true)
		if err != nil {
			return err
		}
		fresh, err := recordClaim(ctx, tx, tagLedger, shopID, cartToken, now)
		if err != nil || !fresh {
			return err
		}
		applied = true
		var held map[tandem.Key]int64
		if r != nil && r.status == tandem.StatusReserved {
			if err := markSettled(ctx, tx, tagLedger, shopID, cartToken, tandem.StatusClaimed, now); err != nil {
				return err
			}
			if err := relabel(ctx, tx, tagLedger, shopID, cartToken, r.lines, lines); err != nil {
				return err
			}
			held = lineQuantities(shopID, r.lines)
		}
		return s.settle(ctx, tx, tagLedger, held, lineQuantities(shopID, lines), now)
	})
	if err != nil {
		return false, err
	}
	return applied, nil
}

// Claimed implements tandem.Ledger: whether the cart's claim record exists.
func (l *ledger) Claimed(ctx context.Context, shopID int64, cartToken string) (bool, error) {
	var one int
	err := l.s.db.QueryRowContext(ctx, claimedSQL, shopID, cartToken).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, translate(tagLedger, err)
	}
	return true, nil
}

// SetOnHand implements tandem.ReservationStore: refused with ECONFLICT,
// changing nothing, when onHand is below what this store holds for key.
func (s *Store) SetOnHand(ctx context.Context, key tandem.Key, onHand int64) (*tandem.Counters, error) {
	if onHand < 0 || onHand > tandem.MaxOnHand {
		return nil, tandem.Errorf(tandem.EINVALID, "on_hand must be 0..%d", tandem.MaxOnHand)
	}
	if key.ShopID <= 0 || key.ItemID <= 0 || key.GroupID <= 0 {
		return nil, tandem.Errorf(tandem.EINVALID, "shop_id, inventory_item_id and group_id must be integers > 0")
	}
	return s.setOnHand(ctx, key, onHand, true)
}

func (s *Store) setOnHand(ctx context.Context, key tandem.Key, onHand int64, strict bool) (*tandem.Counters, error) {
	now := s.Now().UTC()
	var c *tandem.Counters
	var pool, unpooled int64
	err := s.withTx(ctx, tagLedger, func(tx *sql.Tx) error {
		pos, err := lockPositions(ctx, tx, tagLedger, []tandem.Key{key})
		if err != nil {
			return err
		}
		p := pos[key]
		held, err := heldUnits(ctx, tx, tagLedger, key)
		if err != nil {
			return err
		}
		conflict := tandem.Errorf(tandem.ECONFLICT, "on_hand %d is below the %d units held for %s", onHand, held, key)
		if strict && onHand < held {
			return conflict
		}
		before := p.onHand
		delta := onHand - p.onHand
		p.onHand = onHand
		p.dirty = true
		short, err := s.adjustStock(ctx, tx, tagLedger, p, delta, strict)
		if err != nil {
			return err
		}
		if short {
			// Holds grew between the check and the take: the rows were
			// reserved meanwhile.
			return conflict
		}
		if !strict && p.unpooled < 0 {
			s.Logger.Warn("ledger on_hand set below the units this store holds; kept as debt",
				zap.Stringer("key", key), zap.Int64("on_hand", onHand), zap.Int64("debt", -p.unpooled))
		}
		// A restock is no hot path: fill the pool now, so the next
		// reserves find units on the fast path.
		if pool, err = s.fillPool(ctx, tx, tagLedger, p); err != nil {
			return err
		}
		unpooled = p.unpooled
		if err := writePosition(ctx, tx, tagLedger, p, now); err != nil {
			return err
		}
		if held, err = heldUnits(ctx, tx, tagLedger, key); err != nil {
			return err
		}
		c = &tandem.Counters{Key: key, OnHand: onHand, Reserved: held, Available: onHand - held, Before: before}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.repl.observePool(key, pool, unpooled)
	return c, nil
}

// Counters implements tandem.ReservationStore; on_hand and the held units
// come from one statement, so from one consistent view.
func (s *Store) Counters(ctx context.Context, key tandem.Key) (*tandem.Counters, error) {
	var onHand sql.NullInt64
	var held int64
	err := s.withConn(ctx, tagAudit, func(conn *sql.Conn) error {
		return conn.QueryRowContext(ctx, countersSQL, key.ShopID, key.ItemID, key.GroupID,
			key.ShopID, key.ItemID, key.GroupID).Scan(&onHand, &held)
	})
	if err != nil {
		return nil, err
	}
	return &tandem.Counters{Key: key, OnHand: onHand.Int64, Reserved: held, Available: onHand.Int64 - held}, nil
}

// Records implements tandem.Recounter: the position's counters and its
// pool rows plus unpooled units, from one statement.
func (s *Store) Records(ctx context.Context, key tandem.Key) (*tandem.Records, error) {
	var onHand, unpooled sql.NullInt64
	var pool, held int64
	err := s.withConn(ctx, tagAudit, func(conn *sql.Conn) error {
		k := []any{key.ShopID, key.ItemID, key.GroupID}
		args := slices.Concat(k, k, k, k)
		return conn.QueryRowContext(ctx, recordsSQL, args...).Scan(&onHand, &unpooled, &pool, &held)
	})
	if err != nil {
		return nil, err
	}
	c := tandem.Counters{Key: key, OnHand: onHand.Int64, Reserved: held, Available: onHand.Int64 - held}
	return &tandem.Records{Counters: c, Sellable: unpooled.Int64 + pool}, nil
}
