package mysqlres

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
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

// The low-water mark follows each position's take rate: rateWindow is the
// shortest span over which units taken are turned into a rate, and
// ewmaWeight the weight of the newest rate (and refill latency) in their
// moving averages.
const (
	rateWindow = 250 * time.Millisecond
	ewmaWeight = 0.3
)

// poolLowestSQL reads the lowest unit id of a pool (one index seek), for
// the reserves' random scan starts.
const poolLowestSQL = "/* conn_tag='replenish' */ SELECT COALESCE(MIN(id), 0) FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?"

// estimate is this process's idea of a position's pool.
type estimate struct {
	pool      int64
	drainedAt time.Time // when unpooled was last seen <= 0; zero if not
	// lo and hi bound the ids of the pool's rows as its last refill saw
	// them: the smallest id present and next_unit_id. Reserves start their
	// scans at random ids in between (startID).
	lo, hi int64
	// rate is the moving average of units taken per second, from the
	// units taken since winStart (winTaken) once rateWindow has passed.
	rate     float64
	winStart time.Time
	winTaken int64
}

// noteRate adds n units taken at now to e's take rate.
func (e *estimate) noteRate(now time.Time, n int64) {
	if e.winStart.IsZero() {
		e.winStart = now
	}
	e.winTaken += n
	el := now.Sub(e.winStart)
	if el < rateWindow {
		return
	}
	r := float64(e.winTaken) / el.Seconds()
	if e.rate == 0 {
		e.rate = r
	} else {
		e.rate += ewmaWeight * (r - e.rate)
	}
	e.winStart, e.winTaken = now, 0
}

// replenisher refills unit pools in the background, in short transactions
// of their own, when the hot path notices a pool below its low-water mark.
// Signals never block: the hot path holds a connection and locks when it
// could otherwise wait on a channel.
type replenisher struct {
	s    *Store
	wake chan struct{}

	mu sync.Mutex
	// pending maps the positions waiting for a refill to when they were
	// first signalled.
	pending map[tandem.Key]time.Time
	est     map[tandem.Key]*estimate
	// latency is the moving average of a refill's latency in seconds, from
	// its signal to its commit (queueing behind other refills included).
	latency float64
}

func newReplenisher(s *Store) *replenisher {
	return &replenisher{
		s:       s,
		wake:    make(chan struct{}, 1),
		pending: map[tandem.Key]time.Time{},
		est:     map[tandem.Key]*estimate{},
	}
}

// lowWater is the pool size under which a reserve of e's position signals
// a refill: three quarters of the cap (at half the cap, 5-unit carts of one
// hot item at C=32 emptied the pool between refills and fell to the slow
// path; see BENCHMARKS.md), raised by the units the position takes during
// one refill's latency (its take rate times the refill latency, both moving
// averages), so that a hot position still has three quarters of its pool
// when the refill lands. The mark stays a sixteenth of the cap below it, so
// that a refill moves more than a handful of rows. The caller holds r.mu.
func (r *replenisher) lowWater(e *estimate) int64 {
	c := int64(r.s.PoolCap)
	base := max(c*3/4, 1)
	ahead := int64(math.Ceil(e.rate * r.latency))
	return max(min(base+ahead, c-max(c/16, 1)), base)
}

// signal queues k for a refill without blocking.
func (r *replenisher) signal(k tandem.Key) {
	r.mu.Lock()
	if _, ok := r.pending[k]; !ok && len(r.pending) < maxPending {
		r.pending[k] = time.Now()
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
	now := time.Now()
	r.mu.Lock()
	e := r.est[k]
	refill := false
	if e == nil {
		refill = true
	} else {
		e.pool -= n
		e.noteRate(now, n)
		refill = e.pool < r.lowWater(e) && !r.drained(e)
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

// observeRange records the ids of k's pool rows, lowest present and next
// to be numbered, as a refill saw them.
func (r *replenisher) observeRange(k tandem.Key, lo, hi int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.est[k]
	if e == nil {
		e = &estimate{}
		r.est[k] = e
	}
	e.lo, e.hi = lo, hi
}

// startID returns the id at which a reserve of k starts its SKIP LOCKED
// scan: a random id within the pool's last known id range, so concurrent
// reserves of a hot item spread over the pool instead of all stepping over
// the same locked (and freshly deleted, not yet purged) rows at its head.
// It returns 0, the head, when the range is unknown. Rows below the start
// are not lost to the reserve: a short scan wraps around (reserveFast).
func (r *replenisher) startID(k tandem.Key) int64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	e := r.est[k]
	var lo, hi int64
	if e != nil {
		lo, hi = e.lo, e.hi
	}
	r.mu.Unlock()
	if lo <= 0 || hi-lo < 2 {
		return 0
	}
	return lo + rand.Int64N(hi-lo)
}

// observeLatency adds a refill's latency, from its signal to its commit, to
// the moving average.
func (r *replenisher) observeLatency(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.latency == 0 {
		r.latency = d.Seconds()
	} else {
		r.latency += ewmaWeight * (d.Seconds() - r.latency)
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
		signalled := r.pending
		r.pending = map[tandem.Key]time.Time{}
		r.mu.Unlock()
		keys := slices.Collect(maps.Keys(signalled))
		for _, k := range sortKeys(keys) {
			if ctx.Err() != nil {
				return
			}
			rctx, cancel := context.WithTimeout(ctx, replenishTimeout)
			_, err := r.s.replenish(rctx, k)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					r.s.Logger.Warn("background replenish failed", zap.Stringer("key", k), zap.Error(err))
				}
				continue
			}
			r.observeLatency(time.Since(signalled[k]))
		}
	}
}

// replenish refills k's pool up to PoolCap from the ledger's unpooled
// count in one short transaction and returns how many units it moved. The
// ledger row lock makes it the only replenisher of k at a time; the others
// wait for it and then find the pool full.
func (s *Store) replenish(ctx context.Context, k tandem.Key) (int64, error) {
	var moved, pool, unpooled, lo, hi int64
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
		moved, unpooled, hi = before-p.unpooled, p.unpooled, p.nextID
		if err := tx.QueryRowContext(ctx, poolLowestSQL, k.ShopID, k.ItemID, k.GroupID).Scan(&lo); err != nil {
			return fmt.Errorf("lowest unit of %s: %w", k, err)
		}
		return writePosition(ctx, tx, tagReplenish, p, s.Now().UTC())
	})
	if err != nil {
		return 0, err
	}
	s.repl.observePool(k, pool, unpooled)
	s.repl.observeRange(k, lo, hi)
	return moved, nil
}
