package mysqlres

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tandemhq/tandem"
)

// Statements on ledger rows and unit rows shared by several flows; %s is the
// flow's caller tag.
const (
	lockPositionsSQL  = "/* conn_tag='%s' */ SELECT shop_id, inventory_item_id, inventory_group_id, on_hand, unpooled, next_unit_id FROM ledger WHERE %s ORDER BY shop_id, inventory_item_id, inventory_group_id FOR UPDATE"
	positionCondSQL   = "(shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?)"
	updatePositionSQL = "/* conn_tag='%s' */ UPDATE ledger SET on_hand = ?, unpooled = ?, next_unit_id = ?, updated_at = ? WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?"
	insertPositionSQL = "/* conn_tag='%s' */ INSERT INTO ledger (shop_id, inventory_item_id, inventory_group_id, on_hand, unpooled, next_unit_id, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
	poolCountSQL      = "/* conn_tag='%s' */ SELECT COUNT(*) FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?"
	insertUnitsSQL    = "/* conn_tag='%s' */ INSERT INTO unit_pool (shop_id, inventory_item_id, inventory_group_id, id) VALUES "
	unitValuesSQL     = "(?, ?, ?, ?)"
	// deleteNewestUnitsSQL takes the newest units, far from the oldest ones
	// the fast path picks, and waits for rows locked by in-flight reserves.
	deleteNewestUnitsSQL = "/* conn_tag='%s' */ DELETE FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? ORDER BY id DESC LIMIT ?"
	// heldSQL reads the position's held lines through the position index,
	// forced: when one position's lines are most of the table, InnoDB's
	// estimates rate the primary key's shop_id prefix alike, a scan of
	// every line of the shop, ended ones included (60,001 rows read for a
	// sum over 19,980 held lines in TestAuditReadsActiveRows).
	heldSQL = "/* conn_tag='%s' */ SELECT COALESCE(SUM(quantity), 0) FROM reservation_lines FORCE INDEX (reservation_lines_position) WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? AND held = 1"
)

// insertBatch bounds the rows of one multi-row INSERT.
const insertBatch = 500

// position is a ledger row locked by the current transaction.
type position struct {
	key      tandem.Key
	onHand   int64
	unpooled int64
	nextID   int64
	exists   bool
	dirty    bool
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

func sortKeys(keys []tandem.Key) []tandem.Key {
	seen := make(map[tandem.Key]bool, len(keys))
	out := make([]tandem.Key, 0, len(keys))
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return keyLess(out[i], out[j]) })
	return out
}

// lockPositions locks the ledger rows of keys in key order (the one order
// every path uses) and returns them; a key without a row maps to a
// position with exists false, which writePosition inserts.
func lockPositions(ctx context.Context, tx *sql.Tx, tag string, keys []tandem.Key) (map[tandem.Key]*position, error) {
	keys = sortKeys(keys)
	out := make(map[tandem.Key]*position, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	conds := make([]string, len(keys))
	args := make([]any, 0, 3*len(keys))
	for i, k := range keys {
		conds[i] = positionCondSQL
		args = append(args, k.ShopID, k.ItemID, k.GroupID)
	}
	rows, err := tx.QueryContext(ctx, fmt.Sprintf(lockPositionsSQL, tag, strings.Join(conds, " OR ")), args...)
	if err != nil {
		return nil, fmt.Errorf("lock ledger rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		p := &position{exists: true}
		if err := rows.Scan(&p.key.ShopID, &p.key.ItemID, &p.key.GroupID, &p.onHand, &p.unpooled, &p.nextID); err != nil {
			return nil, fmt.Errorf("lock ledger rows: %w", err)
		}
		out[p.key] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lock ledger rows: %w", err)
	}
	for _, k := range keys {
		if out[k] == nil {
			out[k] = &position{key: k, nextID: 1}
		}
	}
	return out, nil
}

// writePosition stores p if it changed. Two transactions creating the same
// position race on the insert; the loser is retried and then finds the row.
func writePosition(ctx context.Context, tx *sql.Tx, tag string, p *position, now time.Time) error {
	if !p.dirty {
		return nil
	}
	if p.exists {
		_, err := tx.ExecContext(ctx, fmt.Sprintf(updatePositionSQL, tag), p.onHand, p.unpooled, p.nextID, now,
			p.key.ShopID, p.key.ItemID, p.key.GroupID)
		if err != nil {
			return fmt.Errorf("update ledger %s: %w", p.key, err)
		}
		return nil
	}
	_, err := tx.ExecContext(ctx, fmt.Sprintf(insertPositionSQL, tag), p.key.ShopID, p.key.ItemID, p.key.GroupID,
		p.onHand, p.unpooled, p.nextID, now)
	if isDuplicate(err) {
		return errRetry
	}
	if err != nil {
		return fmt.Errorf("insert ledger %s: %w", p.key, err)
	}
	p.exists = true
	return nil
}

func poolCount(ctx context.Context, tx *sql.Tx, tag string, k tandem.Key) (int64, error) {
	var n int64
	if err := tx.QueryRowContext(ctx, fmt.Sprintf(poolCountSQL, tag), k.ShopID, k.ItemID, k.GroupID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count pool %s: %w", k, err)
	}
	return n, nil
}

func heldUnits(ctx context.Context, tx *sql.Tx, tag string, k tandem.Key) (int64, error) {
	var n int64
	if err := tx.QueryRowContext(ctx, fmt.Sprintf(heldSQL, tag), k.ShopID, k.ItemID, k.GroupID).Scan(&n); err != nil {
		return 0, fmt.Errorf("sum holds %s: %w", k, err)
	}
	return n, nil
}

// insertUnits adds n unit rows to p's pool, numbered from p.nextID. The
// caller holds p's ledger row lock and moves the units out of unpooled.
func insertUnits(ctx context.Context, tx *sql.Tx, tag string, p *position, n int64) error {
	for n > 0 {
		batch := min(n, insertBatch)
		var b strings.Builder
		b.WriteString(fmt.Sprintf(insertUnitsSQL, tag))
		args := make([]any, 0, 4*batch)
		for i := int64(0); i < batch; i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(unitValuesSQL)
			args = append(args, p.key.ShopID, p.key.ItemID, p.key.GroupID, p.nextID+i)
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("insert units %s: %w", p.key, err)
		}
		p.nextID += batch
		p.dirty = true
		n -= batch
	}
	return nil
}

// fillPool moves units from unpooled into p's pool up to the pool cap and
// returns the pool's size after it.
func (s *Store) fillPool(ctx context.Context, tx *sql.Tx, tag string, p *position) (int64, error) {
	count, err := poolCount(ctx, tx, tag, p.key)
	if err != nil {
		return 0, err
	}
	k := min(p.unpooled, int64(s.PoolCap)-count)
	if k <= 0 {
		return count, nil
	}
	if err := insertUnits(ctx, tx, tag, p, k); err != nil {
		return 0, err
	}
	p.unpooled -= k
	s.metrics.replenished(k)
	return count + k, nil
}

// adjustStock changes p's sellable units (unpooled plus pool rows) by delta,
// keeping conservation when on_hand or holds change. Units coming back pay
// any debt first (negative unpooled, left by an unconditional ledger write
// below this store's holds), then refill the pool up to the cap, then go to
// unpooled. Units going away leave unpooled first, then the pool (waiting
// for rows locked by in-flight reserves). When even the pool cannot cover
// them, strict reports a shortfall and changes nothing it is sure of (the
// caller rolls back); otherwise the rest becomes debt.
func (s *Store) adjustStock(ctx context.Context, tx *sql.Tx, tag string, p *position, delta int64, strict bool) (short bool, err error) {
	if delta == 0 {
		return false, nil
	}
	p.dirty = true
	if delta > 0 {
		if p.unpooled < 0 {
			pay := min(delta, -p.unpooled)
			p.unpooled += pay
			delta -= pay
		}
		if delta == 0 {
			return false, nil
		}
		count, err := poolCount(ctx, tx, tag, p.key)
		if err != nil {
			return false, err
		}
		toPool := max(0, min(delta, int64(s.PoolCap)-count))
		if toPool > 0 {
			if err := insertUnits(ctx, tx, tag, p, toPool); err != nil {
				return false, err
			}
		}
		p.unpooled += delta - toPool
		return false, nil
	}
	need := -delta
	if p.unpooled > 0 {
		take := min(need, p.unpooled)
		p.unpooled -= take
		need -= take
	}
	if need == 0 {
		return false, nil
	}
	res, err := tx.ExecContext(ctx, fmt.Sprintf(deleteNewestUnitsSQL, tag), p.key.ShopID, p.key.ItemID, p.key.GroupID, need)
	if err != nil {
		return false, fmt.Errorf("take units %s: %w", p.key, err)
	}
	got, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("take units %s: %w", p.key, err)
	}
	need -= got
	if need > 0 {
		if strict {
			return true, nil
		}
		p.unpooled -= need
	}
	return false, nil
}

// settle applies a change of holds and on_hand to the ledger in one
// transaction: per position, held units leave "reserved" and deducted units
// leave on_hand; the difference goes back to (or comes out of) stock.
func (s *Store) settle(ctx context.Context, tx *sql.Tx, tag string, held, deducted map[tandem.Key]int64, now time.Time) error {
	keys := make([]tandem.Key, 0, len(held)+len(deducted))
	for k := range held {
		keys = append(keys, k)
	}
	for k := range deducted {
		keys = append(keys, k)
	}
	pos, err := lockPositions(ctx, tx, tag, keys)
	if err != nil {
		return err
	}
	for _, k := range sortKeys(keys) {
		p := pos[k]
		if d := deducted[k]; d != 0 {
			p.onHand -= d
			p.dirty = true
		}
		if _, err := s.adjustStock(ctx, tx, tag, p, held[k]-deducted[k], false); err != nil {
			return err
		}
		if err := writePosition(ctx, tx, tag, p, now); err != nil {
			return err
		}
	}
	return nil
}

// lineQuantities sums the lines of a cart per position.
func lineQuantities(shopID int64, lines []tandem.Line) map[tandem.Key]int64 {
	m := make(map[tandem.Key]int64, len(lines))
	for _, l := range lines {
		m[l.Key(shopID)] += l.Quantity
	}
	return m
}
