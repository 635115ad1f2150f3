package faulttest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tandemhq/tandem"
)

// shadowFailure reports whether a comparison records a shadow that could
// not answer (the kinds an unreachable shadow store may yield).
func shadowFailure(kind tandem.DivergenceKind) bool {
	return kind == tandem.KindShadowError || kind == tandem.KindShadowTimeout || kind == tandem.KindShadowDropped
}

// TestShadowStoreDown takes the shadow store away while buyers keep
// checking out: the source of truth answers every request, every operation
// the shadow missed is recorded as a shadow failure, and once the store is
// back the audit shows the drift and a rebuild from the source of truth
// makes it clean.
func TestShadowStoreDown(t *testing.T) {
	t.Run("ShadowModeMySQLDown", func(t *testing.T) {
		p := mustOpenFaultPod(t, tandem.ModeShadow, podOptions{})
		p.mustStock(t, 50, 1, 2, 3)
		for i := range 4 {
			if _, err := p.reserve(t, fmt.Sprintf("pre-%d", i), line(int64(1+i%3), 2)); err != nil {
				t.Fatal(err)
			}
		}
		p.mustAuditClean(t)
		before := p.rec.len()

		p.myProxy.Down()
		ops := 0
		for i := range 30 {
			res, err := p.reserve(t, fmt.Sprintf("out-%d", i), line(int64(1+i%3), 1))
			ops++
			if err != nil {
				t.Fatalf("reserve out-%d with MySQL down: %v", i, err)
			}
			if res.SourceOfTruth != tandem.StoreRedis {
				t.Errorf("reserve out-%d: got source of truth %q, want redis", i, res.SourceOfTruth)
			}
		}
		for i := range 10 {
			if _, err := p.release(t, fmt.Sprintf("out-%d", i)); err != nil {
				t.Fatalf("release out-%d with MySQL down: %v", i, err)
			}
			ops++
		}
		// pre-0 and pre-1 were shadowed into MySQL before the outage; their
		// release only reaches Redis.
		for i := range 2 {
			if _, err := p.release(t, fmt.Sprintf("pre-%d", i)); err != nil {
				t.Fatalf("release pre-%d with MySQL down: %v", i, err)
			}
			ops++
		}
		for i := range 5 {
			res, err := p.get(t, fmt.Sprintf("out-%d", 10+i))
			if err != nil || res.Status != tandem.StatusReserved {
				t.Fatalf("get out-%d with MySQL down: got %v, %v, want reserved", 10+i, res, err)
			}
		}
		// A claim deducts the ledger, which lives in MySQL: with MySQL down
		// it answers unavailable and leaves the Redis hold as it was.
		_, err := p.claim(t, "pre-2")
		wantCode(t, "claim pre-2 with the ledger down", err, tandem.EUNAVAILABLE)
		p.Wait()

		// The claim the SoT failed is recorded as a comparison with a
		// failed SoT (no divergence: the shadow was not asked), which the
		// SoT error rate counts; every other one is a shadow failure.
		var comps []tandem.Comparison
		var sotFailed int
		for _, c := range p.rec.since(before) {
			if c.Primary.StoreFailed() {
				sotFailed++
				if c.Op != tandem.OpClaim || c.CartToken != "pre-2" || c.Kind != "" {
					t.Errorf("got SoT failure %s %s kind %q, want the claim of pre-2 without a kind", c.Op, c.CartToken, c.Kind)
				}
				continue
			}
			comps = append(comps, c)
		}
		if sotFailed != 1 {
			t.Errorf("got %d comparisons with a failed SoT, want 1 (the claim of pre-2)", sotFailed)
		}
		if len(comps) != ops {
			t.Errorf("got %d comparisons during the outage, want %d (one per dual-written operation)", len(comps), ops)
		}
		for _, c := range comps {
			if !shadowFailure(c.Kind) {
				t.Errorf("%s %s during the outage: got kind %q, want a shadow failure", c.Op, c.CartToken, c.Kind)
			}
		}

		p.myProxy.Restore()
		res, err := p.get(t, "pre-2")
		if err != nil || res.Status != tandem.StatusReserved {
			t.Fatalf("pre-2 after a claim failed on the ledger: got %v, %v, want still reserved", res, err)
		}
		// Once MySQL answers, the dirty-cart worker converges the carts it
		// missed by itself, concurrently with the audit (between its first
		// pass and its settled second one): an item whose every cart it
		// converged first rightly shows no drift. So every item must be
		// either found drifted by the audit or agree in both stores after
		// it; an item MySQL still misses that the audit did not find fails.
		convBefore := p.ConvergeStats().Results
		a := p.mustAudit(t)
		t.Logf("audit after the outage: %d drifted; dirty carts %d; convergences before the audit %v, after %v",
			len(a.Drifted), p.DirtyCarts(), convBefore, p.ConvergeStats().Results)
		flagged := drifted(a)
		for _, d := range a.Found {
			flagged[tandem.Key{ShopID: d.ShopID, ItemID: d.ItemID, GroupID: d.GroupID}] = true
		}
		for _, it := range []int64{1, 2, 3} {
			rc, rerr := p.redis.Counters(context.Background(), key(it))
			mc, merr := p.mysql.Counters(context.Background(), key(it))
			agreed := rerr == nil && merr == nil && rc.Available == mc.Available && rc.Reserved == mc.Reserved
			if !flagged[key(it)] && !agreed {
				t.Errorf("audit after the outage: item %d not found drifted and the stores still differ (redis %+v %v, mysql %+v %v), want drift (MySQL missed its holds)", it, rc, rerr, mc, merr)
			}
		}
		n, err := p.Backfill(context.Background())
		if err != nil {
			t.Fatalf("backfill: %v", err)
		}
		if n < 3 {
			t.Errorf("backfill rewrote %d positions, want >= 3", n)
		}
		p.mustAuditClean(t)

		// Service goes on with both stores: the claim that failed succeeds
		// and deducts the ledger once.
		if _, err := p.claim(t, "pre-2"); err != nil {
			t.Fatalf("claim pre-2 after restore: %v", err)
		}
		if got := p.onHand(t, 3); got != 48 {
			t.Errorf("ledger item 3 after the claim: got on_hand %d, want 48", got)
		}
		p.mustAuditClean(t)
	})

	t.Run("MySQLModeRedisDown", func(t *testing.T) {
		p := mustOpenFaultPod(t, tandem.ModeMySQL, podOptions{})
		p.mustStock(t, 50, 1, 2, 3)
		for i := range 4 {
			if _, err := p.reserve(t, fmt.Sprintf("pre-%d", i), line(int64(1+i%3), 2)); err != nil {
				t.Fatal(err)
			}
		}
		p.mustAuditClean(t)
		before := p.rec.len()

		p.rdProxy.Down()
		ops := 0
		for i := range 30 {
			res, err := p.reserve(t, fmt.Sprintf("out-%d", i), line(int64(1+i%3), 1))
			ops++
			if err != nil {
				t.Fatalf("reserve out-%d with Redis down: %v", i, err)
			}
			if res.SourceOfTruth != tandem.StoreMySQL {
				t.Errorf("reserve out-%d: got source of truth %q, want mysql", i, res.SourceOfTruth)
			}
		}
		claimed := map[int64]int64{}
		for i := range 10 {
			res, err := p.claim(t, fmt.Sprintf("out-%d", i))
			if err != nil {
				t.Fatalf("claim out-%d with Redis down: %v", i, err)
			}
			claimed[res.Lines[0].ItemID]++
			ops++
		}
		for i := range 2 {
			res, err := p.claim(t, fmt.Sprintf("pre-%d", i))
			if err != nil {
				t.Fatalf("claim pre-%d with Redis down: %v", i, err)
			}
			claimed[res.Lines[0].ItemID] += 2
			ops++
		}
		for i := 10; i < 15; i++ {
			if _, err := p.release(t, fmt.Sprintf("out-%d", i)); err != nil {
				t.Fatalf("release out-%d with Redis down: %v", i, err)
			}
			ops++
		}
		p.Wait()
		comps := p.rec.since(before)
		if len(comps) != ops {
			t.Errorf("got %d comparisons during the outage, want %d", len(comps), ops)
		}
		for _, c := range comps {
			if !shadowFailure(c.Kind) {
				t.Errorf("%s %s during the outage: got kind %q, want a shadow failure", c.Op, c.CartToken, c.Kind)
			}
		}

		p.rdProxy.Restore()
		// Once Redis answers, the dirty-cart worker converges the carts it
		// missed by itself, concurrently with the audit: an item it
		// converged before the audit read it shows no drift. So every item
		// must be either found drifted by the audit or agree in both stores
		// after it; an item Redis still misses that the audit did not find
		// fails.
		a := p.mustAudit(t)
		flagged := drifted(a)
		for _, d := range a.Found {
			flagged[tandem.Key{ShopID: d.ShopID, ItemID: d.ItemID, GroupID: d.GroupID}] = true
		}
		for _, it := range []int64{1, 2, 3} {
			rc, rerr := p.redis.Counters(context.Background(), key(it))
			mc, merr := p.mysql.Counters(context.Background(), key(it))
			agreed := rerr == nil && merr == nil && rc.Available == mc.Available && rc.Reserved == mc.Reserved
			if !flagged[key(it)] && !agreed {
				t.Errorf("audit after the outage: item %d not found drifted and the stores still differ (redis %+v %v, mysql %+v %v), want drift (Redis missed holds and claims)", it, rc, rerr, mc, merr)
			}
		}
		if _, err := p.Resync(context.Background()); err != nil {
			t.Fatalf("resync: %v", err)
		}
		p.mustAuditClean(t)
		for it, n := range claimed {
			if got := p.onHand(t, it); got != 50-n {
				t.Errorf("ledger item %d: got on_hand %d, want %d (each claim deducted once)", it, got, 50-n)
			}
		}
	})
}
