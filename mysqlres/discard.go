package mysqlres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/tandemhq/tandem"
)

// Statements of Discard.
const (
	discardLinesSQL  = "/* conn_tag='repair' */ DELETE FROM reservation_lines WHERE shop_id = ? AND cart_token = ?"
	discardHeaderSQL = "/* conn_tag='repair' */ DELETE FROM reservations WHERE shop_id = ? AND cart_token = ?"
)

var _ tandem.Discarder = (*Store)(nil)

// Discard implements tandem.Discarder: the router calls it on a shadow hold
// that the source of truth refused. Lock order as Release: header, then
// ledger rows, then pool rows.
func (s *Store) Discard(ctx context.Context, shopID int64, cartToken string) error {
	if err := tandem.ValidateCartToken(cartToken); err != nil {
		return err
	}
	now := s.Now().UTC()
	return s.withTx(ctx, tagRepair, func(tx *sql.Tx) error {
		r, err := loadReservation(ctx, tx, tagRepair, shopID, cartToken, true)
		if err != nil || r == nil {
			return err
		}
		if r.status == tandem.StatusClaimed {
			return tandem.Errorf(tandem.ECONFLICT, "cart %s is claimed and cannot be discarded", cartToken)
		}
		for _, q := range []string{discardLinesSQL, discardHeaderSQL} {
			if _, err := tx.ExecContext(ctx, q, shopID, cartToken); err != nil {
				return fmt.Errorf("discard: %w", err)
			}
		}
		if r.status != tandem.StatusReserved {
			return nil
		}
		return s.settle(ctx, tx, tagRepair, lineQuantities(shopID, r.lines), nil, now)
	})
}
