package dualwrite

import (
	"time"

	"github.com/tandemhq/tandem"
)

// Tap receives every checkout operation of the pod once its source of
// truth has answered it; a capture satisfies it. Observe runs on the
// buyer's request path: it must not block (a capture drops what its buffer
// cannot take), and it may keep op, whose slices the router never changes.
type Tap interface {
	Observe(pod string, op tandem.TrafficOp)
}

// tapReserve tells the Tap of a reserve the SoT answered.
func (r *Router) tapReserve(req tandem.ReserveRequest, at time.Time, res *tandem.Reservation, err error) {
	if r.Tap == nil {
		return
	}
	op := tandem.TrafficOp{Op: tandem.OpReserve, ShopID: req.ShopID, CartToken: req.CartToken,
		Lines: req.Lines, TTL: req.TTL, At: at, Latency: time.Since(at)}
	op.Status, op.Granted = tapOutcome(res, err)
	r.Tap.Observe(r.Pod, op)
}

// tapSettle tells the Tap of a claim or release the SoT answered.
func (r *Router) tapSettle(kind tandem.Op, shopID int64, cartToken string, at time.Time, res *tandem.Reservation, err error) {
	if r.Tap == nil {
		return
	}
	op := tandem.TrafficOp{Op: kind, ShopID: shopID, CartToken: cartToken, At: at, Latency: time.Since(at)}
	op.Status, op.Granted = tapOutcome(res, err)
	r.Tap.Observe(r.Pod, op)
}

// tapStock tells the Tap of a stock count the SoT wrote.
func (r *Router) tapStock(key tandem.Key, onHand int64, at time.Time, err error) {
	if r.Tap == nil {
		return
	}
	op := tandem.TrafficOp{Op: tandem.OpSetOnHand, ShopID: key.ShopID, Key: key, OnHand: onHand, At: at, Latency: time.Since(at)}
	op.Status = tandem.OutcomeOK
	if err != nil {
		op.Status = tandem.OutcomeStatus(tandem.ErrorCode(err))
	}
	r.Tap.Observe(r.Pod, op)
}

func tapOutcome(res *tandem.Reservation, err error) (tandem.OutcomeStatus, []tandem.Line) {
	if err != nil {
		return tandem.OutcomeStatus(tandem.ErrorCode(err)), nil
	}
	if res == nil {
		return "", nil
	}
	return tandem.StatusOf(res.Status), res.Lines
}
