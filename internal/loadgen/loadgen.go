// Package loadgen runs closed-loop and open-loop load against a function and
// summarises latencies, for `tandem bench` and the demo traffic.
package loadgen

import (
	"context"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Result summarises one run.
type Result struct {
	Ops       int64
	Errors    int64
	Elapsed   time.Duration
	OpsPerSec float64
	P50, P99  time.Duration
	P999      time.Duration
}

// Op is one operation; worker is the worker's index, seq counts its calls.
// It returns an error only for failures that count as errors.
type Op func(ctx context.Context, worker int, seq int64) error

// Closed runs op from concurrency workers back to back for d.
func Closed(ctx context.Context, concurrency int, d time.Duration, op Op) Result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var errs atomic.Int64
	lat := make([][]time.Duration, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			samples := make([]time.Duration, 0, 4096)
			for seq := int64(0); ctx.Err() == nil; seq++ {
				t0 := time.Now()
				err := op(ctx, w, seq)
				if ctx.Err() != nil && err != nil {
					break // cut off by the end of the run, not a failure
				}
				samples = append(samples, time.Since(t0))
				if err != nil {
					errs.Add(1)
				}
			}
			lat[w] = samples
		}(w)
	}
	wg.Wait()
	return summarise(lat, errs.Load(), time.Since(start))
}

// Open offers rate operations per second for d, each on its own goroutine
// up to maxInflight at once (beyond it an arrival counts as an error), so
// latency includes queueing that a closed loop would hide.
func Open(ctx context.Context, rate float64, maxInflight int, d time.Duration, op Op) Result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var errs atomic.Int64
	var mu sync.Mutex
	var samples []time.Duration
	sem := make(chan struct{}, maxInflight)
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	next := start
	for seq := int64(0); ; seq++ {
		if wait := time.Until(next); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		scheduled := next
		next = next.Add(interval)
		select {
		case sem <- struct{}{}:
		default:
			errs.Add(1)
			continue
		}
		wg.Add(1)
		go func(seq int64) {
			defer wg.Done()
			defer func() { <-sem }()
			err := op(context.WithoutCancel(ctx), int(seq), seq)
			d := time.Since(scheduled) // from the intended start: no coordinated omission
			mu.Lock()
			samples = append(samples, d)
			mu.Unlock()
			if err != nil {
				errs.Add(1)
			}
		}(seq)
	}
	wg.Wait()
	return summarise([][]time.Duration{samples}, errs.Load(), time.Since(start))
}

func summarise(parts [][]time.Duration, errs int64, elapsed time.Duration) Result {
	var all []time.Duration
	for _, p := range parts {
		all = append(all, p...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r := Result{Ops: int64(len(all)), Errors: errs, Elapsed: elapsed}
	if elapsed > 0 {
		r.OpsPerSec = float64(int64(len(all))-errs) / elapsed.Seconds()
	}
	r.P50, r.P99, r.P999 = Quantile(all, 0.50), Quantile(all, 0.99), Quantile(all, 0.999)
	return r
}

// Quantile returns the q-quantile of sorted samples (nearest rank).
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
