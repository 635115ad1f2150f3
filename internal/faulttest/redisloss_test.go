package faulttest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestRedisRestartLosesData simulates a Redis restart without persistence
// by deleting the pod's key prefix (never FLUSHALL: other tests share the
// server) while holds are active.
//
// In between, Redis knows no counter: redisres counts a missing counter as
// zero available, so every reserve answers insufficient_inventory. That is
// the design's safe direction: Redis undersells until the resync and never
// sells a unit the ledger does not have. The audit flags every position,
// and a resync from MySQL (which shadowed every hold) restores Redis
// exactly, active holds included, which can then be claimed once.
func TestRedisRestartLosesData(t *testing.T) {
	// A generous shadow timeout: a shadow reserve that times out is not
	// repaired, and one that lands late would leave an orphan hold in MySQL
	// that the resync copies (see the report); this test is about the loss.
	p := mustOpenFaultPod(t, tandem.ModeShadow, podOptions{shadowTimeout: 5 * time.Second})
	items := []int64{1, 2, 3, 4}
	p.mustStock(t, 5, items...)
	for _, it := range items {
		for c := range 2 {
			if _, err := p.reserve(t, fmt.Sprintf("hold-%d-%d", it, c), line(it, 2)); err != nil {
				t.Fatal(err)
			}
		}
	}
	p.mustAuditClean(t)

	testenv.DeletePrefix(t, p.direct, p.prefix)

	a := p.mustAudit(t)
	for _, it := range items {
		if !drifted(a)[key(it)] {
			t.Errorf("audit with Redis empty: item %d not flagged", it)
		}
	}
	// No oversell while Redis is empty: every item has 1 unit left in the
	// ledger (5 on hand, 4 held); a reserve of 2 must never succeed, and
	// with the counters gone not even 1 does.
	granted := map[int64]int64{}
	for i := range 12 {
		it := items[i%len(items)]
		res, err := p.reserve(t, fmt.Sprintf("empty-%d", i), line(it, 1+int64(i%2)))
		if err == nil {
			granted[it] += res.Lines[0].Quantity
			continue
		}
		wantCode(t, fmt.Sprintf("reserve empty-%d with Redis empty", i), err, tandem.EINSUFFICIENT)
	}
	for _, it := range items {
		if granted[it] > 1 {
			t.Errorf("item %d: granted %d units with 1 left in the ledger: oversell", it, granted[it])
		}
		if granted[it] != 0 {
			t.Errorf("item %d: granted %d units with Redis empty, want 0 (a missing counter counts as 0 available)", it, granted[it])
		}
	}
	p.Wait()

	n, err := p.Resync(context.Background())
	if err != nil {
		t.Fatalf("resync: %v", err)
	}
	if n != len(items) {
		t.Errorf("resync rewrote %d positions, want %d", n, len(items))
	}
	p.mustAuditClean(t)
	for _, it := range items {
		if got := p.counters(t, p.redis, it); got.OnHand != 5 || got.Reserved != 4 || got.Available != 1 {
			t.Errorf("redis item %d after resync: got on_hand %d reserved %d available %d, want 5 4 1", it, got.OnHand, got.Reserved, got.Available)
		}
	}
	// The holds granted before the loss survive it: each claims once.
	for _, it := range items {
		if _, err := p.claim(t, fmt.Sprintf("hold-%d-0", it)); err != nil {
			t.Errorf("claim hold-%d-0 after resync: %v", it, err)
		}
		if got := p.onHand(t, it); got != 3 {
			t.Errorf("ledger item %d after one claim of 2: got on_hand %d, want 3", it, got)
		}
	}
	p.mustAuditClean(t)
}
