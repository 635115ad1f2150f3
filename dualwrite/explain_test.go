package dualwrite_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

// setRedisCounter sets a position's Redis counter behind the store's back,
// as a drifted legacy counter would be.
func (p *pod) setRedisCounter(t *testing.T, k tandem.Key, available int64) {
	t.Helper()
	if err := p.rdb.HSet(ctx, p.redisCounterKey(k), "available", available).Err(); err != nil {
		t.Fatal(err)
	}
}

// redisCounterKey is the Redis key of a position's counter hash.
func (p *pod) redisCounterKey(k tandem.Key) string {
	return fmt.Sprintf("%s{%d}:item:%d:%d", p.redis.Prefix, k.ShopID, k.ItemID, k.GroupID)
}

// dropPoolRows deletes every unit row of the position's MySQL pool behind
// the engine's back.
func (p *pod) dropPoolRows(t *testing.T, k tandem.Key) {
	t.Helper()
	if _, err := p.mysql.DB().ExecContext(ctx, "DELETE FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?",
		k.ShopID, k.ItemID, k.GroupID); err != nil {
		t.Fatal(err)
	}
}

// mustDriftVerdict checks that the reserve of token was judged a divergence
// (not contention) and that k's drift was recorded with it, by the
// request's own shadow work: before any audit, with the reserve as its
// operation, and fixed.
func (p *pod) mustDriftVerdict(t *testing.T, token string, k tandem.Key, fixed string) {
	t.Helper()
	p.Wait()
	var verdict *tandem.Comparison
	var drift *tandem.Comparison
	for _, c := range p.rec.snapshot() {
		switch {
		case c.Op == tandem.OpReserve && c.CartToken == token:
			verdict = &c
		case c.Op == tandem.OpReserve && c.Kind == tandem.KindStateDrift && len(c.Drift) == 1 && c.Drift[0].ItemID == k.ItemID:
			drift = &c
		}
	}
	if verdict == nil {
		t.Fatalf("no comparison of reserve %s", token)
	}
	if verdict.Kind != tandem.KindOutcomeMismatch || verdict.Contention {
		t.Errorf("reserve %s: got kind %q contention %v, want outcome_mismatch, not contention (primary %+v, shadow %+v)",
			token, verdict.Kind, verdict.Contention, verdict.Primary, verdict.Shadow)
	}
	if !strings.Contains(verdict.Shadow.Message, "not contention") {
		t.Errorf("reserve %s: the divergence does not say why it is not contention: %q", token, verdict.Shadow.Message)
	}
	if drift == nil {
		t.Fatalf("no state_drift recorded for %v by the reserve's shadow work; recorded %+v", k, p.rec.snapshot())
	}
	d := drift.Drift[0]
	if d.ShopID != k.ShopID || d.GroupID != k.GroupID || d.RedisAvailable == nil || d.MySQLAvailable == nil || d.RedisHeld == nil || d.MySQLHeld == nil {
		t.Errorf("drift record: got %+v, want the position with both stores' available and held", d)
	}
	if !strings.Contains(d.Fixed, fixed) {
		t.Errorf("drift fix: got %q, want it to say %q", d.Fixed, fixed)
	}
}

// TestExplain_DriftIsNotContention: a reserve that one store grants and
// the other refuses because a count drifted is a divergence with a
// state_drift of the position, recorded within the request's shadow work,
// and the drifted count is recounted, so that the stores converge and the
// audit is clean; never contention.
func TestExplain_DriftIsNotContention(t *testing.T) {
	t.Run("MySQLSoT/RedisCounterZero", func(t *testing.T) {
		p := mustOpenPod(t, tandem.ModeMySQL)
		k := tandem.Key{ShopID: 41, ItemID: 1, GroupID: 1}
		if _, err := p.SetOnHand(ctx, k, 10); err != nil {
			t.Fatal(err)
		}
		p.setRedisCounter(t, k, 0)
		if _, err := p.Reserve(ctx, cart("a", 41, one(1, 2, 1))); err != nil {
			t.Fatalf("mysql refused a reserve it can cover: %v", err)
		}
		p.mustDriftVerdict(t, "a", k, "redis repaired")
		if got := p.counters(t, p.redis, k); got.Available != 8 || got.Reserved != 2 {
			t.Errorf("redis after the reserve: got %+v, want available 8, held 2", got)
		}
		p.mustConverge(t)
		if _, err := p.Claim(ctx, 41, "a"); err != nil {
			t.Fatal(err)
		}
		p.mustConverge(t)
	})
	t.Run("MySQLSoT/RedisCounterAboveLedger", func(t *testing.T) {
		p := mustOpenPod(t, tandem.ModeMySQL)
		k := tandem.Key{ShopID: 42, ItemID: 1, GroupID: 1}
		if _, err := p.SetOnHand(ctx, k, 2); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Reserve(ctx, cart("a", 42, one(1, 2, 1))); err != nil {
			t.Fatal(err)
		}
		p.Wait()
		p.setRedisCounter(t, k, 5)
		if _, err := p.Reserve(ctx, cart("b", 42, one(1, 1, 1))); tandem.ErrorCode(err) != tandem.EINSUFFICIENT {
			t.Fatalf("reserve b: got %v, want insufficient_inventory", err)
		}
		p.mustDriftVerdict(t, "b", k, "redis repaired")
		p.mustConverge(t)
		if res, err := p.redis.Get(ctx, 42, "b"); err == nil && res.Status == tandem.StatusReserved {
			t.Errorf("redis still holds the refused cart b: %+v", res)
		}
	})
	t.Run("ShadowMode/RedisCounterZero", func(t *testing.T) {
		p := mustOpenPod(t, tandem.ModeShadow)
		k := tandem.Key{ShopID: 43, ItemID: 1, GroupID: 1}
		if _, err := p.SetOnHand(ctx, k, 10); err != nil {
			t.Fatal(err)
		}
		p.setRedisCounter(t, k, 0)
		// The legacy store undersells: the buyer is refused.
		if _, err := p.Reserve(ctx, cart("a", 43, one(1, 2, 1))); tandem.ErrorCode(err) != tandem.EINSUFFICIENT {
			t.Fatalf("reserve a: got %v, want insufficient_inventory from the drifted counter", err)
		}
		p.mustDriftVerdict(t, "a", k, "redis repaired")
		p.mustConverge(t)
		if _, err := p.Reserve(ctx, cart("a2", 43, one(1, 10, 1))); err != nil {
			t.Fatalf("after the recount, all 10 units sell: %v", err)
		}
		p.mustConverge(t)
	})
	t.Run("ShadowMode/RedisCounterAboveLedger", func(t *testing.T) {
		p := mustOpenPod(t, tandem.ModeShadow)
		k := tandem.Key{ShopID: 44, ItemID: 1, GroupID: 1}
		if _, err := p.SetOnHand(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
		p.setRedisCounter(t, k, 3)
		// The legacy store oversells: it holds 2 of 1.
		if _, err := p.Reserve(ctx, cart("a", 44, one(1, 2, 1))); err != nil {
			t.Fatalf("reserve a: %v", err)
		}
		p.mustDriftVerdict(t, "a", k, "redis repaired")
		// MySQL cannot hold what the ledger does not have; once the buyer
		// lets go, the stores agree.
		if _, err := p.Release(ctx, 44, "a"); err != nil {
			t.Fatal(err)
		}
		p.mustConverge(t)
	})
	t.Run("ShadowMode/MySQLPoolLostRows", func(t *testing.T) {
		p := mustOpenPod(t, tandem.ModeShadow)
		k := tandem.Key{ShopID: 45, ItemID: 1, GroupID: 1}
		if _, err := p.SetOnHand(ctx, k, 10); err != nil {
			t.Fatal(err)
		}
		p.dropPoolRows(t, k)
		if _, err := p.Reserve(ctx, cart("a", 45, one(1, 2, 1))); err != nil {
			t.Fatalf("reserve a: %v", err)
		}
		p.mustDriftVerdict(t, "a", k, "mysql repaired")
		p.mustConverge(t)
		if got, err := p.mysql.Records(ctx, k); err != nil || got.Sellable != 8 || got.Reserved != 2 {
			t.Errorf("mysql after the recount: got %+v, %v, want 8 sellable, 2 held", got, err)
		}
	})
}

// TestExplain_SoldOutBurstIsContention: at the sold-out boundary, with
// production defaults, the stores pick their winners concurrently; the
// differences are explained, so none is a divergence, exactly the units on
// hand sell, and the stores agree at rest.
func TestExplain_SoldOutBurstIsContention(t *testing.T) {
	for _, mode := range []tandem.Mode{tandem.ModeShadow, tandem.ModeMySQL} {
		t.Run(string(mode), func(t *testing.T) {
			p := mustOpenPod(t, mode)
			k := tandem.Key{ShopID: 46, ItemID: 1, GroupID: 1}
			const units, buyers = 10, 60
			if _, err := p.SetOnHand(ctx, k, units); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			granted := 0
			for i := range buyers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := p.Reserve(ctx, cart(fmt.Sprintf("b-%d", i), 46, one(1, 1, 1)))
					switch tandem.ErrorCode(err) {
					case "":
						mu.Lock()
						granted++
						mu.Unlock()
					case tandem.EINSUFFICIENT:
					default:
						t.Errorf("reserve: %v", err)
					}
				}()
			}
			wg.Wait()
			if granted != units {
				t.Errorf("granted %d of %d carts for %d units, want exactly %d", granted, buyers, units, units)
			}
			p.mustConverge(t)
			for _, c := range p.rec.mismatches() {
				t.Errorf("divergence at the sold-out boundary: %s %s %s: primary %+v shadow %+v", c.Op, c.CartToken, c.Kind, c.Primary, c.Shadow)
			}
			for _, c := range p.rec.snapshot() {
				if c.Kind == tandem.KindStateDrift && c.Op == tandem.OpReserve {
					t.Errorf("contention reported as drift: %+v", c.Drift)
				}
			}
		})
	}
}

// TestExplain_NeverReservedNamesItsCause: a release whose shadow answers
// "never reserved" says which earlier difference of the cart explains it
// (its reserve's shadow work, still being converged). (A claim of it is
// settled from the ledger's claim record instead.)
func TestExplain_NeverReservedNamesItsCause(t *testing.T) {
	p := mustOpenPod(t, tandem.ModeMySQL)
	k := tandem.Key{ShopID: 47, ItemID: 1, GroupID: 1}
	if _, err := p.SetOnHand(ctx, k, 10); err != nil {
		t.Fatal(err)
	}
	// Redis's reserve and the convergence's place run out of
	// shadow.timeout without landing: the cart stays dirty.
	p.fr.set("reserve", 2*time.Second, false)
	p.fr.set("place", 2*time.Second, false)
	if _, err := p.Reserve(ctx, cart("a", 47, one(1, 2, 1))); err != nil {
		t.Fatal(err)
	}
	// The reserve's shadow work ends (the cart dirty) before the release:
	// a release already on the SoT would be what that work converges to.
	p.Wait()
	if p.DirtyCarts() != 1 {
		t.Fatalf("got %d dirty carts after the shadow reserve and its convergence timed out, want 1", p.DirtyCarts())
	}
	if _, err := p.Release(ctx, 47, "a"); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	var rel *tandem.Comparison
	for _, c := range p.rec.snapshot() {
		if c.Op == tandem.OpRelease && c.CartToken == "a" {
			rel = &c
		}
	}
	if rel == nil {
		t.Fatal("no comparison of the release")
	}
	if rel.Shadow.Status != tandem.ENOTFOUND || !strings.Contains(rel.Shadow.Message, "follows this cart's earlier difference") {
		t.Errorf("release's shadow: got %s %q, want not_found naming the cart's earlier difference", rel.Shadow.Status, rel.Shadow.Message)
	}
	p.fr.heal()
	p.mustConverge(t)
}
