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

// Statements on reservation headers and lines; %s is the caller tag where
// several flows share a statement.
const (
	loadReservationSQL = "/* conn_tag='%s' */ SELECT r.status, r.fingerprint, r.expires_at, l.inventory_item_id, l.quantity, l.inventory_group_id FROM reservations r JOIN reservation_lines l ON l.shop_id = r.shop_id AND l.cart_token = r.cart_token WHERE r.shop_id = ? AND r.cart_token = ? ORDER BY l.line_no"
	lockReservationSQL = loadReservationSQL + " FOR UPDATE"
	setStatusSQL       = "/* conn_tag='%s' */ UPDATE reservations SET status = ?, updated_at = ? WHERE shop_id = ? AND cart_token = ?"
	unholdLinesSQL     = "/* conn_tag='%s' */ UPDATE reservation_lines SET held = 0 WHERE shop_id = ? AND cart_token = ?"
	deleteLinesSQL     = "/* conn_tag='%s' */ DELETE FROM reservation_lines WHERE shop_id = ? AND cart_token = ?"
	insertClaimSQL     = "/* conn_tag='%s' */ INSERT INTO claims (shop_id, cart_token, claimed_at) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE shop_id = shop_id"
	dueReservationsSQL = "/* conn_tag='expire' */ SELECT shop_id, cart_token FROM reservations WHERE status = 'reserved' AND expires_at <= ? ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED"
	dueLinesSQL        = "/* conn_tag='expire' */ SELECT shop_id, inventory_item_id, inventory_group_id, quantity FROM reservation_lines WHERE held = 1 AND (%s)"
	expireHeadersSQL   = "/* conn_tag='expire' */ UPDATE reservations SET status = 'expired', updated_at = ? WHERE status = 'reserved' AND (%s)"
	expireLinesSQL     = "/* conn_tag='expire' */ UPDATE reservation_lines SET held = 0 WHERE %s"
	cartCondSQL        = "(shop_id = ? AND cart_token = ?)"
)

// expireBatch bounds the holds one reaper transaction expires, so that it
// holds its locks and connection briefly.
const expireBatch = 100

// stored is a reservation as its rows hold it.
type stored struct {
	status      tandem.Status
	fingerprint string
	expiresAt   time.Time
	lines       []tandem.Line
}

// active reports whether the hold still counts for its owner at now: a
// reserved hold past its expiry is expired for Get, Claim and Release,
// although its units stay held until ExpireDue returns them.
func (r *stored) active(now time.Time) bool {
	return r.status == tandem.StatusReserved && r.expiresAt.After(now)
}

func (r *stored) reservation(shopID int64, token string, now time.Time) *tandem.Reservation {
	st := r.status
	if st == tandem.StatusReserved && !r.expiresAt.After(now) {
		st = tandem.StatusExpired
	}
	return &tandem.Reservation{CartToken: token, ShopID: shopID, Status: st, ExpiresAt: r.expiresAt, Lines: r.lines}
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// loadReservation reads a cart's reservation, nil when there is none; with
// lock it takes the header's (and lines') row locks.
func loadReservation(ctx context.Context, q querier, tag string, shopID int64, token string, lock bool) (*stored, error) {
	stmt := loadReservationSQL
	if lock {
		stmt = lockReservationSQL
	}
	rows, err := q.QueryContext(ctx, fmt.Sprintf(stmt, tag), shopID, token)
	if err != nil {
		return nil, fmt.Errorf("read reservation: %w", err)
	}
	defer rows.Close()
	var r *stored
	for rows.Next() {
		var st string
		var l tandem.Line
		if r == nil {
			r = &stored{}
		}
		if err := rows.Scan(&st, &r.fingerprint, &r.expiresAt, &l.ItemID, &l.Quantity, &l.GroupID); err != nil {
			return nil, fmt.Errorf("read reservation: %w", err)
		}
		r.status = tandem.Status(st)
		r.lines = append(r.lines, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read reservation: %w", err)
	}
	if r != nil {
		r.expiresAt = r.expiresAt.UTC()
	}
	return r, nil
}

func notFound(token string) error {
	return tandem.Errorf(tandem.ENOTFOUND, "cart %s has no reservation", token)
}

// Get implements tandem.ReservationStore.
func (s *Store) Get(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	if err := tandem.ValidateCartToken(cartToken); err != nil {
		return nil, err
	}
	var r *stored
	err := s.withConn(ctx, tagReserve, func(conn *sql.Conn) (err error) {
		r, err = loadReservation(ctx, conn, tagReserve, shopID, cartToken, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, notFound(cartToken)
	}
	return r.reservation(shopID, cartToken, s.Now()), nil
}

// Claim implements tandem.ReservationStore: in one transaction it locks the
// header, marks it claimed, records the claim and lowers on_hand; when
// another store already deducted the cart through Ledger.DeductCart, the
// units go back to stock instead of being deducted twice.
func (s *Store) Claim(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	if err := tandem.ValidateCartToken(cartToken); err != nil {
		return nil, err
	}
	now := tandem.AsOf(ctx, s.Now).UTC()
	var res *tandem.Reservation
	err := s.withTx(ctx, tagClaim, func(tx *sql.Tx) error {
		r, err := loadReservation(ctx, tx, tagClaim, shopID, cartToken, true)
		if err != nil {
			return err
		}
		if r == nil {
			return notFound(cartToken)
		}
		res = r.reservation(shopID, cartToken, now)
		switch {
		case r.status == tandem.StatusClaimed:
			res.Replayed = true
			return nil
		case r.status == tandem.StatusReleased:
			return tandem.Errorf(tandem.EGONE, "cart %s was released", cartToken)
		case !r.active(now):
			return tandem.Errorf(tandem.EGONE, "cart %s expired", cartToken)
		}
		if err := markSettled(ctx, tx, tagClaim, shopID, cartToken, tandem.StatusClaimed, now); err != nil {
			return err
		}
		deduct, err := recordClaim(ctx, tx, tagClaim, shopID, cartToken, now)
		if err != nil {
			return err
		}
		held := lineQuantities(shopID, r.lines)
		var deducted map[tandem.Key]int64
		if deduct {
			deducted = held
		}
		res.Status = tandem.StatusClaimed
		return s.settle(ctx, tx, tagClaim, held, deducted, now)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Release implements tandem.ReservationStore: the cart's units go back to
// the pool (or to unpooled when the pool is full) at once.
func (s *Store) Release(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error) {
	if err := tandem.ValidateCartToken(cartToken); err != nil {
		return nil, err
	}
	now := tandem.AsOf(ctx, s.Now).UTC()
	var res *tandem.Reservation
	err := s.withTx(ctx, tagRelease, func(tx *sql.Tx) error {
		r, err := loadReservation(ctx, tx, tagRelease, shopID, cartToken, true)
		if err != nil {
			return err
		}
		if r == nil {
			return notFound(cartToken)
		}
		res = r.reservation(shopID, cartToken, now)
		switch {
		case r.status == tandem.StatusReleased:
			res.Replayed = true
			return nil
		case r.status == tandem.StatusClaimed:
			return tandem.Errorf(tandem.EALREADYCLAIMED, "cart %s is already claimed", cartToken)
		case !r.active(now):
			return tandem.Errorf(tandem.EGONE, "cart %s expired", cartToken)
		}
		if err := markSettled(ctx, tx, tagRelease, shopID, cartToken, tandem.StatusReleased, now); err != nil {
			return err
		}
		res.Status = tandem.StatusReleased
		return s.settle(ctx, tx, tagRelease, lineQuantities(shopID, r.lines), nil, now)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// markSettled moves a reserved cart to a terminal status; its lines stop
// counting as held.
func markSettled(ctx context.Context, tx *sql.Tx, tag string, shopID int64, token string, st tandem.Status, now time.Time) error {
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(setStatusSQL, tag), string(st), now, shopID, token); err != nil {
		return fmt.Errorf("set status %s: %w", st, err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(unholdLinesSQL, tag), shopID, token); err != nil {
		return fmt.Errorf("release lines: %w", err)
	}
	return nil
}

// relabel makes a settled cart's lines claimed's when its own differ: this
// store held the cart in other groups than the store that sold it (a
// location the convergence had not fixed yet). Its own units are back
// already (settle); what it shows of the sale, to a repeated claim after a
// flip, must be what was sold.
func relabel(ctx context.Context, tx *sql.Tx, tag string, shopID int64, token string, own, claimed []tandem.Line) error {
	if len(claimed) == 0 || slices.Equal(own, claimed) {
		return nil
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(deleteLinesSQL, tag), shopID, token); err != nil {
		return fmt.Errorf("relabel lines: %w", err)
	}
	if err := insertUnheldLines(ctx, tx, shopID, token, claimed); err != nil {
		return fmt.Errorf("relabel: %w", err)
	}
	return nil
}

// recordClaim inserts the claims record and reports whether it is new, that
// is whether the ledger still has to be deducted for this cart.
func recordClaim(ctx context.Context, tx *sql.Tx, tag string, shopID int64, token string, now time.Time) (bool, error) {
	res, err := tx.ExecContext(ctx, fmt.Sprintf(insertClaimSQL, tag), shopID, token, now)
	if err != nil {
		return false, fmt.Errorf("record claim: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("record claim: %w", err)
	}
	return n == 1, nil
}

// ExpireDue implements tandem.ReservationStore. Each transaction locks a
// batch of due headers with SKIP LOCKED, so concurrent reapers split the
// work and never return a hold twice.
func (s *Store) ExpireDue(ctx context.Context, now time.Time, limit int) (int, error) {
	now = now.UTC()
	total := 0
	for total < limit {
		batch := min(limit-total, expireBatch)
		var n int
		err := s.withTx(ctx, tagExpire, func(tx *sql.Tx) (err error) {
			n, err = s.expireBatch(ctx, tx, now, batch)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < batch {
			break
		}
	}
	return total, nil
}

func (s *Store) expireBatch(ctx context.Context, tx *sql.Tx, now time.Time, limit int) (int, error) {
	rows, err := tx.QueryContext(ctx, dueReservationsSQL, now, limit)
	if err != nil {
		return 0, fmt.Errorf("select due holds: %w", err)
	}
	var conds []string
	var args []any
	for rows.Next() {
		var shop int64
		var token string
		if err := rows.Scan(&shop, &token); err != nil {
			rows.Close()
			return 0, fmt.Errorf("select due holds: %w", err)
		}
		conds = append(conds, cartCondSQL)
		args = append(args, shop, token)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("select due holds: %w", err)
	}
	if len(conds) == 0 {
		return 0, nil
	}
	where := strings.Join(conds, " OR ")
	held := map[tandem.Key]int64{}
	lrows, err := tx.QueryContext(ctx, fmt.Sprintf(dueLinesSQL, where), args...)
	if err != nil {
		return 0, fmt.Errorf("read due lines: %w", err)
	}
	for lrows.Next() {
		var k tandem.Key
		var q int64
		if err := lrows.Scan(&k.ShopID, &k.ItemID, &k.GroupID, &q); err != nil {
			lrows.Close()
			return 0, fmt.Errorf("read due lines: %w", err)
		}
		held[k] += q
	}
	lrows.Close()
	if err := lrows.Err(); err != nil {
		return 0, fmt.Errorf("read due lines: %w", err)
	}
	res, err := tx.ExecContext(ctx, fmt.Sprintf(expireHeadersSQL, where), append([]any{now}, args...)...)
	if err != nil {
		return 0, fmt.Errorf("expire holds: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("expire holds: %w", err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(expireLinesSQL, where), args...); err != nil {
		return 0, fmt.Errorf("expire lines: %w", err)
	}
	if err := s.settle(ctx, tx, tagExpire, held, nil, now); err != nil {
		return 0, err
	}
	return int(n), nil
}
