// Package mysqlres is the MySQL unit-row reservation engine and the pod's
// inventory ledger.
//
// Every sellable unit of a position (shop, item, group) is either a row of
// the bounded unit pool (at most PoolCap rows per position), counted in the
// ledger's unpooled column, or held by an active reservation. A reserve
// takes unit rows with SELECT ... FOR UPDATE SKIP LOCKED, so concurrent
// checkouts of one hot item lock different rows instead of queueing on one
// counter; a claim is one ACID transaction with the ledger. Conservation,
// per position: on_hand = unpooled + pool rows + reserved units.
//
// Lock order. Every path takes locks in one of these orders, so there is no
// cycle:
//
//   - fast reserve: pool rows (SKIP LOCKED, never waits) -> reservation
//     header and lines (insert);
//   - slow reserve, replenisher, SetOnHand: ledger rows (ordered by key) ->
//     pool rows -> reservation header and lines (insert);
//   - claim, release, expire, Ledger.DeductCart: reservation header (FOR
//     UPDATE) -> claims record -> ledger rows (ordered by key) -> pool rows.
//
// Deadlocks (1213) and lock-wait timeouts (1205) are retried a bounded
// number of times with jittered backoff and surface as EUNAVAILABLE when
// they persist. Every statement starts with a sqlcommenter-style caller tag
// (conn_tag) and the time each flow holds a connection is measured per tag.
//
// Every transaction runs at READ COMMITTED, set as a session variable of the
// engine's own connection pool (tx_isolation on MariaDB,
// transaction_isolation on MySQL 8), never by changing the server default.
package mysqlres
