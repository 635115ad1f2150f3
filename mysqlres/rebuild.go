package mysqlres

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tandemhq/tandem"
)

// Statements of Rebuild.
const (
	rebuildLockSQL        = "/* conn_tag='rebuild' */ SELECT shop_id, inventory_item_id, inventory_group_id FROM ledger WHERE %s ORDER BY shop_id, inventory_item_id, inventory_group_id FOR UPDATE"
	rebuildDropLinesSQL   = "/* conn_tag='rebuild' */ DELETE l FROM reservation_lines l JOIN reservations r ON r.shop_id = l.shop_id AND r.cart_token = l.cart_token WHERE r.status = 'reserved' AND %s"
	rebuildDropActiveSQL  = "/* conn_tag='rebuild' */ DELETE FROM reservations WHERE status = 'reserved' AND %s"
	rebuildDropCartLines  = "/* conn_tag='rebuild' */ DELETE FROM reservation_lines WHERE shop_id = ? AND cart_token IN (%s)"
	rebuildDropPoolSQL    = "/* conn_tag='rebuild' */ DELETE FROM unit_pool WHERE %s"
	rebuildResetSQL       = "/* conn_tag='rebuild' */ UPDATE ledger SET unpooled = on_hand, updated_at = ? WHERE %s"
	rebuildHoldSQL        = "/* conn_tag='rebuild' */ UPDATE ledger SET unpooled = unpooled - ? WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?"
	rebuildNewPositionSQL = "/* conn_tag='rebuild' */ INSERT INTO ledger (shop_id, inventory_item_id, inventory_group_id, on_hand, unpooled, next_unit_id, updated_at) VALUES (?, ?, ?, 0, ?, 1, ?)"
	rebuildHeadersSQL     = "/* conn_tag='rebuild' */ INSERT INTO reservations (shop_id, cart_token, status, fingerprint, expires_at, created_at, updated_at) VALUES "
	rebuildHeaderValues   = "(?, ?, 'reserved', '', ?, ?, ?)"
	rebuildHeadersUpsert  = " ON DUPLICATE KEY UPDATE status = 'reserved', fingerprint = '', expires_at = VALUES(expires_at), created_at = VALUES(created_at), updated_at = VALUES(updated_at)"
	rebuildLinesSQL       = "/* conn_tag='rebuild' */ INSERT INTO reservation_lines (shop_id, cart_token, line_no, inventory_item_id, inventory_group_id, quantity, held) VALUES "
	rebuildPositionsSQL   = "/* conn_tag='rebuild' */ SELECT shop_id, inventory_item_id, inventory_group_id FROM ledger WHERE unpooled > 0 AND %s"
)

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
	return s.rebuild(ctx, nil, holds, true)
}

var _ tandem.ShopRebuilder = (*Store)(nil)

// RebuildShops implements tandem.ShopRebuilder: Rebuild limited to the
// given shops (their ledger rows alone are locked, for one short
// transaction), as the online backfill copies a pod shop batch by shop
// batch while buyers are served. The pools are left to the replenisher
// (signalled) and to the reserves' slow path, so the copy stays short.
func (s *Store) RebuildShops(ctx context.Context, shops []int64, holds []tandem.Reservation) (int, error) {
	if len(shops) == 0 {
		return 0, nil
	}
	byShop := map[int64][]tandem.Reservation{}
	for _, h := range holds {
		if !slices.Contains(shops, h.ShopID) {
			return 0, tandem.Errorf(tandem.EINVALID, "hold %d/%s is of a shop not rebuilt", h.ShopID, h.CartToken)
		}
		if err := validateHold(h); err != nil {
			return 0, err
		}
		byShop[h.ShopID] = append(byShop[h.ShopID], h)
	}
	now := s.Now().UTC()
	positions := 0
	err := s.withTx(ctx, tagRebuild, func(tx *sql.Tx) error {
		positions = 0
		for _, shop := range shops {
			n, err := s.rebuildShop(ctx, tx, shop, byShop[shop], now)
			if err != nil {
				return err
			}
			positions += n
		}
		return nil
	})
	if err == nil {
		s.wroteInBulk(ctx, len(holds))
	}
	return positions, err
}

// Statements of RebuildShops, each on one shop (a primary-key range).
const (
	lockShopSQL = "/* conn_tag='rebuild' */ SELECT inventory_item_id, inventory_group_id, on_hand FROM ledger WHERE shop_id = ? ORDER BY inventory_item_id, inventory_group_id FOR UPDATE"
	// dropShopActiveSQL drops headers and lines in one statement: a
	// reserve committing between two would leave held lines without a
	// header.
	dropShopActiveSQL = "/* conn_tag='rebuild' */ DELETE r, l FROM reservations r JOIN reservation_lines l ON l.shop_id = r.shop_id AND l.cart_token = r.cart_token WHERE r.status = 'reserved' AND r.shop_id = ?"
	// stockSQL reads a position's pool rows and held units in one
	// statement, so from one view: a reserve committing around it moves
	// units from one to the other and is counted once either way.
	stockSQL       = "/* conn_tag='rebuild' */ SELECT (SELECT COUNT(*) FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), (SELECT COALESCE(SUM(quantity), 0) FROM reservation_lines WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? AND held = 1)"
	trimPoolSQL    = "/* conn_tag='rebuild' */ DELETE FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? ORDER BY id LIMIT ?"
	setUnpooledSQL = "/* conn_tag='rebuild' */ UPDATE ledger SET unpooled = ?, updated_at = ? WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?"
)

// testHookRebuildDropped, when set (by tests), runs in rebuildShop once
// the shop's active reservations are dropped.
var testHookRebuildDropped func(shop int64)

// rebuildShop rewrites one shop in tx: its active reservations become
// holds, and each position keeps as many of its pool rows as it can sell,
// the rest of on_hand unpooled (recountPosition). The pool rows are not
// locked, so a fast reserve (it takes pool rows and never the ledger row)
// may commit while the shop is rewritten: its hold survives the drop when
// it commits after it.
func (s *Store) rebuildShop(ctx context.Context, tx *sql.Tx, shop int64, holds []tandem.Reservation, now time.Time) (int, error) {
	onHand, err := lockShopLedger(ctx, tx, shop)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, dropShopActiveSQL, shop); err != nil {
		return 0, fmt.Errorf("rebuild shop %d: %w", shop, err)
	}
	if testHookRebuildDropped != nil {
		testHookRebuildDropped(shop)
	}
	holds, err = s.dropClaimed(ctx, tx, shop, holds, now)
	if err != nil {
		return 0, err
	}
	held := unitsOf(holds)
	for k, q := range held {
		if _, ok := onHand[k]; !ok {
			if _, err := tx.ExecContext(ctx, rebuildNewPositionSQL, k.ShopID, k.ItemID, k.GroupID, -q, now); err != nil {
				return 0, fmt.Errorf("rebuild %s: %w", k, err)
			}
		}
	}
	if err := insertHoldBatches(ctx, tx, holds, now); err != nil {
		return 0, err
	}
	for _, k := range sortKeys(mapKeys(onHand)) {
		if err := s.recountPosition(ctx, tx, k, onHand[k], now); err != nil {
			return 0, err
		}
	}
	return len(onHand) + len(held) - countKnown(held, onHand), nil
}

// lockShopLedger locks a shop's ledger rows and returns their on_hand.
func lockShopLedger(ctx context.Context, tx *sql.Tx, shop int64) (map[tandem.Key]int64, error) {
	onHand := map[tandem.Key]int64{}
	rows, err := tx.QueryContext(ctx, lockShopSQL, shop)
	if err != nil {
		return nil, fmt.Errorf("rebuild shop %d: lock ledger: %w", shop, err)
	}
	for rows.Next() {
		k := tandem.Key{ShopID: shop}
		var v int64
		if err := rows.Scan(&k.ItemID, &k.GroupID, &v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("rebuild shop %d: lock ledger: %w", shop, err)
		}
		onHand[k] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rebuild shop %d: lock ledger: %w", shop, err)
	}
	return onHand, nil
}

// recountPosition sets a rebuilt position's unpooled from its pool rows
// and held units read in one statement, not from the holds given: a hold
// that survived the drop counts once, as held, never again as unpooled
// (units that do not exist, which the next reserves would sell).
// Excess pool rows are trimmed lowest ids first: MariaDB's SKIP LOCKED
// scan checks its range's end only after skipping locked records, so
// locked rows at a pool's top send reserves on into other positions' rows
// (an avalanche of lock structs, seen to exhaust the buffer pool).
func (s *Store) recountPosition(ctx context.Context, tx *sql.Tx, k tandem.Key, onHand int64, now time.Time) error {
	var pool, inHolds int64
	if err := tx.QueryRowContext(ctx, stockSQL, k.ShopID, k.ItemID, k.GroupID, k.ShopID, k.ItemID, k.GroupID).Scan(&pool, &inHolds); err != nil {
		return fmt.Errorf("rebuild %s: count stock: %w", k, err)
	}
	unpooled := onHand - inHolds - pool
	if unpooled < 0 {
		res, err := tx.ExecContext(ctx, trimPoolSQL, k.ShopID, k.ItemID, k.GroupID, min(-unpooled, pool))
		if err != nil {
			return fmt.Errorf("rebuild %s: trim pool: %w", k, err)
		}
		// Rows a reserve took meanwhile are gone already; those deleted
		// here are what comes back.
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("rebuild %s: trim pool: %w", k, err)
		}
		unpooled += n
	}
	if _, err := tx.ExecContext(ctx, setUnpooledSQL, unpooled, now, k.ShopID, k.ItemID, k.GroupID); err != nil {
		return fmt.Errorf("rebuild %s: %w", k, err)
	}
	if unpooled > 0 {
		s.repl.signal(k)
	}
	return nil
}

// claimedOfSQL reads which of a shop's carts the ledger records as
// claimed, locking what it finds: a claim committing meanwhile either
// came first (it is seen) or waits for this rebuild's ledger locks and
// deadlocks with this read (one of the two is rerun).
const claimedOfSQL = "/* conn_tag='rebuild' */ SELECT cart_token FROM claims WHERE shop_id = ? AND cart_token IN (%s) LOCK IN SHARE MODE"

// dropClaimed returns holds less those the ledger records as claimed, and
// records those as claimed, touching no stock: the source read them while
// they were held, and they were sold before this copy was written (their
// claim already lowered the ledger). Written as holds, a claimed cart
// would hold units here that were sold, and show as reserved once this
// store is the source of truth.
func (s *Store) dropClaimed(ctx context.Context, tx *sql.Tx, shop int64, holds []tandem.Reservation, now time.Time) ([]tandem.Reservation, error) {
	claimed := map[string]bool{}
	for part := range slices.Chunk(holds, 500) {
		args := make([]any, 0, 1+len(part))
		args = append(args, shop)
		for _, h := range part {
			args = append(args, h.CartToken)
		}
		q := fmt.Sprintf(claimedOfSQL, strings.TrimSuffix(strings.Repeat("?, ", len(part)), ", "))
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("rebuild shop %d: read claims: %w", shop, err)
		}
		for rows.Next() {
			var t string
			if err := rows.Scan(&t); err != nil {
				rows.Close()
				return nil, fmt.Errorf("rebuild shop %d: read claims: %w", shop, err)
			}
			claimed[t] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("rebuild shop %d: read claims: %w", shop, err)
		}
	}
	if len(claimed) == 0 {
		return holds, nil
	}
	kept := make([]tandem.Reservation, 0, len(holds)-len(claimed))
	for _, h := range holds {
		if !claimed[h.CartToken] {
			kept = append(kept, h)
			continue
		}
		r, err := loadReservation(ctx, tx, tagRebuild, shop, h.CartToken, true)
		if err != nil {
			return nil, err
		}
		if r != nil {
			continue // known here (claimed, or ended): left as it is
		}
		sold := h
		sold.Status = tandem.StatusClaimed
		if err := insertEnded(ctx, tx, sold, now); err != nil {
			return nil, err
		}
	}
	return kept, nil
}

func countKnown(held, onHand map[tandem.Key]int64) int {
	n := 0
	for k := range held {
		if _, ok := onHand[k]; ok {
			n++
		}
	}
	return n
}

// validateHold checks a hold given to a rebuild.
func validateHold(h tandem.Reservation) error {
	if err := tandem.ValidateCartToken(h.CartToken); err != nil {
		return err
	}
	if d := holdDefect(h); d != "" {
		return tandem.Errorf(tandem.EINVALID, "hold %s %s", h.CartToken, d)
	}
	return nil
}

// holdDefect says what a hold given to a rebuild lacks, "" if nothing.
func holdDefect(h tandem.Reservation) string {
	if h.ShopID <= 0 || len(h.Lines) == 0 {
		return "needs a shop and lines"
	}
	for _, l := range h.Lines {
		if l.ItemID <= 0 || l.GroupID <= 0 || l.Quantity <= 0 {
			return "has a line without item, group or quantity"
		}
	}
	return ""
}

// shopFilter returns one condition on shop_id per shop (one that takes
// every shop for nil), each with its arguments: one statement per shop
// equality keeps every statement a range of the primary key whatever the
// optimizer's statistics say (a full scan of unit_pool would lock rows of
// every position, and SKIP LOCKED readers would scan through them).
func shopFilter(alias string, shops []int64) (conds []string, args [][]any) {
	if shops == nil {
		return []string{"1 = 1"}, [][]any{nil}
	}
	for _, sh := range shops {
		conds = append(conds, alias+"shop_id = ?")
		args = append(args, []any{sh})
	}
	return conds, args
}

func (s *Store) rebuild(ctx context.Context, shops []int64, holds []tandem.Reservation, refill bool) (int, error) {
	filter, fargs := shopFilter("", shops)
	for i, h := range holds {
		if err := tandem.ValidateCartToken(h.CartToken); err != nil {
			return 0, err
		}
		if d := holdDefect(h); d != "" {
			return 0, tandem.Errorf(tandem.EINVALID, "holds[%d] %s", i, d)
		}
	}
	now := s.Now().UTC()
	var positions int
	err := s.withTx(ctx, tagRebuild, func(tx *sql.Tx) error {
		known, err := lockLedger(ctx, tx, filter, fargs)
		if err != nil {
			return err
		}
		if err := dropActive(ctx, tx, shops, filter, fargs, now); err != nil {
			return err
		}
		// Holds the ledger records as claimed become claimed carts here.
		kept, err := s.dropClaimedByShop(ctx, tx, holds, now)
		if err != nil {
			return err
		}
		if err := holdUnits(ctx, tx, kept, known, now); err != nil {
			return err
		}
		if err := insertHoldBatches(ctx, tx, kept, now); err != nil {
			return err
		}
		positions = len(known)
		return nil
	})
	if err != nil {
		return 0, err
	}
	s.wroteInBulk(ctx, len(holds))
	if shops == nil {
		s.repl.forget()
	}
	keys, err := s.unpooledPositions(ctx, filter, fargs)
	if err != nil {
		return positions, err
	}
	for _, k := range keys {
		if !refill {
			s.repl.signal(k)
			continue
		}
		if _, err := s.replenish(ctx, k); err != nil {
			return positions, err
		}
	}
	return positions, nil
}

// lockLedger locks the ledger rows that filter selects and returns their
// positions.
func lockLedger(ctx context.Context, tx *sql.Tx, filter []string, fargs [][]any) (map[tandem.Key]bool, error) {
	known := map[tandem.Key]bool{}
	for i, f := range filter {
		rows, err := tx.QueryContext(ctx, fmt.Sprintf(rebuildLockSQL, f), fargs[i]...)
		if err != nil {
			return nil, fmt.Errorf("lock ledger: %w", err)
		}
		for rows.Next() {
			var k tandem.Key
			if err := rows.Scan(&k.ShopID, &k.ItemID, &k.GroupID); err != nil {
				rows.Close()
				return nil, fmt.Errorf("lock ledger: %w", err)
			}
			known[k] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("lock ledger: %w", err)
		}
	}
	return known, nil
}

// dropActive drops the active reservations and the pools of the shops
// (every shop for nil) and resets their positions to unpooled = on_hand.
func dropActive(ctx context.Context, tx *sql.Tx, shops []int64, filter []string, fargs [][]any, now time.Time) error {
	rfilter, _ := shopFilter("r.", shops)
	for i := range filter {
		for j, stmt := range []string{rebuildDropLinesSQL, rebuildDropActiveSQL, rebuildDropPoolSQL} {
			f := filter[i]
			if j == 0 {
				f = rfilter[i]
			}
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(stmt, f), fargs[i]...); err != nil {
				return fmt.Errorf("rebuild: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(rebuildResetSQL, filter[i]), append([]any{now}, fargs[i]...)...); err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
	}
	return nil
}

// dropClaimedByShop runs dropClaimed on the holds of each shop, shops in
// order, and returns the holds kept. It leaves holds as they are: a
// transaction that is rerun starts again from all of them.
func (s *Store) dropClaimedByShop(ctx context.Context, tx *sql.Tx, holds []tandem.Reservation, now time.Time) ([]tandem.Reservation, error) {
	byShop := map[int64][]tandem.Reservation{}
	for _, h := range holds {
		byShop[h.ShopID] = append(byShop[h.ShopID], h)
	}
	var kept []tandem.Reservation
	for _, shop := range slices.Sorted(maps.Keys(byShop)) {
		k, err := s.dropClaimed(ctx, tx, shop, byShop[shop], now)
		if err != nil {
			return nil, err
		}
		kept = append(kept, k...)
	}
	return kept, nil
}

// holdUnits takes the units of holds out of their positions' unpooled
// count, creating the positions the ledger does not know (added to
// known) with a negative unpooled.
func holdUnits(ctx context.Context, tx *sql.Tx, holds []tandem.Reservation, known map[tandem.Key]bool, now time.Time) error {
	held := unitsOf(holds)
	for _, k := range sortKeys(mapKeys(held)) {
		var err error
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
	return nil
}

// unitsOf sums the units of holds per position.
func unitsOf(holds []tandem.Reservation) map[tandem.Key]int64 {
	held := map[tandem.Key]int64{}
	for _, h := range holds {
		for k, q := range lineQuantities(h.ShopID, h.Lines) {
			held[k] += q
		}
	}
	return held
}

// unpooledPositions returns the positions that filter selects which have
// units left to pool.
func (s *Store) unpooledPositions(ctx context.Context, filter []string, fargs [][]any) ([]tandem.Key, error) {
	var keys []tandem.Key
	err := s.withConn(ctx, tagRebuild, func(conn *sql.Conn) error {
		for i, f := range filter {
			rows, err := conn.QueryContext(ctx, fmt.Sprintf(rebuildPositionsSQL, f), fargs[i]...)
			if err != nil {
				return err
			}
			for rows.Next() {
				var k tandem.Key
				if err := rows.Scan(&k.ShopID, &k.ItemID, &k.GroupID); err != nil {
					rows.Close()
					return err
				}
				keys = append(keys, k)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	return keys, err
}

// A rebuild writes its holds in INSERTs of at most rebuildBatch holds and
// about rebuildBatchLines lines (under the 65,535 placeholders of one
// statement: 5 per hold, 6 per line): a backfill batch of a few thousand
// holds is then two statements.
const (
	rebuildBatch      = 5000
	rebuildBatchLines = 10000
)

// insertHoldBatches writes holds with insertHolds, in batches of at most
// rebuildBatch holds and about rebuildBatchLines lines.
func insertHoldBatches(ctx context.Context, tx *sql.Tx, holds []tandem.Reservation, now time.Time) error {
	for start := 0; start < len(holds); {
		end, lines := start, 0
		for end < len(holds) && end-start < rebuildBatch && lines < rebuildBatchLines {
			lines += len(holds[end].Lines)
			end++
		}
		if err := insertHolds(ctx, tx, holds[start:end], now); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// insertHolds writes backfilled holds, replacing any reservation of the
// same carts. The headers go first, in one multi-row upsert: a cart this
// store knew (a terminal reservation, or a hold that raced the rebuild) is
// overwritten in place. Only when the upsert says some cart existed are
// the lines of the batch's carts deleted (per shop, through the primary
// key, so that only those rows are locked) before the lines are inserted:
// a backfill into a MySQL that never saw these carts writes two
// statements per batch and no more.
func insertHolds(ctx context.Context, tx *sql.Tx, holds []tandem.Reservation, now time.Time) error {
	if len(holds) == 0 {
		return nil
	}
	var hb, lb strings.Builder
	hb.Grow(len(rebuildHeadersSQL) + len(holds)*(len(rebuildHeaderValues)+2) + len(rebuildHeadersUpsert))
	hb.WriteString(rebuildHeadersSQL)
	lb.WriteString(rebuildLinesSQL)
	hargs := make([]any, 0, 5*len(holds))
	largs := make([]any, 0, 6*len(holds))
	nl := 0
	for i, h := range holds {
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
	hb.WriteString(rebuildHeadersUpsert)
	res, err := tx.ExecContext(ctx, hb.String(), hargs...)
	if err != nil {
		return fmt.Errorf("rebuild: insert holds: %w", err)
	}
	// An upsert counts 1 per row inserted, 2 per row updated, 0 per row
	// left as it was: any other count than one per hold means some cart
	// existed.
	if n, err := res.RowsAffected(); err != nil || n != int64(len(holds)) {
		if err := dropReplacedLines(ctx, tx, holds); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, lb.String(), largs...); err != nil {
		return fmt.Errorf("rebuild: insert hold lines: %w", err)
	}
	return nil
}

// dropReplacedLines deletes the lines of the holds' carts, per shop.
func dropReplacedLines(ctx context.Context, tx *sql.Tx, holds []tandem.Reservation) error {
	byShop := map[int64][]any{}
	var shops []int64
	for _, h := range holds {
		if byShop[h.ShopID] == nil {
			shops = append(shops, h.ShopID)
		}
		byShop[h.ShopID] = append(byShop[h.ShopID], h.CartToken)
	}
	for _, shop := range shops {
		tokens := byShop[shop]
		marks := strings.TrimSuffix(strings.Repeat("?, ", len(tokens)), ", ")
		args := append([]any{shop}, tokens...)
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(rebuildDropCartLines, marks), args...); err != nil {
			return fmt.Errorf("rebuild: drop replaced lines: %w", err)
		}
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
