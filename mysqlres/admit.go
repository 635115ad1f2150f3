package mysqlres

import (
	"context"
	"time"
)

// admission lets at most cap(a) buyer flows (reserve, claim, release)
// hold a connection at once; the others wait in arrival order.
//
// database/sql hands a freed connection to a random waiter
// (connRequestSet.TakeRandom), so under a queue the unlucky wait many
// turns and the latency's tail grows with the queue. Waiters blocked on a
// channel send are served first in, first out, and a slot that frees goes
// straight to the oldest waiter (the buffer stays full), so a newcomer
// never passes the queue. Admitting fewer flows than the pool has
// connections also keeps the server from running more transactions at
// once than it can make progress on: past a few per core, every
// transaction holds its locks longer.
type admission chan struct{}

func newAdmission(n int) admission { return make(admission, n) }

// enter waits for a slot, in arrival order, until ctx ends. It returns
// how long the flow waited.
func (a admission) enter(ctx context.Context) (time.Duration, error) {
	select {
	case a <- struct{}{}:
		return 0, nil
	default:
	}
	start := time.Now()
	select {
	case a <- struct{}{}:
		return time.Since(start), nil
	case <-ctx.Done():
		return time.Since(start), ctx.Err()
	}
}

// leave gives the slot back.
func (a admission) leave() { <-a }

// admitted reports whether flows under tag go through the admission: the
// buyer-facing ones. Background work (the replenisher, audits, purges,
// convergence) has its own bounds and must not queue behind buyers: the
// replenisher is what keeps buyers on the fast path.
func admitted(tag string) bool {
	switch tag {
	case tagReserve, tagReserveSlow, tagClaim, tagRelease:
		return true
	}
	return false
}
