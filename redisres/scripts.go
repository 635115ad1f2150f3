package redisres

import "github.com/redis/go-redis/v9"

// The Lua scripts below are the only writers of a shop's carts, counters and
// expiry set. Each runs atomically on the Redis that owns the shop's hash
// slot, receives every key it touches in KEYS, and takes the time from its
// caller (ARGV) so that every instance and every test clock agree on expiry.
//
// Numbers travel as decimal strings; Lua's doubles hold every quantity
// (<= 10^7) and millisecond timestamp exactly.
//
// A cart hash holds: status, fp (request fingerprint, or "shape:<items>" for
// a hold written by Rebuild), expires_at_ms and lines ("item:qty:group,...",
// request order). A counter hash holds: available, held, on_hand, and the
// two fields that keep a recount from the ledger exact (see recountSrc):
// claiming, the units of its carts between a claim's ledger step and its
// Redis step, and seq, moved by every script that changes on_hand other
// than through a recount.

// reserveSrc holds every line of a cart or nothing, and is idempotent per
// cart token inside the script: go-redis may send the same EVALSHA twice
// (a retry after a read timeout), and the second run must find the cart and
// answer as a replay instead of holding twice.
//
// KEYS[1] cart, KEYS[2] shop expiry zset, KEYS[3..] the counter of every
// group of every line, in request order.
// ARGV[1] now_ms, ARGV[2] expires_at_ms, ARGV[3] fingerprint, ARGV[4] shape,
// ARGV[5] cart token, ARGV[6] line count, then per line: item, quantity,
// group count, group ids (in preference order).
//
// Answers {"ok", expires_at_ms, lines}, {"replay", expires_at_ms, lines},
// {"conflict", status} or {"insufficient", item, quantity, available}.
const reserveSrc = `
local now = tonumber(ARGV[1])
local cart = redis.call('HMGET', KEYS[1], 'status', 'fp', 'expires_at_ms', 'lines')
if cart[1] then
  local status = cart[1]
  if status == 'reserved' and tonumber(cart[3]) <= now then
    status = 'expired'
  end
  if status == 'reserved' and (cart[2] == ARGV[3] or cart[2] == 'shape:' .. ARGV[4]) then
    return {'replay', cart[3], cart[4]}
  end
  return {'conflict', status}
end

local n = tonumber(ARGV[6])
local a = 7
local k = 3
local picks = {}
for i = 1, n do
  local item = ARGV[a]
  local qty = tonumber(ARGV[a + 1])
  local ng = tonumber(ARGV[a + 2])
  local pick = nil
  local total = 0
  for g = 1, ng do
    local avail = tonumber(redis.call('HGET', KEYS[k + g - 1], 'available') or '0')
    if avail >= qty then
      pick = g
      break
    end
    if avail > 0 then
      total = total + avail
    end
  end
  if pick == nil then
    return {'insufficient', item, ARGV[a + 1], tostring(total)}
  end
  picks[i] = {KEYS[k + pick - 1], qty, item, ARGV[a + 2 + pick]}
  a = a + 3 + ng
  k = k + ng
end

local lines = {}
for i = 1, n do
  local p = picks[i]
  redis.call('HINCRBY', p[1], 'available', -p[2])
  redis.call('HINCRBY', p[1], 'held', p[2])
  lines[i] = p[3] .. ':' .. p[2] .. ':' .. p[4]
end
local encoded = table.concat(lines, ',')
redis.call('HSET', KEYS[1], 'status', 'reserved', 'fp', ARGV[3], 'expires_at_ms', ARGV[2], 'lines', encoded)
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[5])
return {'ok', ARGV[2], encoded}
`

// releaseSrc returns an active cart's units to its counters at once.
//
// KEYS[1] cart, KEYS[2] shop expiry zset, KEYS[3..] the counter of every
// line, in the cart's line order.
// ARGV[1] cart token, ARGV[2] now_ms, ARGV[3] the lines the caller read
// (the keys were built from them), ARGV[4] retention_ms.
//
// Answers {"notfound"}, {"stale"} (the cart changed since the caller read
// it; read again), or {outcome, expires_at_ms, lines} with outcome one of
// released, replay (released before), claimed, gone.
const releaseSrc = unholdLua + `
local cart = redis.call('HMGET', KEYS[1], 'status', 'expires_at_ms', 'lines')
if not cart[1] then
  return {'notfound'}
end
if cart[3] ~= ARGV[3] then
  return {'stale'}
end
local status = cart[1]
if status == 'claimed' or status == 'claiming' then
  return {'claimed', cart[2], cart[3]}
elseif status == 'released' then
  return {'replay', cart[2], cart[3]}
elseif status ~= 'reserved' or tonumber(cart[2]) <= tonumber(ARGV[2]) then
  return {'gone', cart[2], cart[3]}
end
unhold(cart[3])
redis.call('HSET', KEYS[1], 'status', 'released')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {'released', cart[2], cart[3]}
`

// claimSrc is step two of a claim, run after the ledger deducted the cart:
// it marks the cart claimed and removes its hold, so the sold units leave
// both held and the on_hand copy (available is unchanged).
//
// When the hold was returned to stock in between (a reaper expired it, or a
// concurrent release freed it, after the caller checked it was active), the
// ledger has already deducted the sale, so the sold units are taken back
// from available instead; available may then go below zero, which refuses
// reserves (undersell, never oversell) and is reported by CheckInvariants
// until a stock count fixes it. The answer's third field says so.
//
// KEYS[1] cart, KEYS[2] shop expiry zset, KEYS[3..] the counter of every
// line. ARGV[1] cart token, ARGV[2] lines the caller read, ARGV[3]
// retention_ms.
//
// Answers {"notfound"}, {"stale"}, {"replay", expires_at_ms, lines} or
// {"claimed", expires_at_ms, previous status}.
const claimSrc = unclaimingLua + `
local cart = redis.call('HMGET', KEYS[1], 'status', 'expires_at_ms', 'lines')
if not cart[1] then
  return {'notfound'}
end
if cart[3] ~= ARGV[2] then
  return {'stale'}
end
local status = cart[1]
if status == 'claimed' then
  return {'replay', cart[2], cart[3]}
end
local field = 'held'
if status ~= 'reserved' and status ~= 'claiming' then
  field = 'available'
end
local k = 3
for item, qty, group in string.gmatch(cart[3], '(%d+):(%d+):(%d+)') do
  redis.call('HINCRBY', KEYS[k], field, -qty)
  redis.call('HINCRBY', KEYS[k], 'on_hand', -qty)
  if status == 'claiming' then
    unclaiming(KEYS[k], qty)
  end
  redis.call('HINCRBY', KEYS[k], 'seq', 1)
  k = k + 1
end
redis.call('HSET', KEYS[1], 'status', 'claimed')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'claimed', cart[2], status}
`

// expireSrc returns one due hold to stock and marks its cart expired; the
// status check makes every hold expire once whatever number of reapers race
// for it.
//
// KEYS[1] cart, KEYS[2] shop expiry zset, KEYS[3..] the counter of every
// line. ARGV[1] cart token, ARGV[2] now_ms, ARGV[3] lines the caller read,
// ARGV[4] retention_ms.
//
// Answers 1 (expired by this call), 0 (not due, or no longer active), -1
// (stale: the cart changed since the caller read it).
const expireSrc = unholdLua + `
local cart = redis.call('HMGET', KEYS[1], 'status', 'expires_at_ms', 'lines')
if cart[1] == 'claiming' then
  if tonumber(cart[2]) > tonumber(ARGV[2]) then
    return 0
  end
  return -2
end
if cart[1] ~= 'reserved' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 0
end
if cart[3] ~= ARGV[3] then
  return -1
end
if tonumber(cart[2]) > tonumber(ARGV[2]) then
  return 0
end
unhold(cart[3])
redis.call('HSET', KEYS[1], 'status', 'expired')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
`

// setOnHandSrc makes a counter follow a new ledger on_hand: available =
// on_hand - held, with held read inside the script so that a reserve that
// ran since the caller's check is not lost.
//
// It refuses, changing nothing, an on_hand below what is held.
//
// KEYS[1] counter, KEYS[2] shop positions set. ARGV[1] on_hand, ARGV[2]
// position member ("item:group").
//
// Answers {held, available, previous on_hand} or {'conflict', held}.
const setOnHandSrc = `
local cur = redis.call('HMGET', KEYS[1], 'held', 'on_hand')
local held = tonumber(cur[1] or '0')
local onHand = tonumber(ARGV[1])
if onHand < held then
  return {'conflict', tostring(held)}
end
redis.call('HSET', KEYS[1], 'on_hand', ARGV[1], 'available', tostring(onHand - held), 'held', tostring(held))
redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('SADD', KEYS[2], ARGV[2])
return {tostring(held), tostring(onHand - held), cur[2] or ''}
`

// recountSrc sets a counter from the ledger's on_hand, read by the caller
// after it read the counter's seq: available = on_hand - held. It refuses,
// changing nothing, while a claim of the position is between its ledger
// step and its Redis step (claiming > 0: the ledger already lacks units
// that Redis still holds and will take off on_hand when the claim lands),
// and when on_hand moved since the caller's read (seq changed: the ledger
// value read may predate that change). Without those checks a recount
// inside a legacy claim's window took the sold units off twice (available
// -1 at rest, TestRecount).
//
// KEYS[1] counter, KEYS[2] shop positions set. ARGV[1] on_hand, ARGV[2]
// position member, ARGV[3] the seq the caller read, ARGV[4] "claiming" to
// set the counter even while a claim is between its steps.
//
// Answers {held, available, previous on_hand}, {'busy', why} or
// {'missing'}.
const recountSrc = `
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'missing'}
end
local cur = redis.call('HMGET', KEYS[1], 'held', 'on_hand', 'claiming', 'seq')
if ARGV[4] ~= 'claiming' and tonumber(cur[3] or '0') > 0 then
  return {'busy', 'claiming'}
end
if (cur[4] or '0') ~= ARGV[3] then
  return {'busy', 'changed'}
end
local held = tonumber(cur[1] or '0')
local onHand = tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'on_hand', ARGV[1], 'available', tostring(onHand - held))
redis.call('SADD', KEYS[2], ARGV[2])
return {tostring(held), tostring(onHand - held), cur[2] or ''}
`

// repairSrc sets a counter's available again from its own on_hand and
// held, not the ledger's: a counter set by hand (drift) is repaired in one
// step that commutes with every other script (each keeps available + held
// = on_hand), so it is safe under traffic, a legacy claim's window
// included.
//
// KEYS[1] counter. Answers {available, held, on_hand}, or {} when the
// counter is missing (lost data: resync's, not repair's).
const repairSrc = `
local cur = redis.call('HMGET', KEYS[1], 'on_hand', 'held')
if not cur[1] then
  return {}
end
local held = tonumber(cur[2] or '0')
local available = tonumber(cur[1]) - held
redis.call('HSET', KEYS[1], 'available', tostring(available))
return {tostring(available), tostring(held), cur[1]}
`

// unclaimingLua defines unclaiming(counter, qty): a claim that lands or is
// undone takes its units off the counter's claiming field, never below
// zero: a claim begun by an instance of an earlier version, which did not
// add them, must not leave a negative field that hides the next claim from
// a recount.
const unclaimingLua = `
local function unclaiming(counter, qty)
  local c = tonumber(redis.call('HGET', counter, 'claiming') or '0')
  if c > 0 then
    redis.call('HINCRBY', counter, 'claiming', -math.min(c, tonumber(qty)))
  end
end
`

// unholdLua defines unhold(lines), shared by the scripts that end a hold:
// each line's units go from held back to available on the position
// counters KEYS[3..], one key per line in the lines' order.
const unholdLua = `
local function unhold(lines)
  local k = 3
  for item, qty, group in string.gmatch(lines, '(%d+):(%d+):(%d+)') do
    redis.call('HINCRBY', KEYS[k], 'available', qty)
    redis.call('HINCRBY', KEYS[k], 'held', -qty)
    k = k + 1
  end
end
`

// discardSrc forgets a hold the source of truth refused: its units go back
// to the counters and the cart is deleted, as if never reserved.
//
// KEYS[1] cart, KEYS[2] shop expiry zset, KEYS[3..] the lines' counters.
// ARGV[1] token, ARGV[2] the lines the caller read (to detect a change).
//
// Answers {'notfound'}, {'stale'}, {'claimed'} or {'discarded'}.
const discardSrc = unholdLua + `
local cart = redis.call('HMGET', KEYS[1], 'status', 'lines')
if not cart[1] then
  return {'notfound'}
end
if cart[2] ~= ARGV[2] then
  return {'stale'}
end
if cart[1] == 'claimed' or cart[1] == 'claiming' then
  return {'claimed'}
end
if cart[1] == 'reserved' then
  unhold(cart[2])
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[1])
return {'discarded'}
`

// beginClaimSrc is step zero of a claim: it marks an active hold
// "claiming" before the ledger is deducted, so that no reaper can return
// its units to stock while the sale is being recorded (the reaper skips a
// claiming cart; after a grace period it completes or undoes the claim from
// the ledger's claim record). A claiming cart counts as held.
//
// Its units count as claiming on their counters until the claim lands or
// is undone, which keeps a recount from the ledger off those positions.
//
// KEYS[1] cart, KEYS[2] shop expiry zset (unused), KEYS[3..] the counter
// of every line. ARGV[1] now_ms, ARGV[2] the lines the caller read.
//
// Answers {'ok'} (claiming now or already), {'claimed'}, {'gone'},
// {'notfound'} or {'stale'}.
const beginClaimSrc = `
local cart = redis.call('HMGET', KEYS[1], 'status', 'expires_at_ms', 'lines')
if not cart[1] then
  return {'notfound'}
end
if cart[3] ~= ARGV[2] then
  return {'stale'}
end
if cart[1] == 'claiming' then
  return {'ok'}
elseif cart[1] == 'claimed' then
  return {'claimed'}
elseif cart[1] ~= 'reserved' or tonumber(cart[2]) <= tonumber(ARGV[1]) then
  return {'gone'}
end
local k = 3
for item, qty, group in string.gmatch(cart[3], '(%d+):(%d+):(%d+)') do
  redis.call('HINCRBY', KEYS[k], 'claiming', qty)
  redis.call('HINCRBY', KEYS[k], 'seq', 1)
  k = k + 1
end
redis.call('HSET', KEYS[1], 'status', 'claiming')
return {'ok'}
`

// unclaimSrc undoes step zero of a claim whose ledger step never happened:
// the cart is reserved again (and expires as usual).
//
// KEYS[1] cart, KEYS[2] shop expiry zset (unused), KEYS[3..] the counter
// of every line. ARGV[1] the lines the caller read.
//
// Answers 1 when it undid a claiming cart, 0 when the cart is not
// claiming, -1 when it changed since the caller read it.
const unclaimSrc = unclaimingLua + `
local cart = redis.call('HMGET', KEYS[1], 'status', 'lines')
if cart[1] ~= 'claiming' then
  return 0
end
if cart[2] ~= ARGV[1] then
  return -1
end
local k = 3
for item, qty, group in string.gmatch(cart[2], '(%d+):(%d+):(%d+)') do
  unclaiming(KEYS[k], qty)
  redis.call('HINCRBY', KEYS[k], 'seq', 1)
  k = k + 1
end
redis.call('HSET', KEYS[1], 'status', 'reserved')
return 1
`

// scripts are the store's Lua scripts, loaded once by Open.
type scripts struct {
	reserve, release, claim, expire, setOnHand, recount, discard, beginClaim, unclaim, repair *redis.Script
}

func newScripts() scripts {
	return scripts{
		reserve:    redis.NewScript(reserveSrc),
		release:    redis.NewScript(releaseSrc),
		claim:      redis.NewScript(claimSrc),
		expire:     redis.NewScript(expireSrc),
		setOnHand:  redis.NewScript(setOnHandSrc),
		recount:    redis.NewScript(recountSrc),
		discard:    redis.NewScript(discardSrc),
		beginClaim: redis.NewScript(beginClaimSrc),
		unclaim:    redis.NewScript(unclaimSrc),
		repair:     redis.NewScript(repairSrc),
	}
}

func (s scripts) all() []*redis.Script {
	return []*redis.Script{s.reserve, s.release, s.claim, s.expire, s.setOnHand, s.recount, s.discard, s.beginClaim, s.unclaim, s.repair}
}
