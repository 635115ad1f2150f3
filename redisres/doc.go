// Package redisres is the legacy reservation engine: a quantity counter per
// (shop, item, group) in Redis and a hold per cart with its expiry, as the
// checkout path has run it for years, made as sound as two systems allow.
//
// # Keys
//
// Every key of a shop carries the shop as a hash tag, so that a cart, the
// counters it draws from and the shop's expiry set live in one Redis Cluster
// slot and one Lua script can change them atomically:
//
//	<Prefix>{<shop>}:item:<item>:<group>  hash: available, held, on_hand,
//	                                       claiming, seq
//	<Prefix>{<shop>}:cart:<token>         hash: status, fp, expires_at_ms, lines
//	<Prefix>{<shop>}:expiry               zset: active carts by expiry (ms)
//	<Prefix>{<shop>}:positions            set:  "item:group" of every counter
//	<Prefix>shops                         set:  every shop with counters
//
// The untagged shops set is written outside the scripts (it lives in another
// slot); the reaper, ListCounters and the audit use it to find the shops.
//
// On a Redis Cluster every script and every MULTI/EXEC touches one shop's
// keys, hence one slot; reads that span shops are pipelined per master.
// The shops set is the one key outside every shop's slot. It is written
// before the counters it announces, so a shop with counters is listed;
// a failover that loses the newest writes of its master can drop a shop
// from it, which the drift audit reports (that shop's positions read as
// missing) and a resync writes back. A master that cannot answer fails
// the reaper for its own shops only.
// Terminal carts (claimed, released, expired) are kept for Retention so that
// retries get the same answer, then Redis drops them.
//
// # Atomicity
//
// Reserve, release, the claim's Redis step, expiry and the counter update
// of SetOnHand are Lua scripts, loaded once by Open and run with EVALSHA
// (EVAL when the server lost them). Each is all-or-nothing and checks the
// cart's state itself, so a script that go-redis sends twice (it retries a
// command after a read timeout) answers the second time as a replay and
// never holds, releases or expires twice.
//
// # The claim window
//
// A claim writes two systems that cannot commit together: (1) the ledger
// deducts the cart in MySQL (exactly once per cart, by the ledger's claim
// record), then (2) a script marks the cart claimed and removes its hold
// from held and from the on_hand copy. If the process dies between (1) and
// (2), Redis keeps a hold for units already sold. A claim retried while the
// hold is active completes step (2) (the ledger answers "already deducted"
// and changes nothing); after its expiry a retry answers gone. If
// nobody retries and the hold expires instead, the reaper returns sold
// units to available: Redis over-counts by the cart's quantities until a
// stock count (SetOnHand) or a resync, and the drift audit, comparing Redis
// with the ledger, flags the position. When a reaper or a release frees the
// hold between the claim's check and step (2), step (2) takes the sold
// units back from available (see claimSrc) and logs it: the sale stands,
// and a release that raced the claim may have answered "released" for a
// cart that ends claimed.
//
// A recount from the ledger (the sweep's, after drift) must not land in
// that window: the ledger already lacks the sold units that Redis still
// holds and takes off on_hand when step (2) lands, so they would go twice.
// Step zero marks the cart claiming and adds its units to each counter's
// claiming field until step (2) or an undo; every script that moves
// on_hand other than a recount bumps the counter's seq. Recount refuses
// while claiming > 0 or when seq moved since it read the counter before
// the ledger.
//
// SetOnHand has the same shape the other way round: one script checks held
// and sets on_hand and available = on_hand - held, then the ledger is
// written. If the ledger write fails, or the script's answer is lost (a
// read timeout: it may have run), Redis is put back to the ledger's count,
// as a recount that reads again when on_hand moved meanwhile; left at the
// new one, Redis would sell units the ledger never had. Only
// when that fails too does Redis keep a count the ledger does not have
// (counted in two_system_window_total, logged) until the next stock count
// or a resync; the drift audit flags the position.
//
// A counter missing in Redis counts as zero available: a lost key undersells
// and never oversells.
package redisres
