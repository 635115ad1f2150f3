package mysqlres

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/tandemhq/tandem"
)

// Retention. An ended reservation (claimed, released, expired) answers a
// repeated claim or release and refuses its cart token to a new reserve;
// the Redis engine keeps its ended carts for its retention (key expiry),
// and this engine keeps its ended reservations as long, then removes them,
// so that its tables hold the recent traffic rather than all of it.

// Statements of PurgeEnded. The due reservations of one status are a range
// of reservations_due (status, expires_at): a batch reads its own rows, not
// the ended reservations still kept. A reservation ends at or before its
// expiry, or when the reaper expires it (updated_at): both must be past the
// cutoff.
const (
	purgeDueSQL   = "/* conn_tag='purge' */ SELECT shop_id, cart_token FROM reservations WHERE status = ? AND expires_at < ? AND updated_at < ? ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED"
	purgeLinesSQL = "/* conn_tag='purge' */ DELETE FROM reservation_lines WHERE held = 0 AND (%s)"
	// A reservation whose lines are not all gone (a line held while it is
	// not reserved) is kept: the audit reports it.
	purgeHeadersSQL = "/* conn_tag='purge' */ DELETE FROM reservations WHERE status <> 'reserved' AND (%s) AND NOT EXISTS (SELECT 1 FROM reservation_lines l WHERE l.shop_id = reservations.shop_id AND l.cart_token = reservations.cart_token)"
)

// purgeClaimsSQL removes claim records older than the cutoff whose
// reservation is gone (purged, or never here: a cart only Redis held) and
// whose cart is not dirty (a convergence may still ask the ledger).
const purgeClaimsSQL = "/* conn_tag='purge' */ DELETE FROM claims WHERE claimed_at < ? AND NOT EXISTS (SELECT 1 FROM reservations r WHERE r.shop_id = claims.shop_id AND r.cart_token = claims.cart_token) AND NOT EXISTS (SELECT 1 FROM shadow_dirty d WHERE d.shop_id = claims.shop_id AND d.cart_token = claims.cart_token) ORDER BY claimed_at LIMIT ?"

// purgeBatch bounds the reservations one purge transaction removes, so that
// it holds its locks and connection briefly.
const purgeBatch = 500

// endedStatuses are the statuses PurgeEnded removes.
var endedStatuses = []tandem.Status{tandem.StatusClaimed, tandem.StatusReleased, tandem.StatusExpired}

// PurgeEnded removes at most limit reservations that ended (claimed,
// released or expired) more than Retention before now, with their lines,
// in short transactions, and returns how many it removed. Concurrent
// purgers (many instances) split the work. A cart token whose reservation
// was removed is unknown again, as it is to the Redis engine once its ended
// cart expired.
func (s *Store) PurgeEnded(ctx context.Context, now time.Time, limit int) (int, error) {
	cutoff := now.UTC().Add(-s.Retention)
	total := 0
	for _, status := range endedStatuses {
		for total < limit {
			batch := min(limit-total, purgeBatch)
			// Each batch asks the pod's throttle (tandem.WithThrottle) first.
			if err := tandem.WaitThrottle(ctx); err != nil {
				return total, translate(tagPurge, err)
			}
			var found, removed int
			err := s.withTx(ctx, tagPurge, func(tx *sql.Tx) (err error) {
				found, removed, err = purgeBatchOf(ctx, tx, status, cutoff, batch)
				return err
			})
			if err != nil {
				return total, err
			}
			total += removed
			if found < batch || removed == 0 {
				break // none left, or a batch of kept (inconsistent) ones
			}
		}
	}
	return total, nil
}

// PurgeClaims removes at most limit claim records (the ledger's record of
// a deducted cart) older than Retention before now, in batches of their own
// statements, and returns how many it removed. A record is kept while its
// reservation is (PurgeEnded removes a claimed one after the same
// retention) or its cart is dirty. Past that horizon every store has
// forgotten the cart (the Redis engine's ended carts expire after their
// retention too), and so may the ledger: a later reserve of the token is a
// new cart, on every store alike.
func (s *Store) PurgeClaims(ctx context.Context, now time.Time, limit int) (int, error) {
	cutoff := now.UTC().Add(-s.Retention)
	total := 0
	for total < limit {
		batch := min(limit-total, purgeBatch)
		if err := tandem.WaitThrottle(ctx); err != nil {
			return total, translate(tagPurge, err)
		}
		var n int64
		err := s.withConn(ctx, tagPurge, func(conn *sql.Conn) error {
			res, err := conn.ExecContext(ctx, purgeClaimsSQL, cutoff, batch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, err
		}
		total += int(n)
		if n < int64(batch) {
			break
		}
	}
	return total, nil
}

// purgeBatchOf removes in tx at most limit reservations of status that
// ended before cutoff, and says how many it found and how many it removed.
func purgeBatchOf(ctx context.Context, tx *sql.Tx, status tandem.Status, cutoff time.Time, limit int) (found, removed int, err error) {
	rows, err := tx.QueryContext(ctx, purgeDueSQL, string(status), cutoff, cutoff, limit)
	if err != nil {
		return 0, 0, fmt.Errorf("select ended reservations: %w", err)
	}
	var conds []string
	var args []any
	for rows.Next() {
		var shop int64
		var token string
		if err := rows.Scan(&shop, &token); err != nil {
			rows.Close()
			return 0, 0, fmt.Errorf("select ended reservations: %w", err)
		}
		conds = append(conds, cartCondSQL)
		args = append(args, shop, token)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("select ended reservations: %w", err)
	}
	if len(conds) == 0 {
		return 0, 0, nil
	}
	where := strings.Join(conds, " OR ")
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(purgeLinesSQL, where), args...); err != nil {
		return 0, 0, fmt.Errorf("remove ended lines: %w", err)
	}
	res, err := tx.ExecContext(ctx, fmt.Sprintf(purgeHeadersSQL, where), args...)
	if err != nil {
		return 0, 0, fmt.Errorf("remove ended reservations: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, 0, fmt.Errorf("remove ended reservations: %w", err)
	}
	return len(conds), int(n), nil
}
