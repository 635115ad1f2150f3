package bench

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/tandemhq/tandem"
)

// naive is the single-row baseline: one counter row per position, reserve
// = UPDATE ... WHERE available >= n plus the reservation insert in one
// transaction, at the server's default isolation. Every buyer of a hot item
// queues on that one row lock, held across the transaction's round trips.
type naive struct{ db *sql.DB }

const (
	naiveLedgerDDL = `CREATE TABLE IF NOT EXISTS naive_ledger (
  shop_id BIGINT NOT NULL, inventory_item_id BIGINT NOT NULL, inventory_group_id BIGINT NOT NULL,
  available BIGINT NOT NULL, PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id)) ENGINE=InnoDB`
	naiveReservationsDDL = `CREATE TABLE IF NOT EXISTS naive_reservations (
  shop_id BIGINT NOT NULL, cart_token VARCHAR(128) NOT NULL, inventory_item_id BIGINT NOT NULL,
  inventory_group_id BIGINT NOT NULL, quantity BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (shop_id, cart_token, inventory_item_id)) ENGINE=InnoDB`
	naiveStock   = `/* conn_tag='naive' */ REPLACE INTO naive_ledger (shop_id, inventory_item_id, inventory_group_id, available) VALUES (?, ?, ?, ?)`
	naiveTake    = `/* conn_tag='naive' */ UPDATE naive_ledger SET available = available - ? WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? AND available >= ?`
	naiveHold    = `/* conn_tag='naive' */ INSERT INTO naive_reservations (shop_id, cart_token, inventory_item_id, inventory_group_id, quantity, expires_at) VALUES (?, ?, ?, ?, ?, ?)`
	naiveBalance = `/* conn_tag='naive' */ SELECT l.shop_id, l.inventory_item_id, l.available, COALESCE(SUM(r.quantity), 0)
  FROM naive_ledger l LEFT JOIN naive_reservations r ON r.shop_id = l.shop_id AND r.inventory_item_id = l.inventory_item_id AND r.inventory_group_id = l.inventory_group_id
  GROUP BY l.shop_id, l.inventory_item_id, l.available`
)

func openNaive(ctx context.Context, dsn string, conns int) (*naive, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	for _, ddl := range []string{naiveLedgerDDL, naiveReservationsDDL} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			db.Close()
			return nil, err
		}
	}
	return &naive{db: db}, nil
}

func (n *naive) Close() error { return n.db.Close() }

func (n *naive) stock(ctx context.Context, k tandem.Key, v int64) error {
	_, err := n.db.ExecContext(ctx, naiveStock, k.ShopID, k.ItemID, k.GroupID, v)
	return err
}

func (n *naive) reserve(ctx context.Context, req tandem.ReserveRequest) error {
	tx, err := n.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	exp := time.Now().Add(10 * time.Minute)
	for _, l := range req.Lines {
		r, err := tx.ExecContext(ctx, naiveTake, l.Quantity, req.ShopID, l.ItemID, l.GroupIDs[0], l.Quantity)
		if err != nil {
			return err
		}
		if nrows, _ := r.RowsAffected(); nrows == 0 {
			return tandem.Errorf(tandem.EINSUFFICIENT, "item %d sold out", l.ItemID)
		}
		if _, err := tx.ExecContext(ctx, naiveHold, req.ShopID, req.CartToken, l.ItemID, l.GroupIDs[0], l.Quantity, exp); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// check verifies available + held = the stock set at the start.
func (n *naive) check(ctx context.Context) error {
	rows, err := n.db.QueryContext(ctx, naiveBalance)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var shop, item, avail, held int64
		if err := rows.Scan(&shop, &item, &avail, &held); err != nil {
			return err
		}
		if avail+held != benchStock || avail < 0 {
			return fmt.Errorf("INVARIANT BROKEN in naive baseline: shop %d item %d available %d + held %d != %d", shop, item, avail, held, benchStock)
		}
	}
	return rows.Err()
}
