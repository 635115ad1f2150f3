package mysqlres

import (
	"context"
	"database/sql"
	"errors"
)

const claimedSQL = "/* conn_tag='ledger' */ SELECT 1 FROM claims WHERE shop_id = ? AND cart_token = ?"

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
