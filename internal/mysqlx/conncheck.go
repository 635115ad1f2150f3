package mysqlx

import (
	"context"
	"database/sql"
	"database/sql/driver"
)

// checkedConnector hands database/sql connections that check their
// liveness before their first use, as the driver does (its ResetSession,
// checkConnLiveness) before every later one. database/sql asks for that
// check only of a connection that went back to the pool, never of one its
// opener dialed for a waiter that left before it was ready (a request
// that timed out): that connection waits in the pool unused and
// unchecked. When the server or the network drops it meanwhile (a cut, a
// restart), the first statement sent on it, BEGIN, goes into a socket
// the peer has closed and the reply is EOF: the driver's "invalid
// connection", which a caller cannot tell from a connection that broke
// after the server received the request (TestSoak in CI, and
// TestPoolChecksUnusedConnections). Checked, such a connection fails with
// driver.ErrBadConn before anything is sent, and database/sql takes
// another connection.
type checkedConnector struct{ driver.Connector }

func (c checkedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if dc, ok := conn.(driverConn); ok {
		return &checkedConn{driverConn: dc, fresh: true}, nil
	}
	return conn, nil
}

// driverConn is what go-sql-driver's connection implements and database/sql
// looks for; checkedConn passes every method through.
type driverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

// checkedConn is a connection that checks its liveness on its first use
// unless database/sql had it checked (ResetSession) first. database/sql
// uses a connection from one goroutine at a time, so fresh needs no lock.
type checkedConn struct {
	driverConn
	fresh bool
}

// check runs the driver's liveness check once, on the first use of a
// connection database/sql never reset.
func (c *checkedConn) check(ctx context.Context) error {
	if !c.fresh {
		return nil
	}
	c.fresh = false
	if err := c.driverConn.ResetSession(ctx); err != nil {
		return driver.ErrBadConn
	}
	return nil
}

func (c *checkedConn) ResetSession(ctx context.Context) error {
	c.fresh = false
	return c.driverConn.ResetSession(ctx)
}

func (c *checkedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	return c.driverConn.BeginTx(ctx, opts)
}

func (c *checkedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	return c.driverConn.ExecContext(ctx, query, args)
}

func (c *checkedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	return c.driverConn.QueryContext(ctx, query, args)
}

func (c *checkedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	return c.driverConn.PrepareContext(ctx, query)
}

func (c *checkedConn) Ping(ctx context.Context) error {
	if err := c.check(ctx); err != nil {
		return err
	}
	return c.driverConn.Ping(ctx)
}

// Conn returns a connection of db, checked for liveness when it was never
// used: a sql.Conn's first statement is not a call database/sql reruns on
// another connection, as it does BeginTx on a dead one. A dead connection
// is discarded and another taken, at most once for each connection db may
// hold, so that the last try dials.
func Conn(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	for try := 0; ; try++ {
		conn, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		err = conn.Raw(func(dc any) error {
			if c, ok := dc.(*checkedConn); ok {
				return c.check(ctx)
			}
			return nil
		})
		if err == nil {
			return conn, nil
		}
		conn.Close() // Raw discarded it already
		if try >= db.Stats().MaxOpenConnections {
			return nil, err
		}
	}
}
