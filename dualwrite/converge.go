package dualwrite

import (
	"context"
	"time"

	"github.com/tandemhq/tandem"
)

// ConvergeResult is what converging one cart did.
type ConvergeResult string

// Results of converging a cart.
const (
	// ConvergeEqual: the stores already agreed on the cart.
	ConvergeEqual ConvergeResult = "equal"
	// ConvergeRepaired: the shadow was changed to agree.
	ConvergeRepaired ConvergeResult = "repaired"
	// ConvergeFailed: a store could not be read or changed (unavailable,
	// timed out, short of units while losers' holds come back); retried.
	ConvergeFailed ConvergeResult = "failed"
	// ConvergeConflict: the shadow holds a state the authority's cannot
	// lead to (a claimed cart the authority holds or does not know); it is
	// reported, never resolved by forgetting a sale.
	ConvergeConflict ConvergeResult = "conflict"
	// ConvergeDropped: nothing to converge any more (the pod's mode keeps no
	// shadow).
	ConvergeDropped ConvergeResult = "dropped"
)

// convergeCart makes the store to hold for the cart what the store from
// holds: the same hold in the same groups, the same claim, or nothing. It
// reads both stores' state of the cart, not the operations that led there,
// so it is idempotent and safe to repeat; callers run it in the cart's line
// (enqueue) so that it never races the cart's own shadow work. Every store
// call is bounded by ShadowTimeout.
//
// refused says the authority has just refused this cart's reserve: its
// silence about the cart is then an answer, not a possible loss of data.
func (rp *repairer) convergeCart(ctx context.Context, ck cartKey, from, to tandem.ShadowStore, refused bool) (ConvergeResult, error) {
	rp.r.migrate.waitShop(ctx, ck.shop)
	want, err := rp.read(ctx, from, ck)
	if err != nil {
		return ConvergeFailed, err
	}
	have, err := rp.read(ctx, to, ck)
	if err != nil {
		return ConvergeFailed, err
	}
	switch {
	case want != nil && (want.Status == tandem.StatusReleased || want.Status == tandem.StatusExpired):
		return rp.convergeEnded(ctx, ck, from, to, want, have)
	case want == nil:
		return rp.convergeAbsent(ctx, ck, from, to, have, refused)
	case want.Status == tandem.StatusReserved:
		return rp.convergeHeld(ctx, ck, from, to, want, have)
	default: // claimed
		if have != nil && have.Status == tandem.StatusClaimed && sameLines(want.Lines, have.Lines) {
			return ConvergeEqual, nil
		}
		return rp.settleSold(ctx, ck, to, want, have)
	}
}

// convergeEnded converges a cart from released or expired: to holds
// nothing for it, and knows it as ended too (a tombstone where it never
// saw it), so that it never reserves the token again once it answers the
// buyer, with from's lines (to may have held it in other groups), so that
// its replays answer what the buyer was answered.
func (rp *repairer) convergeEnded(ctx context.Context, ck cartKey, from, to tandem.ShadowStore, want, have *tandem.Reservation) (ConvergeResult, error) {
	if have != nil && (have.Status == tandem.StatusReleased || have.Status == tandem.StatusExpired) && sameLines(want.Lines, have.Lines) {
		return ConvergeEqual, nil
	}
	if have != nil && have.Status == tandem.StatusClaimed {
		return ConvergeConflict, tandem.Errorf(tandem.ECONFLICT, "%s claimed cart %s, which %s does not hold", to.Name(), ck.token, from.Name())
	}
	err := rp.r.call(ctx, func(ctx context.Context) error { return to.End(ctx, *want) })
	if tandem.ErrorCode(err) == tandem.ECONFLICT {
		return ConvergeConflict, err // claimed there meanwhile
	}
	return ConvergeRepaired, err
}

// convergeAbsent converges a cart from never holds (refused, discarded or
// never reserved): to holds nothing for it, and forgets a copy it has (a
// later flip must never show it to the buyer), once from is known not to
// have lost it (checkNotWiped) unless from has just refused it.
func (rp *repairer) convergeAbsent(ctx context.Context, ck cartKey, from, to tandem.ShadowStore, have *tandem.Reservation, refused bool) (ConvergeResult, error) {
	if have == nil || have.Status == tandem.StatusReleased || have.Status == tandem.StatusExpired {
		return ConvergeEqual, nil
	}
	if have.Status == tandem.StatusClaimed {
		return ConvergeConflict, tandem.Errorf(tandem.ECONFLICT, "%s claimed cart %s, which %s does not hold", to.Name(), ck.token, from.Name())
	}
	if !refused {
		if err := rp.checkNotWiped(ctx, from, ck.shop, have.Lines); err != nil {
			return ConvergeFailed, err
		}
	}
	return ConvergeRepaired, rp.r.call(ctx, func(ctx context.Context) error {
		return to.Discard(ctx, ck.shop, ck.token)
	})
}

// convergeHeld converges a cart from holds: to holds the same hold in the
// same groups, or, when the ledger has the cart claimed, the claim.
func (rp *repairer) convergeHeld(ctx context.Context, ck cartKey, from, to tandem.ShadowStore, want, have *tandem.Reservation) (ConvergeResult, error) {
	if have != nil && have.Status == tandem.StatusReserved && sameLines(want.Lines, have.Lines) {
		return ConvergeEqual, nil
	}
	if have != nil && have.Status == tandem.StatusClaimed {
		return ConvergeConflict, tandem.Errorf(tandem.ECONFLICT, "%s claimed cart %s, which %s still holds", to.Name(), ck.token, from.Name())
	}
	if have != nil {
		if err := rp.r.call(ctx, func(ctx context.Context) error { return to.Discard(ctx, ck.shop, ck.token) }); err != nil {
			return ConvergeFailed, err
		}
	}
	if err := rp.placeRetrying(ctx, to, *want); err != nil {
		if tandem.ErrorCode(err) == tandem.ECONFLICT && rp.claimed(ctx, ck) {
			// The authority is between the two steps of a claim (the
			// ledger has it, its own hold not yet settled): the cart is
			// sold, so the other store settles the claim instead.
			sold := *want
			sold.Status = tandem.StatusClaimed
			return rp.settleSold(ctx, ck, to, &sold)
		}
		return ConvergeFailed, err
	}
	return ConvergeRepaired, nil
}

// claimed reports whether the ledger records the cart as claimed.
func (rp *repairer) claimed(ctx context.Context, ck cartKey) bool {
	if rp.r.Ledger == nil {
		return false
	}
	var ok bool
	err := rp.r.call(ctx, func(ctx context.Context) (err error) {
		ok, err = rp.r.Ledger.Claimed(ctx, ck.shop, ck.token)
		return err
	})
	return err == nil && ok
}

// settleSold makes to show the cart claimed with want's lines; have is
// what to holds (read again when not given).
func (rp *repairer) settleSold(ctx context.Context, ck cartKey, to tandem.ShadowStore, want *tandem.Reservation, haves ...*tandem.Reservation) (ConvergeResult, error) {
	var have *tandem.Reservation
	if len(haves) > 0 {
		have = haves[0]
	} else {
		var err error
		if have, err = rp.read(ctx, to, ck); err != nil {
			return ConvergeFailed, err
		}
	}
	if have != nil && have.Status == tandem.StatusClaimed && sameLines(want.Lines, have.Lines) {
		return ConvergeEqual, nil
	}
	if have != nil && have.Status == tandem.StatusReserved && sameLines(want.Lines, have.Lines) {
		// Claim the copy; the ledger's claim record makes its deduction
		// a no-op. Judged as of a time the copy was still active.
		asOf := tandem.WithAsOf(ctx, minTime(rp.r.Now(), have.ExpiresAt.Add(-time.Millisecond)))
		return ConvergeRepaired, rp.r.call(asOf, func(ctx context.Context) error {
			_, err := to.Claim(ctx, ck.shop, ck.token)
			return err
		})
	}
	if have != nil && have.Status == tandem.StatusReserved {
		if err := rp.r.call(ctx, func(ctx context.Context) error { return to.Discard(ctx, ck.shop, ck.token) }); err != nil {
			return ConvergeFailed, err
		}
	}
	return ConvergeRepaired, rp.r.call(ctx, func(ctx context.Context) error { return to.SettleClaim(ctx, *want) })
}

// placeRetrying places hold in s, retrying for up to ShadowTimeout while s
// is short: at the sold-out boundary the two stores pick their winners
// concurrently, and the shadow's units come back as the holds of the carts
// its SoT refused are discarded.
func (rp *repairer) placeRetrying(ctx context.Context, s tandem.ShadowStore, hold tandem.Reservation) error {
	end := time.Now().Add(rp.r.ShadowTimeout)
	for wait := 2 * time.Millisecond; ; wait = min(2*wait, 32*time.Millisecond) {
		err := rp.r.call(ctx, func(ctx context.Context) error {
			_, err := s.Place(ctx, hold)
			return err
		})
		if tandem.ErrorCode(err) != tandem.EINSUFFICIENT || time.Now().Add(wait).After(end) {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
	}
}

// checkNotWiped checks, before a hold is discarded because the authority
// never saw the cart, that the authority has not lost its data: each
// position the hold draws from agrees with the ledger. A Redis that lost
// its data (a restart without persistence) knows nothing, and its silence
// must not wipe the other store's holds: that is resync's disaster, not
// convergence.
func (rp *repairer) checkNotWiped(ctx context.Context, s tandem.ShadowStore, shop int64, lines []tandem.Line) error {
	if rp.r.Ledger == nil || s.Name() != tandem.StoreRedis {
		return nil // MySQL's counts are the ledger's own
	}
	for _, l := range lines {
		k := l.Key(shop)
		var c *tandem.Counters
		var onHand int64
		err := rp.r.call(ctx, func(ctx context.Context) (err error) {
			if c, err = s.Counters(ctx, k); err != nil {
				return err
			}
			onHand, err = rp.r.Ledger.OnHand(ctx, k)
			return err
		})
		if err != nil {
			return err
		}
		if c.OnHand != onHand {
			return tandem.Errorf(tandem.EUNAVAILABLE, "%s counts on_hand %d at %s, the ledger %d: it may have lost its data (resync)", s.Name(), c.OnHand, k, onHand)
		}
	}
	return nil
}

// read returns the cart as s knows it, nil when s never saw it.
func (rp *repairer) read(ctx context.Context, s tandem.ShadowStore, ck cartKey) (*tandem.Reservation, error) {
	var res *tandem.Reservation
	err := rp.r.call(ctx, func(ctx context.Context) (err error) {
		res, err = s.Get(ctx, ck.shop, ck.token)
		return err
	})
	if tandem.ErrorCode(err) == tandem.ENOTFOUND {
		return nil, nil
	}
	return res, err
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
