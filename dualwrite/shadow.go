package dualwrite

import (
	"context"
	"errors"
	"runtime/pprof"
	"time"

	"github.com/tandemhq/tandem"
)

// The shadow path. Every dual-written operation of a cart gets one shadow
// job: once the SoT answered, it runs the operation on the shadow under
// ShadowTimeout (a reserve the SoT served, a claim or release the SoT
// settled; never one the SoT could not serve), compares the two answers and, when they differ, converges the cart: the
// shadow is made equal to what the store that answered the buyer holds for
// it (converge.go). A cart whose job was dropped, timed out or could not be
// converged is marked dirty and converged later by the background worker
// (dirty.go), so nothing is given up.
//
// The jobs of one cart run one after the other, in admission order: a job
// starts only when its predecessor, convergence included, has finished. A
// job takes its in-flight slot and its place in the cart's line when its
// operation is admitted, and its goroutine only once the SoT answered:
// nothing waits on the SoT's answer but the request itself.
// The wait in line has no time limit of its own (every store call of the
// job before it has one); ShadowTimeout bounds each store call.

// shadowJob is one shadow operation, admitted with its SoT operation and
// started once the SoT answered (primary).
type shadowJob struct {
	r    *Router
	o    *op
	op   tandem.Op
	base context.Context
	call shadowCall
	// dropped: the in-flight cap was reached; the job runs no shadow work.
	dropped bool
	// prev is closed when the cart's job before this one is done (nil when
	// there is none); line is this job's place in the cart's line.
	prev <-chan struct{}
	line chan struct{}
	// started is set by primary or lost, in the request's goroutine.
	started bool
	// rawCh carries the shadow's first answer, sent once, to a settle that
	// may answer the buyer from it (nil for a reserve).
	rawCh chan shadowAnswer
}

// shadowCall is the operation a shadow job runs on the shadow store: a
// reserve, or a claim or release (settle).
type shadowCall struct {
	req    tandem.ReserveRequest
	shop   int64
	token  string
	settle settleFunc
}

// run runs the call on s once the SoT answered p.
func (c *shadowCall) run(ctx context.Context, s tandem.ShadowStore, p tandem.Outcome) (*tandem.Reservation, error) {
	if c.settle != nil {
		return c.settle(s, ctx, c.shop, c.token)
	}
	// The shadow's copy ends with the SoT's hold, however late it lands.
	req := c.req
	req.ExpiresAt = p.ExpiresAt
	return s.Reserve(ctx, req)
}

// shadowAnswer is the shadow store's answer to the operation.
type shadowAnswer struct {
	outcome tandem.Outcome
	res     *tandem.Reservation
	err     error
}

// primary hands the SoT's outcome to the shadow job and starts it (no-op
// without one, or when it has started).
func (j *shadowJob) primary(o tandem.Outcome) {
	if j == nil || j.started {
		return
	}
	j.started = true
	j.start(o, true)
}

// lost starts a job whose SoT call never answered (it panicked): its answer
// is lost, so the cart is converged later. Callers defer it; a no-op once
// primary ran.
func (j *shadowJob) lost() {
	if j == nil || j.started {
		return
	}
	j.started = true
	j.start(tandem.Outcome{}, false)
}

func (j *shadowJob) start(p tandem.Outcome, havePrimary bool) {
	if havePrimary && p.StoreFailed() {
		// The shadow does not follow a failed SoT, but the failure is
		// counted: it feeds the SoT error rate of the automatic abort.
		j.r.recordSoTFailure(j.o, j.op, p)
	}
	if j.dropped {
		// Nothing to run: recorded at once, in the request's goroutine
		// (markDirty and Record never block).
		j.r.endDropped(j, p, havePrimary)
		return
	}
	go j.r.runShadow(j, p, havePrimary)
}

// wait returns the shadow's first answer, if it comes within d.
func (j *shadowJob) wait(ctx context.Context, d time.Duration) (shadowAnswer, bool) {
	if j == nil || j.rawCh == nil {
		return shadowAnswer{}, false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case a := <-j.rawCh:
		return a, true
	case <-t.C:
	case <-ctx.Done():
	}
	return shadowAnswer{}, false
}

// answer hands the shadow's answer (or its absence) to the waiting request.
func (j *shadowJob) answer(o tandem.Outcome, res *tandem.Reservation, err error) {
	if j.rawCh != nil {
		j.rawCh <- shadowAnswer{outcome: o, res: res, err: err}
	}
}

// enqueue puts a job in the cart's line: prev is closed when the job before
// it is done (nil when there is none), and dequeue(ck, line) must be called
// once when this job is done.
func (r *Router) enqueue(ck cartKey) (prev <-chan struct{}, line chan struct{}) {
	line = make(chan struct{})
	r.linesMu.Lock()
	if p, ok := r.shadowCarts[ck]; ok {
		prev = p
	}
	r.shadowCarts[ck] = line
	r.linesMu.Unlock()
	return prev, line
}

// dequeue ends the job enqueue put in the cart's line.
func (r *Router) dequeue(ck cartKey, line chan struct{}) {
	close(line)
	r.linesMu.Lock()
	if r.shadowCarts[ck] == line {
		delete(r.shadowCarts, ck)
	}
	r.linesMu.Unlock()
}

// takeSlot takes one of MaxInflight shadow slots, false when none is free
// or the router is closed. The caller gives it back with freeSlot.
func (r *Router) takeSlot() bool {
	if r.closed.Load() {
		return false
	}
	if r.inflight.Add(1) > int64(r.MaxInflight) {
		r.inflight.Add(-1)
		return false
	}
	return true
}

// freeSlot gives back a slot takeSlot took.
func (r *Router) freeSlot() { r.inflight.Add(-1) }

// goShadow admits op on the admitted operation's shadow store: it takes an
// in-flight slot and the job's place in the cart's line now, and the job
// starts once the SoT answered (primary): the shadow operation, the
// comparison and, when they differ, the convergence of the cart. The
// operation stays open in its epoch until the job is done, so that a
// change of SoT waits for it (admit). It returns nil when the mode has no
// shadow. The caller hands the job the SoT's outcome with primary, and
// defers lost in case it never can.
func (r *Router) goShadow(ctx context.Context, o *op, op tandem.Op, call shadowCall) *shadowJob {
	if o.shadow == nil {
		return nil
	}
	// The shadow reads the lines after the request returned.
	call.req.Lines = append([]tandem.LineRequest(nil), call.req.Lines...)
	job := &shadowJob{r: r, o: o, op: op, call: call, base: context.WithoutCancel(ctx)}
	if call.settle != nil {
		job.rawCh = make(chan shadowAnswer, 1)
	}
	job.dropped = !r.takeSlot()
	r.wg.Add(1)
	r.pending.Add(1)
	o.hold()
	if job.dropped {
		// No shadow work now; the cart is converged later, and the
		// comparison is still recorded once the SoT answers.
		job.answer(tandem.Outcome{Store: o.shadow.Name(), Status: tandem.OutcomeDropped}, nil, nil)
		return job
	}
	job.prev, job.line = r.enqueue(o.ck)
	return job
}

// endDropped ends a dropped job once the SoT answered p (havePrimary) or
// its answer was lost.
func (r *Router) endDropped(j *shadowJob, p tandem.Outcome, havePrimary bool) {
	o := j.o
	defer r.wg.Done()
	defer r.pending.Add(-1)
	defer o.unref()
	if havePrimary && !shadowRuns(j.op, p) && !p.Failed() {
		return // the shadow would not have followed it anyway
	}
	r.repair.markDirty(o.ck, o.sot.Name(), string(tandem.OutcomeDropped), false)
	if havePrimary && !p.Failed() {
		dropped := tandem.Outcome{Store: o.shadow.Name(), Status: tandem.OutcomeDropped}
		r.record(o.mode, j.op, o.ck.shop, o.ck.token, p, dropped, false, verdict{})
	}
}

// runShadow is the body of a shadow job, in the cart's line, once the SoT
// answered p (havePrimary) or its answer was lost.
func (r *Router) runShadow(j *shadowJob, p tandem.Outcome, havePrimary bool) {
	o, op, base := j.o, j.op, j.base
	pprof.SetGoroutineLabels(workLabels[workShadow])
	defer r.wg.Done()
	defer r.pending.Add(-1)
	defer o.unref()
	defer r.dequeue(o.ck, j.line)
	defer r.freeSlot()
	if !havePrimary || !shadowRuns(op, p) {
		j.answer(tandem.Outcome{Store: o.shadow.Name(), Status: tandem.OutcomeSkipped}, nil, nil)
		if !havePrimary || p.Failed() {
			// The SoT's answer was lost: it may have settled the cart.
			r.repair.markDirty(o.ck, o.sot.Name(), string(tandem.OutcomeSkipped), false)
		}
		// The line still ends in order: whoever waits for this job (a
		// convergence, the next job) waits for the jobs before it too.
		if j.prev != nil {
			<-j.prev
		}
		return
	}
	if j.prev != nil {
		<-j.prev
	}
	if o.sot.Name() == tandem.StoreRedis && o.ck.token != "" && !p.Failed() && p.Status != tandem.ENOTFOUND && r.migrate.skipsShadow(o.ck.shop) {
		// A copy runs, and its batch will rewrite this shop from Redis,
		// the SoT, which has just answered. (A cart the SoT does not know
		// may be the shadow's to answer: that job runs.)
		j.answer(tandem.Outcome{Store: o.shadow.Name(), Status: tandem.OutcomeSkipped}, nil, nil)
		return
	}
	r.migrate.waitShop(base, o.ck.shop)
	if p.Status == tandem.ENOTFOUND && r.repair.suspect(base, o.ck, o.sot.Name()) {
		// The shadow's copy may be a hold the SoT refused, still to be
		// discarded: it is converged, never claimed or released for the
		// buyer.
		j.answer(tandem.Outcome{Store: o.shadow.Name(), Status: tandem.OutcomeSkipped}, nil, nil)
		r.repair.markDirty(o.ck, o.sot.Name(), "suspect copy", true)
		return
	}
	sctx, cancel := context.WithTimeout(base, r.ShadowTimeout)
	start := time.Now()
	res, err := j.call.run(sctx, o.shadow, p)
	timedOut := pastDeadline(sctx, err)
	cancel()
	sh := tandem.OutcomeOf(o.shadow.Name(), res, err, time.Since(start))
	if timedOut {
		sh.Status = tandem.OutcomeTimeout
	}
	j.answer(sh, res, err)

	if op != tandem.OpReserve && sh.Status == tandem.ENOTFOUND && !p.Failed() {
		sh.Message = r.repair.unreserved(o.ck, sh.Message)
	}
	v, deferred := r.reconcile(base, j, p, sh)
	if !p.Failed() && !deferred {
		r.record(o.mode, op, o.ck.shop, o.ck.token, p, sh, timedOut, v)
	}
}

// pastDeadline reports whether a shadow call under ctx failed with err because
// its deadline passed, whichever layer noticed first: the MySQL driver's
// socket deadline (an i/o timeout, or a connection cut mid-packet, both
// answered unavailable) can fire before the context's own timer has
// marked ctx done.
func pastDeadline(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

// reconcile brings the shadow to the state of the store that answered the
// buyer, when the two answers differ, and returns the verdict on the
// difference. A reserve whose answers differ as the sold-out boundary
// makes them differ (contention) is explained first (explain.go): it is
// contention, a match, only when the positions involved agree; a drifted
// position makes it a divergence, recorded with the drift and recounted
// before the cart converges. The buyer's claim overtaking the shadow's
// copy of its own reserve is contention too (claimedFirst).
// A cart it cannot converge now is marked dirty; so is one whose shadow
// answer was lost, since the lost operation may still land. A contention
// difference that cannot be converged at once (the shadow's ledger row is
// queued behind the sold-out boundary's slow path) is deferred: its
// comparison is recorded when the worker has converged the cart, as a
// match, or as the divergence it was when the cart does not converge.
func (r *Router) reconcile(ctx context.Context, j *shadowJob, p, sh tandem.Outcome) (v verdict, deferred bool) {
	o, op := j.o, j.op
	if !p.Failed() && p.Status == sh.Status && sameLines(p.Lines, sh.Lines) {
		return verdict{}, false
	}
	authority, other := o.sot, o.shadow
	if p.Status == tandem.ENOTFOUND && earlierSoTAnswers(op, sh) {
		// The buyer was answered from the shadow's copy (a hold from an
		// earlier SoT): that copy is the cart's truth.
		authority, other = o.shadow, o.sot
	}
	boundary := op == tandem.OpReserve && !p.Failed() && contention(p, sh)
	if boundary {
		v = r.explain(ctx, j)
		r.recordPositionDrift(op, v.drift)
	}
	refused := op == tandem.OpReserve && (p.Status == tandem.EINSUFFICIENT || p.Status == tandem.ECONFLICT)
	res, err := r.repair.convergeCart(ctx, o.ck, authority, other, refused && authority == o.sot)
	r.repair.observe(res, err, 0)
	if !boundary && op == tandem.OpReserve && !p.Failed() && r.claimedFirst(ctx, o, p, sh) {
		v.contention = true
	}
	if err != nil || sh.Status == tandem.OutcomeTimeout || p.Failed() {
		cause := string(sh.Status)
		if err != nil {
			cause = "converge: " + tandem.ErrorMessage(err)
		}
		var later *tandem.Comparison
		if v.contention && err != nil && res != ConvergeConflict {
			c := r.comparison(o.mode, op, o.ck.shop, o.ck.token, p, sh, false, v)
			later = &c
		}
		// A copy of a hold the SoT refused that could not be discarded yet
		// (or whose shadow reserve timed out and may still land) is
		// suspect: it must not answer the buyer (see suspect).
		suspect := refused && authority == o.sot
		r.repair.markDirtyWith(o.ck, authority.Name(), cause, suspect, later)
		if suspect {
			r.repair.markRefused(o.ck, authority.Name())
		}
		return verdict{drift: v.drift}, later != nil
	}
	return v, false
}

// claimedFirst reports whether a reserve's shadow refused a hold the SoT
// granted only because the buyer's claim of that cart got to the ledger
// first: the shadow's copy landed late, found the token sold and answered
// "already claimed". The stores saw the same two operations in different
// orders, as at the sold-out boundary; convergence settles the copy as
// claimed.
func (r *Router) claimedFirst(ctx context.Context, o *op, p, sh tandem.Outcome) bool {
	return p.Status.Is(tandem.StatusReserved) && sh.Status == tandem.ECONFLICT && r.repair.claimed(ctx, o.ck)
}

// contention reports whether a reserve's two answers differ only as the
// sold-out boundary makes them differ: one store held and the other was
// short, or both held in other groups.
func contention(p, sh tandem.Outcome) bool {
	held := func(s tandem.OutcomeStatus) bool { return s.Is(tandem.StatusReserved) }
	short := func(s tandem.OutcomeStatus) bool { return s == tandem.EINSUFFICIENT }
	switch {
	case held(p.Status) && held(sh.Status):
		return true // other groups
	case held(p.Status) && short(sh.Status), short(p.Status) && held(sh.Status):
		return true
	}
	return false
}

// shadowRuns reports whether the shadow runs op once the SoT answered p: a
// reserve the SoT answered (granted or refused: the shadow's answer is
// compared), not one it could not serve (a 503 changes nothing anywhere;
// the cart is converged once the SoT answers again, in case its work
// landed); a claim or release as shadowSettles says.
func shadowRuns(op tandem.Op, p tandem.Outcome) bool {
	if op == tandem.OpReserve {
		return !p.Failed()
	}
	return shadowSettles(p)
}

// shadowSettles reports whether the shadow runs a claim or release the SoT
// answered p: only one the SoT settled (the shadow settles its copy), or a
// cart the SoT does not know (the shadow's copy, from an earlier SoT, is
// the buyer's answer). A cart the SoT refuses as gone or already claimed is
// left to the shadow's own state and reaper: a shadow claim of a hold the
// SoT saw expire would deduct the ledger for a sale the buyer was refused
// (the shadow's copy expires later, having landed later), and a shadow
// release of a cart the SoT sold would put sold units back on sale.
func shadowSettles(p tandem.Outcome) bool {
	switch p.Status {
	case tandem.StatusOf(tandem.StatusClaimed), tandem.StatusOf(tandem.StatusReleased), tandem.ENOTFOUND:
		return true
	}
	return false
}
