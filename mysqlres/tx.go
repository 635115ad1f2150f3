package mysqlres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/mysqlx"
)

// Caller tags: every statement starts with /* conn_tag='TAG' */ and every
// flow's connection hold time is measured under its tag.
const (
	tagReserve     = "reserve"
	tagReserveSlow = "reserve_slow"
	tagClaim       = "claim"
	tagRelease     = "release"
	tagExpire      = "expire"
	tagReplenish   = "replenish"
	tagLedger      = "ledger"
	tagAudit       = "audit"
	tagRebuild     = "rebuild"
	tagRepair      = "repair"
	tagConverge    = "converge"
	tagPurge       = "purge"
)

// MySQL error numbers the engine acts on (deadlocks and lock-wait
// timeouts: mysqlx.Retryable).
const (
	errBadNull  = 1048
	errDupEntry = 1062
)

// errRetry asks withTx to run the transaction again: a race it lost (a
// concurrent insert of the same ledger row) that a new attempt resolves.
var errRetry = mysqlx.ErrRetry

// errNotOpen is returned by every operation of a store that is not open.
var errNotOpen = tandem.Errorf(tandem.EUNAVAILABLE, "mysql store is not open")

// withTx runs fn in a transaction on one connection of the READ COMMITTED
// pool and commits it; fn's error (or a failed commit) rolls it back. A
// deadlock or lock-wait timeout reruns fn from the start, and so does, once
// and on a fresh connection, a connection that broke under it
// (mysqlx.RetryIdempotent): every flow of this store is keyed (a cart by
// its token and request, a claim by its record, a count set whole), so a
// rerun after an unknown outcome finds what the first run did. fn must
// not keep state across attempts except what it returns. The time the
// connection is held is observed under tag.
func (s *Store) withTx(ctx context.Context, tag string, fn func(tx *sql.Tx) error) error {
	if s.db == nil {
		return errNotOpen
	}
	err := mysqlx.RetryIdempotent(ctx, func() error { return s.txOnce(ctx, tag, fn) }, func(attempt int, err error) {
		s.metrics.retry(tag)
		s.Logger.Debug("retrying transaction", zap.String("conn_tag", tag), zap.Int("attempt", attempt), zap.Error(err))
	})
	return translate(tag, err)
}

func (s *Store) txOnce(ctx context.Context, tag string, fn func(tx *sql.Tx) error) error {
	if err := s.admit(ctx, tag); err != nil {
		return err
	}
	defer s.leave(tag)
	var acquired time.Time
	err := mysqlx.Tx(ctx, s.db, func(tx *sql.Tx) error {
		acquired = time.Now()
		return fn(tx)
	})
	if !acquired.IsZero() {
		s.metrics.observeHold(tag, time.Since(acquired).Seconds())
	}
	return err
}

// Statements that open and end the batched transactions of withBatchTx;
// %s is the flow's caller tag.
const (
	batchBeginSQL    = "/* conn_tag='%s' */ START TRANSACTION"
	batchCommitSQL   = "/* conn_tag='%s' */ COMMIT"
	batchRollbackSQL = "/* conn_tag='%s' */ ROLLBACK"
)

// batchTx is a transaction whose BEGIN and COMMIT travel in the same
// multi-statement round trip as its first and last statements, instead of
// one round trip each as database/sql's Tx needs. The engine's pool allows
// multi-statement batches; every argument is still interpolated and
// escaped by the driver from constant statement texts, never spliced in.
type batchTx struct {
	conn *sql.Conn
	tag  string
	open bool
	// failed is set when a whole transaction sent by once stopped part way:
	// the work of its statements before the failing one is still in the
	// open transaction, so the next batch on the connection rolls it back
	// first, in the same round trip.
	failed bool
}

// begin returns the statements that start a transaction on the batch's
// connection: BEGIN, after a ROLLBACK of a transaction once left failed.
func (b *batchTx) begin() string {
	q := fmt.Sprintf(batchBeginSQL, b.tag) + "; "
	if b.failed {
		q = fmt.Sprintf(batchRollbackSQL, b.tag) + "; " + q
	}
	b.open, b.failed = true, false
	return q
}

// query opens the transaction with the first query, or runs q inside it.
func (b *batchTx) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if !b.open || b.failed {
		q = b.begin() + q
	}
	return b.conn.QueryContext(ctx, q, args...)
}

// commit runs the statements and the COMMIT in one round trip. The server
// stops a batch at its first failing statement, so COMMIT runs only when
// every statement before it succeeded; otherwise the caller rolls back.
func (b *batchTx) commit(ctx context.Context, stmts string, args ...any) error {
	if !b.open || b.failed {
		return errors.New("mysqlres: commit of a batch transaction that never began")
	}
	if _, err := b.conn.ExecContext(ctx, stmts+"; "+fmt.Sprintf(batchCommitSQL, b.tag), args...); err != nil {
		return err
	}
	b.open = false
	return nil
}

// once runs a whole transaction in one round trip: BEGIN, the statements
// and COMMIT. When a statement fails, the server stops before COMMIT and
// the transaction stays open with the work before it: the next query on
// the batch rolls it back first (in the same round trip), or withBatchTx
// does when fn returns.
func (b *batchTx) once(ctx context.Context, stmts string, args ...any) error {
	if b.open && !b.failed {
		return errors.New("mysqlres: whole batch transaction inside an open one")
	}
	q := b.begin() + stmts + "; " + fmt.Sprintf(batchCommitSQL, b.tag)
	if _, err := b.conn.ExecContext(ctx, q, args...); err != nil {
		b.failed = true
		return err
	}
	b.open = false
	return nil
}

// withBatchTx is withTx for a batchTx: fn opens the transaction with its
// first query and ends it with commit; a transaction fn leaves open is
// rolled back. Retries and hold-time measurement are as in withTx.
func (s *Store) withBatchTx(ctx context.Context, tag string, fn func(b *batchTx) error) error {
	if s.db == nil {
		return errNotOpen
	}
	err := mysqlx.RetryIdempotent(ctx, func() error { return s.batchOnce(ctx, tag, fn) }, func(int, error) { s.metrics.retry(tag) })
	return translate(tag, err)
}

func (s *Store) batchOnce(ctx context.Context, tag string, fn func(b *batchTx) error) error {
	if err := s.admit(ctx, tag); err != nil {
		return err
	}
	defer s.leave(tag)
	conn, err := mysqlx.Conn(ctx, s.db)
	if err != nil {
		return err
	}
	acquired := time.Now()
	b := &batchTx{conn: conn, tag: tag}
	err = fn(b)
	if b.open {
		if err == nil {
			err = errors.New("mysqlres: batch transaction left open")
		}
		// A connection whose transaction cannot be ended must not go back
		// to the pool with its locks: discard it (the server rolls back).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if _, rerr := conn.ExecContext(rctx, fmt.Sprintf(batchRollbackSQL, tag)); rerr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		cancel()
	}
	conn.Close()
	s.metrics.observeHold(tag, time.Since(acquired).Seconds())
	return err
}

// withConn runs fn on one connection outside a transaction (each statement
// commits on its own), observing the hold time under tag.
func (s *Store) withConn(ctx context.Context, tag string, fn func(conn *sql.Conn) error) error {
	if s.db == nil {
		return errNotOpen
	}
	if err := s.admit(ctx, tag); err != nil {
		return translate(tag, err)
	}
	defer s.leave(tag)
	conn, err := mysqlx.Conn(ctx, s.db)
	if err != nil {
		return translate(tag, err)
	}
	acquired := time.Now()
	err = fn(conn)
	conn.Close()
	s.metrics.observeHold(tag, time.Since(acquired).Seconds())
	return translate(tag, err)
}

// admit takes a slot of the store's admission for a buyer flow (tag);
// leave gives it back. Other flows pass straight through both.
func (s *Store) admit(ctx context.Context, tag string) error {
	if s.admission == nil || !admitted(tag) {
		return nil
	}
	waited, err := s.admission.enter(ctx)
	s.metrics.observeAdmission(tag, waited.Seconds())
	if s.Admissions != nil {
		s.Admissions.ObserveAdmission(waited)
	}
	return err
}

func (s *Store) leave(tag string) {
	if s.admission != nil && admitted(tag) {
		s.admission.leave()
	}
}

// isDuplicate reports whether err is a duplicate-key error.
func isDuplicate(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errDupEntry
}

// translate turns an error at the store's boundary into a *tandem.Error
// when it has a meaning in the contract (unreachable server, deadline,
// persisting lock contention) and wraps anything else as internal.
func translate(tag string, err error) error {
	return mysqlx.Translate("mysqlres "+tag, err)
}
