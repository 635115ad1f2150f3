package mysqlres

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/tandemhq/tandem"
)

// Statements of End. A tombstone's lines are not held (held = 0): they
// record what the cart held where it ended, and count nowhere.
const (
	endHeaderSQL  = "/* conn_tag='repair' */ INSERT INTO reservations (shop_id, cart_token, status, fingerprint, expires_at, created_at, updated_at) VALUES (?, ?, ?, '', ?, ?, ?)"
	endLinesSQL   = "/* conn_tag='repair' */ INSERT INTO reservation_lines (shop_id, cart_token, line_no, inventory_item_id, inventory_group_id, quantity, held) VALUES "
	endLineValues = "(?, ?, ?, ?, ?, ?, 0)"
)

var (
	_ tandem.CartEnder    = (*Store)(nil)
	_ tandem.ClaimSettler = (*Store)(nil)
	_ tandem.Tombstoner   = (*Store)(nil)
)

// End implements tandem.CartEnder: the router calls it on a copy of a cart
// its authority released or let expire. Lock order as Release: header, then
// ledger rows, then pool rows. A cart this store never saw gets a header
// and unheld lines only (no ledger or pool row is touched); a reserve of
// the same token racing it loses on the header's primary key, or wins it
// and is then ended as a hold.
func (s *Store) End(ctx context.Context, ended tandem.Reservation) error {
	if err := validateEnded(ended); err != nil {
		return err
	}
	shopID, token := ended.ShopID, ended.CartToken
	now := s.Now().UTC()
	return s.withTx(ctx, tagRepair, func(tx *sql.Tx) error {
		r, err := loadReservation(ctx, tx, tagRepair, shopID, token, true)
		if err != nil {
			return err
		}
		if r == nil {
			return insertEnded(ctx, tx, ended, now)
		}
		switch r.status {
		case tandem.StatusClaimed:
			return tandem.Errorf(tandem.ECONFLICT, "cart %s is claimed and cannot be ended", token)
		case tandem.StatusReserved:
			if err := markSettled(ctx, tx, tagRepair, shopID, token, ended.Status, now); err != nil {
				return err
			}
			if err := relabel(ctx, tx, tagRepair, shopID, token, r.lines, ended.Lines); err != nil {
				return err
			}
			return s.settle(ctx, tx, tagRepair, lineQuantities(shopID, r.lines), nil, now)
		}
		// Released or expired already: it shows the lines it ended with.
		return relabel(ctx, tx, tagRepair, shopID, token, r.lines, ended.Lines)
	})
}

// insertEnded writes a tombstone of ended.
func insertEnded(ctx context.Context, tx *sql.Tx, ended tandem.Reservation, now time.Time) error {
	expires := ended.ExpiresAt.UTC().Truncate(time.Microsecond)
	if ended.ExpiresAt.IsZero() {
		expires = now
	}
	_, err := tx.ExecContext(ctx, endHeaderSQL, ended.ShopID, ended.CartToken, string(ended.Status), expires, now, now)
	if isDuplicate(err) {
		return errRetry // a reserve of the token won the race: end it as a hold
	}
	if err != nil {
		return fmt.Errorf("end: insert header: %w", err)
	}
	if err := insertUnheldLines(ctx, tx, ended.ShopID, ended.CartToken, ended.Lines); err != nil {
		return fmt.Errorf("end: %w", err)
	}
	return nil
}

// insertUnheldLines writes a cart's lines, held by nothing (they record
// what the cart held where it ended).
func insertUnheldLines(ctx context.Context, tx *sql.Tx, shopID int64, token string, lines []tandem.Line) error {
	var b strings.Builder
	b.WriteString(endLinesSQL)
	args := make([]any, 0, 6*len(lines))
	for i, l := range lines {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(endLineValues)
		args = append(args, shopID, token, i, l.ItemID, l.GroupID, l.Quantity)
	}
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("insert lines: %w", err)
	}
	return nil
}

// Tombstone implements tandem.Tombstoner: a header and unheld lines for
// each cart this store never saw, in one transaction per cart (a reserve
// of the token racing it wins the header's primary key, and the cart is
// then known). This store's counts are the ledger's own, so a claimed
// cart's tombstone touches nothing else either.
func (s *Store) Tombstone(ctx context.Context, ended []tandem.Reservation) (int, error) {
	for _, c := range ended {
		if c.Status != tandem.StatusClaimed {
			if err := validateEnded(c); err != nil {
				return 0, err
			}
		} else if err := validateHold(c); err != nil {
			return 0, err
		}
	}
	n := 0
	now := s.Now().UTC()
	for _, c := range ended {
		recorded := false
		err := s.withTx(ctx, tagRepair, func(tx *sql.Tx) error {
			recorded = false
			r, err := loadReservation(ctx, tx, tagRepair, c.ShopID, c.CartToken, true)
			if err != nil || r != nil {
				return err
			}
			if err := insertEnded(ctx, tx, c, now); err != nil {
				return err
			}
			recorded = true
			return nil
		})
		if err != nil {
			return n, err
		}
		if recorded {
			n++
		}
	}
	return n, nil
}

// validateEnded checks a cart given to End.
func validateEnded(ended tandem.Reservation) error {
	if ended.Status != tandem.StatusReleased && ended.Status != tandem.StatusExpired {
		return tandem.Errorf(tandem.EINVALID, "cart %s: end takes a released or expired cart, not %q", ended.CartToken, ended.Status)
	}
	return validateHold(ended)
}

// SettleClaim implements tandem.ClaimSettler: the router calls it on a
// copy of a cart another store claimed. This store's count is the ledger's
// own, which the claim already lowered (Ledger.DeductCart), so nothing is
// deducted here: a hold it has is settled as by Claim (its units return to
// stock, the claim record making the deduction a no-op), and a cart it
// never held or saw end is recorded as claimed with claimed's lines (a
// tombstone: a later reserve of the token is a conflict). The ledger must
// record the claim already; otherwise it answers ECONFLICT and changes
// nothing (the other store is between the two steps of its claim).
func (s *Store) SettleClaim(ctx context.Context, claimed tandem.Reservation) error {
	if err := validateHold(claimed); err != nil {
		return err
	}
	shopID, token := claimed.ShopID, claimed.CartToken
	now := s.Now().UTC()
	return s.withTx(ctx, tagRepair, func(tx *sql.Tx) error {
		r, err := loadReservation(ctx, tx, tagRepair, shopID, token, true)
		if err != nil {
			return err
		}
		if r != nil && r.status == tandem.StatusClaimed {
			return relabel(ctx, tx, tagRepair, shopID, token, r.lines, claimed.Lines)
		}
		fresh, err := recordClaim(ctx, tx, tagRepair, shopID, token, now)
		if err != nil {
			return err
		}
		if fresh {
			// Rolled back with the rest: the claim is not the ledger's yet.
			return tandem.Errorf(tandem.ECONFLICT, "cart %s is not claimed in the ledger", token)
		}
		switch {
		case r == nil:
			ended := claimed
			ended.Status = tandem.StatusClaimed
			return insertEnded(ctx, tx, ended, now)
		case r.status == tandem.StatusReserved:
			if err := markSettled(ctx, tx, tagRepair, shopID, token, tandem.StatusClaimed, now); err != nil {
				return err
			}
			if err := relabel(ctx, tx, tagRepair, shopID, token, r.lines, claimed.Lines); err != nil {
				return err
			}
			return s.settle(ctx, tx, tagRepair, lineQuantities(shopID, r.lines), nil, now)
		}
		// Released or expired here: its units are back already.
		if err := markSettled(ctx, tx, tagRepair, shopID, token, tandem.StatusClaimed, now); err != nil {
			return err
		}
		return relabel(ctx, tx, tagRepair, shopID, token, r.lines, claimed.Lines)
	})
}
