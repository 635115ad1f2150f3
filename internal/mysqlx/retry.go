package mysqlx

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MaxAttempts bounds the tries of a transaction that hits deadlocks or
// lock-wait timeouts.
const MaxAttempts = 5

// ErrRetry asks Retry to run the transaction again: a race it lost (a
// concurrent insert of the same row) that a new attempt resolves.
var ErrRetry = errors.New("mysqlx: lost a race, retry the transaction")

// Retryable reports whether err is a deadlock, a lock-wait timeout or
// ErrRetry, after which the whole transaction may be run again.
func Retryable(err error) bool {
	if errors.Is(err, ErrRetry) {
		return true
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == ErrDeadlock || me.Number == ErrLockWaitTimeout)
}

// Retry runs attempt until it returns nil or an error that is not
// Retryable, at most MaxAttempts times, and returns its last error. So
// attempt must not keep state across calls except what it returns. Between
// attempts it waits a full-jitter exponential backoff, so that contending
// transactions spread out instead of colliding again, and returns ctx's
// error when ctx ends first. onRetry, when set, is told of each retry (the
// attempt that failed, from 1, and its error) before the wait.
func Retry(ctx context.Context, attempt func() error, onRetry func(n int, err error)) error {
	return retry(ctx, attempt, onRetry, false)
}

// RetryIdempotent is Retry for an attempt that may run twice whatever the
// first one did (its effects are keyed, as a cart's are by its token): it
// also reruns it once, at once, when its connection broke under it (reset
// or closed mid-request). database/sql reruns only what never reached the
// server (driver.ErrBadConn before a write); a connection that dies after
// (the server, a proxy or the network dropped it) leaves the outcome
// unknown, which a keyed attempt settles by running again on a fresh
// connection. A second break is returned: the server is likely gone.
func RetryIdempotent(ctx context.Context, attempt func() error, onRetry func(n int, err error)) error {
	return retry(ctx, attempt, onRetry, true)
}

func retry(ctx context.Context, attempt func() error, onRetry func(n int, err error), idempotent bool) error {
	lost := false
	for n := 1; ; n++ {
		err := attempt()
		if err != nil && idempotent && !lost && ConnLost(err) && ctx.Err() == nil && n < MaxAttempts {
			lost = true
			if onRetry != nil {
				onRetry(n, err)
			}
			continue
		}
		if err == nil || !Retryable(err) || n == MaxAttempts {
			return err
		}
		if onRetry != nil {
			onRetry(n, err)
		}
		backoff := time.Duration(rand.Int64N(int64(5*time.Millisecond) << n))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
}

// ConnLost reports whether err is a connection that broke under a request
// (not a refused or timed-out one, and not the caller's context ending).
func ConnLost(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Tx runs fn in a transaction of db and commits it; fn's error (or a
// failed commit) rolls it back.
func Tx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
