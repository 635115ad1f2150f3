package mysqlres

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tandemhq/tandem"
)

var (
	_ tandem.OnHandFollower = (*Store)(nil)
	_ tandem.HoldPlacer     = (*Store)(nil)
	_ tandem.DirtyLog       = (*Store)(nil)
)

// FollowOnHand implements tandem.OnHandFollower. The ledger is this store's
// own table: the source of truth's write (Ledger.SetOnHand) already moved
// the unpooled count in the same transaction, so following is reading back,
// and a conflict is a position whose holds exceed the new on_hand. delta is
// not needed: the count is the ledger's own.
func (s *Store) FollowOnHand(ctx context.Context, key tandem.Key, onHand, delta int64) (*tandem.Counters, error) {
	c, err := s.Counters(ctx, key)
	if err != nil {
		return nil, err
	}
	if c.Reserved > c.OnHand {
		return c, tandem.Errorf(tandem.ECONFLICT, "MySQL holds %d units of %s, more than on_hand %d", c.Reserved, key, c.OnHand)
	}
	return c, nil
}

// Place implements tandem.HoldPlacer: the router converges a MySQL shadow
// to a hold its source of truth granted. The hold is taken like a reserve
// whose every line names only the hold's group, with no fingerprint, so
// that the buyer's own retry matches it.
func (s *Store) Place(ctx context.Context, hold tandem.Reservation) (*tandem.Reservation, error) {
	req := pinnedRequest(hold)
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if s.db == nil {
		return nil, errNotOpen
	}
	now := s.Now().UTC().Truncate(time.Microsecond)
	expires := hold.ExpiresAt.UTC().Truncate(time.Microsecond)
	if !expires.After(now) {
		return nil, tandem.Errorf(tandem.EINVALID, "hold %s expired at %s", hold.CartToken, expires)
	}
	// A cart the ledger records as claimed is never held again: the hold
	// being placed was claimed since the caller read it.
	claimed, err := s.Ledger().Claimed(ctx, hold.ShopID, hold.CartToken)
	if err != nil {
		return nil, err
	}
	if claimed {
		return nil, tandem.Errorf(tandem.ECONFLICT, "cart %s is already claimed", hold.CartToken)
	}
	return s.reserve(ctx, req, "", now, expires)
}

// pinnedRequest asks for exactly hold's lines, each from its own group.
func pinnedRequest(hold tandem.Reservation) tandem.ReserveRequest {
	req := tandem.ReserveRequest{CartToken: hold.CartToken, ShopID: hold.ShopID, Lines: make([]tandem.LineRequest, len(hold.Lines))}
	for i, l := range hold.Lines {
		req.Lines[i] = tandem.LineRequest{ItemID: l.ItemID, Quantity: l.Quantity, GroupIDs: []int64{l.GroupID}}
	}
	return req
}

// Statements of the dirty-cart log.
const (
	// markDirtySQL keeps a suspect mark suspect while its authority stays
	// (suspect is assigned before authority: MySQL evaluates the
	// assignments in order, each seeing the ones before).
	markDirtySQL      = "/* conn_tag='converge' */ INSERT INTO shadow_dirty (shop_id, cart_token, authority, suspect, since, marked_at) VALUES %s ON DUPLICATE KEY UPDATE suspect = IF(authority = VALUES(authority), suspect OR VALUES(suspect), VALUES(suspect)), authority = VALUES(authority), marked_at = GREATEST(marked_at, VALUES(marked_at))"
	dirtyValuesSQL    = "(?, ?, ?, ?, ?, ?)"
	listDirtySQL      = "/* conn_tag='converge' */ SELECT shop_id, cart_token, authority, suspect, since, marked_at FROM shadow_dirty ORDER BY since LIMIT ?"
	clearDirtySQL     = "/* conn_tag='converge' */ DELETE FROM shadow_dirty WHERE "
	clearDirtyCondSQL = "(shop_id = ? AND cart_token = ? AND marked_at <= ?)"
	lookupDirtySQL    = "/* conn_tag='converge' */ SELECT authority, suspect, since, marked_at FROM shadow_dirty WHERE shop_id = ? AND cart_token = ?"
)

// LookupDirty implements tandem.DirtyLog.
func (s *Store) LookupDirty(ctx context.Context, shopID int64, cartToken string) (*tandem.DirtyCart, error) {
	if s.db == nil {
		return nil, errNotOpen
	}
	var c *tandem.DirtyCart
	err := s.withConn(ctx, tagConverge, func(conn *sql.Conn) error {
		d := tandem.DirtyCart{ShopID: shopID, CartToken: cartToken}
		err := conn.QueryRowContext(ctx, lookupDirtySQL, shopID, cartToken).Scan(&d.Authority, &d.Suspect, &d.Since, &d.MarkedAt)
		if err == sql.ErrNoRows {
			return nil
		}
		if err != nil {
			return err
		}
		d.Since, d.MarkedAt = d.Since.UTC(), d.MarkedAt.UTC()
		c = &d
		return nil
	})
	return c, err
}

// MarkDirty implements tandem.DirtyLog in the pod's database.
func (s *Store) MarkDirty(ctx context.Context, carts []tandem.DirtyCart) error {
	if len(carts) == 0 {
		return nil
	}
	if s.db == nil {
		return errNotOpen
	}
	// A backlog of tens of thousands of marks goes in statements of
	// dirtyChunk rows, all in one transaction (one commit).
	return s.withTx(ctx, tagConverge, func(tx *sql.Tx) error {
		for part := range slices.Chunk(carts, dirtyChunk) {
			vals := make([]string, len(part))
			args := make([]any, 0, 6*len(part))
			for i, c := range part {
				vals[i] = dirtyValuesSQL
				args = append(args, c.ShopID, c.CartToken, c.Authority, c.Suspect, c.Since.UTC(), c.MarkedAt.UTC())
			}
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(markDirtySQL, strings.Join(vals, ", ")), args...); err != nil {
				return err
			}
		}
		return nil
	})
}

// dirtyChunk is how many carts one statement of MarkDirty or ClearDirty
// names.
const dirtyChunk = 500

// DirtyCarts implements tandem.DirtyLog.
func (s *Store) DirtyCarts(ctx context.Context, limit int) ([]tandem.DirtyCart, error) {
	if s.db == nil {
		return nil, errNotOpen
	}
	var out []tandem.DirtyCart
	err := s.withConn(ctx, tagConverge, func(conn *sql.Conn) error {
		out = nil
		rows, err := conn.QueryContext(ctx, listDirtySQL, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c tandem.DirtyCart
			if err := rows.Scan(&c.ShopID, &c.CartToken, &c.Authority, &c.Suspect, &c.Since, &c.MarkedAt); err != nil {
				return err
			}
			c.Since, c.MarkedAt = c.Since.UTC(), c.MarkedAt.UTC()
			out = append(out, c)
		}
		return rows.Err()
	})
	return out, err
}

// ClearDirty implements tandem.DirtyLog.
func (s *Store) ClearDirty(ctx context.Context, carts []tandem.DirtyCart) error {
	if len(carts) == 0 {
		return nil
	}
	if s.db == nil {
		return errNotOpen
	}
	// One statement per dirtyChunk carts, one commit for all: the worker
	// clears a round of up to 1,024 converged carts at a time, and a
	// statement (and a commit) per cart made the clearing, not the
	// convergence, the worker's bottleneck.
	return s.withTx(ctx, tagConverge, func(tx *sql.Tx) error {
		for part := range slices.Chunk(carts, dirtyChunk) {
			conds := make([]string, len(part))
			args := make([]any, 0, 3*len(part))
			for i, c := range part {
				conds[i] = clearDirtyCondSQL
				args = append(args, c.ShopID, c.CartToken, c.MarkedAt.UTC())
			}
			if _, err := tx.ExecContext(ctx, clearDirtySQL+strings.Join(conds, " OR "), args...); err != nil {
				return err
			}
		}
		return nil
	})
}

var _ tandem.Recounter = (*Store)(nil)

// Recount implements tandem.Recounter: it sets the position's unpooled
// units again from the ledger, so that on_hand = unpooled + pool rows +
// reserved units, and refills the pool. It repairs a pool that lost rows
// (or gained some) behind the engine's back. Every flow that changes the
// sum of the three takes the ledger row's lock, which Recount holds; a
// reserve moves units from the pool to its holds and keeps the sum.
func (s *Store) Recount(ctx context.Context, key tandem.Key) (*tandem.Counters, error) {
	r, err := s.Repair(ctx, key)
	if err != nil {
		return nil, err
	}
	return &r.Counters, nil
}

// Repair implements tandem.Recounter: the ledger is this store's own
// table, so repairing from its own records is Recount, under the ledger
// row's lock, safe under traffic.
func (s *Store) Repair(ctx context.Context, key tandem.Key) (*tandem.Records, error) {
	if key.ShopID <= 0 || key.ItemID <= 0 || key.GroupID <= 0 {
		return nil, tandem.Errorf(tandem.EINVALID, "shop_id, inventory_item_id and group_id must be integers > 0")
	}
	err := s.withTx(ctx, tagRepair, func(tx *sql.Tx) error {
		pos, err := lockPositions(ctx, tx, tagRepair, []tandem.Key{key})
		if err != nil {
			return err
		}
		p := pos[key]
		if !p.exists {
			return nil
		}
		pool, err := poolCount(ctx, tx, tagRepair, key)
		if err != nil {
			return err
		}
		held, err := heldUnits(ctx, tx, tagRepair, key)
		if err != nil {
			return err
		}
		want := p.onHand - pool - held
		if want == p.unpooled {
			return nil
		}
		if want >= 0 {
			p.unpooled, p.dirty = want, true
			if _, err := s.fillPool(ctx, tx, tagRepair, p); err != nil {
				return err
			}
		} else {
			// More pool rows than on_hand leaves room for: the extra rows go.
			p.unpooled = 0
			if _, err := s.adjustStock(ctx, tx, tagRepair, p, want, false); err != nil {
				return err
			}
		}
		return writePosition(ctx, tx, tagRepair, p, s.Now().UTC())
	})
	if err != nil {
		return nil, err
	}
	return s.Records(ctx, key)
}
