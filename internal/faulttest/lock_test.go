package faulttest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
)

// blocker is a connection of its own to the pod's database, outside the
// engine, that holds row locks in an open transaction.
type blocker struct {
	db *sql.DB
	tx *sql.Tx
}

func mustBlocker(t *testing.T, p *faultPod) *blocker {
	t.Helper()
	db, err := sql.Open("mysql", p.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return &blocker{db: db, tx: tx}
}

func (b *blocker) mustExec(t *testing.T, query string, args ...any) {
	t.Helper()
	rows, err := b.tx.Query(query, args...)
	if err != nil {
		t.Fatalf("blocker %q: %v", query, err)
	}
	rows.Close()
}

// mustAwaitLockWait waits (at most noHang) until a statement of the engine
// in the pod's database has been running for over 200ms, which for these
// single-row statements means it waits for a row lock. (MariaDB 10.11's
// INNODB_TRX shows such a waiter as RUNNING, not LOCK WAIT, so the process
// list is what tells.) done is the waiting call's answer: it must not come
// first.
func (p *faultPod) mustAwaitLockWait(t *testing.T, done <-chan error) {
	t.Helper()
	db, err := sql.Open("mysql", p.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg, _ := mysql.ParseDSN(p.dsn)
	for end := time.Now().Add(noHang); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		var n int
		err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = ? AND COMMAND = 'Query' AND INFO LIKE '%conn_tag=%' AND TIME_MS > 200`, cfg.DBName).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the call returned (%v) before it waited for a lock", err)
		default:
		}
	}
	t.Fatalf("no statement of the engine waited for a lock in %s within %s", cfg.DBName, noHang)
}

// retries returns the engine's retried transactions, all tags summed.
func retries(t *testing.T, g prometheus.Gatherer) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "tandem_mysql_tx_retries_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestMySQLLockContention forces lock waits, lock-wait timeouts and a real
// deadlock on the MySQL engine from a connection outside it. The engine's
// sessions get innodb_lock_wait_timeout=1 through the DSN (a SESSION
// variable of its own connections, never the server's default). Whatever
// the contention, no unit is held twice or lost, the ledger is deducted
// exactly once, a reserve never answers a false sold-out, and any error is
// unavailable.
func TestMySQLLockContention(t *testing.T) {
	open := func(t *testing.T, lockWait int) (*faultPod, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		p := mustOpenFaultPod(t, tandem.ModeMySQLOnly, podOptions{
			dsnParams: map[string]string{"innodb_lock_wait_timeout": fmt.Sprint(lockWait)}, registerer: reg,
		})
		var v int
		if err := p.mysql.DB().QueryRow("SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&v); err != nil || v != lockWait {
			t.Fatalf("engine session innodb_lock_wait_timeout: got %d (%v), want %d", v, err, lockWait)
		}
		return p, reg
	}
	poolLock := "SELECT id FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = 1 FOR UPDATE"
	ledgerLock := "SELECT on_hand FROM ledger WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = 1 FOR UPDATE"

	t.Run("PoolRowsLockedReserveNeverSoldOut", func(t *testing.T) {
		p, _ := open(t, 1)
		p.mustStock(t, 5, 1)
		b := mustBlocker(t, p)
		b.mustExec(t, poolLock, shop, 1)

		// Every unit is locked by a transaction that will roll back: the
		// reserve may wait or give up (unavailable), never say sold out.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := bounded(t, "reserve with the pool locked", func() (*tandem.Reservation, error) {
			return p.Reserve(ctx, tandem.ReserveRequest{CartToken: "locked", ShopID: shop, Lines: []tandem.LineRequest{line(1, 2)}})
		})
		wantCode(t, "reserve with every unit locked", err, tandem.EUNAVAILABLE)

		// The same contention released while the reserve waits: it gets
		// the units.
		done := make(chan error, 1)
		go func() {
			_, err := p.Reserve(context.Background(), tandem.ReserveRequest{CartToken: "waits", ShopID: shop, Lines: []tandem.LineRequest{line(1, 2)}})
			done <- err
		}()
		p.mustAwaitLockWait(t, done)
		if err := b.tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("reserve after the locks went: %v", err)
			}
		case <-time.After(noHang):
			t.Fatalf("reserve did not return within %s after the locks went", noHang)
		}
		if got := p.counters(t, p.mysql, 1); got.OnHand != 5 || got.Reserved != 2 || got.Available != 3 {
			t.Errorf("mysql: got on_hand %d reserved %d available %d, want 5 2 3", got.OnHand, got.Reserved, got.Available)
		}
		// The reserve cut short left nothing: its token is free.
		if _, err := p.reserve(t, "locked", line(1, 3)); err != nil {
			t.Errorf("reserve the token whose first try gave up: %v", err)
		}
		p.mustAuditClean(t)
	})

	t.Run("LedgerLockedClaimTimesOutThenClaimsOnce", func(t *testing.T) {
		p, reg := open(t, 1)
		p.mustStock(t, 5, 1)
		if _, err := p.reserve(t, "c", line(1, 2)); err != nil {
			t.Fatal(err)
		}
		b := mustBlocker(t, p)
		b.mustExec(t, ledgerLock, shop, 1)
		// Lock-wait timeouts (1s) on every attempt: the engine retries,
		// then answers unavailable, and nothing is written.
		_, err := p.claim(t, "c")
		wantCode(t, "claim with the ledger row locked", err, tandem.EUNAVAILABLE)
		if retries(t, reg) == 0 {
			t.Errorf("got no retried transaction after lock-wait timeouts, want retries")
		}
		if err := b.tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if res, err := p.get(t, "c"); err != nil || res.Status != tandem.StatusReserved {
			t.Fatalf("cart after the failed claim: got %v, %v, want reserved", res, err)
		}
		if _, err := p.claim(t, "c"); err != nil {
			t.Fatalf("claim after the lock went: %v", err)
		}
		if got := p.onHand(t, 1); got != 3 {
			t.Errorf("ledger: got on_hand %d, want 3 (deducted once)", got)
		}
		p.mustAuditClean(t)
	})

	t.Run("DeadlockWithClaim", func(t *testing.T) {
		// A lock wait of 30s: within this test, a retry of the engine's
		// claim can only come from a deadlock, not from a lock-wait timeout.
		p, reg := open(t, 30)
		p.mustStock(t, 5, 1)
		if _, err := p.reserve(t, "dl", line(1, 2)); err != nil {
			t.Fatal(err)
		}
		// The blocker takes the ledger row, then (once the claim, which
		// locks the reservation first, waits for it) the reservation: a
		// cycle. Its 200 scratch rows make it the heavier transaction, so
		// InnoDB picks the engine's claim as the victim.
		b := mustBlocker(t, p)
		if _, err := b.db.Exec("CREATE TABLE scratch (id INT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		b.mustExec(t, ledgerLock, shop, 1)
		var vals []string
		for i := range 200 {
			vals = append(vals, fmt.Sprintf("(%d)", i))
		}
		if _, err := b.tx.Exec("INSERT INTO scratch (id) VALUES " + strings.Join(vals, ",")); err != nil {
			t.Fatal(err)
		}
		before := retries(t, reg)
		done := make(chan error, 1)
		go func() {
			_, err := p.Claim(context.Background(), shop, "dl")
			done <- err
		}()
		p.mustAwaitLockWait(t, done)
		_, berr := b.tx.Exec("SELECT status FROM reservations WHERE shop_id = ? AND cart_token = 'dl' FOR UPDATE", shop)
		var me *mysql.MySQLError
		blockerVictim := errors.As(berr, &me) && me.Number == 1213
		if berr != nil && !blockerVictim {
			t.Fatalf("blocker's second lock: %v", berr)
		}
		_ = b.tx.Rollback()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("claim through a deadlock: %v", err)
			}
		case <-time.After(noHang):
			t.Fatalf("claim did not return within %s", noHang)
		}
		engineVictim := retries(t, reg) > before
		t.Logf("deadlock victim: blocker %v, engine %v", blockerVictim, engineVictim)
		if got := p.onHand(t, 1); got != 3 {
			t.Errorf("ledger: got on_hand %d, want 3 (deducted once)", got)
		}
		res, err := p.claim(t, "dl")
		if err != nil || !res.Replayed {
			t.Errorf("repeated claim: got %v, %v, want a replay", res, err)
		}
		p.mustAuditClean(t)
	})
}
