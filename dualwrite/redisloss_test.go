package dualwrite_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

// TestRedisLossRebuiltInMySQLMode takes the pod's Redis data away (as a
// FLUSHDB or a restart without persistence does) while MySQL is the SoT
// and buyers keep reserving and releasing: the router rebuilds Redis from
// MySQL by itself, with no resync; then the kill switch falls back to a
// whole Redis: every hold granted before claims once, and a burst of twice
// the remaining units gets exactly the remaining units.
func TestRedisLossRebuiltInMySQLMode(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs MariaDB and Redis (run without -short)")
	}
	p := mustOpenPod(t, tandem.ModeMySQL)
	ctx := context.Background()
	const (
		shops = 4
		items = 3
		stock = 20
		held  = 5 // holds of one unit per position before the loss
	)
	key := func(s, i int) tandem.Key { return tandem.Key{ShopID: int64(s + 1), ItemID: int64(100 + i), GroupID: 1} }
	for s := range shops {
		for i := range items {
			if _, err := p.SetOnHand(ctx, key(s, i), stock); err != nil {
				t.Fatal(err)
			}
			for h := range held {
				if _, err := p.Reserve(ctx, cart(fmt.Sprintf("h-%d-%d", i, h), int64(s+1), one(int64(100+i), 1, 1))); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	p.mustConverge(t)

	// Live traffic on shop 1, item 100 only: reserve and release.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ops atomic.Int64
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				tok := fmt.Sprintf("live-%d-%d", w, n)
				if _, err := p.Reserve(ctx, cart(tok, 1, one(100, 1, 1))); err == nil {
					p.Release(ctx, 1, tok)
				}
				ops.Add(1)
			}
		}()
	}
	// Every key at once, as FLUSHDB does (one DEL is atomic).
	keys, err := p.rdb.Keys(ctx, p.redis.Prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("redis keys: %d, %v", len(keys), err)
	}
	if err := p.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}

	// Redis is whole again without a resync.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if rb := p.LastRedisRebuild(); rb != nil && rb.Err == "" && p.RedisStale() == "" {
			if rb.Holds < shops*items*held || rb.Lost == 0 {
				t.Errorf("rebuild %+v: want at least %d holds and lost positions", rb, shops*items*held)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis not rebuilt after its data loss (stale: %q)", p.RedisStale())
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if ops.Load() == 0 {
		t.Error("no buyer operation ran during the loss")
	}
	p.mustConverge(t)

	// Kill switch: Redis is the SoT now.
	p.kill.on.Store(true)
	if got := p.Mode(); got != tandem.ModeShadow {
		t.Fatalf("mode under the kill switch: got %s, want shadow", got)
	}
	for s := range shops {
		for i := range items {
			tok := fmt.Sprintf("h-%d-0", i)
			if _, err := p.Claim(ctx, int64(s+1), tok); err != nil {
				t.Errorf("claim %d/%s after the rebuild and the kill switch: %v", s+1, tok, err)
			}
			// A second claim is idempotent: it deducts nothing more.
			if _, err := p.Claim(ctx, int64(s+1), tok); err != nil {
				t.Errorf("second claim %d/%s: %v", s+1, tok, err)
			}
			if got := p.onHand(t, key(s, i)); got != stock-1 {
				t.Errorf("ledger %v after claiming one unit twice: got on_hand %d, want %d", key(s, i), got, stock-1)
			}
		}
	}
	// available = stock - 1 claimed - (held-1) still held.
	left := stock - 1 - (held - 1)
	for s := range shops {
		for i := range items {
			if got := p.counters(t, p.redis, key(s, i)); got.Available != int64(left) {
				t.Errorf("redis %v after the kill switch: got available %d, want %d", key(s, i), got.Available, left)
			}
		}
	}
	var granted atomic.Int64
	var bwg sync.WaitGroup
	for n := range 2 * left {
		bwg.Add(1)
		go func() {
			defer bwg.Done()
			_, err := p.Reserve(ctx, cart(fmt.Sprintf("burst-%d", n), 1, one(101, 1, 1)))
			switch {
			case err == nil:
				granted.Add(1)
			case tandem.ErrorCode(err) != tandem.EINSUFFICIENT:
				t.Errorf("burst reserve %d: %v", n, err)
			}
		}()
	}
	bwg.Wait()
	if granted.Load() != int64(left) {
		t.Errorf("burst of %d single units with %d left: got %d granted, want %d", 2*left, left, granted.Load(), left)
	}
	p.mustConverge(t)
}

// TestRedisLossKillDuringRebuild engages the kill switch right after the
// pod's Redis lost its data, while it is found and rebuilt: every claim of
// a hold granted before the loss succeeds once (never a 503, never a
// double deduction), the kill switch applies once Redis is whole, and the
// stores agree at rest.
func TestRedisLossKillDuringRebuild(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs MariaDB and Redis (run without -short)")
	}
	p := mustOpenPod(t, tandem.ModeMySQL)
	ctx := context.Background()
	const holds = 20
	k := tandem.Key{ShopID: 1, ItemID: 100, GroupID: 1}
	if _, err := p.SetOnHand(ctx, k, 50); err != nil {
		t.Fatal(err)
	}
	for h := range holds {
		if _, err := p.Reserve(ctx, cart(fmt.Sprintf("h-%d", h), 1, one(100, 1, 1))); err != nil {
			t.Fatal(err)
		}
	}
	p.mustConverge(t)
	keys, err := p.rdb.Keys(ctx, p.redis.Prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("redis keys: %d, %v", len(keys), err)
	}
	if err := p.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	// The kill switch engages at once; the engagement makes the watch look.
	p.kill.on.Store(true)
	p.CheckRedisNow()
	for h := range holds {
		tok := fmt.Sprintf("h-%d", h)
		if _, err := p.Claim(ctx, 1, tok); err != nil {
			t.Errorf("claim of %s during the loss and the kill switch: %v", tok, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for p.RedisStale() != "" || p.LastRedisRebuild() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis not rebuilt (stale: %q)", p.RedisStale())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := p.Mode(); got != tandem.ModeShadow {
		t.Fatalf("mode once redis is whole under the kill switch: got %s, want shadow", got)
	}
	for h := range holds {
		res, err := p.Claim(ctx, 1, fmt.Sprintf("h-%d", h))
		if err != nil || !res.Replayed {
			t.Errorf("repeated claim of h-%d: got %+v, %v, want a replay", h, res, err)
		}
	}
	if got := p.onHand(t, k); got != 50-holds {
		t.Errorf("ledger after %d claims (each twice): got on_hand %d, want %d", holds, got, 50-holds)
	}
	p.mustConverge(t)
	if got := p.counters(t, p.redis, k); got.Available != 50-holds || got.Reserved != 0 {
		t.Errorf("redis at rest: got %+v, want %d available, nothing held", got, 50-holds)
	}
}
