// Package replay is `tandem replay`: it plays a capture's operations
// again, open loop at their original inter-arrival times divided by a
// speed, against a reservation store (the MySQL engine on a scratch
// database, with production settings), and reports throughput, latency,
// connection holds and the outcome diff against the capture.
package replay

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/capture"
)

// Clock is the store's clock during a replay: capture time, from the
// capture's start, running speed times faster than the wall clock once
// started, so that holds expire at the same point of the traffic as they
// did when captured.
type Clock struct {
	base  time.Time
	speed float64
	start atomic.Pointer[time.Time] // with a monotonic reading; nil until Start
}

// NewClock returns a clock that reads base until Start, then runs speed
// times faster than the wall clock.
func NewClock(base time.Time, speed float64) *Clock {
	return &Clock{base: base, speed: speed}
}

// Start starts the clock.
func (c *Clock) Start() {
	now := time.Now()
	c.start.Store(&now)
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	s := c.start.Load()
	if s == nil {
		return c.base
	}
	return c.base.Add(time.Duration(float64(time.Since(*s)) * c.speed))
}

// outcome is one replayed operation's answer.
type outcome struct {
	status  tandem.OutcomeStatus
	latency time.Duration // from its scheduled time to its answer
	done    time.Duration // its answer, after the replay's start
}

// Play replays ops (in arrival order) against store, open loop: each op
// is sent at its offset divided by speed after the start, whether or not
// the ones before it have answered; ops of one cart run in order, as the
// router runs them. clock (optional) is started with the replay;
// progress (optional) gets a progress bar.
func Play(ctx context.Context, store tandem.ReservationStore, ops []capture.Op, speed float64, clock *Clock, progress io.Writer) *Run {
	ops = sortedOps(ops)
	run := &Run{Speed: speed, ops: ops, outcomes: make([]outcome, len(ops))}
	var (
		wg    sync.WaitGroup
		carts = map[cartKey]chan struct{}{}
		done  atomic.Int64
	)
	stopBar := startBar(progress, len(ops), &done)
	if clock != nil {
		clock.Start()
	}
	start := time.Now()
	run.started = start
	var late time.Duration
	for i := range ops {
		op := &ops[i]
		due := time.Duration(float64(op.Offset) / speed)
		if wait := due - time.Since(start); wait > time.Millisecond {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		} else if wait < -late {
			late = -wait
		}
		if ctx.Err() != nil {
			run.cancelled = len(ops) - i
			break
		}
		// Ops of one cart wait for the one before them.
		var prev chan struct{}
		next := make(chan struct{})
		if op.CartToken != "" {
			k := cartKey{op.ShopID, op.CartToken}
			prev = carts[k]
			carts[k] = next
		}
		wg.Add(1)
		go func(i int, prev, next chan struct{}) {
			defer wg.Done()
			defer close(next)
			if prev != nil {
				<-prev
			}
			st := do(ctx, store, &ops[i])
			now := time.Since(start)
			run.outcomes[i] = outcome{status: st, latency: now - due, done: now}
			done.Add(1)
		}(i, prev, next)
		// Forget carts whose last op is done, so the map stays small.
		if len(carts) > 100_000 {
			for k, ch := range carts {
				select {
				case <-ch:
					delete(carts, k)
				default:
				}
			}
		}
	}
	run.Offered = time.Since(start)
	wg.Wait()
	run.Elapsed = time.Since(start)
	run.MaxLag = late
	stopBar()
	return run
}

type cartKey struct {
	shop  int64
	token string
}

// sortedOps returns ops in arrival order (a capture holds them in the
// order the SoT answered them).
func sortedOps(ops []capture.Op) []capture.Op {
	out := append([]capture.Op(nil), ops...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out
}

// do sends one op to the store and returns its outcome status.
func do(ctx context.Context, s tandem.ReservationStore, op *capture.Op) tandem.OutcomeStatus {
	var (
		res *tandem.Reservation
		err error
	)
	switch op.Op {
	case tandem.OpReserve:
		res, err = s.Reserve(ctx, tandem.ReserveRequest{CartToken: op.CartToken, ShopID: op.ShopID, TTL: op.TTL, Lines: op.Lines})
	case tandem.OpClaim:
		res, err = s.Claim(ctx, op.ShopID, op.CartToken)
	case tandem.OpRelease:
		res, err = s.Release(ctx, op.ShopID, op.CartToken)
	case tandem.OpSetOnHand:
		if op.Key == nil {
			return tandem.EINVALID
		}
		if _, err := s.SetOnHand(ctx, *op.Key, op.OnHand); err != nil {
			return tandem.OutcomeStatus(tandem.ErrorCode(err))
		}
		return tandem.OutcomeOK
	default:
		return tandem.OutcomeStatus("unknown_op:" + string(op.Op))
	}
	return tandem.OutcomeOf("", res, err, 0).Status
}

// startBar prints a progress bar to w every 200ms until the returned
// function is called; nil w prints nothing.
func startBar(w io.Writer, total int, done *atomic.Int64) func() {
	if w == nil || total == 0 {
		return func() {}
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	draw := func() {
		n := int(done.Load())
		const width = 40
		fill := n * width / total
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = '.'
			if i < fill {
				bar[i] = '#'
			}
		}
		fmt.Fprintf(w, "\rreplay [%s] %d/%d ops", bar, n, total)
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				draw()
			case <-stop:
				draw()
				fmt.Fprintln(w)
				return
			}
		}
	}()
	return func() { close(stop); <-finished }
}
