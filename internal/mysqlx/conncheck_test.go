package mysqlx_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/mysqlx"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestPoolChecksUnusedConnections: the pool's opener dials a connection for
// a caller waiting for one; when the caller gave up first, the connection
// goes to the pool unused, and database/sql hands it out later without
// having the driver check it. The server then drops the pool's connections
// (KILL closes them with a FIN, as a restart does, or the fault proxy when
// it tears a connection down). A keyed transaction must succeed at its
// first attempt: on the unchecked connections BEGIN went out, the answer
// was EOF ("invalid connection"), and the rerun took the next one (TestSoak
// in CI: a claim answered unavailable 10 s after the MySQL cut).
func TestPoolChecksUnusedConnections(t *testing.T) {
	testenv.RequireIntegration(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		run  func(db *sql.DB) error
	}{
		{"Tx", func(db *sql.DB) error { // as mysqlres withTx
			return mysqlx.Tx(ctx, db, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "SELECT 1")
				return err
			})
		}},
		{"Conn", func(db *sql.DB) error { // as mysqlres withBatchTx and withConn
			conn, err := mysqlx.Conn(ctx, db)
			if err != nil {
				return err
			}
			defer conn.Close()
			_, err = conn.ExecContext(ctx, "SELECT 1")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, dbName := poolWithUnusedConns(t, 2)
			killConnections(t, dbName)
			attempts := 0
			err := mysqlx.RetryIdempotent(ctx, func() error {
				attempts++
				return tc.run(db)
			}, nil)
			if err != nil || attempts != 1 {
				t.Fatalf("after the server dropped the pool's connections: got %v after %d attempts, want success at the first", err, attempts)
			}
		})
	}
}

// poolWithUnusedConns returns a pool of unused+1 connections, all idle:
// unused of them dialed by the pool's opener for callers that gave up
// before they were ready, never used; the last one used once. It returns
// the pool's database too.
func poolWithUnusedConns(t *testing.T, unused int) (*sql.DB, string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := mysqlx.ParseDSN(testenv.MustCreateDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	// The opener's dials wait at the gate while it is shut.
	gate := make(chan struct{})
	var shut atomic.Bool
	var open sync.Once
	defer open.Do(func() { close(gate) })
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if shut.Load() {
			<-gate
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	db, err := mysqlx.OpenPool(cfg, unused+1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })

	held := make([]*sql.Conn, unused+1)
	for i := range held {
		if held[i], err = db.Conn(ctx); err != nil {
			t.Fatal(err)
		}
		if err := held[i].PingContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Callers wait for a connection; when connections break, the opener
	// dials one for each, held at the gate until the callers gave up.
	shut.Store(true)
	waitCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	var wg sync.WaitGroup
	for range unused {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, err := db.Conn(waitCtx); err == nil {
				c.Close()
			}
		}()
	}
	waitUntil(t, "callers waiting", func() bool { return db.Stats().WaitCount == int64(unused) })
	for _, c := range held[:unused] {
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
		c.Close()
	}
	giveUp()
	wg.Wait()
	open.Do(func() { close(gate) })
	waitUntil(t, "the opener's connections idle", func() bool { return db.Stats().Idle == unused })
	held[unused].Close()
	return db, cfg.DBName
}

// killConnections has the server drop every connection to database name.
func killConnections(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	admin, err := sql.Open("mysql", testenv.RootDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ids := func() []int64 {
		rows, err := admin.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE db = ?", name)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	for _, id := range ids() {
		if _, err := admin.ExecContext(ctx, "KILL CONNECTION ?", id); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the connections gone", func() bool { return len(ids()) == 0 })
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
