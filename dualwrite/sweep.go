package dualwrite

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tandemhq/tandem"
)

// Anti-entropy. The sweep compares the two maintained stores hold by hold
// and position by position, converges every cart that differs (from the
// SoT), and recounts the shadow's positions that still disagree with the
// ledger once their carts agree. It runs every SweepInterval, after a
// shadow stock count that may not have landed, and with every audit that
// finds drift; resync stays for disasters (a Redis that lost its data).

// CartDiff is one cart the two stores hold differently.
type CartDiff struct {
	ShopID    int64  `json:"shop_id"`
	CartToken string `json:"cart_token"`
	// SoT and Shadow are the lines each store holds (nil: no hold).
	SoT    []tandem.Line `json:"sot"`
	Shadow []tandem.Line `json:"shadow"`
}

// Diff is how a pod's maintained stores differ from each other and from
// the ledger.
type Diff struct {
	Mode      tandem.Mode    `json:"mode"`
	Holds     int            `json:"holds_compared"`
	Carts     []CartDiff     `json:"carts"`
	Positions []tandem.Drift `json:"positions"`
}

// Empty reports whether the stores agree hold by hold and with the ledger.
func (d *Diff) Empty() bool { return len(d.Carts) == 0 && len(d.Positions) == 0 }

// String lists the differences, for logs and test failures.
func (d *Diff) String() string {
	s := fmt.Sprintf("mode %s, %d holds compared", d.Mode, d.Holds)
	for _, c := range d.Carts {
		s += fmt.Sprintf("\n  cart %d/%s: sot %v, shadow %v", c.ShopID, c.CartToken, c.SoT, c.Shadow)
	}
	for _, p := range d.Positions {
		s += fmt.Sprintf("\n  position %d/%d/%d: ledger %d, redis available %v, mysql available %v",
			p.ShopID, p.ItemID, p.GroupID, p.LedgerOnHand, deref(p.RedisAvailable), deref(p.MySQLAvailable))
	}
	return s
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// diff is Router.Diff in the given mode.
func (rp *repairer) diff(ctx context.Context, mode tandem.Mode) (*Diff, error) {
	d, err := rp.diffCarts(ctx, mode)
	if err != nil {
		return nil, err
	}
	res, err := rp.auditPass(ctx, d.Mode, nil)
	if err != nil {
		return nil, err
	}
	d.Positions = res.drifted
	return d, nil
}

// diffCarts is Diff without the positions.
func (rp *repairer) diffCarts(ctx context.Context, mode tandem.Mode) (*Diff, error) {
	d := &Diff{Mode: mode}
	if shadow := rp.r.store(mode.Shadow()); shadow != nil {
		sot := rp.r.store(mode.SourceOfTruth())
		// The two listings run side by side (neither is an atomic view
		// of its store, and the comparison allows for holds in flight
		// either way): a pod's sweep takes the longer of the two, not
		// their sum.
		var b map[cartKey][]tandem.Line
		var errB error
		listed := make(chan struct{})
		go func() {
			defer close(listed)
			b, errB = activeHolds(ctx, shadow)
		}()
		a, err := activeHolds(ctx, sot)
		<-listed
		if err != nil {
			return nil, err
		}
		if errB != nil {
			return nil, errB
		}
		d.Holds = len(a)
		for ck, la := range a {
			if lb, ok := b[ck]; !ok || !sameLines(la, lb) {
				d.Carts = append(d.Carts, CartDiff{ShopID: ck.shop, CartToken: ck.token, SoT: la, Shadow: b[ck]})
			}
		}
		for ck, lb := range b {
			if _, ok := a[ck]; !ok {
				d.Carts = append(d.Carts, CartDiff{ShopID: ck.shop, CartToken: ck.token, Shadow: lb})
			}
		}
		sort.Slice(d.Carts, func(i, j int) bool {
			if d.Carts[i].ShopID != d.Carts[j].ShopID {
				return d.Carts[i].ShopID < d.Carts[j].ShopID
			}
			return d.Carts[i].CartToken < d.Carts[j].CartToken
		})
	}
	return d, nil
}

func activeHolds(ctx context.Context, s tandem.ShadowStore) (map[cartKey][]tandem.Line, error) {
	list, err := s.ActiveHolds(ctx)
	if err != nil {
		return nil, fmt.Errorf("list %s holds: %w", s.Name(), err)
	}
	m := make(map[cartKey][]tandem.Line, len(list))
	for _, h := range list {
		m[cartKey{h.ShopID, h.CartToken}] = h.Lines
	}
	return m, nil
}

// SweepReport is what one anti-entropy sweep found and fixed.
type SweepReport struct {
	At time.Time `json:"at"`
	// Holds is how many SoT holds were compared.
	Holds int `json:"holds_compared"`
	// Carts is how many carts differed; Converged how many of them the
	// sweep made equal. InFlight is how many more differed while this
	// instance still had work of theirs under way (their own shadow
	// operation reconciles them): left to it, and to the next sweep.
	Carts     int `json:"carts_differing"`
	Converged int `json:"carts_converged"`
	InFlight  int `json:"carts_in_flight"`
	// Recounted are the shadow positions set again from the ledger.
	Recounted []tandem.Key `json:"positions_recounted"`
	// Left is what still differs after the sweep (in flight, or failing).
	Left int `json:"left"`

	// rewrote is how many of the Converged carts a store had to change:
	// the others were equal once read in their line (a listing races the
	// buyers: a cart reserved or ended between the two listings differs
	// in them, not in the stores).
	rewrote int
	// skipped counts the differing carts the sweep did not try, by why
	// (dirty, lost, and the rest of them when it stopped or found no
	// slot), and failed those it tried in vain,
	// with the first failure: what a "did not converge" error shows.
	skipped   map[string]int
	failed    int
	firstErr  string
	firstLost string
	took      time.Duration
}

// sweep is Router.Sweep.
func (rp *repairer) sweep(ctx context.Context) (*SweepReport, error) {
	rp.sweepMu.Lock()
	defer rp.sweepMu.Unlock()
	defer rp.sweepsDone.Add(1)
	mode := rp.r.routeMode()
	rep := &SweepReport{At: rp.r.Now().UTC()}
	start := time.Now()
	shadow := rp.r.store(mode.Shadow())
	sot := rp.r.store(mode.SourceOfTruth())
	if err := tandem.WaitThrottle(ctx); err != nil {
		return nil, err
	}
	if shadow == nil {
		return rp.sweepAlone(ctx, mode, sot, rep, start)
	}
	d, err := rp.diffCarts(ctx, mode)
	if err != nil {
		return nil, err
	}
	settled := rp.r.settled(d.Carts)
	rep.Holds, rep.Carts, rep.InFlight = d.Holds, len(settled), len(d.Carts)-len(settled)
	lost, err := rp.lostPositions(ctx, sot, rep)
	if err != nil {
		return nil, err
	}
	var equal map[cartKey]bool
	rep.Converged, rep.rewrote, equal = rp.convergeDiffering(ctx, mode, sot, shadow, settled, lost, rep)
	switch {
	case rep.rewrote > 0:
		if d, err = rp.diffCarts(ctx, mode); err != nil {
			return nil, err
		}
	case len(equal) > 0:
		// Nothing changed: the carts found equal are no difference, and
		// listing every hold again would tell nothing more.
		d.Carts = slices.DeleteFunc(d.Carts, func(c CartDiff) bool { return equal[cartKey{c.ShopID, c.CartToken}] })
	}
	// The carts in flight still differ: they keep the positions they
	// touch from the audit and the recount below, and count as left.
	if len(d.Carts) == 0 && !rp.r.migrate.copying() {
		// The carts agree: the positions must agree with the ledger too.
		res, err := rp.auditPass(ctx, mode, nil)
		if err != nil {
			return nil, err
		}
		d.Positions = res.drifted
	}
	// Counts follow the ledger: a Redis whose count of a position no
	// differing cart touches disagrees with the ledger is recounted, shadow
	// or SoT (the legacy stock count and claim each span two systems and
	// can leave it off), when no shadow work is in flight here.
	if rp.r.shadowIdle() && !rp.r.migrate.copying() {
		if d, err = rp.recount(ctx, mode, sot, shadow, d, rep); err != nil {
			return nil, err
		}
	}
	return rp.sweepDone(rep, d, start), nil
}

// sweepDone records rep, with what d still has left, as the last sweep.
func (rp *repairer) sweepDone(rep *SweepReport, d *Diff, start time.Time) *SweepReport {
	rep.Left = len(d.Carts) + len(d.Positions)
	rep.took = time.Since(start)
	rp.statsMu.Lock()
	rp.lastSweep = rep
	rp.statsMu.Unlock()
	return rep
}

// sweepAlone is the sweep of a mode without a shadow (redis, mysql_only):
// no cart to compare, but the SoT's count of each position still follows
// the ledger. A legacy Redis claim or stock count spans two systems and can
// leave Redis off it; without a recount here it stayed off for as long as
// the pod ran in mode redis (soak, CI at 7ba622b: available -1 at rest).
func (rp *repairer) sweepAlone(ctx context.Context, mode tandem.Mode, sot tandem.ShadowStore, rep *SweepReport, start time.Time) (*SweepReport, error) {
	if rp.r.Ledger == nil {
		return rep, nil
	}
	res, err := rp.auditPass(ctx, mode, nil)
	if err != nil {
		return nil, err
	}
	d := &Diff{Mode: mode, Positions: res.drifted}
	if len(d.Positions) > 0 && rp.r.shadowIdle() && !rp.r.migrate.copying() {
		if d, err = rp.recount(ctx, mode, sot, nil, d, rep); err != nil {
			return nil, err
		}
	}
	return rp.sweepDone(rep, d, start), nil
}

// convergeTouched converges carts from the SoT one by one, each in its
// line after its own operations, as a sweep converges the carts it finds
// differing: a backfill's catch-up of the carts written during its copy.
func (rp *repairer) convergeTouched(ctx context.Context, carts []cartKey) error {
	rp.sweepMu.Lock()
	defer rp.sweepMu.Unlock()
	mode := rp.r.routeMode()
	shadow := rp.r.store(mode.Shadow())
	if shadow == nil {
		return nil
	}
	sot := rp.r.store(mode.SourceOfTruth())
	if err := tandem.WaitThrottle(ctx); err != nil {
		return err
	}
	// Their lines are not listed: none is left out for a position the SoT
	// lost, as a sweep leaves it (a copy during which Redis lost its data
	// copied none of it either).
	diffs := make([]CartDiff, len(carts))
	for i, ck := range carts {
		diffs[i] = CartDiff{ShopID: ck.shop, CartToken: ck.token}
	}
	rep := &SweepReport{}
	rp.convergeDiffering(ctx, mode, sot, shadow, diffs, nil, rep)
	if left := rep.skipped["no_slot"] + rep.skipped["stopping"]; left > 0 || rep.failed > 0 {
		// Left to the worker (failed) and to the periodic sweep (not tried).
		rp.r.Logger.Warnw("the backfill's catch-up left carts", "pod", rp.r.Pod, "carts", len(carts),
			"not_tried", left, "failed", rep.failed, "first_error", rep.firstErr)
	}
	return nil
}

// convergeDiffering converges each differing cart from the SoT, in the
// cart's line, and says how many it made equal, how many of those a store
// had to change, and which were equal already. It leaves alone the carts
// the worker has and those on positions the SoT lost, and tallies in rep
// the carts it left and those it failed.
func (rp *repairer) convergeDiffering(ctx context.Context, mode tandem.Mode, sot, shadow tandem.ShadowStore, carts []CartDiff,
	lost map[tandem.Key]bool, rep *SweepReport) (converged, rewrote int, equal map[cartKey]bool) {
	t := &sweepTally{equal: map[cartKey]bool{}, rep: rep}
	rep.skipped = map[string]int{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, convergeParallel)
	// A paced sweep (tandem.WithPace) converges convergeParallel carts at a
	// time and rests after each round.
	paced := tandem.Paced(ctx)
	round, roundStart := 0, time.Now()
	for i, c := range carts {
		ck := cartKey{c.ShopID, c.CartToken}
		if rp.isDirty(ck) {
			rep.skipped["dirty"]++
			continue // the worker has it, with the authority that answered the buyer
		}
		if touches(c, lost) {
			rep.skipped["lost"]++
			continue // the SoT lost its count there: resync, not convergence
		}
		if paced && round == convergeParallel {
			wg.Wait()
			if tandem.Pace(ctx, roundStart) != nil {
				rep.skipped["stopping"] += len(carts) - i
				break // stopping: the next sweep compares again
			}
			round, roundStart = 0, time.Now()
		}
		round++
		sem <- struct{}{}
		// Shadow work, in one of the router's MaxInflight slots; a cart
		// left for want of one is compared again by the next sweep.
		if !rp.r.takeSlot() {
			<-sem
			rep.skipped["no_slot"] += len(carts) - i
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			defer rp.r.freeSlot()
			rp.sweepCart(ctx, mode, sot, shadow, c, t)
		})
	}
	wg.Wait()
	return t.converged, t.rewrote, t.equal
}

// sweepTally adds up what the sweep's convergences of carts did.
type sweepTally struct {
	mu                 sync.Mutex
	converged, rewrote int
	equal              map[cartKey]bool
	rep                *SweepReport // its failures
}

// sweepCart converges one cart the sweep found differing, from the SoT, in
// the cart's line, and tallies what it did in t.
func (rp *repairer) sweepCart(ctx context.Context, mode tandem.Mode, sot, shadow tandem.ShadowStore, c CartDiff, t *sweepTally) {
	ck := cartKey{c.ShopID, c.CartToken}
	prev, line := rp.r.enqueue(ck)
	if prev != nil {
		<-prev
	}
	if rp.r.routeMode().SourceOfTruth() != sot.Name() {
		// The SoT changed since the stores were compared: the cart is the
		// new SoT's now (the next sweep compares again).
		rp.r.dequeue(ck, line)
		return
	}
	res, err := rp.convergeCart(ctx, ck, sot, shadow, false)
	rp.r.dequeue(ck, line)
	if res != ConvergeEqual || err != nil {
		rp.observe(res, err, 0)
	}
	if res == ConvergeRepaired {
		// A difference no failure explained: drift, reported as such.
		rp.recordDrift(mode, c)
	}
	if err != nil {
		// Unexplained, so suspect. A convergence that failed (a store's
		// read or write timed out) leaves the drift to the worker, to
		// report once it repairs the cart: unreported, it went missing
		// whenever the sweep's attempt failed.
		cause := "sweep: " + tandem.ErrorMessage(err)
		if res == ConvergeFailed {
			rp.markDrift(ck, sot.Name(), cause, rp.driftComparison(mode, c))
		} else {
			rp.markDirty(ck, sot.Name(), cause, true)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err != nil:
		if t.rep.failed++; t.rep.firstErr == "" {
			t.rep.firstErr = fmt.Sprintf("%s: %v", ck.token, err)
		}
	case res == ConvergeEqual:
		t.converged++
		t.equal[ck] = true
	default:
		t.converged++
		t.rewrote++
	}
}

// recount sets again from the ledger each position of either store that
// disagrees with it and that no differing cart of d keeps busy, and
// returns the differences left.
//
// A cart the shadow holds keeps its positions busy: its convergence may
// settle a claim there, which moves on_hand once more. So does a cart a
// Redis SoT holds: a legacy claim deducts the ledger, then Redis. A cart
// only a MySQL SoT holds does not (its claim is one transaction with the
// ledger, and placing its copy commutes with a recount): a Redis shadow
// that missed a stock count is recounted before those carts can be
// placed in it, or they would stay dirty for good, short of its units
// (TestConverge_ShadowMissedStockCount).
func (rp *repairer) recount(ctx context.Context, mode tandem.Mode, sot, shadow tandem.ShadowStore, d *Diff, rep *SweepReport) (*Diff, error) {
	var err error
	busy := map[tandem.Key]bool{}
	for _, c := range d.Carts {
		lines := [][]tandem.Line{c.Shadow}
		if c.Shadow != nil || sot.Name() == tandem.StoreRedis {
			lines = append(lines, c.SoT)
		}
		for _, ls := range lines {
			for _, l := range ls {
				busy[l.Key(c.ShopID)] = true
			}
		}
	}
	if len(d.Carts) > 0 {
		// Positions were not read above: read them now.
		res, err := rp.auditPass(ctx, mode, nil)
		if err != nil {
			return nil, err
		}
		d.Positions = res.drifted
	}
	for _, p := range d.Positions {
		k := tandem.Key{ShopID: p.ShopID, ItemID: p.ItemID, GroupID: p.GroupID}
		if busy[k] {
			continue
		}
		recounted := false
		pl := rp.r.positionLock(k)
		pl.Lock()
		for _, st := range []tandem.ShadowStore{sot, shadow} {
			if st == nil {
				continue // no shadow in this mode
			}
			// A store refuses (ECONFLICT) while a write to the ledger
			// has not reached it yet: the next sweep tries again.
			if _, err := st.Recount(ctx, k); err == nil {
				recounted = true
			}
		}
		pl.Unlock()
		if recounted {
			rep.Recounted = append(rep.Recounted, k)
		}
	}
	if len(rep.Recounted) > 0 {
		if d, err = rp.diff(ctx, mode); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// lostPositions returns the positions where a Redis SoT's count disagrees
// with the ledger (none for MySQL, whose count is the ledger's), and notes
// the first in rep.
func (rp *repairer) lostPositions(ctx context.Context, sot tandem.ShadowStore, rep *SweepReport) (map[tandem.Key]bool, error) {
	if sot.Name() != tandem.StoreRedis || rp.r.Ledger == nil {
		return nil, nil
	}
	ledger, err := rp.r.Ledger.ListOnHand(ctx)
	if err != nil {
		return nil, err
	}
	list, err := sot.ListCounters(ctx)
	if err != nil {
		return nil, err
	}
	have := make(map[tandem.Key]int64, len(list))
	for _, c := range list {
		have[c.Key] = c.OnHand
	}
	lost := map[tandem.Key]bool{}
	for k, v := range ledger {
		if have[k] != v {
			lost[k] = true
			if rep.firstLost == "" {
				rep.firstLost = fmt.Sprintf("%s: ledger %d, %s %d", k, v, sot.Name(), have[k])
			}
		}
	}
	return lost, nil
}

func touches(c CartDiff, lost map[tandem.Key]bool) bool {
	for _, ls := range [][]tandem.Line{c.SoT, c.Shadow} {
		for _, l := range ls {
			if lost[l.Key(c.ShopID)] {
				return true
			}
		}
	}
	return false
}

// converged is Router.Converged.
func (rp *repairer) converged(ctx context.Context) (*Diff, error) {
	last := &Diff{Mode: rp.r.Mode()}
	var lastAt time.Time // when the comparison of last began
	var lastErr error
	for {
		rp.r.Wait()
		// While a cart is dirty the stores cannot agree yet: a comparison
		// of every hold (tens of seconds on a large pod under load) would
		// only slow the worker down. Once one finds differences that no
		// cart's work explains, the next sweep converges them: the next
		// comparison waits for it (at most a second).
		wait := 50 * time.Millisecond
		if rp.dirtyCarts() == 0 {
			at, sweeps := time.Now(), rp.sweepsDone.Load()
			d, err := rp.diff(ctx, rp.r.Mode())
			switch {
			case err != nil:
				lastErr = err
			case d.Empty() && rp.dirtyCarts() == 0:
				return d, nil
			default:
				last, lastAt = d, at
				rp.awaitSweep(ctx, sweeps, time.Second)
				wait = 0
			}
		}
		select {
		case <-ctx.Done():
			return last, rp.notConverged(last, lastAt, lastErr)
		case <-time.After(wait):
		}
	}
}

// awaitSweep waits, at most max, until a sweep has ended since sweeps
// were done or a cart is dirty.
func (rp *repairer) awaitSweep(ctx context.Context, sweeps uint64, max time.Duration) {
	end := time.Now().Add(max)
	for time.Now().Before(end) && ctx.Err() == nil && rp.sweepsDone.Load() == sweeps && rp.dirtyCarts() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
}

// notConverged is converged's error: what is left, and why.
func (rp *repairer) notConverged(last *Diff, lastAt time.Time, lastErr error) error {
	st := rp.stats()
	rp.statsMu.Lock()
	failed, sweepErr := rp.sweepsFailed, rp.sweepErr
	rp.statsMu.Unlock()
	compared := "no comparison completed"
	if !lastAt.IsZero() {
		// A comparison of a large pod under load takes seconds: the one
		// shown may predate the last convergences.
		compared = fmt.Sprintf("the last complete comparison, begun %s ago: %s", time.Since(lastAt).Round(time.Millisecond), last)
	}
	if lastErr != nil {
		compared += fmt.Sprintf(" (the last comparison failed: %v)", lastErr)
	}
	return fmt.Errorf("pod %s did not converge: %d dirty carts (%s); convergences %v; last sweep %+v (%d sweeps failed, the last with %v); %s",
		rp.r.Pod, st.Dirty, rp.dirtySample(), st.Results, st.LastSweep, failed, sweepErr, compared)
}

// recordDrift reports a cart the sweep found different and converged.
func (rp *repairer) recordDrift(mode tandem.Mode, c CartDiff) {
	if rp.r.Recorder != nil {
		rp.r.Recorder.Record(rp.driftComparison(mode, c))
	}
}

// driftComparison is the state_drift of a cart the sweep found different.
func (rp *repairer) driftComparison(mode tandem.Mode, c CartDiff) tandem.Comparison {
	state := func(store string, lines []tandem.Line) tandem.Outcome {
		o := tandem.Outcome{Store: store, Status: tandem.StatusOf(tandem.StatusReserved), Lines: lines}
		if lines == nil {
			o.Status = tandem.OutcomeNoHold
		}
		return o
	}
	return tandem.Comparison{
		At: rp.r.Now(), Pod: rp.r.Pod, Op: tandem.OpAudit, ShopID: c.ShopID, CartToken: c.CartToken,
		SourceOfTruth: mode.SourceOfTruth(), Kind: tandem.KindStateDrift,
		Primary: state(mode.SourceOfTruth(), c.SoT), Shadow: state(mode.Shadow(), c.Shadow),
	}
}

type auditResult struct {
	checked int
	drifted []tandem.Drift
}

func (rp *repairer) auditPass(ctx context.Context, mode tandem.Mode, only map[tandem.Key]bool) (auditResult, error) {
	// The pass's first page asks the pod's throttle too (the stores ask
	// before each next one, tandem.Pace).
	if err := tandem.WaitThrottle(ctx); err != nil {
		return auditResult{}, fmt.Errorf("audit %s: %w", rp.r.Pod, err)
	}
	ledger, err := rp.r.Ledger.ListOnHand(ctx)
	if err != nil {
		return auditResult{}, fmt.Errorf("audit %s: ledger: %w", rp.r.Pod, err)
	}
	keys := make(map[tandem.Key]bool, len(ledger))
	for k := range ledger {
		keys[k] = true
	}
	var redis, mysql map[tandem.Key]tandem.Counters
	broken := make(map[tandem.Key]bool)
	if mode != tandem.ModeMySQLOnly {
		if redis, err = rp.snapshot(ctx, rp.r.Redis, keys, broken); err != nil {
			return auditResult{}, err
		}
	}
	if mode != tandem.ModeRedis {
		if mysql, err = rp.snapshot(ctx, rp.r.MySQL, keys, broken); err != nil {
			return auditResult{}, err
		}
	}
	var res auditResult
	for k := range keys {
		if only != nil && !only[k] {
			continue
		}
		res.checked++
		onHand := ledger[k]
		d := tandem.Drift{ShopID: k.ShopID, ItemID: k.ItemID, GroupID: k.GroupID, LedgerOnHand: onHand}
		bad := broken[k]
		var ra, ma int64
		if redis != nil {
			c := redis[k]
			ra = c.Available
			d.RedisAvailable = &ra
			bad = bad || c.Available+c.Reserved != onHand || c.Available < 0
		}
		if mysql != nil {
			c := mysql[k]
			ma = c.Available
			d.MySQLAvailable = &ma
			bad = bad || c.OnHand != onHand || c.Available < 0
		}
		if redis != nil && mysql != nil && ra != ma {
			bad = true
		}
		if bad {
			res.drifted = append(res.drifted, d)
		}
	}
	sort.Slice(res.drifted, func(i, j int) bool {
		a, b := res.drifted[i], res.drifted[j]
		if a.ShopID != b.ShopID {
			return a.ShopID < b.ShopID
		}
		if a.ItemID != b.ItemID {
			return a.ItemID < b.ItemID
		}
		return a.GroupID < b.GroupID
	})
	return res, nil
}

// snapshot lists a store's counters, adds its positions to keys and marks
// the positions whose store invariants are broken.
func (rp *repairer) snapshot(ctx context.Context, s tandem.ShadowStore, keys, broken map[tandem.Key]bool) (map[tandem.Key]tandem.Counters, error) {
	list, err := s.ListCounters(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit %s: %s counters: %w", rp.r.Pod, s.Name(), err)
	}
	m := make(map[tandem.Key]tandem.Counters, len(list))
	for _, c := range list {
		m[c.Key] = c
		keys[c.Key] = true
	}
	vs, err := s.CheckInvariants(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit %s: %s invariants: %w", rp.r.Pod, s.Name(), err)
	}
	for _, v := range vs {
		broken[v.Key] = true
		keys[v.Key] = true
	}
	return m, nil
}
