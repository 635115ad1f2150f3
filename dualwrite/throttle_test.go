package dualwrite_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/dualwrite"
)

// fakeThrottle is a tandem.Throttle that counts what asks it, holds every job
// while closed, and stops the backfill on its abortAt-th call.
type fakeThrottle struct {
	mu      sync.Mutex
	calls   map[string]int
	abortAt int
	open    chan struct{}
	asked   chan string
}

func newFakeThrottle() *fakeThrottle {
	g := &fakeThrottle{calls: map[string]int{}, open: make(chan struct{}), asked: make(chan string, 1000)}
	close(g.open)
	return g
}

func (g *fakeThrottle) Wait(ctx context.Context, job string) error {
	g.mu.Lock()
	g.calls[job]++
	n, open := g.calls[tandem.JobBackfill], g.open
	g.mu.Unlock()
	select {
	case g.asked <- job:
	default:
	}
	if g.abortAt > 0 && job == tandem.JobBackfill && n >= g.abortAt {
		return tandem.Errorf(tandem.EUNAVAILABLE, "critical load on pod pod-t: Threads_running 150 >= critical 100")
	}
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *fakeThrottle) count(job string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[job]
}

// TestBackfill_AsksTheThrottle checks that every batch of the copy and
// every page of its catch-up ask the pod's throttle as the backfill, that
// a throttled copy waits while buyers are served, and that the pod's
// audit asks as the audit.
func TestBackfill_AsksTheThrottle(t *testing.T) {
	g := newFakeThrottle()
	g.open = make(chan struct{}) // not closed: every job waits
	p := mustOpenPod(t, tandem.ModeRedis, func(r *dualwrite.Router) { r.Throttle, r.BackfillBatch = g, 40 })
	legacyHolds(t, p, 10, 20) // 200 holds, batches of 2 shops
	done := make(chan error, 1)
	go func() {
		_, err := p.Backfill(ctx)
		done <- err
	}()
	for job := range g.asked {
		if job == tandem.JobBackfill {
			break
		}
	}
	// While the copy is held, buyers are served (they never ask) and
	// nothing has been copied.
	if _, err := p.Reserve(ctx, cart("buyer", 3, one(1, 1, 1))); err != nil {
		t.Fatalf("a buyer while the copy is throttled: %v", err)
	}
	if pr := p.BackfillProgress(); pr.Batches != 0 {
		t.Fatalf("%d batches copied while throttled, want 0", pr.Batches)
	}
	close(g.open)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	pr := p.BackfillProgress()
	if got := g.count(tandem.JobBackfill); got < pr.BatchesTotal {
		t.Fatalf("the backfill asked the throttle %d times for %d batches, want once a batch at least", got, pr.BatchesTotal)
	}
	p.modes.set(tandem.ModeShadow)
	p.mustConverge(t)
	if _, err := p.Audit(ctx); err != nil {
		t.Fatal(err)
	}
	if g.count(tandem.JobAudit) == 0 {
		t.Fatal("the audit never asked the throttle")
	}
}

// TestBackfill_CriticalLoadAborts checks that a critical load stops the
// copy with the throttle's reason, at a checkpoint short of the end.
func TestBackfill_CriticalLoadAborts(t *testing.T) {
	g := newFakeThrottle()
	g.abortAt = 3
	p := mustOpenPod(t, tandem.ModeRedis, func(r *dualwrite.Router) {
		r.Throttle, r.BackfillBatch, r.BackfillWorkers = g, 40, 1
	})
	legacyHolds(t, p, 10, 20)
	_, err := p.Backfill(ctx)
	if tandem.ErrorCode(err) != tandem.EUNAVAILABLE || !strings.Contains(err.Error(), "Threads_running 150 >= critical 100") {
		t.Fatalf("got %v, want the copy stopped by the critical load", err)
	}
	pr := p.BackfillProgress()
	if !strings.Contains(pr.Err, "critical load") || pr.Batches >= pr.BatchesTotal || pr.Batches == 0 {
		t.Fatalf("progress %+v, want stopped part way with the reason", pr)
	}
}

// buyerThrottle is a fakeThrottle that sees buyers, or none.
type buyerThrottle struct {
	*fakeThrottle
	active bool
}

func (b *buyerThrottle) BuyersActive() bool { return b.active }

// TestBackfill_GentleWithBuyers checks that a pod serving buyers copies
// gently (one batch at a time, of at most GentleBackfillBatch holds, its
// catch-up paced) and says so in its progress, and that a quiet pod copies batches of
// BackfillBatch holds; both copies leave the stores equal.
func TestBackfill_GentleWithBuyers(t *testing.T) {
	for _, buyers := range []bool{false, true} {
		t.Run(map[bool]string{false: "Quiet", true: "Buyers"}[buyers], func(t *testing.T) {
			g := &buyerThrottle{fakeThrottle: newFakeThrottle(), active: buyers}
			p := mustOpenPod(t, tandem.ModeRedis, func(r *dualwrite.Router) { r.Throttle = g })
			legacyHolds(t, p, 12, 500)
			if _, err := p.Backfill(ctx); err != nil {
				t.Fatal(err)
			}
			if buyers {
				// A copy resumed after shop 1, whose catch-up sweeps.
				p.fm.mu.Lock()
				p.fm.rebuildHolds = nil
				p.fm.mu.Unlock()
				if _, err := p.BackfillFrom(ctx, tandem.BackfillCheckpoint{Shop: 1, Copied: 500}, nil); err != nil {
					t.Fatal(err)
				}
			}
			p.fm.mu.Lock()
			sizes, spans := slices.Clone(p.fm.rebuildHolds), slices.Clone(p.fm.rebuildSpans)
			p.fm.mu.Unlock()
			biggest := slices.Max(sizes)
			pr := p.BackfillProgress()
			// The catch-up lists MySQL's holds once, paced when gentle.
			if paced, want := p.fm.pacedListings.Load(), map[bool]int64{false: 0, true: 1}[buyers]; paced != want {
				t.Errorf("%d paced listings of mysql's holds, want %d", paced, want)
			}
			if buyers {
				if biggest > dualwrite.GentleBackfillBatch || p.fm.mostRebuilding.Load() != 1 || !pr.YieldingToBuyers {
					t.Errorf("batches of %v holds, %d at most at once, yielding %v: want at most %d holds, one at a time, yielding",
						sizes, p.fm.mostRebuilding.Load(), pr.YieldingToBuyers, dualwrite.GentleBackfillBatch)
				}
				// Each batch rests after it, (1-duty)/duty times as long as
				// it took (a batch's own time includes its Redis read:
				// longer than its write).
				rest := (1 - dualwrite.GentleBackfillDuty) / dualwrite.GentleBackfillDuty
				for i := 1; i < len(spans); i++ {
					took, gap := spans[i-1][1].Sub(spans[i-1][0]), spans[i][0].Sub(spans[i-1][1])
					if gap < time.Duration(rest*float64(took)) {
						t.Errorf("batch %d wrote for %s and the next began %s later, want a rest of at least %.0fx that", i, took, gap, rest)
					}
				}
			} else if biggest <= dualwrite.GentleBackfillBatch || pr.YieldingToBuyers {
				t.Errorf("batches of %v holds, yielding %v: want batches of up to %d holds, not yielding",
					sizes, pr.YieldingToBuyers, dualwrite.DefaultBackfillBatch)
			}
			p.modes.set(tandem.ModeShadow)
			p.mustConverge(t)
		})
	}
}
