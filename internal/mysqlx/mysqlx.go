// Package mysqlx holds what tandem's two MySQL adapters share: the pod
// engine (mysqlres) and the control database (controldb). It parses DSNs
// with the session settings both rely on, opens their pools, reruns
// transactions after deadlocks (1213) and lock-wait timeouts (1205),
// translates driver errors into the contract's codes at the boundary, and
// applies and checks embedded migrations.
package mysqlx

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tandemhq/tandem"
)

// ParseDSN parses dsn (go-sql-driver format) and sets what the adapters
// rely on: times parsed in UTC, parameters interpolated client side (one
// round trip per statement instead of prepare, execute and close), and
// time parameters truncated to the microsecond, the precision of the
// adapters' DATETIME(6) columns. A time sent with nanoseconds
// ('...:35.519564775') is not a DATETIME(6) literal: MariaDB then bounds
// an index range by the columns before it only, so the expiry reaper's
// "status = 'reserved' AND expires_at <= ?" read every active hold once a
// second instead of the due ones.
func ParseDSN(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	if err := cfg.Apply(mysql.TimeTruncate(time.Microsecond)); err != nil {
		return nil, err
	}
	return cfg, nil
}

// OpenPool returns a pool on cfg of at most maxConns connections, all of
// them kept idle, each renewed after 30 minutes, and each checked for
// liveness before its first use as before every later one
// (checkedConnector). Like sql.Open it does not connect.
func OpenPool(cfg *mysql.Config, maxConns int) (*sql.DB, error) {
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(checkedConnector{c})
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxLifetime(30 * time.Minute)
	return db, nil
}

// MySQL error numbers the adapters act on.
const (
	ErrLockWaitTimeout = 1205
	ErrDeadlock        = 1213
)

// Translate turns an error at an adapter's boundary into a *tandem.Error
// when it has a meaning in the contract (unreachable server, deadline,
// persisting lock contention) and wraps anything else, an internal error,
// as "prefix: err". A *tandem.Error passes through.
func Translate(prefix string, err error) error {
	if err == nil {
		return nil
	}
	var te *tandem.Error
	if errors.As(err, &te) {
		return err
	}
	if unavailable(err) {
		return &tandem.Error{Code: tandem.EUNAVAILABLE, Message: "mysql is unavailable: " + shortReason(err)}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case ErrDeadlock, ErrLockWaitTimeout,
			1040, // too many connections
			1053, // server shutdown in progress
			1203, // user has too many connections
			1317, // query interrupted
			1969, // MariaDB max_statement_time exceeded
			3024: // MySQL max_execution_time exceeded
			return true
		}
	}
	return false
}

func shortReason(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded"
	case errors.Is(err, context.Canceled):
		return "request canceled"
	case Retryable(err):
		return "lock contention persisted"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "no such host " + dns.Name
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "connection timed out"
	}
	// The rest name the driver's own word for it, so that a rare failure
	// can be told apart in a log.
	switch {
	case errors.Is(err, driver.ErrBadConn):
		return "connection failed (bad connection)"
	case errors.Is(err, mysql.ErrInvalidConn):
		return "connection failed (closed during the request)"
	case errors.Is(err, sql.ErrConnDone):
		return "connection failed (connection already closed)"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection failed (closed by the server)"
	}
	return "connection failed"
}
