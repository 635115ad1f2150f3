package mysqlres

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
)

// drainedFor is how long an observation "this position has nothing left
// outside its pool" is trusted by the fast path and the replenisher.
const drainedFor = time.Second

// maxPending bounds the positions waiting for the background replenisher;
// beyond it signals are dropped (the slow path still refills inline).
const maxPending = 100_000

// replenishTimeout bounds one background refill.
const replenishTimeout = 10 * time.Second

// estimate is this process's idea of a position's pool.
type estimate struct {
	pool      int64
	drainedAt time.Time // when unpooled was last seen <= 0; zero if not
}

// replenisher refills unit pools in the background, in short transactions
// of their own, when the hot path notices a pool below its low-water mark.
// Signals never block: the hot path holds a connection and locks when it
// could otherwise wait on a channel.
type replenisher struct {
	s    *Store
	wake chan struct{}

	mu      sync.Mutex
	pending map[tandem.Key]struct{}
	est     map[tandem.Key]*estimate
}

func newReplenisher(s *Store) *replenisher {
	return &replenisher{
		s:       s,
		wake:    make(chan struct{}, 1),
		pending: map[tandem.Key]struct{}{},
		est:     map[tandem.Key]*estimate{},
	}
}

func (r *replenisher) lowWater() int64 { return max(int64(r.s.PoolCap)/2, 1) }

// signal queues k for a refill without blocking.
func (r *replenisher) signal(k tandem.Key) {
	r.mu.Lock()
	if _, ok := r.pending[k]; !ok && len(r.pending) < maxPending {
		r.pending[k] = struct{}{}
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *replenisher) drained(e *estimate) bool {
	return !e.drainedAt.IsZero() && time.Since(e.drainedAt) < drainedFor
}

// drainedRecently reports whether k was seen with nothing left outside its
// pool within drainedFor.
func (r *replenisher) drainedRecently(k tandem.Key) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.est[k]
	return e != nil && r.drained(e)
}

// noteTaken records n units taken from k's pool by a committed reserve.
func (r *replenisher) noteTaken(k tandem.Key, n int64) {
	r.mu.Lock()
	e := r.est[k]
	refill := false
	if e == nil {
		refill = true
	} else {
		e.pool -= n
		refill = e.pool < r.lowWater() && !r.drained(e)
	}
	r.mu.Unlock()
	if refill {
		r.signal(k)
	}
}

// noteShort records that a reserve found fewer units in k's pool than it
// wanted.
func (r *replenisher) noteShort(k tandem.Key) {
	if !r.drainedRecently(k) {
		r.signal(k)
	}
}

// observeLedger records k's unpooled count as seen with its ledger row
// locked (by the slow path, which refills inline when it needs to).
func (r *replenisher) observeLedger(k tandem.Key, unpooled int64) {
	r.mu.Lock()
	e := r.est[k]
	if e == nil {
		e = &estimate{}
		r.est[k] = e
	}
	if unpooled <= 0 {
		e.drainedAt = time.Now()
	} else {
		e.drainedAt = time.Time{}
	}
	r.mu.Unlock()
}

// observePool records k's pool size and unpooled count after a refill.
func (r *replenisher) observePool(k tandem.Key, pool, unpooled int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.est[k]
	if e == nil {
		e = &estimate{}
		r.est[k] = e
	}
	e.pool = pool
	if unpooled <= 0 {
		e.drainedAt = time.Now()
	} else {
		e.drainedAt = time.Time{}
	}
}

// forget drops every estimate (after a rebuild).
func (r *replenisher) forget() {
	r.mu.Lock()
	r.est = map[tandem.Key]*estimate{}
	r.mu.Unlock()
}

func (r *replenisher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		r.mu.Lock()
		keys := make([]tandem.Key, 0, len(r.pending))
		for k := range r.pending {
			keys = append(keys, k)
		}
		clear(r.pending)
		r.mu.Unlock()
		for _, k := range sortKeys(keys) {
			if ctx.Err() != nil {
				return
			}
			rctx, cancel := context.WithTimeout(ctx, replenishTimeout)
			if _, err := r.s.replenish(rctx, k); err != nil && ctx.Err() == nil {
				r.s.Logger.Warn("background replenish failed", zap.Stringer("key", k), zap.Error(err))
			}
			cancel()
		}
	}
}

// replenish refills k's pool up to PoolCap from the ledger's unpooled
// count in one short transaction and returns how many units it moved. The
// ledger row lock makes it the only replenisher of k at a time; the others
// wait for it and then find the pool full.
func (s *Store) replenish(ctx context.Context, k tandem.Key) (int64, error) {
	var moved, pool, unpooled int64
	err := s.withTx(ctx, tagReplenish, func(tx *sql.Tx) error {
		moved = 0
		pos, err := lockPositions(ctx, tx, tagReplenish, []tandem.Key{k})
		if err != nil {
			return err
		}
		p := pos[k]
		if !p.exists {
			return nil
		}
		before := p.unpooled
		if pool, err = s.fillPool(ctx, tx, tagReplenish, p); err != nil {
			return err
		}
		moved, unpooled = before-p.unpooled, p.unpooled
		return writePosition(ctx, tx, tagReplenish, p, s.Now().UTC())
	})
	if err != nil {
		return 0, err
	}
	s.repl.observePool(k, pool, unpooled)
	return moved, nil
}
