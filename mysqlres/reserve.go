package mysqlres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tandemhq/tandem"
)

// Statements of Reserve. The fast path's select is one UNION ALL of a
// candidate select per (line, group), parenthesised as MariaDB and MySQL 8
// require for per-member LIMIT and locking clauses.
const (
	reserveHeadSQL      = "/* conn_tag='reserve' */ "
	reserveCandidateSQL = "(SELECT %d AS cand, id FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? AND id %s ? ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED)"
	reserveDeleteSQL    = "/* conn_tag='%s' */ DELETE FROM unit_pool WHERE %s"
	reserveDeleteCond   = "(shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? AND id IN (%s))"
	// insertHeaderSQL refuses a token the ledger records as claimed: its
	// status is NULL then (see unclaimedSQL).
	insertHeaderSQL = "/* conn_tag='%s' */ INSERT INTO reservations (shop_id, cart_token, status, fingerprint, expires_at, created_at, updated_at) VALUES (?, ?, " + unclaimedSQL + ", ?, ?, ?, ?)"
	// insertGuardedHeaderSQL follows the delete of the taken units in one
	// batch; see takeBatch.
	insertGuardedHeaderSQL = "/* conn_tag='%s' */ INSERT INTO reservations (shop_id, cart_token, status, fingerprint, expires_at, created_at, updated_at) VALUES (?, ?, " + unclaimedSQL + ", ?, IF(ROW_COUNT() = ?, ?, NULL), ?, ?)"
	// unclaimedSQL is a new header's status: 'reserved', or NULL for a
	// token the ledger records as claimed. Another store may have sold the
	// cart while this one never held it (a cart reserved and claimed in
	// Redis before the backfill followed, which neither the copy nor the
	// shadow brings here): a sold token is never held again. A point read
	// of the claims' primary key in the insert itself, not a round trip.
	unclaimedSQL   = "IF(EXISTS (SELECT 1 FROM claims WHERE shop_id = ? AND cart_token = ?), NULL, 'reserved')"
	insertLinesSQL = "/* conn_tag='%s' */ INSERT INTO reservation_lines (shop_id, cart_token, line_no, inventory_item_id, inventory_group_id, quantity, held) VALUES "
	lineValuesSQL  = "(?, ?, ?, ?, ?, ?, 1)"
	// oneTripDeleteSQL deletes the units a single-group cart takes, found by
	// a derived table of oneTripPartSQL selects (one per line): the SKIP
	// LOCKED selects, the delete and, after it, the guarded header and lines
	// inserts and COMMIT travel as one batch (reserveOneTrip). The derived
	// table comes first (STRAIGHT_JOIN) so that the delete reaches each
	// pool row by its primary key and never waits on a row it did not
	// select. LIMIT keeps the derived table materialized, as MySQL 8 needs
	// to delete from a table the derived table reads.
	oneTripDeleteSQL = "/* conn_tag='reserve' */ DELETE p FROM (%s) t STRAIGHT_JOIN unit_pool p ON p.shop_id = t.shop_id AND p.inventory_item_id = t.inventory_item_id AND p.inventory_group_id = t.inventory_group_id AND p.id = t.id"
	oneTripPartSQL   = "(SELECT shop_id, inventory_item_id, inventory_group_id, id FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? AND id >= ? ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED)"
	slowSelectSQL    = "/* conn_tag='reserve_slow' */ SELECT id FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? ORDER BY id LIMIT ? FOR UPDATE"
	// stockLeftSQL counts, without locking, a candidate's committed pool
	// rows (those locked by other transactions included) and unpooled units.
	stockLeftSQL = "(SELECT %d AS cand, (SELECT COUNT(*) FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?) + COALESCE((SELECT GREATEST(unpooled, 0) FROM ledger WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), 0) AS n)"
)

var (
	// errShort sends a reserve from the fast path to the slow path.
	errShort = errors.New("mysqlres: units short on the fast path")
	// errTokenTaken reports a concurrent reserve of the same cart token.
	errTokenTaken = errors.New("mysqlres: cart token inserted concurrently")
	// errTokenClaimed reports a reserve of a token the ledger records as
	// claimed (unclaimedSQL).
	errTokenClaimed = errors.New("mysqlres: cart token already claimed")
)

// take is the units a reserve takes for one line.
type take struct {
	key tandem.Key
	ids []int64
	// fromUnpooled is taken straight from the ledger's unpooled count
	// (slow path only, when the pool cannot cover the line).
	fromUnpooled int64
}

// Reserve implements tandem.ReservationStore.
//
// The fast path takes every candidate unit in one SKIP LOCKED round trip
// and never answers insufficient_inventory: units it cannot see may be
// locked by transactions that roll back. Any short line sends the cart to
// the slow path, which locks the ledger rows, refills the pool inline and
// waits for locked units, and so says "insufficient" only when the ledger
// truly cannot cover a line.
func (s *Store) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if s.db == nil {
		return nil, errNotOpen
	}
	now := s.Now().UTC().Truncate(time.Microsecond)
	return s.reserve(ctx, req, req.Fingerprint(), now, req.Expiry(now).UTC().Truncate(time.Microsecond))
}

// reserve holds req's lines until expires, recording fingerprint fp ("" for
// a hold matched by items, quantities and groups).
func (s *Store) reserve(ctx context.Context, req tandem.ReserveRequest, fp string, now, expires time.Time) (*tandem.Reservation, error) {
	// A known token is found by the header insert's duplicate key rather
	// than by a read before every reserve (a round trip each): retries are
	// rare, and their transaction rolls back. A refusal still yields to the
	// token's answer (a retry of an active hold, a conflict).
	lines, err := s.reserveFast(ctx, req, fp, now, expires)
	if errors.Is(err, errShort) {
		s.metrics.slow()
		lines, err = s.reserveSlow(ctx, req, fp, now, expires)
	}
	if tandem.ErrorCode(err) == tandem.EINSUFFICIENT {
		if res, rerr := s.replay(ctx, req, fp); res != nil || rerr != nil {
			return res, rerr
		}
		return nil, err
	}
	if errors.Is(err, errTokenClaimed) {
		return nil, tandem.Errorf(tandem.ECONFLICT, "cart %s is already claimed", req.CartToken)
	}
	if errors.Is(err, errTokenTaken) {
		res, rerr := s.replay(ctx, req, fp)
		if res == nil && rerr == nil {
			rerr = tandem.Errorf(tandem.ECONFLICT, "cart %s is in use by a concurrent request", req.CartToken)
		}
		return res, rerr
	}
	if err != nil {
		return nil, err
	}
	return &tandem.Reservation{CartToken: req.CartToken, ShopID: req.ShopID, Status: tandem.StatusReserved,
		ExpiresAt: expires, Lines: lines}, nil
}

// replay answers a reserve whose token this store already knows: the
// stored reservation for a retry while active, ECONFLICT otherwise (also
// for a token this store never held but the ledger records as claimed). It
// returns nil, nil for an unknown token.
func (s *Store) replay(ctx context.Context, req tandem.ReserveRequest, fp string) (*tandem.Reservation, error) {
	var r *stored
	err := s.withConn(ctx, tagReserve, func(conn *sql.Conn) (err error) {
		r, err = loadReservation(ctx, conn, tagReserve, req.ShopID, req.CartToken, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	if r == nil {
		// Another store may have claimed the cart through the shared
		// ledger while this one never held it (a shadow whose copy was
		// still on its way): a claimed token is never reserved again.
		claimed, err := s.Ledger().Claimed(ctx, req.ShopID, req.CartToken)
		if err != nil || !claimed {
			return nil, err
		}
		return nil, tandem.Errorf(tandem.ECONFLICT, "cart %s is already claimed", req.CartToken)
	}
	now := s.Now().UTC()
	if !r.active(now) {
		st := r.reservation(req.ShopID, req.CartToken, now).Status
		return nil, tandem.Errorf(tandem.ECONFLICT, "cart %s is already %s", req.CartToken, st)
	}
	if !sameRequest(r, req, fp) {
		return nil, tandem.Errorf(tandem.ECONFLICT, "cart %s is in use with a different request", req.CartToken)
	}
	res := r.reservation(req.ShopID, req.CartToken, now)
	res.Replayed = true
	return res, nil
}

// sameRequest reports whether req repeats the request that made r. Holds
// backfilled by Rebuild have no fingerprint: a request matches them when
// it asks the same items and quantities and each held group is among the
// line's groups.
func sameRequest(r *stored, req tandem.ReserveRequest, fp string) bool {
	if r.fingerprint != "" {
		return r.fingerprint == fp
	}
	if len(r.lines) != len(req.Lines) {
		return false
	}
	for i, l := range r.lines {
		q := req.Lines[i]
		if l.ItemID != q.ItemID || l.Quantity != q.Quantity || !slices.Contains(q.GroupIDs, l.GroupID) {
			return false
		}
	}
	return true
}

// candidate is one (line, group) a reserve may take units from.
type candidate struct {
	line  int
	key   tandem.Key
	want  int64
	start int64 // first id of the scan; 0 scans the whole pool
}

// unitSelect returns one statement that locks, for each candidate of idx,
// up to want[i] of its unit rows with SKIP LOCKED: at or above its start
// id, or with below, under it (the wrap-around of a short scan).
func unitSelect(cands []candidate, idx []int, want []int64, below bool) (string, []any) {
	parts := make([]string, 0, len(idx))
	args := make([]any, 0, 4*len(idx))
	op := ">="
	if below {
		op = "<"
	}
	for j, i := range idx {
		c := cands[i]
		parts = append(parts, fmt.Sprintf(reserveCandidateSQL, i, op, want[j]))
		args = append(args, c.key.ShopID, c.key.ItemID, c.key.GroupID, c.start)
	}
	if len(parts) == 1 {
		return reserveHeadSQL + strings.TrimSuffix(strings.TrimPrefix(parts[0], "("), ")"), args
	}
	return reserveHeadSQL + strings.Join(parts, " UNION ALL "), args
}

// outOfStock reports whether none of the candidates idx can cover its want
// from the committed pool rows and unpooled units, read without locking.
func outOfStock(ctx context.Context, tx *batchTx, cands []candidate, idx []int) (bool, error) {
	parts := make([]string, 0, len(idx))
	args := make([]any, 0, 6*len(idx))
	for _, i := range idx {
		k := cands[i].key
		parts = append(parts, fmt.Sprintf(stockLeftSQL, i))
		args = append(args, k.ShopID, k.ItemID, k.GroupID, k.ShopID, k.ItemID, k.GroupID)
	}
	stmt := reserveHeadSQL + strings.Join(parts, " UNION ALL ")
	if len(parts) == 1 {
		stmt = reserveHeadSQL + strings.TrimSuffix(strings.TrimPrefix(parts[0], "("), ")")
	}
	rows, err := tx.query(ctx, stmt, args...)
	if err != nil {
		return false, fmt.Errorf("stock left: %w", err)
	}
	defer rows.Close()
	out := true
	for rows.Next() {
		var c int
		var n int64
		if err := rows.Scan(&c, &n); err != nil {
			return false, fmt.Errorf("stock left: %w", err)
		}
		if n >= cands[c].want {
			out = false
		}
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("stock left: %w", err)
	}
	return out, nil
}

// scanUnits runs a unitSelect and appends the ids to got per candidate.
func scanUnits(ctx context.Context, tx *batchTx, stmt string, args []any, got [][]int64) error {
	rows, err := tx.query(ctx, stmt, args...)
	if err != nil {
		return fmt.Errorf("select units: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c int
		var id int64
		if err := rows.Scan(&c, &id); err != nil {
			return fmt.Errorf("select units: %w", err)
		}
		got[c] = append(got[c], id)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("select units: %w", err)
	}
	return nil
}

// reserveFast takes the cart's units on the fast path, each candidate's
// scan starting at a random id of its pool. A cart whose every line names
// one group (the common case) is first tried in one round trip
// (reserveOneTrip); a cart with multi-group lines, or one that trip found
// short, goes through reserveTwoTrips, whose scans wrap around below their
// start and which weighs group preferences. It returns errShort when a line
// cannot be served from the units the fast path sees.
func (s *Store) reserveFast(ctx context.Context, req tandem.ReserveRequest, fp string, now, expires time.Time) ([]tandem.Line, error) {
	var cands []candidate
	for i, l := range req.Lines {
		for _, g := range l.GroupIDs {
			k := tandem.Key{ShopID: req.ShopID, ItemID: l.ItemID, GroupID: g}
			cands = append(cands, candidate{line: i, key: k, want: l.Quantity})
		}
	}
	oneTrip := len(cands) == len(req.Lines)

	var takes []take
	var shortKeys []tandem.Key
	err := s.withBatchTx(ctx, tagReserve, func(tx *batchTx) error {
		takes, shortKeys = nil, nil
		for i := range cands {
			cands[i].start = s.repl.startID(cands[i].key)
		}
		if oneTrip {
			err := reserveOneTrip(ctx, tx, req, fp, cands, now, expires)
			if err == nil {
				for _, c := range cands {
					takes = append(takes, take{key: c.key})
				}
				return nil
			}
			if !errors.Is(err, errShort) {
				return err
			}
			s.metrics.shortTrip()
		}
		var err error
		takes, shortKeys, err = s.reserveTwoTrips(ctx, tx, req, fp, cands, now, expires)
		return err
	})
	for _, k := range shortKeys {
		s.repl.noteShort(k)
	}
	if err != nil {
		return nil, err
	}
	for i, t := range takes {
		s.repl.noteTaken(t.key, req.Lines[i].Quantity)
	}
	return linesOf(req, takes), nil
}

// reserveOneTrip reserves a cart of single-group lines (cands, one per
// line) in one round trip: BEGIN, the delete of the units its SKIP LOCKED
// selects find (oneTripDeleteSQL), the header insert guarded by ROW_COUNT()
// of that delete, the lines and COMMIT. Units are locked only for the
// server's time of that batch. A line short above its start makes the
// guard refuse the header, so the batch stops before COMMIT and the cart
// gets errShort with the transaction left failed on tx: the next query on
// tx rolls it back in the same round trip. A scan short above its start
// does not wrap around here (that needs the count it found, which the batch
// keeps on the server): the caller's two-trip path does that.
func reserveOneTrip(ctx context.Context, tx *batchTx, req tandem.ReserveRequest, fp string, cands []candidate, now, expires time.Time) error {
	parts := make([]string, len(cands))
	args := make([]any, 0, 4*len(cands)+7+6*len(req.Lines))
	groups := make([]int64, len(cands))
	var want int64
	for i, c := range cands {
		parts[i] = fmt.Sprintf(oneTripPartSQL, c.want)
		args = append(args, c.key.ShopID, c.key.ItemID, c.key.GroupID, c.start)
		groups[i] = c.key.GroupID
		want += c.want
	}
	from := strings.Join(parts, " UNION ALL ")
	if len(parts) == 1 {
		from = strings.TrimSuffix(strings.TrimPrefix(from, "("), ")")
	}
	var b strings.Builder
	b.WriteString(fmt.Sprintf(oneTripDeleteSQL, from))
	args = holdBatch(&b, args, tagReserve, req, fp, groups, want, now, expires)
	err := tx.once(ctx, b.String(), args...)
	if nullColumn(err) == "expires_at" {
		return errShort
	}
	if err != nil {
		return takeError(err)
	}
	return nil
}

// reserveTwoTrips takes the cart's units with one SKIP LOCKED select; a
// candidate short above its start wraps around to the ids below it in a
// second select. The units go with the cart's reservation and COMMIT in a
// second round trip. It returns the takes, and the keys of the candidates
// found short.
func (s *Store) reserveTwoTrips(ctx context.Context, tx *batchTx, req tandem.ReserveRequest, fp string, cands []candidate, now, expires time.Time) ([]take, []tandem.Key, error) {
	all := make([]int, len(cands))
	wants := make([]int64, len(cands))
	for i, c := range cands {
		all[i], wants[i] = i, c.want
	}
	got := make([][]int64, len(cands))
	stmt, args := unitSelect(cands, all, wants, false)
	if err := scanUnits(ctx, tx, stmt, args, got); err != nil {
		return nil, nil, err
	}
	var wrap []int
	var rest []int64
	for i, c := range cands {
		if c.start > 0 && int64(len(got[i])) < c.want {
			wrap = append(wrap, i)
			rest = append(rest, c.want-int64(len(got[i])))
		}
	}
	if len(wrap) > 0 {
		stmt, args := unitSelect(cands, wrap, rest, true)
		if err := scanUnits(ctx, tx, stmt, args, got); err != nil {
			return nil, nil, err
		}
	}
	takes, shortKeys, passed := s.chooseGroups(req, cands, got)
	if takes == nil {
		return nil, shortKeys, errShort
	}
	// Drained recently is a hint, not a fact: units SKIP LOCKED did not
	// see may be locked by a transaction that rolls back (a retried
	// reserve finds its token taken only at its insert), or a restock
	// may have refilled the ledger since. Pass a group over only when
	// the committed state agrees it cannot cover the line.
	if len(passed) > 0 {
		if out, err := outOfStock(ctx, tx, cands, passed); err != nil {
			return nil, shortKeys, err
		} else if !out {
			return nil, shortKeys, errShort
		}
	}
	stmts, targs := takeBatch(tagReserve, req, fp, takes, now, expires)
	if err := tx.commit(ctx, stmts, targs...); err != nil {
		return nil, shortKeys, takeError(err)
	}
	return takes, shortKeys, nil
}

// chooseGroups picks, per line, the first group in preference order whose
// candidate got the whole quantity (got, per candidate). A short group may
// be passed over only when it was drained recently, and then only once the
// committed state agrees (passed lists those candidates). It returns nil
// takes when a line cannot be served, and the keys of the short candidates.
func (s *Store) chooseGroups(req tandem.ReserveRequest, cands []candidate, got [][]int64) (takes []take, shortKeys []tandem.Key, passed []int) {
	c := 0
	for _, l := range req.Lines {
		var chosen *take
		preferred := true
		var skipped []int
		for range l.GroupIDs {
			cd := cands[c]
			c++
			if chosen != nil {
				continue
			}
			if int64(len(got[c-1])) >= l.Quantity {
				if preferred {
					chosen = &take{key: cd.key, ids: got[c-1]}
					passed = append(passed, skipped...)
				}
				continue
			}
			shortKeys = append(shortKeys, cd.key)
			// A short group earlier in the preference order may only
			// be passed over when it is known to be out of stock;
			// otherwise the slow path decides with the ledger locked.
			if !s.repl.drainedRecently(cd.key) {
				preferred = false
			} else {
				skipped = append(skipped, c-1)
			}
		}
		if chosen == nil {
			return nil, shortKeys, nil
		}
		takes = append(takes, *chosen)
	}
	return takes, shortKeys, passed
}

func linesOf(req tandem.ReserveRequest, takes []take) []tandem.Line {
	lines := make([]tandem.Line, len(req.Lines))
	for i, l := range req.Lines {
		lines[i] = tandem.Line{ItemID: l.ItemID, Quantity: l.Quantity, GroupID: takes[i].key.GroupID}
	}
	return lines
}

// takeBatch returns the statements that move the taken unit rows into the
// cart's reservation, as one multi-statement batch (one round trip): delete
// the units first, then insert the header and the lines (the lock order of
// every reserve: pool rows, then reservation; see holdBatch).
func takeBatch(tag string, req tandem.ReserveRequest, fp string, takes []take, now, expires time.Time) (string, []any) {
	var b strings.Builder
	var args []any
	var want int64
	var conds []string
	groups := make([]int64, len(takes))
	for i, t := range takes {
		groups[i] = t.key.GroupID
		if len(t.ids) == 0 {
			continue
		}
		ph := strings.Repeat("?, ", len(t.ids))
		conds = append(conds, fmt.Sprintf(reserveDeleteCond, ph[:len(ph)-2]))
		args = append(args, t.key.ShopID, t.key.ItemID, t.key.GroupID)
		for _, id := range t.ids {
			args = append(args, id)
		}
		want += int64(len(t.ids))
	}
	if len(conds) > 0 {
		b.WriteString(fmt.Sprintf(reserveDeleteSQL, tag, strings.Join(conds, " OR ")))
	}
	args = holdBatch(&b, args, tag, req, fp, groups, want, now, expires)
	return b.String(), args
}

// holdBatch appends to b (and their arguments to args) the inserts of the
// cart's header and lines, each line held in groups[i]. When want > 0, b
// ends with the delete of the taken units, and the header insert checks
// ROW_COUNT() of that delete: should fewer units go than want, expires_at
// gets NULL, which a single-row INSERT refuses (error 1048) whatever the
// SQL mode, so the batch stops before COMMIT.
func holdBatch(b *strings.Builder, args []any, tag string, req tandem.ReserveRequest, fp string, groups []int64, want int64, now, expires time.Time) []any {
	args = append(args, req.ShopID, req.CartToken, req.ShopID, req.CartToken, fp)
	if want > 0 {
		b.WriteString("; ")
		b.WriteString(fmt.Sprintf(insertGuardedHeaderSQL, tag))
		args = append(args, want, expires, now, now)
	} else {
		b.WriteString(fmt.Sprintf(insertHeaderSQL, tag))
		args = append(args, expires, now, now)
	}
	b.WriteString("; ")
	b.WriteString(fmt.Sprintf(insertLinesSQL, tag))
	for i, l := range req.Lines {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(lineValuesSQL)
		args = append(args, req.ShopID, req.CartToken, i, l.ItemID, groups[i], l.Quantity)
	}
	return args
}

// takeError classifies the failure of a take batch.
func takeError(err error) error {
	if isDuplicate(err) {
		return errTokenTaken
	}
	switch nullColumn(err) {
	case "status":
		return errTokenClaimed
	case "expires_at":
		return fmt.Errorf("take units: deleted fewer units than were locked: %w", err)
	}
	return fmt.Errorf("take units and insert reservation: %w", err)
}

// nullColumn returns the column a header insert refused as NULL (error
// 1048): "status" for a claimed token (unclaimedSQL), "expires_at" for a
// delete of the taken units short of what was locked (holdBatch); "" for
// any other error. MySQL and MariaDB name the column alike: "Column
// 'status' cannot be null".
func nullColumn(err error) string {
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != errBadNull {
		return ""
	}
	for _, c := range []string{"status", "expires_at"} {
		if strings.Contains(me.Message, "'"+c+"'") {
			return c
		}
	}
	return ""
}

// reserveSlow reserves with the candidates' ledger rows locked (in key
// order): one replenisher per position at a time, the pool refilled
// inline, locked units waited for rather than skipped.
func (s *Store) reserveSlow(ctx context.Context, req tandem.ReserveRequest, fp string, now, expires time.Time) ([]tandem.Line, error) {
	var keys []tandem.Key
	for _, l := range req.Lines {
		for _, g := range l.GroupIDs {
			keys = append(keys, tandem.Key{ShopID: req.ShopID, ItemID: l.ItemID, GroupID: g})
		}
	}
	var takes []take
	var pos map[tandem.Key]*position
	err := s.withTx(ctx, tagReserveSlow, func(tx *sql.Tx) error {
		takes = nil
		var err error
		pos, err = lockPositions(ctx, tx, tagReserveSlow, keys)
		if err != nil {
			return err
		}
		for _, l := range req.Lines {
			t, best, err := s.slowLine(ctx, tx, req.ShopID, l, pos)
			if err != nil {
				return err
			}
			if t == nil {
				unit := "units"
				if best == 1 {
					unit = "unit"
				}
				return tandem.Errorf(tandem.EINSUFFICIENT, "item %d has %d sellable %s, %d requested",
					l.ItemID, best, unit, l.Quantity).WithDetail("inventory_item_id", l.ItemID)
			}
			takes = append(takes, *t)
		}
		for _, k := range sortKeys(keys) {
			if err := writePosition(ctx, tx, tagReserveSlow, pos[k], now); err != nil {
				return err
			}
		}
		stmts, args := takeBatch(tagReserveSlow, req, fp, takes, now, expires)
		if _, err := tx.ExecContext(ctx, stmts, args...); err != nil {
			return takeError(err)
		}
		return nil
	})
	if err == nil {
		for k, p := range pos {
			s.repl.observeLedger(k, p.unpooled)
		}
	}
	if err != nil {
		return nil, err
	}
	return linesOf(req, takes), nil
}

// slowLine finds the first group of the line that can cover it, with its
// ledger row locked; nil and the best sellable count when none can.
func (s *Store) slowLine(ctx context.Context, tx *sql.Tx, shopID int64, l tandem.LineRequest, pos map[tandem.Key]*position) (*take, int64, error) {
	var best int64
	for _, g := range l.GroupIDs {
		k := tandem.Key{ShopID: shopID, ItemID: l.ItemID, GroupID: g}
		p := pos[k]
		if !p.exists {
			continue
		}
		count, err := poolCount(ctx, tx, tagReserveSlow, k)
		if err != nil {
			return nil, 0, err
		}
		// Pool rows only disappear while the ledger row is locked, so a
		// group whose stock is short now cannot cover the line.
		if stock := max(p.unpooled, 0) + count; stock < l.Quantity {
			best = max(best, stock)
			continue
		}
		if count < l.Quantity && p.unpooled > 0 {
			if _, err := s.fillPool(ctx, tx, tagReserveSlow, p); err != nil {
				return nil, 0, err
			}
		}
		ids, err := selectUnitsBlocking(ctx, tx, k, l.Quantity)
		if err != nil {
			return nil, 0, err
		}
		rest := l.Quantity - int64(len(ids))
		if rest > max(p.unpooled, 0) {
			best = max(best, int64(len(ids))+max(p.unpooled, 0))
			continue
		}
		if rest > 0 {
			p.unpooled -= rest
			p.dirty = true
		}
		return &take{key: k, ids: ids, fromUnpooled: rest}, 0, nil
	}
	return nil, best, nil
}

// selectUnitsBlocking locks up to n units of k, waiting for units locked by
// in-flight transactions: those that commit take their units away, those
// that roll back leave them to this one.
func selectUnitsBlocking(ctx context.Context, tx *sql.Tx, k tandem.Key, n int64) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, slowSelectSQL, k.ShopID, k.ItemID, k.GroupID, n)
	if err != nil {
		return nil, fmt.Errorf("lock units %s: %w", k, err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("lock units %s: %w", k, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lock units %s: %w", k, err)
	}
	return ids, nil
}
