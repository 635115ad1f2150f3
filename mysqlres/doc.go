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
//     UPDATE) -> claims record -> ledger rows (ordered by key) -> pool rows;
//   - purge of ended reservations: reservation headers (FOR UPDATE SKIP
//     LOCKED) -> their lines.
//
// Deadlocks (1213) and lock-wait timeouts (1205) are retried a bounded
// number of times with jittered backoff and surface as EUNAVAILABLE when
// they persist. Every statement starts with a sqlcommenter-style caller tag
// (conn_tag) and the time each flow holds a connection is measured per tag.
//
// Every transaction runs at READ COMMITTED, set as a session variable of the
// engine's own connection pool (tx_isolation on MariaDB,
// transaction_isolation on MySQL 8), never by changing the server default.
//
// The fast reserve is built for few round trips, since a hot item's
// throughput is bounded by how long its units stay locked (BENCHMARKS.md):
//
//   - no read of the cart token before the reserve: a known token shows as
//     the header insert's duplicate key (the transaction rolls back and the
//     stored answer is replayed), and a refusal yields to the token's answer;
//     a token the ledger records as claimed (sold through another store,
//     never held here) is refused by the header insert itself, which reads
//     the claim record's primary key as its status (NULL: error 1048);
//   - one round trip for a cart whose every line names one group (the
//     common case): START TRANSACTION, a DELETE of the units found by a
//     derived table of per-line SKIP LOCKED selects, the header insert
//     guarded by ROW_COUNT() of that delete, the lines insert and COMMIT
//     travel as one multi-statement batch (batchTx.once), so units stay
//     locked only for the server's time of that batch; a short line stops
//     the batch before COMMIT and the cart goes on, on the same connection,
//     to the two-trip path;
//   - two round trips otherwise (multi-group lines, or after a short one-trip
//     batch): START TRANSACTION travels with the SKIP LOCKED select, and the
//     delete of the taken units, the header and lines inserts and COMMIT
//     travel as one batch, the header insert guarded the same way;
//     parameters are always interpolated and escaped by the driver from
//     constant texts;
//   - each scan starts at a random id within the pool's id range as the
//     last refill saw it, so concurrent pickers spread over the pool rather
//     than stepping over the same locked rows at its head; a scan short
//     above its start wraps around below it (on the two-trip path) before
//     the cart may fall to the slow path, so the no-false-sold-out rule is
//     unchanged;
//   - the pool is refilled in the background below its low-water mark, in
//     transactions of their own, so reserves do not refill inline.
package mysqlres
