package tandem

import (
	"context"
	"time"
)

// ReservationStore is one reservation engine of a pod: the legacy Redis
// counters (redisres) or the MySQL unit rows (mysqlres). Both implement the
// same semantics, pinned by one conformance suite. Every method may also
// return EUNAVAILABLE when the store (or the ledger it needs) cannot be
// reached in time, and changes nothing visible when it does.
type ReservationStore interface {
	// Name returns StoreRedis or StoreMySQL.
	Name() string

	// Reserve holds every line of the cart or nothing. Each line is taken
	// whole from the first of its groups that can cover it. A retry of an
	// identical request (same token and Fingerprint) while the hold is active
	// returns the stored reservation with Replayed set.
	// Returns EINVALID (a request that breaks ReserveRequest.Validate's
	// rules), EINSUFFICIENT (a line cannot be covered; details name
	// inventory_item_id), ECONFLICT (the token is in use with a different
	// request, or already claimed, released or expired).
	Reserve(ctx context.Context, req ReserveRequest) (*Reservation, error)

	// Claim deducts the ledger's on_hand by every line of the cart, exactly
	// once per (shop, cart token), and removes the hold. A repeated claim
	// returns the claimed reservation with Replayed set and changes nothing.
	// Returns ENOTFOUND (never reserved here), EGONE (expired or released).
	Claim(ctx context.Context, shopID int64, cartToken string) (*Reservation, error)

	// Release returns the cart's units to stock at once. A repeated release
	// returns the released reservation with Replayed set.
	// Returns ENOTFOUND (never reserved here), EALREADYCLAIMED, EGONE (expired).
	Release(ctx context.Context, shopID int64, cartToken string) (*Reservation, error)

	// Get returns the cart's reservation in any state. Returns ENOTFOUND.
	Get(ctx context.Context, shopID int64, cartToken string) (*Reservation, error)

	// SetOnHand sets the ledger's on_hand for key (a stock count or restock)
	// and makes this store's sellable count follow at once.
	// Returns EINVALID (out of 0..MaxOnHand), ECONFLICT (below what this
	// store holds for key; nothing changes).
	SetOnHand(ctx context.Context, key Key, onHand int64) (*Counters, error)

	// Counters returns key's counters as this store sees them (zeros for a
	// key never stocked).
	Counters(ctx context.Context, key Key) (*Counters, error)

	// ExpireDue returns the stock of at most limit active holds whose expiry
	// is at or before now, marking them expired, and says how many it
	// expired. Safe to run from many instances at once: each hold is
	// returned once.
	ExpireDue(ctx context.Context, now time.Time, limit int) (int, error)

	// ListCounters returns the counters of every position this store knows,
	// ordered by key, for the drift audit.
	ListCounters(ctx context.Context) ([]Counters, error)

	// CheckInvariants returns the store's broken internal invariants
	// (mysqlres: on_hand = unpooled + pool rows + reserved units; redisres:
	// counter + holds = on_hand), none when it is consistent.
	CheckInvariants(ctx context.Context) ([]Violation, error)
}

// ShadowStore is a store a pod's router runs on either side: as the source
// of truth that answers the buyer or as the shadow that follows it, and
// swaps between the two at a flip or a kill switch. It is one contract
// because both engines implement every part of it: the router converges a
// shadow to its authority (Discarder, CartEnder, HoldPlacer, ClaimSettler,
// OnHandFollower), audits and recounts it (Recounter), backfills, resyncs
// and rebuilds it (Resyncer, ShopRebuilder, Tombstoner), whichever engine
// it is; nothing falls back when a part is missing. A store that wraps
// another (fault injection, instrumentation) forwards all of it, and says
// so with a `var _ tandem.ShadowStore` check beside it.
//
// Optional, found by type assertion: ShopLister and HoldCounter, which
// only redisres implements: with them the backfill (always Redis into
// MySQL) counts and lists each batch's holds just before writing it;
// without them it lists every hold up front. MySQL, never the backfill's
// source, needs neither.
type ShadowStore interface {
	ReservationStore
	Discarder
	CartEnder
	OnHandFollower
	HoldPlacer
	ClaimSettler
	Recounter
	Resyncer
	ShopRebuilder
	Tombstoner
}

// Discarder is a store that can forget a hold the source of truth refused.
// The router uses it to repair a shadow: releasing the shadow's copy would
// leave a released cart behind, which the SoT never had and which a later
// flip would make visible to the buyer.
type Discarder interface {
	// Discard returns the units of the cart's hold, if it holds them, and
	// forgets the cart as if it had never been reserved. A missing cart is
	// not an error. Returns ECONFLICT for a claimed cart (never forgotten).
	Discard(ctx context.Context, shopID int64, cartToken string) error
}

// CartEnder is a store that can record a cart as another store ended it.
// The router converges a store to a cart its authority released or let
// expire with it: the token must stay known as ended there too, or that
// store, once it answers the buyer (a flip, a kill switch), would reserve
// the token again where the authority answers conflict.
type CartEnder interface {
	// End makes the store show the cart ended with ended.Status
	// (StatusReleased or StatusExpired): a hold it has returns its units
	// to stock and takes that status, and a cart it never saw is recorded
	// with that status and ended's lines without touching stock (a
	// tombstone: a later reserve of the token is a conflict). A cart it
	// already knows as released or expired keeps its status. Either way
	// the cart shows ended's lines from then on: the store may have held
	// it in other groups, and its replays must answer what the buyer was
	// answered. Returns ECONFLICT for a claimed cart (or one being
	// claimed), EINVALID for another status or a cart without lines.
	End(ctx context.Context, ended Reservation) error
}

// Tombstoner is a store that can learn, after it was rebuilt from another
// store's state, of the carts that store had ended and this one never
// knew. The rebuild wrote counts and holds only: a cart claimed, released
// or expired meanwhile is in no count, and without its tombstone this
// store, once it answers the buyer, would answer a repeated claim "never
// reserved" and reserve the token again.
type Tombstoner interface {
	// Tombstone records each cart of ended (StatusClaimed, StatusReleased
	// or StatusExpired, with its lines) that this store does not know,
	// with that status and those lines, touching no counter: the rebuilt
	// counts already account for it. A cart the store knows is left as it
	// is. Returns how many it recorded; EINVALID, recording nothing, for a
	// cart that is not ended or has no lines.
	Tombstone(ctx context.Context, ended []Reservation) (int, error)
}

// OnHandFollower is a store that can follow a stock count that the source
// of truth has just written to the ledger, without writing the ledger
// itself: a shadow writing the ledger again would put back an on_hand that
// a claim committed in between had already lowered.
type OnHandFollower interface {
	// FollowOnHand makes the store's sellable count for key follow the
	// ledger's new on_hand. delta is the change the source of truth made
	// to the ledger (onHand less the on_hand it replaced): a store that
	// keeps its own copy of on_hand applies delta, which commutes with the
	// claims still on their way to it, so no order between the stock count
	// and those claims is needed; a store that reads the ledger reads back.
	// Returns ECONFLICT when the store holds more than on_hand for key (its
	// count then stays as the ledger leaves it).
	FollowOnHand(ctx context.Context, key Key, onHand, delta int64) (*Counters, error)
}

// HoldPlacer is a store that can take a hold exactly as another store holds
// it: the same lines in the same groups, the same expiry. The router
// converges a shadow to its source of truth with it.
type HoldPlacer interface {
	// Place holds every line of hold in its group, or nothing. The hold
	// keeps no request fingerprint: a retried reserve matches it by items,
	// quantities and groups, so the buyer's identical retry after a flip
	// is a replay. A hold already there with the same lines is answered
	// with Replayed set. Returns EINSUFFICIENT (a group cannot cover its
	// line now) and ECONFLICT (the token is known here in another state,
	// or the ledger records the cart as claimed).
	Place(ctx context.Context, hold Reservation) (*Reservation, error)
}

// ClaimSettler is a store that can show a cart claimed that another store
// claimed while this one does not hold it (its copy was never taken, or was
// released or expired here). When its sellable count is its own copy of
// the ledger (redisres), the ledger lost the cart's lines and so must that
// count; when its count is the ledger's own (mysqlres), the claim already
// lowered it, and the cart is only recorded.
type ClaimSettler interface {
	// SettleClaim makes the store show the cart claimed with claimed's
	// lines: a hold it has is settled as by Claim; otherwise the lines
	// leave its sellable count (if it keeps its own) and the cart is
	// recorded as claimed, so that a later reserve of the token is a
	// conflict. The ledger is not written. The cart shows claimed's lines
	// from then on (the store may have held it in other groups),
	// whatever it showed before. Idempotent per cart.
	SettleClaim(ctx context.Context, claimed Reservation) error
}

// Recounter is a store whose sellable units are kept in records of its
// own (Redis's counter, MySQL's pool and unpooled units), which can drift
// from the ledger and its holds, and which it can set again from them.
type Recounter interface {
	// Records returns key's counters and what the store's own records of
	// stock would still hand out, read in one atomic step, so that they
	// agree under any concurrency unless the store drifted.
	Records(ctx context.Context, key Key) (*Records, error)
	// Recount sets key's sellable units again from the ledger's on_hand
	// less the units this store holds for key. Run it at rest: a legacy
	// claim between the ledger and Redis while it runs is counted twice
	// or not at all.
	Recount(ctx context.Context, key Key) (*Counters, error)
	// Repair sets key's sellable records again from the store's own
	// on_hand and holds, so that they agree with themselves (Records
	// Consistent), without reading the ledger: one atomic step, safe
	// under traffic. Returns EUNAVAILABLE when the store has no record of
	// key (it lost its data).
	Repair(ctx context.Context, key Key) (*Records, error)
}

// Records is one position as a store's own records of stock show it.
type Records struct {
	Counters
	// Sellable is what those records would still hand out: for redisres
	// the on_hand it recorded less its holds (Available is its counter),
	// for mysqlres its pool rows plus the ledger's unpooled units
	// (Available is on_hand less its holds).
	Sellable int64
}

// Consistent reports whether the store's records of the position agree
// with themselves: Sellable = Available, not negative. A counter set by
// hand, or a pool that lost rows, breaks it.
func (r Records) Consistent() bool {
	return r.Sellable == r.Available && r.Available >= 0
}

// DirtyCart is a cart whose shadow copy may differ from its authority's:
// its shadow work failed, timed out, was dropped, or lost a race.
type DirtyCart struct {
	ShopID    int64
	CartToken string
	// Authority names the store whose state the other store must reach
	// (StoreRedis or StoreMySQL): the store that answered the buyer.
	Authority string
	// Suspect is set when the other store's copy may be a hold the
	// Authority refused (or a difference the sweep could not explain): until
	// converged, it never answers the buyer. A cart marked only because a
	// store call failed or was dropped is not suspect: its copy is of a
	// granted hold, and answers when the Authority lost it (a Redis
	// failover drops the writes not yet replicated).
	Suspect bool
	// Since is when the cart was first marked; MarkedAt when it was last.
	Since    time.Time
	MarkedAt time.Time
}

// DirtyLog is a pod's durable set of dirty carts, so that the router's
// convergence resumes after a restart of the instance.
type DirtyLog interface {
	// MarkDirty adds the carts, or updates Authority, Suspect and MarkedAt
	// of the ones already there (Since is kept; a suspect mark stays
	// suspect while its Authority stays).
	MarkDirty(ctx context.Context, carts []DirtyCart) error
	// DirtyCarts returns at most limit carts, oldest first.
	DirtyCarts(ctx context.Context, limit int) ([]DirtyCart, error)
	// LookupDirty returns the cart's mark, nil when it is not dirty.
	LookupDirty(ctx context.Context, shopID int64, cartToken string) (*DirtyCart, error)
	// ClearDirty removes each cart unless it was marked again after its
	// MarkedAt.
	ClearDirty(ctx context.Context, carts []DirtyCart) error
}

// Resyncer is a store whose state can be listed and rebuilt from the ledger,
// used when a pod enters shadow (MySQL backfilled from the ledger and the
// active Redis holds) and by resync (Redis rebuilt from MySQL).
type Resyncer interface {
	// ActiveHolds returns every active reservation the store holds.
	ActiveHolds(ctx context.Context) ([]Reservation, error)

	// Rebuild replaces the store's counters and holds for the whole pod:
	// every position gets the ledger's on_hand less the given holds, which
	// become this store's active holds. Terminal reservations it knows are
	// kept. Returns how many positions it rewrote.
	Rebuild(ctx context.Context, holds []Reservation) (int, error)
}

// ShopRebuilder is a Resyncer that can rebuild some shops of the pod at a
// time, so that a copy runs in short steps while buyers are served.
type ShopRebuilder interface {
	// RebuildShops is Rebuild limited to shops; every hold must be of one
	// of them.
	RebuildShops(ctx context.Context, shops []int64, holds []Reservation) (int, error)
}

// ShopLister is a Resyncer that can list the active holds of some shops,
// so that a copy of those shops reads them just before it writes them.
type ShopLister interface {
	// ShopHolds is ActiveHolds limited to shops.
	ShopHolds(ctx context.Context, shops []int64) ([]Reservation, error)
}

// HoldCounter is a ShopLister that can count the active holds of each of
// its shops without reading them, so that a copy knows its size and cuts
// its batches before it reads a single hold.
type HoldCounter interface {
	// ShopHoldCounts returns, for every shop the store knows, how many
	// active holds it has (a count that may be off by the holds starting or
	// ending meanwhile).
	ShopHoldCounts(ctx context.Context) (map[int64]int, error)
}

// Ledger is a pod's inventory ledger, in the pod's MySQL: on_hand per
// position, the source of truth for physical stock, and the record of
// claimed carts that makes every claim deduct exactly once whichever store
// claims it. mysqlres implements it; redisres claims through it.
type Ledger interface {
	// OnHand returns key's on_hand, 0 for a key never stocked.
	OnHand(ctx context.Context, key Key) (int64, error)

	// ListOnHand returns on_hand of every stocked position.
	ListOnHand(ctx context.Context) (map[Key]int64, error)

	// SetOnHand writes on_hand for key unconditionally (the caller has
	// checked its own holds).
	SetOnHand(ctx context.Context, key Key, onHand int64) error

	// DeductCart lowers on_hand by every line's quantity once per (shop,
	// cart token): applied is false when the cart was deducted before, in
	// which case nothing changes. Stores that keep holds in the ledger's
	// database settle the cart's hold in the same transaction.
	DeductCart(ctx context.Context, shopID int64, cartToken string, lines []Line) (applied bool, err error)

	// Claimed reports whether the cart was deducted (its claim record
	// exists), so that a claim interrupted between its ledger step and a
	// store's own step can be completed rather than undone.
	Claimed(ctx context.Context, shopID int64, cartToken string) (bool, error)
}
